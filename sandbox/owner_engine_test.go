package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// stranger replaces the container of sandbox name with one of the same
// name that sandbox-mcp did not make (`podman rm -f`, then `podman run -d
// --name <same> <image> sleep infinity`), with labels if given, and
// removes it when the test ends.
func stranger(t *testing.T, tg enginetest.Target, prefix, name string, labels map[string]string) sandbox.Container {
	t.Helper()
	ctx := context.Background()
	rt := tg.New()
	ctr := sandbox.ContainerName(prefix, name)
	if err := rt.Remove(ctx, ctr); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := rt.Run(ctx, sandbox.RunSpec{Name: ctr, Image: tg.Image, Labels: labels, Command: []string{"sleep", "infinity"}}); err != nil {
		t.Fatal(err)
	}
	c, err := rt.Inspect(ctx, ctr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Only the stranger made here: the name may hold another by now.
		if cur, err := rt.Inspect(context.Background(), ctr); err == nil && cur.ID == c.ID {
			_ = rt.Remove(context.Background(), c.ID)
		}
		// The sandbox's workspace outlived its container, which the
		// stranger replaced, so the prefix sweep cannot find it by that.
		if _, err := rt.Inspect(context.Background(), ctr); errors.Is(err, sandbox.ErrNotFound) {
			_ = rt.VolumeRemove(context.Background(), sandbox.ContainerName(prefix+"-ws", name))
		}
	})
	return c
}

// untouched checks that nothing ran in the stranger: no file the refused
// commands would have made, no shell left in it, and it is still the same
// container under its name, in the state it was left.
func untouched(t *testing.T, tg enginetest.Target, c sandbox.Container, state sandbox.State) {
	t.Helper()
	ctx := context.Background()
	rt := tg.New()
	cur, err := rt.Inspect(ctx, c.Name)
	if err != nil || cur.ID != c.ID || cur.State != state {
		t.Fatalf("the stranger was touched: %+v, %v (want id %s, %s)", cur, err, c.ID, state)
	}
	if state != sandbox.StateRunning {
		return
	}
	if out, err := rt.Exec(ctx, c.ID, sandbox.ExecSpec{Argv: []string{"test", "-e", "/tmp/ran"}}); err != nil || out.ExitCode != 1 {
		t.Fatalf("a refused command ran in the stranger: /tmp/ran: exit %d, %v", out.ExitCode, err)
	}
	// The shell started in it while its owner was checked was given
	// nothing and ends; wait for that.
	enginetest.WaitFor(t, "no shell left in the stranger", func() error {
		out, err := rt.Exec(ctx, c.ID, sandbox.ExecSpec{Argv: []string{"ps", "-eo", "args"}})
		if err != nil {
			return err
		}
		if text := "\n" + string(out.Stdout); strings.Contains(text, "\nsh\n") {
			return fmt.Errorf("a shell was left in the stranger:\n%s", text)
		}
		return nil
	})
}

