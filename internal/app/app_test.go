package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// fakeEngines writes stand-in CLIs named names into a new directory.
func fakeEngines(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// binaryOf is the CLI a runtime runs.
func binaryOf(rt sandbox.Runtime) string {
	if b, ok := rt.(interface{ Binary() string }); ok {
		return b.Binary()
	}
	return "?"
}

// chooser returns an engine chooser for tests: goos, engines found as
// find finds them, docker's daemon as daemon says, no memory.
func chooser(goos string, find engineFinder, daemon bool) engineChooser {
	return engineChooser{goos: goos, find: find, wait: firstCheckWait,
		dockerDaemon: func() (bool, string) { return daemon, "test" },
		logger:       slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestAutoRuntime: auto picks Apple's container CLI on macOS when it is
// found, and never on Linux, where it falls back to docker or podman.
func TestAutoRuntime(t *testing.T) {
	dir := fakeEngines(t, "container", "podman")
	t.Setenv("PATH", dir)
	ctx := context.Background()
	find := engineFinder{lookPath: exec.LookPath}
	for goos, want := range map[string]string{"darwin": "container", "linux": "podman"} {
		if rt, why := chooser(goos, find, false).choose(ctx, "auto"); rt.Kind() != want {
			t.Errorf("auto on %s: %v (%s), want %s", goos, rt.Kind(), why, want)
		}
	}
	if err := os.Remove(filepath.Join(dir, "container")); err != nil {
		t.Fatal(err)
	}
	if rt, _ := chooser("darwin", find, false).choose(ctx, "auto"); rt.Kind() != "podman" {
		t.Errorf("auto on darwin without container: %v", rt.Kind())
	}
	if rt, why := chooser("linux", find, false).choose(ctx, "container"); rt.Kind() != "container" || why != "set by --runtime" {
		t.Errorf("explicit container: %v %q", rt.Kind(), why)
	}
}

// TestEngineOutsidePATH: a GUI app on macOS has launchd's minimal PATH;
// the engine in /usr/local/bin or /opt/homebrew/bin (here: a directory
// standing in for them) is still found, and run by its full path. A
// configured engine_path wins over both.
func TestEngineOutsidePATH(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // nothing on PATH
	brew := fakeEngines(t, "container", "podman")
	ctx := context.Background()
	find := engineFinder{dirs: []string{t.TempDir(), brew}, lookPath: exec.LookPath}
	rt, _ := chooser("darwin", find, false).choose(ctx, "auto")
	if rt.Kind() != "container" || binaryOf(rt) != filepath.Join(brew, "container") {
		t.Errorf("auto on darwin: %s %s", rt.Kind(), binaryOf(rt))
	}
	rt, _ = chooser("linux", find, false).choose(ctx, "podman")
	if binaryOf(rt) != filepath.Join(brew, "podman") {
		t.Errorf("explicit podman: %s", binaryOf(rt))
	}
	own := fakeEngines(t, "docker")
	find.path = filepath.Join(own, "docker")
	if rt, _ := chooser("darwin", find, true).choose(ctx, "auto"); rt.Kind() != "docker" || binaryOf(rt) != find.path {
		t.Errorf("engine_path: %s %s", rt.Kind(), binaryOf(rt))
	}
}

// TestNoEngine: with no engine anywhere, auto still gives a runtime (the
// platform's), whose calls fail with the install hint, so that the server
// starts and its tools explain.
func TestNoEngine(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	find := engineFinder{dirs: []string{t.TempDir()}, lookPath: exec.LookPath}
	for goos, want := range map[string]string{"darwin": "container", "linux": "podman"} {
		rt, why := chooser(goos, find, false).choose(context.Background(), "auto")
		if rt.Kind() != want || !strings.Contains(why, "not installed") {
			t.Fatalf("%s: %s (%s)", goos, rt.Kind(), why)
		}
		err := rt.Ping(context.Background())
		if !errors.Is(err, sandbox.ErrEngineMissing) || !strings.Contains(err.Error(), "install") {
			t.Errorf("%s: ping without an engine: %v", goos, err)
		}
	}
}

// scriptEngine writes an engine CLI named name into dir that runs body
// (sh) and appends each call's arguments to dir/name.calls.
func scriptEngine(t *testing.T, dir, name, body string) {
	t.Helper()
	script := "#!/bin/sh\necho \"$*\" >> " + filepath.Join(dir, name+".calls") + "\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func calls(t *testing.T, dir, name string) int {
	b, _ := os.ReadFile(filepath.Join(dir, name+".calls"))
	return strings.Count(string(b), "\n")
}

// TestAutoWaitsForSlowEngine: docker installed with no daemon, and a
// podman whose first check takes 8 s (another client holds its lock):
// auto waits for podman instead of taking a docker that cannot work,
// remembers it, and the next server of that state directory takes it
// without asking either engine again.
func TestAutoWaitsForSlowEngine(t *testing.T) {
	dir := t.TempDir()
	scriptEngine(t, dir, "docker", `echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1`)
	scriptEngine(t, dir, "podman", "/bin/sleep 8; echo 4.3.1")
	t.Setenv("PATH", dir)
	find := engineFinder{lookPath: exec.LookPath}
	c := chooser("linux", find, false)
	c.memoDir = t.TempDir()
	rt, why := c.choose(context.Background(), "auto")
	if rt.Kind() != "podman" || !strings.Contains(why, "podman answered") || !strings.Contains(why, "docker: installed, but no daemon") {
		t.Fatalf("auto: %s (%s)", rt.Kind(), why)
	}
	if n := calls(t, dir, "docker"); n != 0 {
		t.Errorf("docker without a daemon was called %d times", n)
	}
	if fi, err := os.Stat(filepath.Join(c.memoDir, engineMemoFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the choice is not kept privately: %v %v", fi, err)
	}
	// Another server (or the CLI) of the same state directory, with a
	// docker daemon now up: the same engine, asked nothing.
	c.dockerDaemon = func() (bool, string) { return true, "test" }
	before := calls(t, dir, "podman")
	rt, why = c.choose(context.Background(), "auto")
	if rt.Kind() != "podman" || !strings.Contains(why, "remembered in "+c.memoDir) || calls(t, dir, "podman") != before || calls(t, dir, "docker") != 0 {
		t.Fatalf("second choice: %s (%s), podman called %d times more", rt.Kind(), why, calls(t, dir, "podman")-before)
	}
	// The remembered engine uninstalled: auto chooses again.
	if err := os.Remove(filepath.Join(dir, "podman")); err != nil {
		t.Fatal(err)
	}
	scriptEngine(t, dir, "docker", "echo 27.0.1")
	if rt, why := c.choose(context.Background(), "auto"); rt.Kind() != "docker" || !strings.Contains(why, "docker answered") {
		t.Fatalf("after podman went: %s (%s)", rt.Kind(), why)
	}
}

// TestAutoKeepsEngineSlowerThanItsWait: an engine that has not answered
// when the wait ends is still the one (it is there, only slow), and is not
// remembered, so the next start looks again.
func TestAutoKeepsEngineSlowerThanItsWait(t *testing.T) {
	dir := t.TempDir()
	scriptEngine(t, dir, "podman", "/bin/sleep 5; echo 4.3.1")
	t.Setenv("PATH", dir)
	c := chooser("linux", engineFinder{lookPath: exec.LookPath}, false)
	c.memoDir, c.wait = t.TempDir(), time.Second
	rt, why := c.choose(context.Background(), "auto")
	if rt.Kind() != "podman" || !strings.Contains(why, "did not answer within 1s") {
		t.Fatalf("auto: %s (%s)", rt.Kind(), why)
	}
	if _, err := os.Stat(filepath.Join(c.memoDir, engineMemoFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a choice that did not answer was remembered: %v", err)
	}
}

// TestAutoPassesOverDeadDaemon: both engines installed, docker's socket
// there but its daemon refusing: podman, with docker's words in the why.
func TestAutoPassesOverDeadDaemon(t *testing.T) {
	dir := t.TempDir()
	scriptEngine(t, dir, "docker", `echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1`)
	scriptEngine(t, dir, "podman", "echo 4.3.1")
	t.Setenv("PATH", dir)
	c := chooser("linux", engineFinder{lookPath: exec.LookPath}, true)
	rt, why := c.choose(context.Background(), "auto")
	if rt.Kind() != "podman" || !strings.Contains(why, "Cannot connect to the Docker daemon") {
		t.Fatalf("auto: %s (%s)", rt.Kind(), why)
	}
	// Both answer: docker, the first.
	scriptEngine(t, dir, "docker", "echo 27.0.1")
	if rt, why := c.choose(context.Background(), "auto"); rt.Kind() != "docker" {
		t.Fatalf("both answering: %s (%s)", rt.Kind(), why)
	}
}

// TestAutoKeepsTheRememberedEngine: a remembered docker whose daemon
// fails for a while (restarting; its socket file stays) is kept, so that
// no server of the state directory moves to podman and forgets docker's
// sandboxes; its calls say what docker says.
func TestAutoKeepsTheRememberedEngine(t *testing.T) {
	dir := t.TempDir()
	scriptEngine(t, dir, "docker", "echo 27.0.1")
	scriptEngine(t, dir, "podman", "echo 4.3.1")
	t.Setenv("PATH", dir)
	c := chooser("linux", engineFinder{lookPath: exec.LookPath}, true)
	c.memoDir = t.TempDir()
	if rt, why := c.choose(context.Background(), "auto"); rt.Kind() != "docker" {
		t.Fatalf("first: %s (%s)", rt.Kind(), why)
	}
	scriptEngine(t, dir, "docker", `echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1`)
	rt, why := c.choose(context.Background(), "auto")
	if rt.Kind() != "docker" || !strings.Contains(why, "remembered") {
		t.Fatalf("while the daemon is down: %s (%s)", rt.Kind(), why)
	}
	if err := rt.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "Cannot connect to the Docker daemon") {
		t.Errorf("the kept engine's calls do not say what it says: %v", err)
	}
}

// TestDockerDaemonPresent: the daemon is looked for where the docker CLI
// looks: DOCKER_HOST, the current context, the default socket.
func TestDockerDaemonPresent(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfgDir := filepath.Join(dir, "cfg")
	env := map[string]string{"DOCKER_CONFIG": cfgDir}
	getenv := func(k string) string { return env[k] }

	env["DOCKER_HOST"] = "unix://" + sock
	if ok, where := dockerDaemonPresent(getenv, "linux"); !ok {
		t.Errorf("DOCKER_HOST to a socket: %s", where)
	}
	env["DOCKER_HOST"] = "unix://" + filepath.Join(dir, "gone.sock")
	if ok, where := dockerDaemonPresent(getenv, "linux"); ok || !strings.Contains(where, "DOCKER_HOST") {
		t.Errorf("DOCKER_HOST to nothing: %v %s", ok, where)
	}
	env["DOCKER_HOST"] = "tcp://10.0.0.1:2375"
	if ok, _ := dockerDaemonPresent(getenv, "linux"); !ok {
		t.Error("DOCKER_HOST over tcp is taken as there")
	}
	delete(env, "DOCKER_HOST")

	// A context in the config, as `docker context use` writes it.
	sum := sha256.Sum256([]byte("rootless"))
	meta := filepath.Join(cfgDir, "contexts", "meta", hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(meta, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(cfgDir, "config.json"), []byte(`{"currentContext":"rootless"}`), 0o600)
	os.WriteFile(filepath.Join(meta, "meta.json"), []byte(`{"Name":"rootless","Endpoints":{"docker":{"Host":"unix://`+sock+`"}}}`), 0o600)
	if ok, where := dockerDaemonPresent(getenv, "linux"); !ok || !strings.Contains(where, "docker context rootless") {
		t.Errorf("context: %v %s", ok, where)
	}
	os.WriteFile(filepath.Join(meta, "meta.json"), []byte(`{"Name":"rootless","Endpoints":{"docker":{"Host":"unix://`+sock+`.gone"}}}`), 0o600)
	if ok, where := dockerDaemonPresent(getenv, "linux"); ok {
		t.Errorf("context to nothing: %v %s", ok, where)
	}
	// DOCKER_CONTEXT=default is the default socket, whatever the config says.
	env["DOCKER_CONTEXT"] = "default"
	if ok, where := dockerDaemonPresent(getenv, "linux"); !strings.Contains(where, "/var/run/docker.sock") {
		t.Errorf("default context: %v %s", ok, where)
	}
}

// TestOpen: Open makes the state directory private and builds the manager
// on the runtime the configuration names; a bad configuration opens nothing.
func TestOpen(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Runtime = "podman"
	cfg.StateDir = filepath.Join(t.TempDir(), "state")
	env, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if env.Runtime.Kind() != "podman" || env.Manager == nil || env.State == nil || env.Logger == nil {
		t.Errorf("env %+v", env)
	}
	if fi, err := os.Stat(cfg.StateDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir: %v %v", fi, err)
	}

	cfg.Runtime = "lxc"
	cfg.StateDir = filepath.Join(t.TempDir(), "other")
	if _, err := Open(context.Background(), cfg); err == nil {
		t.Error("Open with runtime lxc: no error")
	}
	if _, err := os.Stat(cfg.StateDir); err == nil {
		t.Error("a failed Open created the state dir")
	}
}

// TestEndReader: the end of the session's input runs the shutdown once,
// before the MCP server sees it (and cancels the requests in flight).
func TestEndReader(t *testing.T) {
	ended := 0
	r := &endReader{r: strings.NewReader("{}\n"), end: func() { ended++ }}
	b := make([]byte, 8)
	if n, err := r.Read(b); n != 3 || err != nil || ended != 0 {
		t.Fatalf("first read: %d %v, ended %d", n, err, ended)
	}
	for range 2 {
		if _, err := r.Read(b); err != io.EOF || ended != 1 {
			t.Fatalf("at the end: %v, ended %d", err, ended)
		}
	}
}

// TestPruneDir: prune removes the saved outputs (regular files) and keeps
// what is not one; a dry run only counts.
func TestPruneDir(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"a.stdout": "12345", "a.stderr": "1", "b.stdout": "123"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if n, size, err := pruneDir(dir, true); n != 3 || size != 9 || err != nil {
		t.Fatalf("dry run: %d %d %v", n, size, err)
	}
	if n, size, err := pruneDir(dir, false); n != 3 || size != 9 || err != nil {
		t.Fatalf("prune: %d %d %v", n, size, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("left %v, want sub and link", ents)
	}
	if n, _, err := pruneDir(filepath.Join(dir, "missing"), false); n != 0 || err != nil {
		t.Fatalf("missing dir: %d %v", n, err)
	}
}

// TestDoctorSaysWhereTheAgentsComeFrom: doctor refuses, with the reason,
// an agent binary that is not ELF or is for the other machine, and says
// for each architecture where its agent comes from or that its sandboxes
// are on the exec fallback, and why.
func TestDoctorSaysWhereTheAgentsComeFrom(t *testing.T) {
	dir := t.TempDir()
	// An ELF header for aarch64, named for amd64.
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF\x02\x01\x01")
	hdr[0x10], hdr[0x12], hdr[0x14] = 2, 183, 1
	os.WriteFile(filepath.Join(dir, "sandbox-ctl-linux-amd64"), hdr, 0o755)
	os.WriteFile(filepath.Join(dir, "sandbox-ctl-linux-arm64"), []byte("not a program\n"), 0o755)
	t.Setenv("SANDBOX_MCP_CTL_DIR", dir)
	var b strings.Builder
	reportAgents(context.Background(), &b, "none") // builds nothing
	out := b.String()
	for _, want := range []string{
		"agent:    linux/amd64: refused " + filepath.Join(dir, "sandbox-ctl-linux-amd64") + ": an executable for aarch64 (linux/arm64), not for x86-64 (linux/amd64)\n",
		"agent:    linux/arm64: refused " + filepath.Join(dir, "sandbox-ctl-linux-arm64") + ": not a linux executable (not ELF",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor lacks %q:\n%s", want, out)
		}
	}
	for _, arch := range []string{"amd64", "arm64"} {
		ok := strings.Contains(out, "agent:    linux/"+arch+": ok, ")
		none := strings.Contains(out, "agent:    linux/"+arch+": NONE, so linux/"+arch+" sandboxes are on the exec fallback (port forwards use one engine exec per connection; children have no control socket): no sandbox-ctl for linux/"+arch+": ")
		if ok == none {
			t.Errorf("%s: neither where it comes from nor why none:\n%s", arch, out)
		}
	}
}

// TestStatusSaysWhyTheExecFallback: the status command names the
// sandbox's agent, and for one on the exec fallback, what that costs and
// why; --json carries it too.
func TestStatusSaysWhyTheExecFallback(t *testing.T) {
	in := sandbox.Info{Name: "web", Container: "sandbox-mcp-web", State: sandbox.StateRunning, Image: "mcp-dev"}
	ag := sandbox.AgentState{State: sandbox.AgentFallback, Platform: "linux/arm64",
		Reason: "no sandbox-ctl for linux/arm64: none is embedded (this server was built without `make build`)"}
	var b strings.Builder
	if err := writeStatus(&b, in, ag, false); err != nil {
		t.Fatal(err)
	}
	want := "agent:      none (no sandbox-ctl for linux/arm64: none is embedded (this server was built without `make build`)); " +
		"port forwards use one engine exec per connection; children have no control socket\n"
	if !strings.Contains(b.String(), "name:       web\n") || !strings.HasSuffix(b.String(), want) {
		t.Fatalf("got:\n%s\nwant the last line:\n%s", b.String(), want)
	}
	b.Reset()
	if err := writeStatus(&b, in, ag, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"state": "fallback"`) || !strings.Contains(b.String(), `"reason": "no sandbox-ctl for linux/arm64`) {
		t.Fatalf("--json:\n%s", b.String())
	}
}
