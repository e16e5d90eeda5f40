package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testApp returns an app for version v writing into buffers; the engine
// is never started by the cases that use it.
func testApp(v string) (*app, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &app{v: MustVersion(v), eng: &engine{bin: "/nonexistent/podman"}, stdout: &out, stderr: &errb}, &out, &errb
}

func TestParseArgs(t *testing.T) {
	v := MustVersion("1.5.0")
	p, err := parseArgs(v, runSpec("run"), []string{"-d", "--name=web", "-l", "a=b", "--label", "c=d", "-it", "-c", "2",
		"mcp-dev", "sh", "-c", "--name", "x"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.has("detach") || !p.has("interactive") || !p.has("tty") || p.val("name", "") != "web" || p.val("cpus", "") != "2" {
		t.Errorf("flags: %+v", p)
	}
	if !reflect.DeepEqual(p.vals["label"], []string{"a=b", "c=d"}) {
		t.Errorf("labels: %v", p.vals["label"])
	}
	if want := []string{"mcp-dev", "sh", "-c", "--name", "x"}; !reflect.DeepEqual(p.pos, want) {
		t.Errorf("positionals %v, want %v", p.pos, want)
	}
}

func TestExecKeepsDoubleDash(t *testing.T) {
	p, err := parseArgs(MustVersion("1.5.0"), execSpec(), []string{"-i", "ctr", "--", "ls"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ctr", "--", "ls"}; !reflect.DeepEqual(p.pos, want) {
		t.Errorf("got %v, want %v", p.pos, want)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		version string
		spec    *cmdSpec
		args    []string
		first   string
	}{
		{"1.5.0", runSpec("run"), []string{"--bogus", "img"}, "Error: Unknown option '--bogus'"},
		{"1.5.0", runSpec("run"), []string{"-z", "img"}, "Error: Unknown option '-z'"},
		{"1.5.0", runSpec("run"), []string{"-d"}, "Error: Missing expected argument '<image>'"},
		{"1.5.0", runSpec("run"), []string{"--name"}, "Error: Missing value for '--name <name>'"},
		{"0.9.0", runSpec("run"), []string{"--init", "img"}, "Error: Unknown option '--init'"},
		{"1.5.0", execSpec(), []string{"ctr"}, "Error: Missing expected argument '<arguments> ...'"},
		{"0.12.3", exportSpec(MustVersion("0.10.0")), []string{"-o", "f", "ctr"}, "Error: Unknown option '-o'"},
	} {
		_, err := parseArgs(MustVersion(c.version), c.spec, c.args)
		var ee *exitError
		if !errors.As(err, &ee) {
			t.Fatalf("%v: no usage error (%v)", c.args, err)
		}
		lines := strings.Split(ee.text, "\n")
		if ee.code != 64 || lines[0] != c.first || len(lines) != 3 || !strings.HasPrefix(lines[1], "Usage: ") {
			t.Errorf("%v: code %d text %q", c.args, ee.code, ee.text)
		}
	}
	if _, err := parseArgs(MustVersion("1.0.0"), runSpec("run"), []string{"--init", "img"}); err != nil {
		t.Errorf("--init must exist on 1.0.0: %v", err)
	}
}

func TestDispatchUsageAndPlugins(t *testing.T) {
	a, _, errb := testApp("1.5.0")
	if code := a.finish(a.dispatch([]string{"list", "--bogus"})); code != 64 {
		t.Errorf("unknown option exit %d", code)
	}
	if !strings.HasPrefix(errb.String(), "Error: Unknown option '--bogus'\nUsage: container list") {
		t.Errorf("stderr %q", errb.String())
	}
	a, _, errb = testApp("0.12.3")
	if code := a.finish(a.dispatch([]string{"cp", "a", "b:/c"})); code != 1 || errb.String() != "Error: Plugin 'container-cp' not found.\n" {
		t.Errorf("0.x cp: %d %q", code, errb.String())
	}
	a, out, _ := testApp("1.2.0")
	if code := a.finish(a.dispatch([]string{"--version"})); code != 0 || out.String() != "container CLI version 1.2.0 (build: release, commit: 0000000)\n" {
		t.Errorf("--version: %d %q", code, out.String())
	}
}

// TestMeasurement: sizes are read as Measurement.parse does
// (Measurement+Parse.swift, 0.8.0–1.2.2): a bare number is bytes.
func TestMeasurement(t *testing.T) {
	for in, want := range map[string]int64{
		"1G": 1 << 30, "512M": 512 << 20, "512m": 512 << 20, "1024": 1024, "2GiB": 2 << 30, "2gb": 2 << 30,
		"64K": 64 << 10, "1.5G": 3 << 29, " 1 g ": 1 << 30, "1.": 1, ".5k": 512, "0": 0, "7b": 7, "7B": 7,
		"1p": 1 << 50, "1\tt": 1 << 40,
	} {
		if got, err := sizeBytes(in); err != nil || got != want {
			t.Errorf("sizeBytes(%q) = %d %v, want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"": "invalid size", "  ": "invalid size", "x": "invalid size", "-1G": "invalid size", "G": "invalid size",
		".": "invalid size", "1.2.3": "invalid size", "1e3": "invalid symbol: e3", "1x": "invalid symbol: x",
		"1 Mi": "invalid symbol: mi", "1kk": "invalid symbol: kk", "1 mbb": "invalid symbol: mbb",
	} {
		if got, err := sizeBytes(in); err == nil || err.Error() != want {
			t.Errorf("sizeBytes(%q) = %d %v, want %q", in, got, err, want)
		}
	}
	// -m is whole MiB, the fraction dropped.
	for in, want := range map[string]int64{"1048576": 1, "1048575": 0, "1.9m": 1, "1g": 1024, "512k": 0} {
		if got, err := memoryMiB(in); err != nil || got != want {
			t.Errorf("memoryMiB(%q) = %d %v, want %d", in, got, err, want)
		}
	}
}

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{"web": true, "a": false, "a.b_c-d": true, "-x": false, "bad name": false,
		strings.Repeat("a", 63): true, strings.Repeat("a", 64): false} {
		if validName(name) != ok {
			t.Errorf("validName(%q) != %v", name, ok)
		}
	}
}

func TestValidVolumeName(t *testing.T) {
	for name, ok := range map[string]bool{"ws": true, "a": true, "A.b_c-1": true, "-x": false, ".x": false,
		"a b": false, "a=b": false, "é": false, "": false, strings.Repeat("a", 255): true, strings.Repeat("a", 256): false} {
		if validVolumeName(name) != ok {
			t.Errorf("validVolumeName(%q) != %v", name, ok)
		}
	}
}

// TestVolumeArg: -v is read as Parser.volume reads it (Parser.swift).
func TestVolumeArg(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.MkdirAll(filepath.Join(dir, "sub", "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		version, in, want string // want: podman -v, or "Error: …"
		named             string
	}{
		{"1.2.2", "ws:/workspace", "ws:/workspace", "ws"},
		{"1.2.2", "ws:/w:ro", "ws:/w:ro", ""},
		{"1.2.2", "::ws::/w", "ws:/w", "ws"},
		{"1.2.2", dir + ":/src", dir + ":/src", ""},
		{"1.2.2", "sub/d:/src:ro", dir + "/sub/d:/src:ro", ""},
		{"1.2.2", "./sub:/src", dir + "/sub:/src", ""},
		{"1.2.2", ".:/src", dir + ":/src", ""},
		{"0.10.0", ".:/src", "Error: invalid volume name '.': must match ^[A-Za-z0-9][A-Za-z0-9_.-]*$", ""},
		{"0.9.0", "..:/src", `Error: invalidArgument: "invalid volume name '..': must match ^[A-Za-z0-9][A-Za-z0-9_.-]*$"`, ""},
		{"1.2.2", "~/x:/src", "Error: path '~/x' does not exist", ""},
		{"1.2.2", "~:/src", "Error: invalid volume name '~': must match ^[A-Za-z0-9][A-Za-z0-9_.-]*$", ""},
		{"1.2.2", ".hidden:/src", "Error: invalid volume name '.hidden': must match ^[A-Za-z0-9][A-Za-z0-9_.-]*$", ""},
		{"1.2.2", "/nonexistent-smt:/src", "Error: path '/nonexistent-smt' does not exist", ""},
		{"1.2.2", "a:b:c:d", "Error: invalid volume format a:b:c:d", ""},
		{"1.2.2", "bad name:/w", "Error: invalid volume name 'bad name': must match ^[A-Za-z0-9][A-Za-z0-9_.-]*$", ""},
	} {
		a, _, _ := testApp(c.version)
		plan := &createPlan{}
		got, err := a.volumeArg(plan, c.in)
		if err != nil {
			got = errString(t, err)
		}
		if got != c.want {
			t.Errorf("%s -v %q: %q, want %q", c.version, c.in, got, c.want)
		}
		if c.named != "" && !reflect.DeepEqual(plan.rwVolumes, []string{c.named}) {
			t.Errorf("%s -v %q: read-write volumes %q", c.version, c.in, plan.rwVolumes)
		}
	}
	a, _, _ := testApp("1.2.2")
	plan := &createPlan{}
	if got, err := a.volumeArg(plan, "/data"); err != nil || !strings.HasSuffix(got, ":/data") || len(plan.anon) != 1 {
		t.Errorf("anonymous: %q %v %q", got, err, plan.anon)
	}
}

// TestCPUsAboveHost: -c above the host's CPUs fails the boot before
// 0.12.0 and is clamped in the VM from 0.12.0; the CLI never refuses it.
func TestCPUsAboveHost(t *testing.T) {
	host := hostCPUs()
	for v, fails := range map[string]bool{"0.8.0": true, "0.11.0": true, "0.12.0": false, "1.5.0": false} {
		a, _, _ := testApp(v)
		err := a.checkCPUs(host + 1)
		if (err != nil) != fails {
			t.Errorf("%s: -c %d on %d CPUs: %v", v, host+1, host, err)
		}
		if err != nil && !strings.Contains(errString(t, err), "failed to bootstrap container") {
			t.Errorf("%s: %q", v, errString(t, err))
		}
		if err := a.checkCPUs(host); err != nil {
			t.Errorf("%s: -c %d on %d CPUs: %v", v, host, host, err)
		}
	}
	if _, err := parseArgs(MustVersion("1.5.0"), runSpec("run"), []string{"-c", "4096", "img"}); err != nil {
		t.Errorf("the parser takes any count: %v", err)
	}
}
