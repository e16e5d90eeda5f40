package apple

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{
		"container CLI version 1.5.0 (build: release, commit: d265d66)\n":              {1, 5, 0},
		"container CLI version 0.1.0 (build: release, commit: 0fd8692, sdk: MacOS 15)": {0, 1, 0},
		"container CLI version 0.6.0 (build: release, commit: unspeci)":                {0, 6, 0},
		"container CLI version 0.10.0-27-g9fd15f0 (build: debug, commit: 9fd15f0)":     {0, 10, 0},
		"1.2":   {1, 2, 0},
		"1.2.1": {1, 2, 1},
	} {
		got, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseVersion("container CLI"); err == nil {
		t.Error("no number: want an error")
	}
}

func TestFeaturesByVersion(t *testing.T) {
	cases := []struct {
		v                                      Version
		init, statusJSON, cp, sockets, liveExp bool
	}{
		{Version{0, 9, 0}, false, false, false, false, false},
		{Version{0, 10, 0}, true, true, false, false, false},
		{Version{1, 0, 0}, true, true, true, false, false},
		{Version{1, 1, 0}, true, true, true, true, false},
		{Version{1, 2, 0}, true, true, true, true, false},
		{Version{1, 2, 1}, true, true, true, true, true},
		{Version{1, 5, 0}, true, true, true, true, true},
	}
	for _, c := range cases {
		f := FeaturesOf(c.v)
		if f.Init != c.init || f.StatusJSON != c.statusJSON || f.Copy != c.cp || f.SocketMounts != c.sockets || f.LiveExport != c.liveExp {
			t.Errorf("%v: %+v", c.v, f)
		}
	}
	if (Version{0, 7, 1}).AtLeast(MinVersion) || !(Version{0, 8, 0}).AtLeast(MinVersion) {
		t.Error("MinVersion is 0.8.0")
	}
}

func TestRunArgs(t *testing.T) {
	spec := sandbox.RunSpec{
		Name:    "smt-box",
		Image:   "mcp-dev",
		Labels:  map[string]string{"io.sandbox-mcp.owner": "smt", "io.sandbox-mcp.name": "box"},
		CPUs:    1.5,
		Memory:  "512m",
		Mounts:  []sandbox.Mount{{Volume: "smt-ws-box", Target: "/workspace"}, {Source: "/Users/me/src", Target: "/src", ReadOnly: true}},
		Workdir: "/workspace",
		Env:     map[string]string{"B": "2", "A": "1"},
		Command: []string{"sleep", "infinity"},
		Init:    true,
		Network: "none",
	}
	got, err := RunArgs(FeaturesOf(Version{1, 5, 0}), spec)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"run", "-d", "--name", "smt-box",
		"-l", "io.sandbox-mcp.name=box", "-l", "io.sandbox-mcp.owner=smt",
		"--init", "-c", "2", "-m", "512M", "--network", "none",
		"-v", "smt-ws-box:/workspace", "-v", "/Users/me/src:/src:ro",
		"-w", "/workspace", "-e", "A=1", "-e", "B=2",
		"mcp-dev", "sleep", "infinity"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RunArgs 1.5.0:\n got %q\nwant %q", got, want)
	}
	// 0.9 has no --init; there is never a "--" (Apple passes it on).
	old, err := RunArgs(FeaturesOf(Version{0, 9, 0}), spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range old {
		if a == "--init" || a == "--" {
			t.Fatalf("0.9 argv has %q: %q", a, old)
		}
	}
	spec.Virtualization = true
	spec.Memory = "1073741825" // bytes: rounds up to whole MiB
	got, _ = RunArgs(FeaturesOf(Version{1, 5, 0}), spec)
	if s := strings.Join(got, " "); !strings.Contains(s, "-m 1025M") || !strings.Contains(s, "--virtualization") {
		t.Fatalf("%s", s)
	}
	for _, bad := range []sandbox.RunSpec{
		{Name: "-x", Image: "mcp-dev"},
		{Name: "ok", Image: "--privileged"},
		{Name: "ok", Image: "mcp-dev", Mounts: []sandbox.Mount{{Source: "rel/dir", Target: "/x"}}},
		{Name: "ok", Image: "mcp-dev", Mounts: []sandbox.Mount{{Volume: "v", Target: "/a:b"}}},
	} {
		if args, err := RunArgs(FeaturesOf(Version{1, 5, 0}), bad); err == nil {
			t.Errorf("%+v: want an error, got %q", bad, args)
		}
	}
}

