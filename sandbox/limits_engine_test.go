package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/loopdisk"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

func limitsManager(t *testing.T, tg enginetest.Target, prefix string, profiles map[string]sandbox.Profile) *sandbox.Manager {
	t.Helper()
	m := sandbox.NewManager(tg.New(), sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}, Profiles: profiles})
	t.Cleanup(m.Close)
	return m
}

// bombTest readies a fork bomb test: it skips it on the container CLI,
// which sets no pids limit (a VM bounds a bomb on a Mac, but the stand-in
// has none, and the bomb's processes, which outlive its command, would
// fill the host's process table for as long as its container lives), and
// waits until no other test's bomb runs. One bomb keeps both processors of
// a small machine busy; two at once starve the rest of the suite, and the
// servers under test with it. The next bomb may start once the test has
// ended, and its cleanups with it: box, the bomb's sandbox in m, is
// destroyed then if the test has not done it.
func bombTest(t *testing.T, rt sandbox.Runtime) (destroyAtEnd func(m *sandbox.Manager, box string)) {
	t.Helper()
	if rt.Kind() == "container" {
		t.Skip("the container CLI sets no pids limit; a bomb there is bounded by the VM, which the stand-in does not have")
	}
	select {
	case bombSlot <- struct{}{}:
	case <-time.After(30 * time.Minute):
		t.Fatal("another test's fork bomb has run for 30 minutes")
	}
	t.Cleanup(func() { <-bombSlot })
	return func(m *sandbox.Manager, box string) {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			_, _ = m.Destroy(ctx, box)
		})
	}
}

// bombSlot is held by the one fork bomb test that may run (bombTest).
var bombSlot = make(chan struct{}, 1)

// bombCPUs bounds a bomb's sandbox to one processor: a bomb keeps every
// processor its sandbox has busy, and the default of 2 is the whole of a
// CI machine, where everything else then crawls for the bomb's minutes.
// What the bomb tests check (the table full, the server's marks and
// kills) holds on one. Not less: a shell in the sandbox gets its share of
// what the bomb leaves, and at half a processor a mark through one took a
// minute rather than 13 s.
const bombCPUs = 1.0

// TestForkBombOnEngine: a fork bomb in a sandbox with pids=64 is bounded,
// and the server, the sandbox and another sandbox keep working.
func TestForkBombOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			destroyAtEnd := bombTest(t, rt)
			m := limitsManager(t, tg, enginetest.Prefix(t, rt), map[string]sandbox.Profile{"bomb": {Pids: 64, CPUs: bombCPUs}})
			destroyAtEnd(m, "bomb")
			run(t, m, "other", shell.Request{Command: "true"})
			in, err := m.Status(context.Background(), "bomb")
			if err == nil {
				t.Fatalf("bomb exists already: %+v", in)
			}
			run(t, m, "bomb", shell.Request{Command: "true"})
			in, err = m.Status(context.Background(), "bomb")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("limits: %s", in.Limits)
			if in.Limits.Pids == 0 {
				// Never run a bomb the sandbox does not bound: it fills the host's table.
				t.Skipf("the engine here enforces no pids limit (%s; a rootless engine on cgroup v1 cannot)", in.Limits)
			}
			if in.Limits.Note != "" {
				t.Fatalf("fresh sandbox: %+v", in.Limits)
			}
			if in.Limits.Pids != 64 {
				t.Fatalf("limits %+v", in.Limits)
			}
			if o := run(t, m, "bomb", shell.Request{Command: "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max"}); strings.TrimSpace(o.stdout) != "64" {
				t.Fatalf("pids.max %q", o.stdout)
			}
			done := make(chan out, 1)
			go func() {
				var so, se strings.Builder
				res, err := m.Exec(context.Background(), "bomb", shell.Request{
					Command: "f(){ f|f& }; f; sleep 2; echo survived", Timeout: 20 * time.Second, Stdout: &so, Stderr: &se})
				if err != nil {
					t.Errorf("fork bomb exec: %v", err)
				}
				done <- out{res: res, stdout: so.String(), stderr: se.String()}
			}()
			// While it runs, another sandbox answers.
			if o := run(t, m, "other", shell.Request{Command: "echo fine"}); o.stdout != "fine\n" {
				t.Fatalf("other sandbox: %q", o.stdout)
			}
			enginetest.WaitFor(t, "the fork bomb's command to end (its timeout is 20 s)", func() error {
				select {
				case o := <-done:
					t.Logf("fork bomb: exit %d, timed out %v, %d bytes of stderr", o.res.ExitCode, o.res.TimedOut, len(o.stderr))
					return nil
				default:
					return errors.New("it runs")
				}
			})
			// The bomb's last processes may still be ending. An attempt
			// that times out is tried again: the guard is WaitFor's.
			enginetest.WaitFor(t, "the sandbox to answer after the fork bomb", func() error {
				var so strings.Builder
				res, err := m.Exec(context.Background(), "bomb", shell.Request{Command: "echo later", Timeout: time.Minute, Stdout: &so})
				if err != nil {
					return err
				}
				if so.String() != "later\n" {
					return fmt.Errorf("%q exit %d", so.String(), res.ExitCode)
				}
				return nil
			})
			// Gone before the test ends: its processes outlive the command.
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if _, err := m.Destroy(dctx, "bomb"); err != nil {
				t.Errorf("destroy the bomb's sandbox: %v", err)
			}
		})
	}
}

