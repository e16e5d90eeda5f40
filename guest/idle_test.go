package guest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// watchdogOnHost starts the watchdog script with its activity file moved
// to a temporary directory and PATH starting with bin.
func watchdogOnHost(t *testing.T, bin string, ttl, every string, until ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh on this host")
	}
	dir := t.TempDir()
	argv := WatchdogCommand(time.Second, time.Second, time.Time{})
	script := strings.ReplaceAll(argv[2], ActivityFile, filepath.Join(dir, "active"))
	cmd := exec.Command("sh", append([]string{"-c", script, "sandbox-mcp-watchdog", ttl, every}, until...)...)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	// A group of its own: the cleanup ends the checker loop the script
	// forks too, not only the main process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done, ended := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(ended) }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-ended })
	return cmd, done
}

// exitCode is the exit code in a Wait's error (0 for none).
func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestWatchdogStopsWhenIdle: with nothing touching the activity file, the
// main process exits with ExitIdle after the TTL.
func TestWatchdogStopsWhenIdle(t *testing.T) {
	_, done := watchdogOnHost(t, t.TempDir(), "1", "1")
	select {
	case err := <-done:
		if exitCode(err) != ExitIdle {
			t.Fatalf("the idle watchdog ended with %v, want exit %d", err, ExitIdle)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watchdog did not stop an idle sandbox")
	}
}

// TestWatchdogLostReadingIsNotIdle: when the checker cannot read the
// activity file's time (in a full process table the fork inside the
// command substitution fails; here stat kills that subshell, the same
// outcome), it skips the check instead of taking the empty reading as
// "never used" and stopping a sandbox in use.
func TestWatchdogLostReadingIsNotIdle(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "stat"), []byte("#!/bin/sh\nkill -9 $PPID\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, done := watchdogOnHost(t, bin, "100", "1")
	select {
	case err := <-done:
		t.Fatalf("the watchdog stopped a sandbox in use (%v) after a lost reading", err)
	case <-time.After(3500 * time.Millisecond): // three checks
	}
}

// TestWatchdogEndOfLife: with no idle TTL and an end of life, the main
// process keeps running while the sandbox is idle and exits with
// ExitLifetime once the clock passes the end.
func TestWatchdogEndOfLife(t *testing.T) {
	until := time.Now().Add(3 * time.Second)
	_, done := watchdogOnHost(t, t.TempDir(), "0", "1", strconv.FormatInt(until.Unix(), 10))
	select {
	case err := <-done:
		if exitCode(err) != ExitLifetime {
			t.Fatalf("the watchdog ended with %v, want exit %d", err, ExitLifetime)
		}
		if time.Now().Before(until.Truncate(time.Second)) {
			t.Fatal("the watchdog ended its sandbox before its end of life")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watchdog did not stop a sandbox past its end of life")
	}
}

// TestWatchdogStoppedExitsZero: a stop's signal ends the watchdog with
// 0, which tells a stop by a person or a server from its own.
func TestWatchdogStoppedExitsZero(t *testing.T) {
	cmd, done := watchdogOnHost(t, t.TempDir(), "100", "1")
	// Its trap is set before it forks the checker, but after it runs
	// mkdir, rm and mkfifo: a child alone does not say the trap is set.
	// A grandchild does: only the checker forks (date, sleep).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if hasGrandchild(cmd.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Skip("no /proc children list to tell when the watchdog has forked")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if exitCode(err) != 0 {
			t.Fatalf("a stopped watchdog ended with %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watchdog did not end on SIGTERM")
	}
}

// hasGrandchild tells whether a child of pid has a child of its own,
// by the kernel's children lists.
func hasGrandchild(pid int) bool {
	children := func(p string) []string {
		b, _ := os.ReadFile("/proc/" + p + "/task/" + p + "/children")
		return strings.Fields(string(b))
	}
	for _, c := range children(strconv.Itoa(pid)) {
		if len(children(c)) > 0 {
			return true
		}
	}
	return false
}

// TestWatchdogOffNeverStops: with no idle TTL and no end of life, the
// watchdog never stops the sandbox.
func TestWatchdogOffNeverStops(t *testing.T) {
	_, done := watchdogOnHost(t, t.TempDir(), "0", "1", "0")
	select {
	case err := <-done:
		t.Fatalf("the watchdog stopped a sandbox with no TTL (%v)", err)
	case <-time.After(2500 * time.Millisecond):
	}
}
