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

// watchdogShell is one way the watchdog script runs: through the
// image's sh, which hands the loop to bash, runs it itself (busybox's ash)
// or, with neither, forks the checker loop (dash with no bash on PATH).
type watchdogShell struct {
	name string
	// argv runs the script; bare is true when PATH must hold only the
	// test's bin directory and the tools the forking checker needs, so
	// that the script finds no bash; asSh runs argv[0] under the name sh
	// (bash then runs in its POSIX mode, as where /bin/sh is bash).
	argv     []string
	bare     bool
	asSh     bool
	forkFree bool
	// env is added to the script's environment.
	env []string
}

var watchdogShells = []watchdogShell{
	{name: "bash", argv: []string{"sh"}, forkFree: true},
	{name: "bash-as-sh", argv: []string{"bash"}, asSh: true, forkFree: true},
	{name: "busybox", argv: []string{"busybox", "sh"}, forkFree: true},
	{name: "forking", argv: []string{"dash"}, bare: true},
}

// forEachWatchdogShell runs test once per watchdogShell the host has.
func forEachWatchdogShell(t *testing.T, test func(t *testing.T, sh watchdogShell)) {
	t.Parallel()
	for _, sh := range watchdogShells {
		t.Run(sh.name, func(t *testing.T) {
			if _, err := exec.LookPath(sh.argv[0]); err != nil {
				t.Skipf("no %s on this host (CI's set-up installs busybox-static)", sh.argv[0])
			}
			t.Parallel()
			test(t, sh)
		})
	}
}

// watchdogOnHost starts the watchdog script with its activity file moved
// to dir/active, in shell sh, with PATH starting with bin (or, for a bare
// shell, made of bin and links to the forking checker's tools).
func watchdogOnHost(t *testing.T, sh watchdogShell, dir, bin string, ttl, every string, until ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	argv := WatchdogCommand(time.Second, time.Second, time.Time{})
	script := strings.ReplaceAll(argv[2], ActivityFile, filepath.Join(dir, "active"))
	path := bin + string(os.PathListSeparator) + os.Getenv("PATH")
	if sh.bare {
		for _, tool := range []string{"date", "sleep", "stat", "mkdir", "rm", "mkfifo"} {
			if _, err := os.Lstat(filepath.Join(bin, tool)); err == nil {
				continue // the test's own
			}
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Skipf("no %s on this host", tool)
			}
			if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
				t.Fatal(err)
			}
		}
		path = bin
	}
	name, _ := exec.LookPath(sh.argv[0])
	cmd := exec.Command(name, append(append(sh.argv[1:], "-c", script, "sandbox-mcp-watchdog", ttl, every), until...)...)
	if sh.asSh {
		cmd.Args[0] = "sh"
	}
	cmd.Env = append(append(os.Environ(), "PATH="+path), sh.env...)
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
	forEachWatchdogShell(t, func(t *testing.T, sh watchdogShell) {
		_, done := watchdogOnHost(t, sh, t.TempDir(), t.TempDir(), "1", "1")
		select {
		case err := <-done:
			if exitCode(err) != ExitIdle {
				t.Fatalf("the idle watchdog ended with %v, want exit %d", err, ExitIdle)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the watchdog did not stop an idle sandbox")
		}
	})
}

