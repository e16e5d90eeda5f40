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

// TestWatchdogStopsWhenIdle: with nothing touching the activity file, the
// main process exits 0 after the TTL.
func TestWatchdogStopsWhenIdle(t *testing.T) {
	_, done := watchdogOnHost(t, t.TempDir(), "1", "1")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the idle watchdog ended with %v, want exit 0", err)
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
// process keeps running while the sandbox is idle and exits 0 once the
// clock passes the end.
func TestWatchdogEndOfLife(t *testing.T) {
	until := time.Now().Add(3 * time.Second)
	_, done := watchdogOnHost(t, t.TempDir(), "0", "1", strconv.FormatInt(until.Unix(), 10))
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the watchdog ended with %v, want exit 0", err)
		}
		if time.Now().Before(until.Truncate(time.Second)) {
			t.Fatal("the watchdog ended its sandbox before its end of life")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watchdog did not stop a sandbox past its end of life")
	}
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
