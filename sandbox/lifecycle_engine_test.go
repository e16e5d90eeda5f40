package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// servers returns two Managers sharing one state directory and lock
// directory, as two server processes on one machine do.
func servers(t *testing.T, tg enginetest.Target, prefix string) (a, b *sandbox.Manager, st *state.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	mk := func() *sandbox.Manager {
		m := sandbox.NewManager(tg.New(), sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
			History: st, Jobs: st, Sandboxes: st, LockDir: dir + "/locks"})
		t.Cleanup(m.Close)
		return m
	}
	return mk(), mk(), st
}

// execAsync runs command in the background and returns its outcome later.
func execAsync(m *sandbox.Manager, name, command string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := m.Exec(context.Background(), name, shell.Request{Command: command, Timeout: hangGuard})
		done <- err
	}()
	return done
}

// wait returns what done delivers, the outcome of a call under way; the
// guard counts from now, so call it once what must end the call is done.
func wait(t *testing.T, done <-chan error) (err error) {
	t.Helper()
	return waitWithin(t, done, enginetest.HangGuard)
}

// waitWithin is wait with a guard of its own, for a call that may take
// minutes on a loaded machine (a save to an image).
func waitWithin(t *testing.T, done <-chan error, guard time.Duration) (err error) {
	t.Helper()
	if perr := enginetest.Poll(context.Background(), guard, func() error {
		select {
		case err = <-done:
			return nil
		default:
			return errors.New("it has not ended")
		}
	}); perr != nil {
		t.Fatalf("waiting for the call to end: %v\nengine processes now:\n%s", perr, enginetest.EngineProcesses())
	}
	return err
}

// running waits until a process matching pattern runs in the sandbox.
func running(t *testing.T, m *sandbox.Manager, name, pattern string) {
	t.Helper()
	enginetest.WaitFor(t, fmt.Sprintf("%q to run", pattern), func() error {
		var so bytes.Buffer
		_, err := m.Exec(context.Background(), name, shell.Request{Command: "ps -eo args | grep -c '^" + pattern + "' || true", Stdout: &so})
		if err != nil {
			return err
		}
		if strings.TrimSpace(so.String()) == "0" {
			return errors.New("no such process")
		}
		return nil
	})
}

func containers(t *testing.T, tg enginetest.Target, prefix, name string) int {
	t.Helper()
	cs, err := tg.New().List(context.Background(), map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: name})
	if err != nil {
		t.Fatal(err)
	}
	return len(cs)
}