// TestIdleStopWithAFullTableOnEngine: a sandbox whose process table a
// bomb keeps full, and that nobody uses, still stops itself after its idle
// TTL: its watchdog forks nothing once it runs, so the bomb cannot end it.
// The stop ends the bomb, and the next use boots the sandbox again.
func TestIdleStopWithAFullTableOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			destroyAtEnd := bombTest(t, rt)
			// The watchdog checks every TTL/10: a checker that forks
			// (date, sleep) meets a full table at its first check after
			// the bomb filled it, long before the TTL is up.
			const box, idleTTL = "idlebomb", 30 * time.Second
			m := limitsManager(t, tg, enginetest.Prefix(t, rt), map[string]sandbox.Profile{box: {Pids: 64, CPUs: bombCPUs, IdleTTL: idleTTL.String()}})
			destroyAtEnd(m, box)
			ctx := context.Background()
			run(t, m, box, shell.Request{Command: "true"})
			if in, err := m.Status(ctx, box); err != nil || in.Limits.Pids != 64 {
				// Never run a bomb the sandbox does not bound: it fills the host's table.
				t.Skipf("the engine here enforces no pids limit (%+v, %v; a rootless engine on cgroup v1 cannot)", in.Limits, err)
			}
			ctr := m.ContainerFor(box)
			run(t, m, box, shell.Request{Command: "(" + refillingBomb + ") </dev/null >/dev/null 2>&1 &"})
			full := tableFull(rt, ctr)
			enginetest.WaitFor(t, "the bomb to fill the table", full)
			filled := time.Now()
			// Nothing uses the sandbox from here on: the server's last
			// mark follows the bomb's call, so the TTL runs out about
			// 30 s after it. The bound is the guard against a hang.
			var c sandbox.Container
			enginetest.WaitFor(t, "the idle sandbox to stop itself with its table full", func() error {
				var err error
				if c, err = rt.Inspect(ctx, ctr); err != nil {
					return err
				}
				if c.Running() {
					if err := full(); err != nil {
						t.Logf("the table is not full now: %v", err)
					}
					return errors.New("it runs")
				}
				return nil
			})
			if by := sandbox.StoppedBy(c); by != "idle" {
				t.Fatalf("the sandbox stopped with exit %d at %s (stopped by %q), want its watchdog's idle stop", c.ExitCode, c.Finished, by)
			}
			if c.Finished.Before(filled.Add(idleTTL / 5)) {
				t.Fatalf("the sandbox stopped at %s, %s after the table filled: too soon for its watchdog to have checked twice in a full table",
					c.Finished.Format(time.TimeOnly), c.Finished.Sub(filled).Round(time.Millisecond))
			}
			t.Logf("stopped idle %s after the table filled", c.Finished.Sub(filled).Round(time.Second))
			if o := run(t, m, box, shell.Request{Command: "pgrep -c sleep || true"}); strings.TrimSpace(o.stdout) != "0" {
				t.Fatalf("after the idle stop and a new boot, %s sleeps of the bomb's run", strings.TrimSpace(o.stdout))
			}
			dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			if _, err := m.Destroy(dctx, box); err != nil {
				t.Errorf("destroy the bomb's sandbox: %v", err)
			}
		})
	}
}

// hostFree is the free space of the filesystem holding dir.
func hostFree(t *testing.T, dir string) int64 {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	return int64(s.Bavail) * int64(s.Bsize)
}

