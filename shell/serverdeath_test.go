package shell

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
)

// serverEnv makes the test binary a server that writes one file through
// a local shell (see runServer) instead of running tests; serverShellEnv
// names the shell's program.
const (
	serverEnv      = "SHELL_TEST_SERVER_WRITES"
	serverShellEnv = "SHELL_TEST_SERVER_SHELL"
)

func TestMain(m *testing.M) {
	if target := os.Getenv(serverEnv); target != "" {
		runServer(target)
		return
	}
	os.Exit(m.Run())
}

// runServer opens a shell whose pipes only this process holds the other
// ends of (as a sandbox's shell on the server's own pipes), prints the
// shell's PID, and writes 64 MiB to target through the server's write
// script, until it is killed.
func runServer(target string) {
	// Run as sh (busybox's applet so; bash in its POSIX mode).
	sh, err := Open(context.Background(), shellHost{path: os.Getenv(serverShellEnv)}, Options{})
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(2)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	script, err := guest.WriteFileScript(target, false, int64(len(data)), false, ".sandbox-mcp-wdeath")
	if err != nil {
		os.Exit(2)
	}
	os.Stdout.WriteString(strconv.Itoa(sh.PID()) + "\n")
	_, _ = sh.Run(context.Background(), Request{Command: script, Trusted: true, Stdin: data, Stdout: io.Discard, Stderr: io.Discard}, "")
	os.Exit(3) // the test kills this process before the write ends
}

// A server killed while one of its write scripts takes in the content
// leaves nothing in the sandbox: the content arrives cut short and the
// script removes its temporary file, although what it then says goes to
// pipes nobody reads any more (a shell on the server's own pipes: no
// engine relays its output after the server's death).
func TestServerKilledDuringAWriteLeavesNoTemporaryFile(t *testing.T) {
	for _, prog := range []string{"sh", "bash", "busybox"} {
		path, err := exec.LookPath(prog)
		if err != nil {
			t.Logf("%s: not on this machine (%v)", prog, err)
			continue
		}
		t.Run(prog, func(t *testing.T) { serverKilledDuringAWrite(t, path) })
	}
}

func serverKilledDuringAWrite(t *testing.T, prog string) {
	dir := t.TempDir()
	target := filepath.Join(dir, "new.bin")
	srv := exec.Command(os.Args[0])
	srv.Env = append(os.Environ(), serverEnv+"="+target, serverShellEnv+"="+prog)
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the server said nothing: %v", err)
	}
	shPID, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the server said %q", line)
	}
	t.Cleanup(func() { _ = syscall.Kill(shPID, syscall.SIGKILL) })

	// Killed once the shell has read a part of the content.
	deadline := time.Now().Add(hangGuard)
	for readBy(shPID) < 4<<20 {
		if time.Now().After(deadline) {
			t.Fatal("the shell never read the content")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := srv.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = srv.Wait()

	// The shell ends with its server; what it left is then final.
	for st := procState(shPID); st != "" && st != "Z"; st = procState(shPID) {
		if time.Now().After(deadline) {
			t.Fatal("the shell outlived its server")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if len(left) != 0 {
		t.Fatalf("a write cut short by its server's death left %v", left)
	}
}

// readBy is how many bytes process pid has read (its rchar), 0 if that
// cannot be told.
func readBy(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
