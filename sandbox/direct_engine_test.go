package sandbox_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// On podman a sandbox's shells read and write the server's own pipes,
// handed into the container, not streams the engine relays: the pipes the
// shell holds (its stdin, stdout and stderr, under whichever numbers the
// framing keeps them) are the ones this process (the server) holds the
// other ends of. So are those of a second shell,
// opened while the first is busy, and commands on both give their output
// whole.
func TestShellsUseTheServersOwnPipes(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			if tg.Runtime != "podman" || tg.StandIn {
				t.Skip("only podman's exec hands a process descriptors of the host's (--preserve-fds); on the others the engine relays the shells' streams, as every other engine test covers")
			}
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			m := sandbox.NewManager(tg.New(), sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}, LockDir: t.TempDir()})
			t.Cleanup(m.Close)
			// The framing shell's own descriptors, read through /proc
			// into a file: while a pipeline runs, the shell holds its
			// pipes for a moment itself.
			streams := "for f in /proc/$$/fd/*; do readlink $f; done >/tmp/fds.$$; grep '^pipe:' /tmp/fds.$$ | sort -u; rm -f /tmp/fds.$$"
			first := run(t, m, "direct", shell.Request{Command: streams})
			checkOwnPipes(t, first.stdout)

			// A command holds the first shell while the second answers.
			hold := execAsync(m, "direct", "sleep 987")
			running(t, m, "direct", "sleep 987")
			var wg sync.WaitGroup
			outs := make([]string, 3)
			for i := range outs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var so strings.Builder
					res, err := m.Exec(context.Background(), "direct", shell.Request{Command: streams + "; seq 1 20000 | wc -l", Stdout: &so})
					if err != nil || res.ExitCode != 0 {
						t.Errorf("exec beside a busy shell: %v (exit %d)", err, res.ExitCode)
					}
					outs[i] = so.String()
				}()
			}
			wg.Wait()
			for _, o := range outs {
				lines := strings.Split(strings.TrimSpace(o), "\n")
				if len(lines) != 4 || lines[3] != "20000" {
					t.Fatalf("a command's output = %q, want its shell's three pipes and 20000", o)
				}
				checkOwnPipes(t, strings.Join(lines[:3], "\n"))
			}
			if _, err := m.Destroy(context.Background(), "direct"); err != nil {
				t.Fatal(err)
			}
			if err := wait(t, hold); err == nil {
				t.Fatal("the held command ended well though its sandbox was destroyed")
			}
		})
	}
}

// checkOwnPipes checks that out, the distinct pipes a shell holds, one a
// line, names three pipes (its stdin, stdout and stderr) this process
// holds an end of.
func checkOwnPipes(t *testing.T, out string) {
	t.Helper()
	mine := map[string]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			mine[l] = true
		}
	}
	lines := strings.Fields(out)
	if len(lines) != 3 {
		t.Fatalf("the shell holds the pipes %q, want three", out)
	}
	for _, l := range lines {
		if !mine[l] {
			t.Errorf("the shell holds %s, not a pipe of the server's (which holds %d pipes)", l, len(mine))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}
