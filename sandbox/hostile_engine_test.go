package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// TestHostileCommandsOnEngine: commands that try to outlive their timeout,
// write into later commands' results, or damage the framing shell. One
// sandbox per engine is shared; each case leaves it usable, which is part
// of what is checked.
func TestHostileCommandsOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			m := newManager(t, tg, enginetest.Prefix(t, rt))
			const box = "hostile"
			run(t, m, box, shell.Request{Command: "true"})
			// noneLeft waits until no process of the sandbox runs sleep with
			// the given (unique) argument. A killed process that was stopped
			// first needs to be scheduled to exit, which on a loaded machine
			// takes a moment: poll.
			noneLeft := func(t *testing.T, arg string) {
				t.Helper()
				enginetest.WaitFor(t, "no sleep "+arg+" to outlive the timeout", func() error {
					o := run(t, m, box, shell.Request{Command: "ps -eo args | grep -c '^[s]leep " + arg + "' || true"})
					if n := strings.TrimSpace(o.stdout); n != "0" {
						return fmt.Errorf("%s processes outlived the timeout", n)
					}
					return nil
				})
			}

			for _, c := range []struct{ name, prefix string }{
				{"in the shell", ""},
				{"isolated", "set -e; "}, // set -e: runs in a subshell
			} {
				t.Run("timeout ends the sequence "+c.name, func(t *testing.T) {
					f := "/workspace/after-" + strings.ReplaceAll(c.name, " ", "-")
					run(t, m, box, shell.Request{Command: "export KEEP=seq; rm -f " + f})
					start := time.Now()
					// The sleep outlasts the timeout by more than a stop takes
					// on a loaded machine (seconds, when every engine exec
					// waits its turn).
					o := run(t, m, box, shell.Request{Command: c.prefix + "echo began; sleep 12; touch " + f + "; echo ran-after", Timeout: time.Second})
					if took := time.Since(start); took > hangGuard {
						t.Fatalf("answered after %v", took)
					}
					if !o.res.TimedOut || o.res.ExitCode != 124 || o.stdout != "began\n" {
						t.Fatalf("got %+v stdout %q", o.res.Result, o.stdout)
					}
					// Not a wait but the window the test watches: past the
					// point where the rest would have run, nothing of it has.
					time.Sleep(12 * time.Second)
					o = run(t, m, box, shell.Request{Command: "ls " + f + " 2>/dev/null; echo $KEEP"})
					if o.stdout != "seq\n" {
						t.Fatalf("the rest of the command ran, or state was lost: %q", o.stdout)
					}
				})
				t.Run("cancel ends the sequence "+c.name, func(t *testing.T) {
					f := "/workspace/cancel-" + strings.ReplaceAll(c.name, " ", "-")
					ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
					defer cancel()
					var so strings.Builder
					res, err := m.Exec(ctx, box, shell.Request{Command: c.prefix + "sleep 12; touch " + f + "; echo ran-after", Stdout: &so})
					if err != nil || !res.Canceled || res.ExitCode != 130 || so.String() != "" {
						t.Fatalf("got %+v, %v, stdout %q", res.Result, err, so.String())
					}
					time.Sleep(12 * time.Second) // the window the test watches, as above
					if o := run(t, m, box, shell.Request{Command: "ls " + f + " 2>/dev/null; echo done"}); o.stdout != "done\n" {
						t.Fatalf("the rest of a cancelled command ran: %q", o.stdout)
					}
				})
			}
			t.Run("timeout ends what the command left behind", func(t *testing.T) {
				o := run(t, m, box, shell.Request{Command: "(sleep 1001 &); setsid sleep 1002 & sleep 1003", Timeout: time.Second})
				if !o.res.TimedOut {
					t.Fatalf("got %+v", o.res.Result)
				}
				noneLeft(t, "100[123]")
			})
			t.Run("a forking loop ends with its timeout", func(t *testing.T) {
				o := run(t, m, box, shell.Request{Command: "while :; do sleep 1004 & sleep 0.005; done", Timeout: 2 * time.Second})
				if !o.res.TimedOut || o.res.ExitCode != 124 {
					t.Fatalf("got %+v", o.res.Result)
				}
				noneLeft(t, "1004")
			})
			t.Run("late background output stays out of later results", func(t *testing.T) {
				o := run(t, m, box, shell.Request{Command: "(sleep 1; echo LATE; echo LATE-ERR >&2) &"})
				if !o.res.LeftBehind {
					t.Fatalf("background process not reported: %+v", o.res.Result)
				}
				// The window the test watches, not a wait: the late output
				// comes meanwhile, and no later result may carry it.
				time.Sleep(2 * time.Second)
				for range 6 { // every shell of the pool
					o = run(t, m, box, shell.Request{Command: "echo next"})
					if o.stdout != "next\n" || o.stderr != "" {
						t.Fatalf("stdout %q stderr %q", o.stdout, o.stderr)
					}
				}
				// A daemon that slipped past the check (no $! in the shell):
				// its output between commands is discarded too.
				run(t, m, box, shell.Request{Command: "sh -c '(sleep 1; echo STRAY) &'"})
				time.Sleep(2 * time.Second) // the window the test watches, as above
				for range 6 {
					if o = run(t, m, box, shell.Request{Command: "echo next"}); o.stdout != "next\n" {
						t.Fatalf("stdout %q", o.stdout)
					}
				}
			})
			t.Run("concurrent exports all land", func(t *testing.T) {
				var wg sync.WaitGroup
				for i := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						run(t, m, box, shell.Request{Command: fmt.Sprintf("export PAR%d=v%d; sleep 0.2", i, i)})
					}()
				}
				wg.Wait()
				for range 4 {
					o := run(t, m, box, shell.Request{Command: "env | grep '^PAR' | sort | tr '\\n' ' '"})
					if o.stdout != "PAR0=v0 PAR1=v1 PAR2=v2 PAR3=v3 PAR4=v4 PAR5=v5 PAR6=v6 PAR7=v7 " {
						t.Fatalf("exports: %q", o.stdout)
					}
				}
				run(t, m, box, shell.Request{Command: "unset PAR0 PAR1 PAR2 PAR3 PAR4 PAR5 PAR6 PAR7"})
			})
			t.Run("queue time counts toward the timeout", func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var wg sync.WaitGroup
				for range shell.DefaultPoolSize {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, _ = m.Exec(ctx, box, shell.Request{Command: "sleep 1005"}) // until cancel
					}()
				}
				// Wait for them to take every shell, looking through the
				// engine: the pool has no shell left to look with.
				enginetest.WaitFor(t, "every shell to run a sleep", func() error {
					out, err := rt.Exec(context.Background(), m.ContainerFor(box), sandbox.ExecSpec{Argv: []string{"ps", "-eo", "args"}})
					if err != nil {
						return err
					}
					n := 0
					for _, l := range strings.Split(string(out.Stdout), "\n") {
						if strings.TrimSpace(l) == "sleep 1005" {
							n++
						}
					}
					if n != shell.DefaultPoolSize {
						return fmt.Errorf("%d of %d run", n, shell.DefaultPoolSize)
					}
					return nil
				})
				start := time.Now()
				o := run(t, m, box, shell.Request{Command: "echo quick", Timeout: time.Second})
				if took := time.Since(start); took > hangGuard {
					t.Fatalf("a 1 s timeout answered after %v", took)
				}
				if !o.res.TimedOut || !o.res.NotStarted || o.res.Queued == 0 || o.stdout != "" {
					t.Fatalf("got %+v stdout %q", o.res.Result, o.stdout)
				}
				cancel()
				wg.Wait()
			})
			t.Run("shell state a command sets lasts for it only", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "cd /workspace; export KEEP=frame"})
				for _, damage := range []string{
					"set -e",
					"set -x",
					"set -u",
					"set -n",
					"ulimit -v 1000",
					"ulimit -n 3",
					"alias printf=true; alias echo=false",
					"printf() { :; }; echo() { :; }; cd() { :; }; command() { :; }",
					"trap 'echo TRAPPED' EXIT INT TERM",
					"IFS=/",
					"exec 3>&- 4>&-",
					"exec >/dev/null 2>&1",
					"umask 777",
					"readonly KEEP",
				} {
					o := run(t, m, box, shell.Request{Command: "cd /tmp\n" + damage, Timeout: hangGuard})
					if o.res.TimedOut || o.res.ShellLost || strings.Contains(o.stdout+o.stderr, "sbx") {
						t.Fatalf("%q: %+v stdout %q stderr %q", damage, o.res.Result, o.stdout, o.stderr)
					}
					// The command's cd lands. With no fds to spare (ulimit -n 3)
					// or nothing executed any more (set -n) the report of its
					// state cannot run, and the state stays as it was.
					want := "/tmp"
					if damage == "ulimit -n 3" || damage == "set -n" {
						want = "/workspace"
					}
					for range 5 { // on every shell
						o = run(t, m, box, shell.Request{Command: "false; echo \"ok $KEEP\"; pwd; set +o | grep -c -e '-o errexit' -e '-o xtrace' -e '-o nounset'; ulimit -v; umask; echo x | cat; export KEEP=frame", Timeout: hangGuard})
						if o.stdout != "ok frame\n"+want+"\n0\nunlimited\n0022\nx\n" || o.stderr != "" || o.res.ExitCode != 0 {
							t.Fatalf("after %q: %+v stdout %q stderr %q", damage, o.res.Result, o.stdout, o.stderr)
						}
					}
					run(t, m, box, shell.Request{Command: "cd /workspace"})
				}
			})
			t.Run("stdin is exact and leaves nothing in /tmp", func(t *testing.T) {
				data := strings.Repeat("0123456789", 500)
				o := run(t, m, box, shell.Request{Command: "wc -c; ls -a /tmp | grep -c sandbox-mcp || true", Stdin: []byte(data)})
				if o.stdout != "5000\n0\n" {
					t.Fatalf("stdout %q", o.stdout)
				}
			})
		})
	}
}
