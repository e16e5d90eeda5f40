package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// runCLI runs the binary with args and the target's environment, and
// returns what it printed and whether it exited 0.
func runCLI(t *testing.T, tg enginetest.Target, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), tg.Env...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// runCLICode runs the binary with args and the target's environment, and
// returns what it printed and its exit status.
func runCLICode(t *testing.T, tg enginetest.Target, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), tg.Env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestDoctorAndPruneCLI: doctor passes on a working engine and prints the
// set-up to paste with the flags it was given; prune --dry-run names the
// workspace of a sandbox whose container was removed behind the server's
// back and removes nothing, and prune removes it and leaves a live
// sandbox's workspace alone.
func TestDoctorAndPruneCLI(t *testing.T) {
	enginetest.RunFirstAndKubernetes(t, testDoctorAndPruneCLI)
}

// testDoctorAndPruneCLI is TestDoctorAndPruneCLI on one target.
func testDoctorAndPruneCLI(t *testing.T, tg enginetest.Target) {
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	stateDir := t.TempDir()
	flags := []string{"--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", stateDir}

	out, ok := runCLI(t, tg, append([]string{"doctor"}, flags...)...)
	if !ok || !strings.Contains(out, "engine:   ok") || !strings.Contains(out, "image:    ok") ||
		!strings.Contains(out, "claude mcp add --scope user") || !strings.Contains(out, "--prefix "+prefix) {
		t.Fatalf("doctor:\n%s", out)
	}

	s := startServer(t, tg, prefix, "")
	for _, box := range []string{"keep", "gone"} {
		if r := s.call(t, "exec", map[string]any{"command": "true", "sandbox": box}); r.isError {
			t.Fatal(r.text)
		}
	}
	if err := rt.Remove(t.Context(), sandbox.ContainerName(prefix, "gone")); err != nil {
		t.Fatal(err)
	}
	gone, keep := prefix+"-ws-gone", prefix+"-ws-keep"
	volumes := func() []string {
		names, err := rt.(sandbox.VolumeLister).VolumeNames(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return names
	}

	out, ok = runCLI(t, tg, append([]string{"prune", "--dry-run"}, flags...)...)
	if !ok || !strings.Contains(out, "would remove volume "+gone) || strings.Contains(out, keep) {
		t.Fatalf("prune --dry-run:\n%s", out)
	}
	if !slices.Contains(volumes(), gone) {
		t.Fatal("the dry run removed a volume")
	}
	out, ok = runCLI(t, tg, append([]string{"prune"}, flags...)...)
	if !ok || !strings.Contains(out, "removed volume "+gone) {
		t.Fatalf("prune:\n%s", out)
	}
	if vols := volumes(); slices.Contains(vols, gone) || !slices.Contains(vols, keep) {
		t.Fatalf("volumes after prune: %v", vols)
	}
	if r := s.call(t, "exec", map[string]any{"command": "echo still", "sandbox": "keep"}); r.str("stdout") != "still\n" {
		t.Fatalf("the kept sandbox after prune: %+v", r)
	}
}

// runExit runs the binary with args and returns its output (stdout, then
// stderr: the two are read apart, so neither cuts into the other) and its
// exit status.
func runExit(t *testing.T, tg enginetest.Target, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), tg.Env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	out := append(stdout, stderr.Bytes()...)
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// withoutLogLines is out without the lines of the binary's own log (slog's
// text lines, which start with "time="), which the CLI writes too.
func withoutLogLines(out string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(out, "\n") {
		if !strings.HasPrefix(line, "time=") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestPeopleCLI: the command line for people works beside a running
// server on the same sandboxes: ls (table and JSON), exec with the
// command's status and the agent's working directory, logs of a job the
// agent started, shell on a terminal (its size, its status), snapshot and
// restore, destroy; a missing sandbox, a missing job and a shell without a
// terminal are refused with statuses a script can tell apart.
func TestPeopleCLI(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	prefix := enginetest.Prefix(t, tg.New())
	stateDir := t.TempDir()
	flags := []string{"--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", stateDir}
	p := startProc(t, tg, prefix, stateDir)
	s := &server{cs: p.cs}
	if r := s.call(t, "exec", map[string]any{"sandbox": "box", "command": "mkdir -p /tmp/here && cd /tmp/here"}); r.isError {
		t.Fatal(r.text)
	}
	if r := s.call(t, "bg", map[string]any{"sandbox": "box", "name": "ticker", "command": "for i in 1 2 3; do echo tick$i; sleep 1; done"}); r.isError {
		t.Fatal(r.text)
	}
	// The CLI's own log lines aside: on a loaded machine, the sweep of
	// its shells as it exits can outlast its 10 s bound and say so.
	cli := func(args ...string) (string, int) {
		t.Helper()
		out, code := runExit(t, tg, append(append([]string{args[0]}, flags...), args[1:]...)...)
		return withoutLogLines(out), code
	}

	if out, code := cli("exec", "box", "--", "pwd; echo err >&2; exit 7"); code != 7 || !strings.Contains(out, "/tmp/here\n") || !strings.Contains(out, "err\n") {
		t.Fatalf("exec: %d %q", code, out)
	}
	if out, code := cli("exec", "box", "--", "sh", "-c", `echo "[$1]"`, "x", "two words"); code != 0 || out != "[two words]\n" {
		t.Fatalf("exec of words: %d %q", code, out)
	}
	// Timed out in the middle of a line on stderr: the CLI's own message
	// starts a line of its own, and the status is timeout(1)'s.
	if out, code := cli("exec", "--timeout", "2s", "box", "--", "printf part >&2; sleep 600"); code != 124 || !strings.HasSuffix(out, "part\nsandbox-mcp: timed out after 2s\n") {
		t.Fatalf("exec that timed out: %d %q", code, out)
	}
	if out, code := cli("exec", "nosuch", "--", "true"); code != 3 || !strings.Contains(out, `no sandbox "nosuch"`) {
		t.Fatalf("exec in a missing sandbox: %d %q", code, out)
	}
	if out, code := cli("ls"); code != 0 || !strings.Contains(out, "box") || !strings.Contains(out, "running") {
		t.Fatalf("ls: %d %q", code, out)
	}
	out, code := cli("ls", "--json")
	var infos []sandbox.Info
	if err := json.Unmarshal([]byte(out), &infos); code != 0 || err != nil || len(infos) != 1 || infos[0].Name != "box" {
		t.Fatalf("ls --json: %d %v %q", code, err, out)
	}
	if out, code := cli("logs", "box", "ticker", "-f"); code != 0 || out != "tick1\ntick2\ntick3\n" {
		t.Fatalf("logs -f: %d %q", code, out)
	}
	if out, code := cli("logs", "box", "nojob"); code != 3 {
		t.Fatalf("logs of a missing job: %d %q", code, out)
	}
	if out, code := cli("shell", "box"); code != 2 || !strings.Contains(out, "needs a terminal") {
		t.Fatalf("shell without a terminal: %d %q", code, out)
	}

	// On a terminal: the shell has its size and passes its status on.
	cmd := exec.Command(binary, append(append([]string{"shell"}, flags...), "box")...)
	cmd.Env = append(os.Environ(), tg.Env...)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 91, Rows: 27})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var screen bytes.Buffer
	read := make(chan struct{})
	go func() { _, _ = io.Copy(&screen, ptmx); close(read) }()
	if _, err := ptmx.WriteString("stty size; exit 5\r"); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 5 {
			t.Fatalf("shell: %v", err)
		}
	case <-time.After(enginetest.HangGuard):
		procs := enginetest.EngineProcesses()
		_ = cmd.Process.Kill()
		ptmx.Close()
		<-read
		t.Fatalf("the shell did not end: %q\nengine processes then:\n%s", screen.String(), procs)
	}
	ptmx.Close()
	<-read
	if !strings.Contains(screen.String(), "27 91") {
		t.Fatalf("the shell's terminal: %q", screen.String())
	}
	// A shell in a sandbox that does not exist creates none.
	missing := exec.Command(binary, append(append([]string{"shell"}, flags...), "nosuch")...)
	missing.Env = append(os.Environ(), tg.Env...)
	mpt, err := pty.Start(missing)
	if err != nil {
		t.Fatal(err)
	}
	var mout bytes.Buffer
	mread := make(chan struct{})
	go func() { _, _ = io.Copy(&mout, mpt); close(mread) }()
	merr := missing.Wait()
	mpt.Close()
	<-mread
	var mee *exec.ExitError
	if !errors.As(merr, &mee) || mee.ExitCode() != 3 || !strings.Contains(mout.String(), `no sandbox "nosuch"`) {
		t.Fatalf("shell in a missing sandbox: %v %q", merr, mout.String())
	}

	// The snapshot keeps the workspace unless told not to, as the tool
	// does; the restore says only that it did.
	cli("exec", "box", "--", "echo kept > /workspace/ws-file")
	if out, code := cli("snapshot", "box", "snap1"); code != 0 {
		t.Fatalf("snapshot: %d %q", code, out)
	}
	cli("exec", "box", "--", "touch /marker; rm /workspace/ws-file")
	if out, code := cli("restore", "box", "snap1"); code != 0 || out != "restored box from snapshot snap1\n" {
		t.Fatalf("restore: %d %q", code, out)
	}
	if out, code := cli("exec", "box", "--", "test ! -e /marker && cat /workspace/ws-file"); code != 0 || out != "kept\n" {
		t.Fatalf("after the restore: %d %q (a later file kept, or the workspace not saved)", code, out)
	}
	if out, code := cli("restore", "box", "nosnap"); code != 3 {
		t.Fatalf("restore of a missing snapshot: %d %q", code, out)
	}
	// A snapshot this server reaches is deleted whole, not forgotten.
	if out, code := cli("delete-snapshot", "snap1", "--forget"); code != 2 || !strings.Contains(out, "delete it (without --forget)") {
		t.Fatalf("forget a snapshot this server reaches: %d %q", code, out)
	}
	if out, code := cli("delete-snapshot", "snap1"); code != 0 || out != "deleted snapshot snap1\n" {
		t.Fatalf("delete-snapshot: %d %q", code, out)
	}
	if out, code := cli("delete-snapshot", "snap1"); code != 3 {
		t.Fatalf("delete-snapshot of a missing snapshot: %d %q", code, out)
	}
	// A job whose sandbox was stopped behind the servers' backs is lost:
	// logs says so and fails, rather than printing nothing with status 0.
	if r := s.call(t, "bg", map[string]any{"sandbox": "box", "name": "sleeper", "command": "echo started; sleep 600"}); r.isError {
		t.Fatal(r.text)
	}
	if err := tg.New().Stop(context.Background(), sandbox.ContainerName(prefix, "box"), time.Second); err != nil {
		t.Fatal(err)
	}
	if out, code := cli("logs", "box", "sleeper"); code != 1 || !strings.Contains(out, `job "sleeper" of sandbox "box" is lost`) {
		t.Fatalf("logs of a lost job: %d %q", code, out)
	}
	if out, code := cli("destroy", "box"); code != 0 || !strings.Contains(out, "destroyed box") {
		t.Fatalf("destroy: %d %q", code, out)
	}
	if out, code := cli("destroy", "box"); code != 3 {
		t.Fatalf("destroy of a missing sandbox: %d %q", code, out)
	}
	if out, code := cli("exec", "box"); code != 2 {
		t.Fatalf("exec without a command: %d %q", code, out)
	}
}

