package main

import (
	"bytes"
	"github.com/sandbox-mcp/sandbox-mcp/internal/applecli"
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

// TestDispatchRefusals: the parser's refusals reach stderr as the
// tables render them, with their exit codes.
func TestDispatchRefusals(t *testing.T) {
	for _, c := range []struct {
		version string
		args    []string
		first   string
	}{
		{"1.5.0", []string{"run", "--bogus", "img"}, "Error: Unknown option '--bogus'. Did you mean '--cpus'?"},
		{"1.5.0", []string{"run", "-z", "img"}, "Error: Unknown option '-z'"},
		{"1.5.0", []string{"run", "-d"}, "Error: Missing expected argument '<image>'"},
		{"1.5.0", []string{"run", "--name"}, "Error: Missing value for '--name <name>'"},
		{"0.9.0", []string{"run", "--init", "img"}, "Error: Unknown option '--init'. Did you mean '--env'?"},
		{"1.5.0", []string{"exec", "ctr"}, "Error: Missing expected argument '<arguments> ...'"},
		{"0.10.0", []string{"export", "-o", "f", "ctr"}, "Error: Unknown option '-o'"},
		{"1.5.0", []string{"create", "--progress", "none", "img"}, "Error: Unknown option '--progress'"},
	} {
		a, _, errb := testApp(c.version)
		code := a.finish(a.dispatch(c.args))
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		if code != 64 || lines[0] != c.first || !strings.HasPrefix(lines[len(lines)-2], "Usage: ") {
			t.Errorf("%s %v: %d %q", c.version, c.args, code, errb.String())
		}
	}
	a, _, errb := testApp("1.5.0")
	if code := a.finish(a.dispatch([]string{"stop"})); code != 1 || errb.String() != "Error: no containers specified and --all not supplied\n" {
		t.Errorf("stop: %d %q", code, errb.String())
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
	if code := a.finish(a.dispatch([]string{"cp", "a", "b:/c"})); code != 64 || !strings.HasPrefix(errb.String(), "Error: Plugin 'container-cp' not found.\n") ||
		!strings.HasSuffix(errb.String(), "\nUsage: container [--debug] <subcommand>\n  See 'container --help' for more information.\n") {
		t.Errorf("0.x cp: %d %q", code, errb.String())
	}
	a, out, _ := testApp("1.2.0")
	if code := a.finish(a.dispatch([]string{"--version"})); code != 0 || out.String() != "container CLI version 1.2.0 (build: release, commit: 0000000)\n" {
		t.Errorf("--version: %d %q", code, out.String())
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
	if err := applecli.Check(MustVersion("1.5.0"), []string{"run", "-c", "4096", "img"}); err != nil {
		t.Errorf("the parser takes any count: %v", err)
	}
}