// TestLifecycleOnEngine covers lifecycle changes that race with boots,
// commands and each other, in one server and across two.
func TestLifecycleOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			a, b, _ := servers(t, tg, prefix)
			ctx := context.Background()

			t.Run("destroy during boot", func(t *testing.T) {
				done := execAsync(a, "d1", "echo hi")
				// A step of the scenario, not a wait: the boot is under way.
				// Wherever it is by the destroy, it must end with nothing left.
				time.Sleep(50 * time.Millisecond)
				if _, err := a.Destroy(ctx, "d1"); err != nil {
					t.Fatal(err)
				}
				if err := wait(t, done); err != nil && !errors.Is(err, sandbox.ErrCutShort) {
					t.Fatalf("exec: %v", err)
				}
				if n := containers(t, tg, prefix, "d1"); n != 0 {
					t.Fatalf("%d containers left after destroy", n)
				}
				if _, err := a.Status(ctx, "d1"); !errors.Is(err, sandbox.ErrNotFound) {
					t.Fatalf("status after destroy: %v", err)
				}
			})

			t.Run("reset during a long exec", func(t *testing.T) {
				run(t, a, "r1", shell.Request{Command: "true"})
				done := execAsync(a, "r1", "sleep 987")
				running(t, a, "r1", "sleep 987")
				if _, err := a.Reset(ctx, "r1", false); err != nil {
					t.Fatal(err)
				}
				err := wait(t, done)
				var cut *sandbox.CutShortError
				if !errors.As(err, &cut) || !cut.Started || cut.Why != "was reset" || !strings.Contains(err.Error(), "cut short") {
					t.Fatalf("the command's result: %v", err)
				}
				if o := run(t, a, "r1", shell.Request{Command: "echo after"}); o.stdout != "after\n" {
					t.Fatalf("after reset: %q", o.stdout)
				}
			})

			t.Run("two resets at once", func(t *testing.T) {
				run(t, a, "r2", shell.Request{Command: "echo x > /workspace/keep"})
				var wg sync.WaitGroup
				errs := make([]error, 2)
				for i, m := range []*sandbox.Manager{a, b} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, errs[i] = m.Reset(ctx, "r2", false)
					}()
				}
				wg.Wait()
				if errs[0] != nil || errs[1] != nil {
					t.Fatalf("resets: %v", errs)
				}
				// Replaced containers go in the background.
				enginetest.WaitFor(t, "one container for one name", func() error {
					if n := containers(t, tg, prefix, "r2"); n != 1 {
						return fmt.Errorf("%d containers", n)
					}
					return nil
				})
				for _, m := range []*sandbox.Manager{a, b} {
					if o := run(t, m, "r2", shell.Request{Command: "cat /workspace/keep"}); o.stdout != "x\n" {
						t.Fatalf("workspace after two resets: %q", o.stdout)
					}
				}
			})

			t.Run("destroy from another server during a command", func(t *testing.T) {
				run(t, a, "x1", shell.Request{Command: "true"})
				done := execAsync(a, "x1", "sleep 986")
				running(t, a, "x1", "sleep 986")
				if existed, err := b.Destroy(ctx, "x1"); err != nil || !existed {
					t.Fatalf("destroy through b: %v %v", existed, err)
				}
				err := wait(t, done)
				var cut *sandbox.CutShortError
				if !errors.As(err, &cut) || !cut.Destroyed || !strings.Contains(err.Error(), "was destroyed by another server") {
					t.Fatalf("a's command: %v", err)
				}
				// A new command through a creates the sandbox afresh and says why.
				o := run(t, a, "x1", shell.Request{Command: "ls /workspace | wc -l"})
				if !o.res.Boot.Created || !strings.Contains(o.res.Boot.Recovered, "destroyed by another server") {
					t.Fatalf("next command: %+v", o.res.Boot)
				}
			})

			t.Run("reset by another server", func(t *testing.T) {
				run(t, a, "x2", shell.Request{Command: "cd /tmp"})
				if _, err := b.Reset(ctx, "x2", false); err != nil {
					t.Fatal(err)
				}
				o := run(t, a, "x2", shell.Request{Command: "echo fine"})
				if o.stdout != "fine\n" || !strings.Contains(o.res.Boot.Recovered, "reset by another server") {
					t.Fatalf("a after b's reset: %q %+v", o.stdout, o.res.Boot)
				}
			})

			t.Run("secrets hold across servers and resets", func(t *testing.T) {
				const secret = "tok-9f8e7d6c5b4a"
				if err := a.SetEnv(ctx, "s1", "API_TOKEN", secret, true); err != nil {
					t.Fatal(err)
				}
				if err := a.SetEnv(ctx, "s1", "PLAIN", "visible", false); err != nil {
					t.Fatal(err)
				}
				// b sees the variable on its next command, and hides its value.
				o := run(t, b, "s1", shell.Request{Command: `echo "$API_TOKEN $PLAIN"; echo ` + secret + ` >/dev/null`})
				if o.stdout != secret+" visible\n" {
					t.Fatalf("b's command: %q", o.stdout)
				}
				vars, err := b.Env(ctx, "s1")
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]sandbox.EnvVar{}
				for _, v := range vars {
					got[v.Name] = v
				}
				if got["API_TOKEN"].Value != "***" || !got["API_TOKEN"].Secret || got["PLAIN"].Value != "visible" {
					t.Fatalf("b's env list: %+v", vars)
				}
				// A third server (a restart) hides it too, in history and env.
				c, _, _ := servers(t, tg, prefix)
				run(t, c, "s1", shell.Request{Command: "printf %s " + secret + " | wc -c"})
				for i, m := range []*sandbox.Manager{a, b} {
					// History is flushed in batches: wait for b's command,
					// the one that names the secret, to reach the store.
					var hist []sandbox.HistoryEntry
					enginetest.WaitFor(t, fmt.Sprintf("server %d's history to show b's command", i), func() error {
						var err error
						if hist, err = m.CommandHistory("s1", 100); err != nil {
							t.Fatal(err)
						}
						for _, e := range hist {
							if strings.HasPrefix(e.Command, `echo "$API_TOKEN $PLAIN"; echo `) {
								return nil
							}
						}
						return fmt.Errorf("none of its %d entries is b's", len(hist))
					})
					for _, e := range hist {
						if strings.Contains(e.Command, secret) {
							t.Fatalf("server %d's history shows the secret: %q", i, e.Command)
						}
					}
				}
				// Unset through b reaches a's shells.
				if err := b.UnsetEnv(ctx, "s1", "PLAIN"); err != nil {
					t.Fatal(err)
				}
				if o := run(t, a, "s1", shell.Request{Command: `echo "[${PLAIN-unset}]"`}); o.stdout != "[unset]\n" {
					t.Fatalf("after unset through b: %q", o.stdout)
				}
				// The store survives a reset.
				if _, err := a.Reset(ctx, "s1", true); err != nil {
					t.Fatal(err)
				}
				if o := run(t, a, "s1", shell.Request{Command: `echo "$API_TOKEN"`}); o.stdout != secret+"\n" {
					t.Fatalf("after reset: %q", o.stdout)
				}
				vars, _ = a.Env(ctx, "s1")
				if len(vars) != 1 || vars[0].Value != "***" {
					t.Fatalf("env after reset: %+v", vars)
				}
			})
		})
	}
}

// TestCloseJoinsEverything: a Manager that booted sandboxes, ran commands
// and reset one leaves no goroutine behind once closed.
func TestCloseJoinsEverything(t *testing.T) {
	tgs := enginetest.Targets(t)
	tg := tgs[0]
	prefix := enginetest.Prefix(t, tg.New())
	opts := goleak.IgnoreCurrent()
	dir := t.TempDir()
	m := sandbox.NewManager(tg.New(), sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}, LockDir: dir})
	run(t, m, "a", shell.Request{Command: "echo hi"})
	run(t, m, "b", shell.Request{Command: "sleep 0.1 & wait"})
	if _, err := m.Reset(context.Background(), "b", false); err != nil {
		t.Fatal(err)
	}
	done := execAsync(m, "a", "sleep 985")
	running(t, m, "a", "sleep 985")
	m.ReconcileAfter(0)
	m.BootInBackground("c")
	m.Close()
	if err := wait(t, done); err == nil {
		t.Fatal("a command survived Close")
	}
	// The engine dialect's one look at where its engine keeps images
	// (docker's store.go) is the runtime's, not the Manager's: it may
	// still be under way, and ends by itself within its timeout.
	goleak.VerifyNone(t, opts, goleak.IgnoreAnyFunction("github.com/sandbox-mcp/sandbox-mcp/sandbox/docker.(*Dialect).learnStore"))
}