// storageDir is where the engine keeps containers and volumes, for
// measuring the host's free space. On a Mac, "/" measures the APFS
// container that Apple's volume images share with every volume.
func storageDir(tg enginetest.Target) string {
	for _, d := range []string{"/var/lib/containers", "/var/lib/docker"} {
		if _, err := os.Stat(d); err == nil {
			return d
		}
	}
	return "/"
}

// TestDiskLimitOnEngine: a sandbox with disk=1G writing 4 GB to /workspace
// and to its root filesystem is stopped with a clear message, the host
// loses at most about the limit, and after rm the sandbox works.
func TestDiskLimitOnEngine(t *testing.T) {
	enginetest.FillsDisk(t)
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			m := limitsManager(t, tg, prefix, map[string]sandbox.Profile{"full": {Disk: "1G"}})
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				if _, err := m.Destroy(ctx, "full"); err != nil {
					t.Errorf("destroy: %v", err)
				}
				disks := ""
				switch {
				case tg.Name == "podman" && os.Geteuid() == 0:
					disks = "/var/lib/containers/sandbox-mcp-disks/"
				case tg.StandIn && loopdisk.Unavailable() == "":
					disks = "/var/lib/containers/container-standin-disks/"
				}
				if disks != "" {
					left, _ := filepath.Glob(disks + prefix + "*")
					if len(left) > 0 {
						t.Errorf("workspace images left after destroy: %q", left)
					}
				}
			})
			run(t, m, "full", shell.Request{Command: "true"})
			in, err := m.Status(context.Background(), "full")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("limits: %s", in.Limits)
			dir := storageDir(tg)
			const limit = int64(1 << 30)
			write := func(t *testing.T, path, mech string) {
				if mech == sandbox.MechNone {
					t.Skipf("nothing bounds %s on this host", path)
				}
				if tg.StandIn {
					// Its volumes are ext4 images of their size on loop
					// devices, as Apple's are, where the host has them.
					if why := loopdisk.Unavailable(); why != "" {
						t.Skipf("the stand-in's volumes are plain podman volumes here (%s)", why)
					}
				}
				before := hostFree(t, dir)
				var so, se strings.Builder
				res, err := m.Exec(context.Background(), "full", shell.Request{
					Command: "dd if=/dev/zero of=" + path + "/fill bs=1M count=4096; s=$?; sync; exit $s",
					Timeout: 10 * time.Minute, Stdout: &so, Stderr: &se})
				if err != nil {
					t.Fatal(err)
				}
				lost := before - hostFree(t, dir)
				o := run(t, m, "full", shell.Request{Command: "du -sk " + path + "/fill | cut -f1"})
				t.Logf("%s (%s): exit %d, notice %q, stderr tail %q; file %s KiB; host lost %d MiB",
					path, mech, res.ExitCode, res.Notice, tail(se.String()), strings.TrimSpace(o.stdout), lost>>20)
				if res.ExitCode == 0 || res.TimedOut {
					t.Fatalf("the writer was not stopped: exit %d timed out %v", res.ExitCode, res.TimedOut)
				}
				switch mech {
				case sandbox.MechWatcher:
					if !strings.Contains(res.Notice, "passed its disk limit of 1G") {
						t.Fatalf("notice %q", res.Notice)
					}
				default:
					if !strings.Contains(se.String(), "No space left on device") {
						t.Fatalf("stderr %q", tail(se.String()))
					}
				}
				// The engine's storage is shared with other tests: allow
				// slack, but far less than the 4 GB an unbounded write takes.
				if lost > 2*limit+limit/2 {
					t.Errorf("the host lost %d MiB for a 1G limit", lost>>20)
				}
				o = run(t, m, "full", shell.Request{Command: "rm -f " + path + "/fill && echo again > " + path + "/after && cat " + path + "/after"})
				if o.stdout != "again\n" {
					t.Fatalf("after rm: %q exit %d", o.stdout, o.res.ExitCode)
				}
				if o.res.Notice != "" {
					t.Fatalf("a notice after rm: %q", o.res.Notice)
				}
			}
			t.Run("workspace", func(t *testing.T) { write(t, "/workspace", in.Limits.Workspace) })
			t.Run("rootfs", func(t *testing.T) { write(t, "/var/tmp", in.Limits.Rootfs) })
		})
	}
}

func tail(s string) string {
	if len(s) > 200 {
		return s[len(s)-200:]
	}
	return s
}
