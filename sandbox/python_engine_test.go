package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/pysession"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

func runPython(t *testing.T, m *sandbox.Manager, box, session, code string) sandbox.PythonResult {
	t.Helper()
	res, err := m.RunPython(guarded(t), box, session, pysession.Request{Code: code, Timeout: time.Minute, Limit: 8192})
	if err != nil {
		t.Fatalf("python %q: %v", code, err)
	}
	return res
}

// TestPythonSessionsOnEngine: a session keeps its state in the sandbox,
// starts in the shells' directory with the env tool's variables, ends
// with what it started when reset, and comes back, saying its state is
// gone, after its container was stopped behind the server's back.
func TestPythonSessionsOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			m := newManager(t, tg, enginetest.Prefix(t, rt))
			const box = "py"
			run(t, m, box, shell.Request{Command: "mkdir -p /tmp/pywd && cd /tmp/pywd"})
			if err := m.SetEnv(guarded(t), box, "PY_SEEN", "from-env", false); err != nil {
				t.Fatal(err)
			}
			r := runPython(t, m, box, "default", "import os\nkept = 41\n(os.getcwd(), os.environ.get('PY_SEEN'))")
			if r.Value == nil || *r.Value != "('/tmp/pywd', 'from-env')" || r.Count != 1 || r.Version == "" {
				t.Fatalf("first call: %+v", r)
			}
			if r := runPython(t, m, box, "default", "kept + 1"); r.Value == nil || *r.Value != "42" || r.Count != 2 {
				t.Fatalf("state: %+v", r)
			}

			// What the session started ends with it.
			// One child keeps the run ID, one drops it: both are the driver's.
			runPython(t, m, box, "default", "import os, subprocess\nchild = subprocess.Popen(['sleep', '1234'])\n"+
				"env = dict(os.environ)\nenv.pop('SANDBOX_MCP_RUN', None)\nother = subprocess.Popen(['sleep', '1234'], env=env)")
			sleepers := func() string {
				o := run(t, m, box, shell.Request{Command: `for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 1234' || true`})
				return strings.TrimSpace(o.stdout)
			}
			if n := sleepers(); n != "2" {
				t.Fatalf("the session's children are not seen running: %q", n)
			}
			if ended, err := m.ResetPython(box, "default"); err != nil || !ended {
				t.Fatalf("reset: %v %v", ended, err)
			}
			enginetest.WaitFor(t, "the session's child to end", func() error {
				if n := sleepers(); n != "0" {
					return fmt.Errorf("%s still run", n)
				}
				return nil
			})
			if r := runPython(t, m, box, "default", "'kept' in dir()"); r.Value == nil || *r.Value != "False" || r.Count != 1 {
				t.Fatalf("after reset: %+v", r)
			}

			// Stopped behind the server's back: the next call boots the
			// sandbox again in a new interpreter and says why.
			runPython(t, m, box, "default", "kept = 1")
			if err := rt.Stop(context.Background(), m.ContainerFor(box), 0); err != nil {
				t.Fatal(err)
			}
			var res sandbox.PythonResult
			enginetest.WaitFor(t, "a call after the stop", func() error {
				var err error
				res, err = m.RunPython(guarded(t), box, "default", pysession.Request{Code: "'kept' in dir()", Timeout: time.Minute, Limit: 8192})
				if errors.Is(err, pysession.ErrEnded) {
					return err // the stop raced the call: it ended the session under way
				}
				if err != nil {
					t.Fatal(err)
				}
				return nil
			})
			if res.Value == nil || *res.Value != "False" || res.Count != 1 || res.Ended == "" {
				t.Fatalf("after a stop: %+v", res)
			}

			// A destroy in the middle of a call ends it, promptly.
			errc := make(chan error, 1)
			go func() {
				_, err := m.RunPython(guarded(t), box, "default", pysession.Request{Code: "import time\ntime.sleep(600)", Timeout: time.Hour, Limit: 1024})
				errc <- err
			}()
			time.Sleep(time.Second)
			if _, err := m.Destroy(guarded(t), box); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if !errors.Is(err, pysession.ErrEnded) || !strings.Contains(err.Error(), "destroyed") {
					t.Fatalf("a call under way at the destroy: %v", err)
				}
			case <-time.After(hangGuard):
				t.Fatal("a call under way at the destroy still waits")
			}
			// A bad session name is refused.
			var arg *sandbox.ArgError
			if _, err := m.RunPython(guarded(t), box, "../x", pysession.Request{Code: "1"}); !errors.As(err, &arg) {
				t.Fatalf("bad session name: %v", err)
			}
		})
	}
}