// TestForeignContainerOnEngine: a container that takes a sandbox's name
// behind the server's back is never used: the command fails with an
// error that names it, and nothing runs in it, whether it runs or is
// stopped, unlabelled or carrying our labels; reset and destroy leave it
// alone.
func TestForeignContainerOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			m := newManager(t, tg, prefix)
			ctx := context.Background()
			refused := func(t *testing.T, box, want string) error {
				t.Helper()
				_, err := m.Exec(ctx, box, shell.Request{Command: "touch /tmp/ran; echo ran", Timeout: hangGuard})
				if !errors.Is(err, sandbox.ErrForeign) || !strings.Contains(err.Error(), sandbox.ContainerName(prefix, box)) ||
					!strings.Contains(err.Error(), want) {
					t.Fatalf("exec in a sandbox whose container was replaced: %v (want an error naming it, %q)", err, want)
				}
				return err
			}

			t.Run("running stranger", func(t *testing.T) {
				const box = "stranger"
				run(t, m, box, shell.Request{Command: "echo mine > /workspace/mine"})
				c := stranger(t, tg, prefix, box, nil)
				err := refused(t, box, "no sandbox-mcp label")
				if !strings.Contains(err.Error(), "is not sandbox \"stranger\"'s (id "+c.ID[:12]) ||
					!strings.Contains(err.Error(), "remove it or destroy the sandbox") {
					t.Fatalf("error: %v", err)
				}
				refused(t, box, "no sandbox-mcp label") // every later shell open checks too
				untouched(t, tg, c, sandbox.StateRunning)

				// Destroy removes what is ours and leaves the stranger.
				if _, err := m.Destroy(ctx, box); err != nil {
					t.Fatalf("destroy: %v", err)
				}
				untouched(t, tg, c, sandbox.StateRunning)
				if n := containers(t, tg, prefix, box); n != 0 {
					t.Fatalf("%d containers of ours left", n)
				}
				// A boot does not adopt it either.
				_, err = m.Exec(ctx, box, shell.Request{Command: "touch /tmp/ran"})
				if !errors.Is(err, sandbox.ErrForeign) || !strings.Contains(err.Error(), "pick another sandbox name") {
					t.Fatalf("exec after destroy: %v", err)
				}
				untouched(t, tg, c, sandbox.StateRunning)

				// Once it is gone, the name is ours again.
				if err := rt.Remove(ctx, c.ID); err != nil {
					t.Fatal(err)
				}
				// An ext4 workspace volume (Apple's, the stand-in's) has
				// its formatter's lost+found.
				if o := run(t, m, box, shell.Request{Command: "ls -I lost+found /workspace; echo fresh"}); o.stdout != "fresh\n" {
					t.Fatalf("after the stranger left: %q", o.stdout)
				}
			})

			t.Run("stopped stranger", func(t *testing.T) {
				const box = "stopped"
				run(t, m, box, shell.Request{Command: "true"})
				c := stranger(t, tg, prefix, box, nil)
				if err := rt.Stop(ctx, c.ID, 0); err != nil {
					t.Fatal(err)
				}
				refused(t, box, "no sandbox-mcp label")
				untouched(t, tg, c, sandbox.StateStopped) // not started, not removed
			})

			t.Run("labelled stranger", func(t *testing.T) {
				if tg.Name == "container-0.9.0" {
					// 0.x reports no creation date and an ID that is the
					// name: a container with our labels under our name is
					// indistinguishable from ours there.
					t.Skip("Apple container 0.x JSON has no creation date and IDs are names; a labelled stranger cannot be told apart")
				}
				const box = "labelled"
				run(t, m, box, shell.Request{Command: "true"})
				if rt.Kind() == "container" {
					// Apple's ID is the name; what tells the containers apart is
					// the creation date, which has whole seconds. A step of
					// the scenario, not a wait: load only makes it longer.
					time.Sleep(1100 * time.Millisecond)
				}
				c := stranger(t, tg, prefix, box, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: box})
				refused(t, box, "labelled for it, but")
				untouched(t, tg, c, sandbox.StateRunning)
			})

			t.Run("reset leaves it alone", func(t *testing.T) {
				const box = "reset"
				run(t, m, box, shell.Request{Command: "true"})
				c := stranger(t, tg, prefix, box, nil)
				if _, err := m.Reset(ctx, box, false); !errors.Is(err, sandbox.ErrForeign) {
					t.Fatalf("reset over a stranger: %v", err)
				}
				untouched(t, tg, c, sandbox.StateRunning)
			})

			t.Run("our own shells reopen", func(t *testing.T) {
				const box = "reopen"
				run(t, m, box, shell.Request{Command: "export KEEP=1"})
				for range 3 {
					// The shell dies with the command; the next opens a new one.
					if _, err := m.Exec(ctx, box, shell.Request{Command: "exit 3"}); err != nil {
						t.Fatal(err)
					}
				}
				if o := run(t, m, box, shell.Request{Command: `echo "$KEEP"`}); o.stdout != "1\n" {
					t.Fatalf("after reopening: %q", o.stdout)
				}
			})
		})
	}
}