// TestWatchdogTouchedIsNotIdle: touches of the activity file more often
// than the TTL keep the sandbox up past several TTLs, also across the
// removal of the activity directory (and with it the watchdog's file of
// the last touch seen); once they stop, the watchdog stops it after the
// TTL, not before.
func TestWatchdogTouchedIsNotIdle(t *testing.T) {
	forEachWatchdogShell(t, func(t *testing.T, sh watchdogShell) {
		dir := t.TempDir()
		_, done := watchdogOnHost(t, sh, dir, t.TempDir(), "3", "1")
		active := filepath.Join(dir, "active")
		for end := time.Now().Add(8 * time.Second); time.Now().Before(end); {
			select {
			case err := <-done:
				t.Fatalf("the watchdog stopped a sandbox touched every 500ms (%v)", err)
			case <-time.After(500 * time.Millisecond):
			}
			now := time.Now()
			if err := os.Chtimes(active, now, now); err != nil {
				t.Fatal(err)
			}
			if left := time.Until(end); left < 5*time.Second && left > 4*time.Second {
				// The directory removed (a user's rm -rf), then made again
				// by the next mark: neither the failed writes meanwhile
				// nor its own file gone may stop the sandbox.
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				time.Sleep(1500 * time.Millisecond)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(active, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		last := time.Now()
		select {
		case err := <-done:
			if exitCode(err) != ExitIdle {
				t.Fatalf("the idle watchdog ended with %v, want exit %d", err, ExitIdle)
			}
			// Whole seconds on both ends (busybox's -nt, date +%s).
			if idle := time.Since(last); idle < 2*time.Second {
				t.Fatalf("the watchdog stopped the sandbox %s after its last touch; its TTL is 3s", idle)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the watchdog did not stop the sandbox once the touches stopped")
		}
	})
}

// TestWatchdogForksNothing: where the shell allows, the watchdog's main
// process starts no process once it runs (so a full process table cannot
// end it): date, sleep and stat on PATH are never run, it has no child
// at any look, and it stops an idle sandbox all the same.
func TestWatchdogForksNothing(t *testing.T) {
	forEachWatchdogShell(t, func(t *testing.T, sh watchdogShell) {
		if !sh.forkFree {
			t.Skip("this shell has no builtin clock or timed read; its checker forks")
		}
		dir, bin := t.TempDir(), t.TempDir()
		ran := filepath.Join(dir, "ran")
		for _, tool := range []string{"date", "sleep", "stat"} {
			if err := os.WriteFile(filepath.Join(bin, tool), []byte("#!/bin/sh\necho "+tool+" >>"+ran+"\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd, done := watchdogOnHost(t, sh, dir, bin, "3", "1")
		pid := strconv.Itoa(cmd.Process.Pid)
		looks := 0
		for {
			select {
			case err := <-done:
				if exitCode(err) != ExitIdle {
					t.Fatalf("the watchdog ended with %v, want exit %d", err, ExitIdle)
				}
				if b, _ := os.ReadFile(ran); len(b) > 0 {
					t.Fatalf("the watchdog ran %q", b)
				}
				if looks == 0 {
					t.Fatal("the watchdog's children were never looked at")
				}
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := os.Stat(filepath.Join(dir, "active.seen")); err != nil {
				continue // still starting (mkdir, rm and mkfifo fork)
			}
			b, err := os.ReadFile("/proc/" + pid + "/task/" + pid + "/children")
			if err != nil {
				continue // ended meanwhile, or no children list here
			}
			looks++
			if kids := strings.Fields(string(b)); len(kids) > 0 {
				t.Fatalf("the watchdog has children %v", kids)
			}
		}
	})
}

// TestWatchdogLostReadingIsNotIdle: when the forking checker cannot read
// the activity file's time (in a full process table the fork inside the
// command substitution fails; here stat kills that subshell, the same
// outcome), it skips the check instead of taking the empty reading as
// "never used" and stopping a sandbox in use.
func TestWatchdogLostReadingIsNotIdle(t *testing.T) {
	forEachWatchdogShell(t, func(t *testing.T, sh watchdogShell) {
		if sh.forkFree {
			t.Skip("the fork-free loop reads no time through a process")
		}
		bin := t.TempDir()
		if err := os.WriteFile(filepath.Join(bin, "stat"), []byte("#!/bin/sh\nkill -9 $PPID\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, done := watchdogOnHost(t, sh, t.TempDir(), bin, "100", "1")
		select {
		case err := <-done:
			t.Fatalf("the watchdog stopped a sandbox in use (%v) after a lost reading", err)
		case <-time.After(3500 * time.Millisecond): // three checks
		}
	})
}

// TestWatchdogEndOfLife: with no idle TTL and an end of life, the main
// process keeps running while the sandbox is idle and exits with
// ExitLifetime once the clock passes the end.
func TestWatchdogEndOfLife(t *testing.T) {
	forEachWatchdogShell(t, func(t *testing.T, sh watchdogShell) {
		until := time.Now().Add(3 * time.Second)
		_, done := watchdogOnHost(t, sh, t.TempDir(), t.TempDir(), "0", "1", strconv.FormatInt(until.Unix(), 10))
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
	})
}

// TestWatchdogStoppedExitsZero: a stop's signal ends the watchdog with
// 0, which tells a stop by a person or a server from its own.
func TestWatchdogStoppedExitsZero(t *testing.T) {
	forEachWatchdogShell(t, func(t *testing.T, sh watchdogShell) {
		dir := t.TempDir()
		cmd, done := watchdogOnHost(t, sh, dir, t.TempDir(), "100", "1")
		// Its trap is set before it runs its loop, but after it runs
		// mkdir, rm and mkfifo: a child alone does not say the trap is
		// set. The fork-free loop writes the seen file after its own
		// trap; the forking checker's children (date, sleep) say it forked.
		ready := func() bool {
			if sh.forkFree {
				_, err := os.Stat(filepath.Join(dir, "active.seen"))
				return err == nil
			}
			return hasGrandchild(cmd.Process.Pid)
		}
		for deadline := time.Now().Add(30 * time.Second); !ready(); time.Sleep(20 * time.Millisecond) {
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
	})
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
	forEachWatchdogShell(t, func(t *testing.T, sh watchdogShell) {
		_, done := watchdogOnHost(t, sh, t.TempDir(), t.TempDir(), "0", "1", "0")
		select {
		case err := <-done:
			t.Fatalf("the watchdog stopped a sandbox with no TTL (%v)", err)
		case <-time.After(2500 * time.Millisecond):
		}
	})
}

// TestWatchdogLoopHasNoSingleQuote: the launcher keeps the fork-free loop
// in a single-quoted variable.
func TestWatchdogLoopHasNoSingleQuote(t *testing.T) {
	if strings.Contains(watchdogLoop, "'") {
		t.Fatal("watchdogLoop holds a single quote")
	}
}

// TestWatchdogIgnoresTheEnvironment: an image's environment cannot turn
// the watchdog against its sandbox: a BASH_ENV that exits, shell options
// (errexit, noclobber), POSIXLY_CORRECT and an EPOCHSECONDS in dash's
// environment (whose read has no -t, so the loop would spin) leave it
// stopping an idle sandbox after its TTL and not before.
func TestWatchdogIgnoresTheEnvironment(t *testing.T) {
	for _, tool := range []string{"dash", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this host", tool)
		}
	}
	rc := filepath.Join(t.TempDir(), "rc")
	if err := os.WriteFile(rc, []byte("exit 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := watchdogShell{name: "dash", argv: []string{"dash"},
		env: []string{"BASH_ENV=" + rc, "EPOCHSECONDS=1", "SHELLOPTS=errexit:noclobber", "POSIXLY_CORRECT=1"}}
	start := time.Now()
	_, done := watchdogOnHost(t, sh, t.TempDir(), t.TempDir(), "3", "1", "0")
	select {
	case err := <-done:
		if exitCode(err) != ExitIdle {
			t.Fatalf("the watchdog ended with %v after %s, want exit %d after its TTL", err, time.Since(start).Round(time.Millisecond), ExitIdle)
		}
		if took := time.Since(start); took < 2*time.Second {
			t.Fatalf("the watchdog stopped an idle sandbox %s after its start; its TTL is 3s", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watchdog did not stop an idle sandbox")
	}
}

// TestPooledWatchdogWaitsForItsFirstUse: armed by use (a sandbox a
// cluster's warm pool keeps booted ahead), an untouched sandbox is not
// stopped however long past its TTL; from its first mark of use on, it
// is stopped when idle as any other.
func TestPooledWatchdogWaitsForItsFirstUse(t *testing.T) {
	argv := PooledWatchdogCommand(time.Second, time.Second)
	if argv[len(argv)-1] != "armed-by-use" || argv[2] != WatchdogCommand(time.Second, time.Second, time.Time{})[2] {
		t.Fatalf("argv %q", argv)
	}
	forEachWatchdogShell(t, func(t *testing.T, sh watchdogShell) {
		dir := t.TempDir()
		_, done := watchdogOnHost(t, sh, dir, t.TempDir(), "1", "1", "0", "armed-by-use")
		select {
		case err := <-done:
			t.Fatalf("stopped before its first use: %v", err)
		case <-time.After(4 * time.Second):
		}
		if _, err := os.Stat(filepath.Join(dir, "active")); !os.IsNotExist(err) {
			t.Fatalf("the activity file before a use: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "active"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if exitCode(err) != ExitIdle {
				t.Fatalf("the watchdog ended with %v, want exit %d", err, ExitIdle)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("used once and idle since, the sandbox was not stopped")
		}
	})
}
