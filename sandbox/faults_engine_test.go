package sandbox_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// TestContainerFaultsSaidTrueOnEngine: a container paused outside
// sandbox-mcp is called paused (a command frozen in it says so when it
// times out; a server that adopts it, and the job tools, say how to
// unpause it, and nothing is started or recreated); a container removed
// with its volume while a command runs ends that command with those
// words, and the next call says the workspace is empty.
func TestContainerFaultsSaidTrueOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			if rt.Kind() == "container" {
				t.Skip("Apple's container CLI has no pause")
			}
			prefix := enginetest.Prefix(t, rt)
			a, b, _ := servers(t, tg, prefix)
			ctx := guarded(t)
			const box = "faults"
			ctr := a.ContainerFor(box)
			engine := func(args ...string) {
				t.Helper()
				cmd := exec.Command(rt.Binary(), args...)
				cmd.Env = append(cmd.Environ(), tg.Env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s %v: %v: %s", rt.Binary(), args, err, out)
				}
			}
			run(t, a, box, shell.Request{Command: "echo kept >/workspace/f"})
			startJob(t, a, box, "sleeper", "sleep 1000")

			engine("pause", ctr)
			// The command cannot run; the call says why, in its error or
			// (once it timed out) its notice.
			res, err := a.Exec(ctx, box, shell.Request{Command: "echo hi", Timeout: 2 * time.Second})
			said := res.Notice
			if err != nil {
				said = err.Error()
			}
			if !(errors.Is(err, sandbox.ErrPaused) || err == nil && res.TimedOut) || !strings.Contains(said, "paused") || !strings.Contains(said, "unpause "+ctr) {
				t.Errorf("a command in the paused container: %+v %v", res, err)
			}
			if _, _, err := b.Get(ctx, box); !errors.Is(err, sandbox.ErrPaused) || !strings.Contains(err.Error(), "unpause "+ctr) {
				t.Errorf("another server adopting it: %v", err)
			}
			if _, err := b.Jobs(ctx, box); !errors.Is(err, sandbox.ErrPaused) {
				t.Errorf("jobs of the paused sandbox: %v", err)
			}
			engine("unpause", ctr)
			if o := run(t, b, box, shell.Request{Command: "cat /workspace/f"}); o.stdout != "kept\n" {
				t.Fatalf("after unpause: %+v", o)
			}

			// Removed with its volume while a command runs.
			done := make(chan error, 1)
			go func() {
				_, err := a.Exec(ctx, box, shell.Request{Command: "sleep 60", Timeout: hangGuard})
				done <- err
			}()
			time.Sleep(500 * time.Millisecond)
			engine("rm", "-f", ctr)
			engine("volume", "rm", "-f", sandbox.ContainerName(prefix+"-ws", box))
			err = <-done
			if !errors.Is(err, sandbox.ErrCutShort) || !strings.Contains(err.Error(), "was removed") {
				t.Errorf("the command whose container was removed: %v", err)
			}
			res, err = a.Exec(ctx, box, shell.Request{Command: "ls /workspace | wc -l"})
			if err != nil || !strings.Contains(res.Boot.Recovered, "workspace is empty") {
				t.Errorf("the next call: %+v %v", res.Boot, err)
			}
		})
	}
}
