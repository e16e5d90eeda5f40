package sandbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// TestSharedStateOnEngine: the directory and exports a command leaves, and
// env set through any server, reach every shell of every server, survive
// a stop of the container, and concurrent exports all land.
func TestSharedStateOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			a, b, _ := servers(t, tg, enginetest.Prefix(t, rt))
			const box = "shared"
			// The first command a server runs in a sandbox changes its
			// state: that is recorded for every server too.
			run(t, a, box, shell.Request{Command: "cd /tmp && export FIRST=yes"})
			if o := run(t, b, box, shell.Request{Command: `pwd; echo "$FIRST"`}); o.stdout != "/tmp\nyes\n" {
				t.Fatalf("server b after a's first command: %q", o.stdout)
			}
			// Both servers have open shells before anything changes.
			run(t, a, box, shell.Request{Command: "true"})
			run(t, b, box, shell.Request{Command: "true"})

			t.Run("exports and cwd across servers", func(t *testing.T) {
				run(t, a, box, shell.Request{Command: "mkdir -p /tmp/across && cd /tmp/across && export ACROSS='it''s here' GONE=1"})
				run(t, a, box, shell.Request{Command: "unset GONE"})
				for range 3 { // several shells of b
					o := run(t, b, box, shell.Request{Command: `pwd; echo "$ACROSS ${GONE-unset}"`})
					if o.stdout != "/tmp/across\nits here unset\n" {
						t.Fatalf("server b sees %q", o.stdout)
					}
				}
			})
			t.Run("env set through one server", func(t *testing.T) {
				if err := a.SetEnv(context.Background(), box, "MYTOKEN", "t0k", true); err != nil {
					t.Fatal(err)
				}
				o := run(t, b, box, shell.Request{Command: `echo "[$MYTOKEN]"`})
				if o.stdout != "[t0k]\n" {
					t.Fatalf("server b: %q", o.stdout)
				}
				vars, err := b.Env(context.Background(), box)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, v := range vars {
					found = found || v.Name == "MYTOKEN" && v.Secret
				}
				if !found {
					t.Fatalf("env list in server b: %+v", vars)
				}
			})
			t.Run("concurrent exports through both servers", func(t *testing.T) {
				var wg sync.WaitGroup
				for i := range 8 {
					m := a
					if i%2 == 1 {
						m = b
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						run(t, m, box, shell.Request{Command: fmt.Sprintf("export CON%d=%d; sleep 0.3", i, i)})
					}()
				}
				wg.Wait()
				for i, srv := range []*sandbox.Manager{a, b} {
					o := run(t, srv, box, shell.Request{Command: "env | grep '^CON[0-9]=' | sort | tr '\\n' ' '"})
					if o.stdout != "CON0=0 CON1=1 CON2=2 CON3=3 CON4=4 CON5=5 CON6=6 CON7=7 " {
						t.Fatalf("server %d: %q", i, o.stdout)
					}
				}
			})
			t.Run("state survives a stop of the container", func(t *testing.T) {
				run(t, a, box, shell.Request{Command: "cd /tmp/across; export SURVIVES=yes"})
				if err := rt.Stop(context.Background(), a.ContainerFor(box), 0); err != nil {
					t.Fatal(err)
				}
				o := run(t, a, box, shell.Request{Command: `pwd; echo "$SURVIVES"`})
				if o.stdout != "/tmp/across\nyes\n" || o.res.Boot.Recovered == "" {
					t.Fatalf("after a stop: %q (boot %+v)", o.stdout, o.res.Boot)
				}
				o = run(t, b, box, shell.Request{Command: `pwd; echo "$SURVIVES"`})
				if !strings.HasSuffix(o.stdout, "/tmp/across\nyes\n") {
					t.Fatalf("server b after the stop: %q", o.stdout)
				}
			})
		})
	}
}

// TestSecretSetByAnotherServerIsHidden: a secret one server sets stays
// out of the history of another server that already runs commands in the
// sandbox, whose next command loads the store but changes nothing itself.
func TestSecretSetByAnotherServerIsHidden(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			a := newManager(t, tg, prefix)
			b := newManager(t, tg, prefix)
			const box = "twoservers"
			const secret = "pw-Zq9xT4-prod-db"
			run(t, a, box, shell.Request{Command: "true"})
			run(t, b, box, shell.Request{Command: "true"}) // b adopts the sandbox
			if err := a.SetEnv(context.Background(), box, "DB_PW", secret, true); err != nil {
				t.Fatal(err)
			}
			o := run(t, b, box, shell.Request{Command: `test "$DB_PW" = ` + secret + ` && echo same`})
			if o.stdout != "same\n" {
				t.Fatalf("b does not see the variable: %q", o.stdout)
			}
			run(t, b, box, shell.Request{Command: "echo " + secret})
			h, err := b.CommandHistory(box, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(h) < 2 {
				t.Fatalf("history %+v", h)
			}
			for _, e := range h {
				if strings.Contains(e.Command, secret) {
					t.Errorf("b's history keeps a secret a set: %q", e.Command)
				}
			}
		})
	}
}