// TestDoctorFailures: doctor says what is wrong, with what to run, and
// exits non-zero: no engine installed, an engine that is not started, a
// state file another process holds locked.
func TestDoctorFailures(t *testing.T) { enginetest.RunFirstAndKubernetes(t, testDoctorFailures) }

// testDoctorFailures is TestDoctorFailures on one target.
func testDoctorFailures(t *testing.T, tg enginetest.Target) {
	state := t.TempDir()
	run := func(env []string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"doctor", "--state-dir", state}, args...)...)
		cmd.Env = append(append(os.Environ(), tg.Env...), env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	if engineOutsidePath("podman") != "" {
		t.Log("no check of a missing podman: the server finds one outside PATH here")
	} else if out, code := run([]string{"PATH=/nonexistent"}, "--runtime", "podman"); code == 0 || !strings.Contains(out, "podman") {
		t.Errorf("no engine: %d %q", code, out)
	}
	if _, err := exec.LookPath("docker"); err == nil {
		out, code := run([]string{"DOCKER_HOST=unix://" + filepath.Join(t.TempDir(), "none.sock")}, "--runtime", "docker")
		if code == 0 || !strings.Contains(out, "engine:   FAIL") || !strings.Contains(out, "start the Docker daemon") {
			t.Errorf("an engine not started: %d %q", code, out)
		}
	}
	// A state file held by another process (bbolt locks it whole).
	f, err := os.OpenFile(filepath.Join(state, "state.db"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if out, code := run(nil, "--runtime", tg.Runtime, "--image", tg.Image); code == 0 || !strings.Contains(out, "state:    FAIL") || !strings.Contains(out, "lock") {
		t.Errorf("a locked state file: %d %q", code, out)
	}
}

// TestAuditCLI: every tool call through a real client leaves a record in
// the state directory that `sandbox-mcp audit` shows, without the
// secrets, tokens and file contents the calls carried; --sandbox picks
// one sandbox's calls, and --follow prints a call made after it started.
func TestAuditCLI(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	prefix := enginetest.Prefix(t, tg.New())
	s := startServer(t, tg, prefix, "")
	const token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
	const secret = "sekrit-value-9f8e7d"
	calls := []struct {
		tool string
		args map[string]any
	}{
		{"exec", map[string]any{"sandbox": "audited", "command": "echo hello; echo 'Authorization: Bearer " + token + "' >/dev/null"}},
		{"write_file", map[string]any{"sandbox": "audited", "path": "/tmp/f.txt", "content": "file-body-never-logged"}},
		{"env", map[string]any{"sandbox": "audited", "action": "set", "key": "API_KEY", "value": secret, "secret": true}},
		{"exec", map[string]any{"sandbox": "audited", "command": "echo $API_KEY"}},
		{"exec", map[string]any{"sandbox": "audited", "command": []any{"not", "a", "string"}}},
	}
	for _, c := range calls {
		s.call(t, c.tool, c.args)
	}
	flags := []string{"--state-dir", s.stateDir}
	out, ok := runCLI(t, tg, append([]string{"audit", "--json"}, flags...)...)
	if !ok {
		t.Fatalf("audit --json:\n%s", out)
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit --json printed %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != len(calls) {
		t.Fatalf("%d records for %d calls:\n%s", len(recs), len(calls), out)
	}
	for i, r := range recs {
		if r["tool"] != calls[i].tool || r["sandbox"] != "audited" || r["client"] != "e2e 0" || r["session"] == "" {
			t.Errorf("record %d: %v", i, r)
		}
	}
	if recs[0]["status"] != "ok" || recs[0]["duration_ms"].(float64) <= 0 || recs[0]["result_bytes"].(float64) == 0 {
		t.Errorf("the first exec: %v", recs[0])
	}
	if recs[4]["status"] != "error" {
		t.Errorf("a call refused for its arguments: %v", recs[4])
	}
	for _, leak := range []string{token, secret, "file-body-never-logged"} {
		if strings.Contains(out, leak) {
			t.Errorf("%q is in the audit log:\n%s", leak, out)
		}
	}
	raw, err := os.ReadFile(filepath.Join(s.stateDir, "audit", "audit.jsonl"))
	if err != nil || strings.Contains(string(raw), secret) || strings.Contains(string(raw), token) {
		t.Errorf("the file itself: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(s.stateDir, "audit", "audit.jsonl")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the audit file is not private: %v %v", fi.Mode(), err)
	}

	out, ok = runCLI(t, tg, append([]string{"audit", "--sandbox", "other"}, flags...)...)
	if !ok || strings.TrimSpace(out) != "" {
		t.Errorf("audit --sandbox other: %q", out)
	}
	out, ok = runCLI(t, tg, append([]string{"audit", "--sandbox", "audited"}, flags...)...)
	if !ok || strings.Count(out, "\n") != len(calls) || !strings.Contains(out, "write_file") || !strings.Contains(out, "<22 bytes>") {
		t.Errorf("audit --sandbox audited:\n%s", out)
	}
	if out, ok := runCLI(t, tg, append([]string{"audit", "--sandbox", "../x"}, flags...)...); ok {
		t.Errorf("a bad sandbox name was taken: %s", out)
	}

	// --follow prints what comes after it started.
	cmd := exec.Command(binary, append([]string{"audit", "--follow"}, flags...)...)
	cmd.Env = append(os.Environ(), tg.Env...)
	var buf syncBuffer
	cmd.Stdout = &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	s.call(t, "exec", map[string]any{"sandbox": "audited", "command": "echo followed-call"})
	deadline := time.Now().Add(enginetest.HangGuard)
	for !strings.Contains(buf.String(), "followed-call") {
		if time.Now().After(deadline) {
			t.Fatalf("audit --follow did not print the new call:\n%s", buf.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(calls)+1 {
		t.Errorf("audit --follow printed %d lines, want %d:\n%s", n, len(calls)+1, buf.String())
	}
}

// syncBuffer is a bytes.Buffer a process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCopyCLI: `sandbox-mcp cp` copies a host directory into a sandbox
// and back, a file out to a host path, refuses to replace it without
// --overwrite, keeps a sandbox's symlink a symlink on the host, and says
// plainly what is wrong with a bad or unknown sandbox name.
func TestCopyCLI(t *testing.T) { enginetest.RunFirstAndKubernetes(t, testCopyCLI) }

// testCopyCLI is TestCopyCLI on one target.
func testCopyCLI(t *testing.T, tg enginetest.Target) {
	prefix := enginetest.Prefix(t, tg.New())
	s := startServer(t, tg, prefix, "")
	if r := s.call(t, "exec", map[string]any{"sandbox": "cpbox", "command": "mkdir -p /workspace/made/sub && echo inside > /workspace/made/sub/f.txt && ln -s /etc/passwd /workspace/made/link"}); r.isError {
		t.Fatal(r.text)
	}
	flags := []string{"--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", s.stateDir}
	cp := func(args ...string) (string, int) {
		t.Helper()
		return runCLICode(t, tg, append(append([]string{"cp"}, args...), flags...)...)
	}
	host := t.TempDir()
	src := filepath.Join(host, "proj")
	if err := os.MkdirAll(filepath.Join(src, "deep", "er"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "deep", "er", "a.txt"), []byte("from the host\n"), 0o644)
	os.WriteFile(filepath.Join(src, "skip.log"), []byte("left out\n"), 0o644)

	if out, code := cp(src, "cpbox:", "--ignore", "skip.log"); code != 0 || !strings.Contains(out, "uploaded") {
		t.Fatalf("cp to the sandbox: %d %s", code, out)
	}
	if r := s.call(t, "exec", map[string]any{"sandbox": "cpbox", "command": "cat /workspace/proj/deep/er/a.txt; ls /workspace/proj"}); r.isError ||
		r.data["stdout"] != "from the host\ndeep\n" {
		t.Fatalf("in the sandbox: %q", r.data["stdout"])
	}

	out := filepath.Join(host, "out")
	os.Mkdir(out, 0o755)
	if o, code := cp("cpbox:made", out); code != 0 || !strings.Contains(o, "downloaded") {
		t.Fatalf("cp from the sandbox: %d %s", code, o)
	}
	if b, err := os.ReadFile(filepath.Join(out, "made", "sub", "f.txt")); err != nil || string(b) != "inside\n" {
		t.Fatalf("on the host: %q %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(out, "made", "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the sandbox's symlink on the host: %v %v", fi, err)
	}

	file := filepath.Join(host, "f.txt")
	if o, code := cp("cpbox:/workspace/made/sub/f.txt", file); code != 0 {
		t.Fatalf("cp a file out: %d %s", code, o)
	}
	if o, code := cp("cpbox:/workspace/made/sub/f.txt", file); code == 0 || !strings.Contains(o, "pass --overwrite") {
		t.Fatalf("cp over an existing file without --overwrite: %d %s", code, o)
	}
	if o, code := cp("cpbox:/workspace/made/sub/f.txt", file, "--overwrite"); code != 0 {
		t.Fatalf("cp --overwrite: %d %s", code, o)
	}
	if o, code := cp("nosuch:/x", host); code != 3 || !strings.Contains(o, `no sandbox "nosuch"`) {
		t.Fatalf("an unknown sandbox: %d %s", code, o)
	}
	if o, code := cp("Bad_Name!:/x", host); code != 2 {
		t.Fatalf("a bad sandbox name: %d %s", code, o)
	}
	if o, code := cp(host, filepath.Join(host, "x")); code != 2 {
		t.Fatalf("two host paths: %d %s", code, o)
	}
}

// TestPortCLI: `sandbox-mcp port expose` records a forward that the
// running server takes over and serves; `port ls` shows it and who
// serves it; `port unexpose` ends it; with --foreground the command
// serves it until Ctrl-C and removes it then.
func TestPortCLI(t *testing.T) { enginetest.RunFirstAndKubernetes(t, testPortCLI) }

// testPortCLI is TestPortCLI on one target.
func testPortCLI(t *testing.T, tg enginetest.Target) {
	prefix := enginetest.Prefix(t, tg.New())
	s := startServer(t, tg, prefix, "", "--toolsets", "all")
	if r := s.call(t, "bg", map[string]any{"sandbox": "pbox", "name": "web", "command": "cd /tmp && echo port-cli-ok > index.html && exec python3 -m http.server 8000"}); r.isError {
		t.Fatal(r.text)
	}
	flags := []string{"--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", s.stateDir}
	port := func(args ...string) (string, int) {
		t.Helper()
		return runCLICode(t, tg, append(append([]string{"port"}, args...), flags...)...)
	}
	urlRE := regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+`)
	get := func(url string) string {
		c := http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get(url + "/index.html")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(enginetest.HangGuard)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("waited in vain: %s", what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	out, code := port("expose", "pbox", "8000")
	url := urlRE.FindString(out)
	if code != 0 || url == "" || !strings.Contains(out, "served by server pid") {
		t.Fatalf("port expose: %d %s", code, out)
	}
	waitFor("the page through the forward", func() bool { return strings.Contains(get(url), "port-cli-ok") })
	if out, code := port("ls", "--json"); code != 0 || !strings.Contains(out, `"sandbox": "pbox"`) || !strings.Contains(out, `"server": "server pid`) {
		t.Fatalf("port ls: %d %s", code, out)
	}
	if r := s.call(t, "list_ports", map[string]any{}); !strings.Contains(r.text, url) {
		t.Fatalf("the agent's list_ports does not show the command line's forward: %s", r.text)
	}
	if out, code := port("unexpose", "pbox", "8000"); code != 0 {
		t.Fatalf("port unexpose: %d %s", code, out)
	}
	waitFor("the forward to end", func() bool { return !strings.Contains(get(url), "port-cli-ok") })
	if out, code := port("unexpose", "pbox", "8000"); code != 3 {
		t.Fatalf("unexpose of no forward: %d %s", code, out)
	}
	if out, code := port("expose", "nosuch", "80"); code != 3 {
		t.Fatalf("expose on no sandbox: %d %s", code, out)
	}

	cmd := exec.Command(binary, append([]string{"port", "expose", "pbox", "8000", "--foreground"}, flags...)...)
	cmd.Env = append(os.Environ(), tg.Env...)
	var buf syncBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitFor("the foreground forward's URL", func() bool { return urlRE.MatchString(buf.String()) })
	url = urlRE.FindString(buf.String())
	waitFor("the page through the foreground forward", func() bool { return strings.Contains(get(url), "port-cli-ok") })
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the foreground forward after Ctrl-C: %v\n%s", err, buf.String())
	}
	if out, _ := port("ls"); strings.Contains(out, "pbox") {
		t.Fatalf("the foreground forward outlived its command:\n%s", out)
	}
}
