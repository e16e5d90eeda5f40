package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestCommandsCannotLie drives exec through a real client the way a hostile
// or careless agent would: a timed-out or cancelled sequence does not run
// on, a background process's late output stays out of later results, and
// shell damage lasts for one command.
func TestCommandsCannotLie(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "")
			s.call(t, "exec", map[string]any{"command": "true"})

			t.Run("a timeout ends the whole sequence", func(t *testing.T) {
				// The rest of the command runs only if the stop comes
				// later than the sleep's end: margin after the timeout.
				const sleep, timeout = 3, 1
				const margin = (sleep - timeout) * time.Second
				r := s.call(t, "exec", map[string]any{"command": fmt.Sprintf("sleep %d; touch /workspace/after; echo ran-after", sleep), "timeout": timeout})
				if !r.isError || r.data["timed_out"] != true || r.num("exit_code") == 0 {
					t.Fatalf("%+v", r)
				}
				if time.Duration(r.num("stop_took_ms"))*time.Millisecond >= margin {
					// A loaded host: stopping took past the sleep, and the
					// result says the command ran on; nothing more to check.
					if !strings.Contains(r.text, "what it did meanwhile ran") {
						t.Fatalf("a slow stop not reported: %q", r.text)
					}
					t.Skipf("the host was too slow to stop the command within %s (%v ms), which the result said", margin, r.num("stop_took_ms"))
				}
				if strings.Contains(r.str("stdout"), "ran-after") || !strings.Contains(r.text, "nothing after that point ran") && !strings.Contains(r.text, "what it did meanwhile ran") {
					t.Fatalf("%+v", r)
				}
				// Past the sleep's end, when the rest would have run:
				// what is checked is that nothing happens.
				time.Sleep(3 * time.Second)
				r = s.call(t, "exec", map[string]any{"command": "ls /workspace/after 2>&1 || echo absent"})
				if !strings.Contains(r.str("stdout"), "absent") {
					t.Fatalf("the rest of the command ran: %+v", r)
				}
			})
			t.Run("a cancel ends the whole sequence", func(t *testing.T) {
				const cancelled = "sleep 3; touch /workspace/after-cancel"
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					_, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{
						"command": cancelled}})
					done <- err
				}()
				// A second into the command's 3 s sleep: the scenario is a
				// cancel mid-sequence (one that came earlier would prove
				// less, not fail).
				time.Sleep(time.Second)
				start := time.Now()
				cancel() // the client sends notifications/cancelled
				<-done
				// Past the sleep's end, when the rest would have run:
				// what is checked is that nothing happens.
				time.Sleep(3 * time.Second)
				r := s.call(t, "exec", map[string]any{"command": "ls /workspace/after-cancel 2>&1 || echo absent"})
				if !strings.Contains(r.str("stdout"), "absent") {
					// The cancelled call's result is not delivered, so how
					// long stopping it took is known only from its history
					// entry, written once the stop is done.
					var h result
					var entry map[string]any
					enginetest.WaitFor(t, "the history entry of a cancelled command whose rest ran", func() error {
						h = s.call(t, "history", map[string]any{"limit": 5})
						entries, _ := h.data["entries"].([]any)
						for _, e := range entries {
							if e, _ := e.(map[string]any); e["command"] == cancelled {
								entry = e
								return nil
							}
						}
						return fmt.Errorf("not recorded; the command's rest ran: %+v\nhistory: %s", r, h.text)
					})
					// stop_took_ms is present only for a stop the server called slow.
					if ms, ok := entry["stop_took_ms"].(float64); ok && strings.Contains(h.text, "slow to answer") {
						t.Skipf("the host was too slow to stop the command (%v ms after the cancel), which its record says", ms)
					}
					t.Fatalf("the rest of a cancelled command ran (%s after the cancel): %+v\nhistory: %s", time.Since(start), r, h.text)
				}
			})
			t.Run("late output stays out of the next result", func(t *testing.T) {
				r := s.call(t, "exec", map[string]any{"command": "(sleep 1; echo LATE; echo LATE-ERR >&2) &"})
				if r.data["background_left"] != true || !strings.Contains(r.text, "discarded") {
					t.Fatalf("%+v", r)
				}
				time.Sleep(2 * time.Second) // the late output is written meanwhile
				r = s.call(t, "exec", map[string]any{"command": "echo next"})
				if r.str("stdout") != "next\n" || r.str("stderr") != "" {
					t.Fatalf("%+v", r)
				}
			})
			t.Run("set -e and functions last for one command", func(t *testing.T) {
				s.call(t, "exec", map[string]any{"command": "set -e; printf() { :; }; alias echo=false; ulimit -v 1000"})
				r := s.call(t, "exec", map[string]any{"command": "false; printf 'still %s\\n' here; echo ok", "timeout": 10})
				if r.str("stdout") != "still here\nok\n" || r.num("exit_code") != 0 {
					t.Fatalf("%+v", r)
				}
			})
			t.Run("exit ends the command only", func(t *testing.T) {
				r := s.call(t, "exec", map[string]any{"command": "export KEPT=1; exit 3"})
				if r.num("exit_code") != 3 || r.data["shell_restarted"] == true {
					t.Fatalf("%+v", r)
				}
				if r = s.call(t, "exec", map[string]any{"command": "echo $KEPT"}); r.str("stdout") != "1\n" {
					t.Fatalf("%+v", r)
				}
			})
		})
	}
}
