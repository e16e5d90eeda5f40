package sandbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// fetch is a command that prints what http://$1/ answers, or the error.
// Its timeout ends a hang; it is no speed check.
const fetch = `python3 -c 'import sys, urllib.request
try: print(urllib.request.urlopen("http://" + sys.argv[1] + "/hello.txt", timeout=120).read().decode().strip())
except Exception as e: print("failed:", e)' `

// TestNetworkOnEngine: two sandboxes reach each other by name where the
// engine makes networks (by address elsewhere), a sandbox with network
// "none" reaches neither, and NetworkInfo says so; an unknown sandbox is
// an error.
func TestNetworkOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
				Profiles: map[string]sandbox.Profile{"iso": {Network: "none"}}})
			t.Cleanup(m.Close)
			ctx := context.Background()
			if o := run(t, m, "web", shell.Request{Command: "mkdir -p /tmp/www && echo hi-from-web >/tmp/www/hello.txt && cd /tmp/www && " +
				"(nohup python3 -m http.server 8000 >/dev/null 2>&1 &)"}); o.res.ExitCode != 0 {
				t.Fatalf("web: %+v", o)
			}
			enginetest.WaitFor(t, "the web server to answer in its own sandbox", func() error {
				if o := run(t, m, "web", shell.Request{Command: fetch + "127.0.0.1:8000"}); o.stdout != "hi-from-web\n" {
					return fmt.Errorf("%q", o.stdout)
				}
				return nil
			})
			run(t, m, "client", shell.Request{Command: "true"})
			run(t, m, "iso", shell.Request{Command: "true"})
			rep, err := m.NetworkInfo(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			by := map[string]sandbox.SandboxNet{}
			for _, sn := range rep.Sandboxes {
				by[sn.Name] = sn
			}
			web, client, iso := by["web"], by["client"], by["iso"]
			if len(rep.Sandboxes) != 3 || !iso.Isolated || len(iso.ReachesByName)+len(iso.ReachesByAddress) != 0 {
				t.Fatalf("report: %+v", rep)
			}
			if !slices.Equal(client.ReachesByName, []string{"web"}) || !slices.Contains(web.Names, "web") || web.Networks[0].IP == "" {
				t.Fatalf("by name: %+v", rep)
			}
			for _, target := range []string{"web:8000", web.Networks[0].IP + ":8000"} {
				if o := run(t, m, "client", shell.Request{Command: fetch + target}); o.stdout != "hi-from-web\n" {
					t.Fatalf("client -> %s: %+v\n%s", target, o, rep.Platform)
				}
				if o := run(t, m, "iso", shell.Request{Command: fetch + target}); !strings.HasPrefix(o.stdout, "failed:") {
					t.Fatalf("the isolated sandbox reached %s: %+v", target, o)
				}
			}
			if _, named := rt.(sandbox.Networker); !named {
				// Kept hosts entries: a destroyed sandbox leaves them.
				if _, err := m.Destroy(ctx, "web"); err != nil {
					t.Fatal(err)
				}
				if _, err := m.NetworkInfo(ctx, ""); err != nil {
					t.Fatal(err)
				}
				if o := run(t, m, "client", shell.Request{Command: "grep -c ' web ' /etc/hosts"}); o.stdout != "0\n" {
					t.Fatalf("the destroyed sandbox is still in the client's hosts: %+v", o)
				}
			}
			one, err := m.NetworkInfo(ctx, "client")
			if err != nil || len(one.Sandboxes) != 1 || one.Sandboxes[0].Name != "client" {
				t.Fatalf("one sandbox: %+v %v", one, err)
			}
			if _, err := m.NetworkInfo(ctx, "nosuch"); err == nil {
				t.Fatal("an unknown sandbox gave no error")
			}
		})
	}
}