func TestExecArgsNeverTTYNorDoubleDash(t *testing.T) {
	got := ExecArgs("smt-box", sandbox.ExecSpec{Argv: []string{"sh"}, Interactive: true, Workdir: "/w", User: "1000", Env: map[string]string{"K": "v"}})
	want := []string{"exec", "-i", "-w", "/w", "-u", "1000", "-e", "K=v", "smt-box", "sh"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q want %q", got, want)
	}
	got = ExecArgs("smt-box", sandbox.ExecSpec{Argv: []string{"true"}})
	if !reflect.DeepEqual(got, []string{"exec", "smt-box", "true"}) {
		t.Fatalf("got %q", got)
	}
}

func TestBuildArgs(t *testing.T) {
	got, err := BuildArgs(BuildSpec{Tag: "mcp-dev", File: "Containerfile.mcp-dev", ContextDir: ".", NoCache: true})
	if err != nil || !reflect.DeepEqual(got, []string{"build", "-t", "mcp-dev", "-f", "Containerfile.mcp-dev", "--no-cache", "."}) {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := BuildArgs(BuildSpec{Tag: "-x", ContextDir: "."}); err == nil {
		t.Fatal("tag starting with '-': want an error")
	}
}

func TestNormalizeReference(t *testing.T) {
	for in, want := range map[string]string{
		"mcp-dev":                          "docker.io/library/mcp-dev:latest",
		"mcp-dev:1":                        "docker.io/library/mcp-dev:1",
		"alpine:3.22":                      "docker.io/library/alpine:3.22",
		"user/img":                         "docker.io/user/img:latest",
		"docker.io/library/alpine:latest":  "docker.io/library/alpine:latest",
		"docker.io/alpine":                 "docker.io/library/alpine:latest",
		"registry-1.docker.io/alpine":      "registry-1.docker.io/library/alpine:latest",
		"ghcr.io/apple/x/builder:0.12.0":   "ghcr.io/apple/x/builder:0.12.0",
		"localhost:5000/img":               "localhost:5000/img:latest",
		"localhost/img":                    "localhost/img:latest",
		"localhost.lan/img":                "localhost.lan/img:latest",
		"docker.io/kindest/node@sha256:ab": "docker.io/kindest/node@sha256:ab",
		"alpine:3@sha256:ab":               "docker.io/library/alpine:3",
		"comicarr:latest":                  "docker.io/library/comicarr:latest",
	} {
		if got := NormalizeReference(in, ""); got != want {
			t.Errorf("NormalizeReference(%q) = %q, want %q", in, got, want)
		}
	}
	// A configured default domain replaces docker.io, without library/.
	for in, want := range map[string]string{
		"mcp-dev":            "registry.example.com/mcp-dev:latest",
		"team/tool:2":        "registry.example.com/team/tool:2",
		"docker.io/alpine":   "docker.io/library/alpine:latest",
		"ghcr.io/a/b":        "ghcr.io/a/b:latest",
		"localhost:5000/img": "localhost:5000/img:latest",
	} {
		if got := NormalizeReference(in, "registry.example.com"); got != want {
			t.Errorf("NormalizeReference(%q, registry.example.com) = %q, want %q", in, got, want)
		}
	}
	if got := NormalizeReference("x", "ghcr.io/org"); got != "ghcr.io/org/x:latest" {
		t.Errorf("domain with a path: %q", got)
	}
}

// TestRegistryDomain: the domain is read from the CLI once (property list
// from 1.0, property get before), docker.io when it cannot be read, and
// ImageExists compares references under it.
func TestRegistryDomain(t *testing.T) {
	const images = `[{"id":"aa","configuration":{"name":"registry.example.com/mcp-dev:latest","descriptor":{"digest":"sha256:aa"}}}]`
	d, lines := fakeCLI(t, "1.2.2", map[string]fakeReply{
		// The whole ContainerSystemConfig, as 1.2.2 prints it (ContainerSystemConfig.swift).
		"system property list --format json": {stdout: `{"build":{"cpus":2,"image":"ghcr.io\/apple\/container-builder-shim\/builder:0.13.1","memory":"2048mb","rosetta":true},` +
			`"container":{"cpus":4,"memory":"1gb"},"dns":{},"kernel":{"binaryPath":"opt\/kata\/share\/kata-containers\/vmlinux-6.18.15-186",` +
			`"digest":"sha256:f63d54507d1f18635d94475077e4c2330de4d8e05cedf25f7c38f063b0e66a91","url":"https:\/\/github.com\/kata-containers\/kata-containers\/releases\/download\/3.28.0\/kata-static-3.28.0-arm64.tar.zst"},` +
			`"machine":{"cpus":6,"homeMount":"rw","memory":"8gb","virtualization":false},"network":{},"registry":{"domain":"registry.example.com"},` +
			`"vminit":{"image":"ghcr.io\/apple\/containerization\/vminit:0.40.1"}}` + "\n"},
		"image list --format json": {stdout: images},
	})
	for range 2 {
		if got := d.RegistryDomain(tctx(t)); got != "registry.example.com" {
			t.Errorf("1.2.2: %q", got)
		}
	}
	if ok, err := d.ImageExists(tctx(t), "mcp-dev"); err != nil || !ok {
		t.Errorf("ImageExists(mcp-dev) under the configured domain: %v %v", ok, err)
	}
	if imgs, err := d.ListImages(tctx(t)); err != nil || len(imgs) != 1 || imgs[0].Ref != "mcp-dev:latest" {
		t.Errorf("ListImages under the configured domain: %+v %v", imgs, err)
	}
	if n := strings.Count(strings.Join(lines(), "\n"), "system property"); n != 1 {
		t.Errorf("the domain was read %d times: %q", n, lines())
	}
	d, _ = fakeCLI(t, "0.12.3", map[string]fakeReply{"system property get registry.domain": {stdout: "ghcr.io\n"}})
	if got := d.RegistryDomain(tctx(t)); got != "ghcr.io" {
		t.Errorf("0.12.3: %q", got)
	}
	d, _ = fakeCLI(t, "1.5.0", nil) // the property command fails
	if got := d.RegistryDomain(tctx(t)); got != DefaultRegistryDomain {
		t.Errorf("unreadable: %q", got)
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		code   int
		stderr string
		kind   error
		hint   string
	}{
		// 1.x and >= 0.10
		{1, "Error: container not found: nosuch", sandbox.ErrNotFound, ""},
		{1, "Error: get failed: container nosuch not found", sandbox.ErrNotFound, ""},
		{1, "Error: container web is not running", sandbox.ErrNotRunning, ""},
		{1, "Error: container with id dup already exists", sandbox.ErrAlreadyExists, ""},
		{1, `Error: internalError: "failed to stop container" (cause: "notFound: "container with ID nosuch not found"")`, sandbox.ErrNotFound, ""},
		{1, `Error: internalError: "failed to delete container" (cause: "notFound: "container with ID nosuch not found"")`, sandbox.ErrNotFound, ""},
		{1, `Error: failed to delete one or more containers: ["nosuch"]`, sandbox.ErrNotFound, ""},
		{1, "Error: no such container: X", sandbox.ErrNotFound, ""},
		{1, "Error: image not found: nosuch:latest", sandbox.ErrNotFound, ""},
		{1, "Error: volume not found: nope", sandbox.ErrNotFound, ""},
		{1, "Error: volume 'definitely-missing-volume-2157' not found", sandbox.ErrNotFound, ""},
		{1, `Error: invalidState: "volume 'smt-ws-default' is currently in use and cannot be accessed by another container, or deleted"`, sandbox.ErrInUse, ""},
		// The shapes the source words them in (ContainerClient.swift,
		// ContainersService.swift, 1.0.0–1.2.2).
		{1, `Error: failed to copy into container box (cause: "invalidState: "container box is not running"")`, sandbox.ErrNotRunning, ""},
		{1, `Error: failed to copy from container box (cause: "notFound: "container with ID box not found"")`, sandbox.ErrNotFound, ""},
		{1, `Error: failed to export container (cause: "notFound: "container with ID box not found"")`, sandbox.ErrNotFound, ""},
		{1, "Error: container already exists: box", sandbox.ErrAlreadyExists, ""},
		{1, `Error: failed to create container (cause: "exists: "container already exists: box"")`, sandbox.ErrAlreadyExists, ""},
		// before 0.10
		{1, `Error: notFound: "get failed: container nosuch not found"`, sandbox.ErrNotFound, ""},
		{1, `Error: invalidState: "container web is not running"`, sandbox.ErrNotRunning, ""},
		{1, `Error: exists: "container with id dup already exists"`, sandbox.ErrAlreadyExists, ""},
		// the system service
		{1, "Error: internalError: \"failed to list containers\" (cause: \"interrupted: \"XPC connection error: Connection invalid\"\")\nEnsure container system service has been started with `container system start`.", sandbox.ErrEngineNotStarted, StartHint},
		{1, `Error: interrupted: "XPC connection error: Connection invalid"`, sandbox.ErrEngineNotStarted, StartHint},
		{64, "Error: Plugins are unavailable. Start the container system services and retry", sandbox.ErrEngineNotStarted, StartHint},
		// neither
		{1, `Error: internalError: "failed to delete container" (cause: "invalidState: "container qtest is running and can not be deleted"")`, nil, ""},
		{1, `Error: invalidState: "container is not stopped"`, nil, ""},
		{1, `Error: failed to export container (cause: "invalidState: "container is not stopped"")`, nil, ""},
		{64, "Error: Unknown option '--bogus'\nUsage: container run", nil, "upgrade"},
		{1, "Error: Plugin 'container-cp' not found.", nil, "upgrade"},
		{1, `Error: unsupported: "nested virtualization is not supported on the platform"`, nil, "M3"},
	}
	for _, c := range cases {
		kind, hint := Classify(c.code, c.stderr)
		if !errors.Is(kind, c.kind) || (c.kind == nil && kind != nil) || !strings.Contains(hint, c.hint) {
			t.Errorf("Classify(%d, %q) = %v, %q; want %v, …%q…", c.code, c.stderr, kind, hint, c.kind, c.hint)
		}
	}
}

func TestCLIErrorInExecStderr(t *testing.T) {
	for _, c := range []struct {
		code    int
		stderr  string
		kind    error
		drained bool
	}{
		{1, "Error: container smt-box is not running\n", sandbox.ErrNotRunning, false},
		{1, "Error: get failed: container smt-box not found\n", sandbox.ErrNotFound, false},
		{1, "Error: failed to exec process CancellationError()\n", nil, true},
		{1, "grep: not found\n", nil, false},      // the process's own words
		{127, "sh: foo: not found\n", nil, false}, // ditto
		{2, "Error: get failed: container x not found", nil, false},
		{1, "", nil, false},
	} {
		kind, drained := cliError(c.code, c.stderr)
		if !errors.Is(kind, c.kind) || (c.kind == nil && kind != nil) || drained != c.drained {
			t.Errorf("cliError(%d, %q) = %v, %v", c.code, c.stderr, kind, drained)
		}
	}
}

func TestVolumeCreateArgs(t *testing.T) {
	joined := func(name string, labels map[string]string, size int64) string {
		args, err := VolumeCreateArgs(name, labels, size)
		if err != nil {
			t.Errorf("VolumeCreateArgs(%q, %q, %d): %v", name, labels, size, err)
		}
		return strings.Join(args, " ")
	}
	labels := map[string]string{"b": "2", "a": "1"}
	if got := joined("ws", labels, 0); got != "volume create --label a=1 --label b=2 ws" {
		t.Errorf("unsized: %q", got)
	}
	if got := joined("ws", nil, 1<<30); got != "volume create -s 1024M ws" {
		t.Errorf("1G: %q", got)
	}
	if got := joined("ws", nil, 1<<20+1); got != "volume create -s 2M ws" {
		t.Errorf("rounding up: %q", got)
	}
	spec := sandbox.RunSpec{Name: "box", Image: "img", PidsLimit: 64, StorageSize: "1G"}
	args, err := RunArgs(FeaturesOf(Version{1, 5, 0}), spec)
	if err != nil || strings.Contains(strings.Join(args, " "), "pids") || strings.Contains(strings.Join(args, " "), "storage") {
		t.Errorf("Apple has no pids or rootfs size flags: %q %v", args, err)
	}
}

// TestRunArgsCapsCPUsAtHost: a VM cannot have more CPUs than the Mac (the
// boot fails before 0.12.0), so -c is capped at the host's count.
func TestRunArgsCapsCPUsAtHost(t *testing.T) {
	for _, v := range []Version{{0, 11, 0}, {1, 2, 2}} {
		f := FeaturesOf(v)
		f.HostCPUs = 8
		for cpus, want := range map[float64]string{64: "8", 8: "8", 7.5: "8", 2: "2"} {
			args, err := RunArgs(f, sandbox.RunSpec{Name: "box", Image: "img", CPUs: cpus})
			if s := strings.Join(args, " "); err != nil || !strings.Contains(s, "-c "+want+" ") {
				t.Errorf("%v: CPUs %v: %q %v, want -c %s", v, cpus, s, err, want)
			}
		}
	}
}
