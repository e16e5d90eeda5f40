package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func TestRunArgs(t *testing.T) {
	got := RunArgs(Podman, sandbox.RunSpec{
		Name: "sandbox-mcp-web", Image: "mcp-dev", Labels: map[string]string{"b": "2", "a": "1"},
		CPUs: 1.5, Memory: "512M", Network: "none", Init: true, Workdir: "/workspace",
		Mounts:  []sandbox.Mount{{Volume: "vol", Target: "/workspace"}, {Source: "/h/s.sock", Target: "/run/s.sock", ReadOnly: true}},
		Command: []string{"sleep", "infinity"},
	})
	want := []string{"run", "-d", "--name", "sandbox-mcp-web", "--label", "a=1", "--label", "b=2", "--init",
		"--cpus", "1.5", "--memory", "512M", "--network", "none",
		"--mount", "type=volume,source=vol,target=/workspace", "--mount", "type=bind,source=/h/s.sock,target=/run/s.sock,readonly",
		"--workdir", "/workspace", "--", "mcp-dev", "sleep", "infinity"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestExecArgsNeverTTY(t *testing.T) {
	got := ExecArgs("c", sandbox.ExecSpec{Argv: []string{"sh"}, Interactive: true, Env: map[string]string{"K": "v"}})
	want := []string{"exec", "--interactive", "--env", "K=v", "--", "c", "sh"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q", got)
	}
}

// A local podman's shells get the server's pipes handed in as descriptors
// 3 to 5, which a shell makes its standard streams before it runs the
// argv; docker, a podman client of a remote service and a terminal keep
// the engine's relayed streams.
func TestDirectExecOnlyOnALocalPodman(t *testing.T) {
	t.Setenv("CONTAINER_HOST", "")
	t.Setenv("CONTAINER_CONNECTION", "")
	spec := sandbox.ExecSpec{Argv: []string{"sh"}, Interactive: true, Env: map[string]string{"K": "v"}}
	p, ok := New(Options{Flavor: Podman}).DirectExecCommand(context.Background(), "c", spec)
	if !ok {
		t.Fatal("a local podman's exec does not hand its streams on")
	}
	got := p.(interface{ Cmd() *exec.Cmd }).Cmd().Args[1:]
	want := []string{"exec", "--preserve-fds", "3", "--env", "K=v", "--", "c", "sh", "-c", handedStreams, "sh", "sh"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("argv = %q, want %q", got, want)
	}
	if _, ok := New(Options{Flavor: Docker}).DirectExecCommand(context.Background(), "c", spec); ok {
		t.Error("docker's exec, which has no --preserve-fds, is taken to hand streams on")
	}
	tty := spec
	tty.TTY = true
	if _, ok := New(Options{Flavor: Podman}).DirectExecCommand(context.Background(), "c", tty); ok {
		t.Error("a terminal's exec is taken to hand streams on")
	}
	if _, ok := New(Options{Flavor: Podman, Env: []string{"CONTAINER_HOST=unix:///run/podman/podman.sock"}}).DirectExecCommand(context.Background(), "c", spec); ok {
		t.Error("a client of a podman service is taken to hand streams on")
	}
	t.Setenv("CONTAINER_CONNECTION", "elsewhere")
	if _, ok := New(Options{Flavor: Podman}).DirectExecCommand(context.Background(), "c", spec); ok {
		t.Error("a client of a named podman connection is taken to hand streams on")
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		f      Flavor
		stderr string
		want   error
	}{
		{Podman, `Error: no container with name or ID "x" found: no such container`, sandbox.ErrNotFound},
		{Podman, "Error: inspecting object: no such container x", sandbox.ErrNotFound},
		{Docker, "Error: No such container: x", sandbox.ErrNotFound},
		// podman 4.3.1 inspecting an ID that ps listed and a removal took since.
		{Podman, `Error: getting container from store "52c15f50e6e3": container not known`, sandbox.ErrNotFound},
		{Podman, "Error: can only create exec sessions on running containers: container state improper", sandbox.ErrNotRunning},
		{Docker, "Error response from daemon: Container 3f2 is not running", sandbox.ErrNotRunning},
		{Podman, `Error: creating container storage: the container name "x" is already in use by abc. You have to remove that container to be able to reuse that name: that name is already in use`, sandbox.ErrAlreadyExists},
		{Docker, `docker: Error response from daemon: Conflict. The container name "/x" is already in use by container "abc".`, sandbox.ErrAlreadyExists},
		{Docker, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?", sandbox.ErrEngineNotStarted},
		{Podman, "Error: localhost/nope: image not known", sandbox.ErrNotFound},
		{Docker, "Error: No such image: nope", sandbox.ErrNotFound},
		// podman 4.3.1's and docker's words for a volume a container holds.
		{Podman, "Error: volume smt-ws-default is being used by the following container(s): 3776e9e1c159: volume is being used", sandbox.ErrInUse},
		{Docker, "Error response from daemon: remove smt-ws-default: volume is in use - [3776e9e1c159]", sandbox.ErrInUse},
		{Podman, "Error: something else entirely", nil},
	}
	for _, c := range cases {
		got, hint := Classify(c.f, 125, c.stderr)
		if !errors.Is(got, c.want) && !(got == nil && c.want == nil) {
			t.Errorf("%s %q: got %v want %v", c.f, c.stderr, got, c.want)
		}
		if c.want == sandbox.ErrEngineNotStarted && hint == "" {
			t.Errorf("no hint for %q", c.stderr)
		}
	}
}

func TestParseInspectPodman(t *testing.T) {
	data, err := os.ReadFile("testdata/podman-4.3-inspect.json")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := ParseInspect(data)
	if err != nil || len(cs) != 1 {
		t.Fatalf("%v %d", err, len(cs))
	}
	c := cs[0]
	if c.Name != "smcp-capture" || c.State != sandbox.StateRunning || c.Labels["io.sandbox-mcp.owner"] != "x" ||
		c.CPUs != 1.5 || c.Memory != 256<<20 || c.Created.IsZero() || c.Started.IsZero() || c.Image == "" {
		t.Fatalf("%+v", c)
	}
}

func TestParseInspectEmptyAndGarbage(t *testing.T) {
	if cs, err := ParseInspect([]byte("[]")); err != nil || len(cs) != 0 {
		t.Fatalf("%v %v", cs, err)
	}
	if _, err := ParseInspect([]byte("Error: nope")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestHasLabels(t *testing.T) {
	have := map[string]string{"owner": "p1", "clone": "copy"}
	for _, c := range []struct {
		want map[string]string
		ok   bool
	}{
		{map[string]string{"owner": "p1", "clone": ""}, true},
		{map[string]string{"owner": "p2", "clone": ""}, false},
		{map[string]string{"owner": "p1", "snapshot": ""}, false},
		{nil, true},
	} {
		if got := hasLabels(have, c.want); got != c.ok {
			t.Errorf("hasLabels(%v) = %v, want %v", c.want, got, c.ok)
		}
	}
}

// podman removes a volume without --force, so that it never takes the
// containers' locks from the volume's side; docker keeps its --force.
func TestVolumeRemoveArgs(t *testing.T) {
	if got, want := strings.Join(VolumeRemoveArgs(Podman, "v"), " "), "volume rm -- v"; got != want {
		t.Errorf("podman: %q, want %q", got, want)
	}
	if got, want := strings.Join(VolumeRemoveArgs(Docker, "v"), " "), "volume rm --force -- v"; got != want {
		t.Errorf("docker: %q, want %q", got, want)
	}
}

// fakeEngine writes a CLI that records each call in dir/calls and, for its
// first fails calls, exits 125 with stderr; a `container inspect` is
// answered "running", not recorded.
func fakeEngine(t *testing.T, fails int, stderr string) (bin, calls string) {
	t.Helper()
	dir := t.TempDir()
	bin, calls = filepath.Join(dir, "podman"), filepath.Join(dir, "calls")
	script := fmt.Sprintf(`#!/bin/sh
if [ "$1 $2" = "container inspect" ]; then echo "%s running"; exit 0; fi
echo "$*" >> %q
n=$(wc -l < %q)
if [ "$n" -le %d ]; then echo %q >&2; exit 125; fi
`, strings.Repeat("ab", 32), calls, calls, fails, stderr)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, calls
}

func callLines(t *testing.T, calls string) []string {
	t.Helper()
	data, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// removals are the `rm` calls among the fake engine's calls (a podman
// Remove looks at the container's state first).
func removals(t *testing.T, calls string) []string {
	t.Helper()
	var rms []string
	for _, l := range callLines(t, calls) {
		if strings.HasPrefix(l, "rm ") {
			rms = append(rms, l)
		}
	}
	return rms
}

// TestRemoveRetriesABusyUnmount: podman's passing "device or resource
// busy" is tried again until the removal goes through; any other refusal
// is returned at once.
func TestRemoveRetriesABusyUnmount(t *testing.T) {
	defer func(p time.Duration) { removePause = p }(removePause)
	removePause = 10 * time.Millisecond
	busy := `Error: cleaning up container abc: unmounting container abc storage: cleaning up container abc storage: unmounting "/var/lib/containers/storage/overlay/x/merged": device or resource busy`

	bin, calls := fakeEngine(t, 2, busy)
	if err := New(Options{Flavor: Podman, Binary: bin}).Remove(context.Background(), "smt-a"); err != nil {
		t.Fatalf("a busy unmount that passes should not fail the removal: %v", err)
	}
	lines := removals(t, calls)
	if len(lines) != 3 || lines[2] != "rm --force --time 0 -- smt-a" {
		t.Fatalf("want 3 removals, got %q", lines)
	}

	bin, calls = fakeEngine(t, 100, busy)
	err := New(Options{Flavor: Podman, Binary: bin}).Remove(context.Background(), "smt-a")
	if err == nil || !strings.Contains(err.Error(), "device or resource busy") {
		t.Fatalf("a busy unmount that stays should be returned: %v", err)
	}
	if n := len(removals(t, calls)); n != removeTries {
		t.Fatalf("tried %d times, want %d", n, removeTries)
	}

	bin, calls = fakeEngine(t, 100, "Error: something else entirely")
	if err := New(Options{Flavor: Podman, Binary: bin}).Remove(context.Background(), "smt-a"); err == nil {
		t.Fatal("a refusal should be returned")
	}
	if n := len(removals(t, calls)); n != 1 {
		t.Fatalf("another refusal was tried %d times, want once", n)
	}

	// A refused try that removed the container after all: the next
	// finds none, and the removal is done.
	dir := t.TempDir()
	bin = filepath.Join(dir, "podman")
	script := fmt.Sprintf("#!/bin/sh\n[ \"$1 $2\" != \"container inspect\" ] || exit 1\nif [ -e %[1]q ]; then echo 'Error: no container with name or ID \"smt-a\" found: no such container' >&2; exit 1; fi\n: > %[1]q\necho %[2]q >&2\nexit 125\n", filepath.Join(dir, "gone"), busy)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := New(Options{Flavor: Podman, Binary: bin}).Remove(context.Background(), "smt-a"); err != nil {
		t.Fatalf("a container gone after a refused try is removed: %v", err)
	}
	if err := New(Options{Flavor: Podman, Binary: bin}).Remove(context.Background(), "smt-a"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a container that was never there is not found: %v", err)
	}

	bin, _ = fakeEngine(t, 100, busy)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New(Options{Flavor: Podman, Binary: bin}).Remove(ctx, "smt-a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled removal should say so: %v", err)
	}
}

// TestStartTriesOnceMoreAfterACleanup: a podman start that fails is tried
// again after `container cleanup` (what a killed run or start left); a
// second failure is returned; docker's start is tried once.
func TestStartTriesOnceMoreAfterACleanup(t *testing.T) {
	stale := `Error: OCI runtime error: unable to start container "abc": runc: runc create failed: container with given ID already exists`
	bin, calls := fakeEngine(t, 1, stale)
	if err := New(Options{Flavor: Podman, Binary: bin}).Start(context.Background(), "smt-a"); err != nil {
		t.Fatalf("a start that fails once: %v", err)
	}
	if got := callLines(t, calls); !slices.Equal(got, []string{"start -- smt-a", "container cleanup -- smt-a", "start -- smt-a"}) {
		t.Fatalf("calls %q", got)
	}
	bin, calls = fakeEngine(t, 100, stale)
	if err := New(Options{Flavor: Podman, Binary: bin}).Start(context.Background(), "smt-a"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a start that keeps failing: %v", err)
	}
	if n := len(callLines(t, calls)); n != 3 {
		t.Fatalf("%d calls, want start, cleanup, start", n)
	}
	bin, calls = fakeEngine(t, 100, stale)
	if err := New(Options{Flavor: Docker, Binary: bin}).Start(context.Background(), "smt-a"); err == nil {
		t.Fatal("docker: a failed start should fail")
	}
	if n := len(callLines(t, calls)); n != 1 {
		t.Fatalf("docker: %d calls, want one start", n)
	}
}
