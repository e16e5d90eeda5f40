package sandbox_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestEarlyAgentHoldsNoBoot: a new allowlist sandbox starts its agent
// from its channel while the boot goes on, and neither the boot nor a
// destroy behind it waits for that agent when it never answers (an image
// whose sh hangs on it, as a sandbox can make of its own snapshot).
func TestEarlyAgentHoldsNoBoot(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Runtime != "docker" && tg.Runtime != "podman" {
			continue // channels are docker's and podman's
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			cli := func(args ...string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				cmd := exec.CommandContext(ctx, rt.Binary(), args...)
				cmd.Env = append(os.Environ(), tg.Env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s %v: %v: %s", rt.Binary(), args, err, out)
				}
			}
			// sh hangs when it is asked to run anything from the channel.
			img, build := strings.ToLower(prefix)+"-hangsh:1", prefix+"-hangsh"
			cli("run", "-d", "--name", build, tg.Image, "sleep", "600")
			t.Cleanup(func() {
				exec.Command(rt.Binary(), "rm", "-f", build).Run()
				exec.Command(rt.Binary(), "rmi", "-f", img).Run()
			})
			cli("exec", build, "dash", "-c", `rm -f /bin/sh && printf '#!/bin/dash\ncase "$*" in *`+sandbox.ChannelMount+`*) exec sleep 1000;; esac\nexec /bin/dash "$@"\n' >/bin/sh && chmod 755 /bin/sh`)
			cli("commit", build, img)
			cli("rm", "-f", build)

			ca, err := egress.LoadOrCreateCA(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, CA: ca, Resolver: &egress.HostsResolver{},
				ChannelRoot: filepath.Join(t.TempDir(), "chan"),
				Defaults:    sandbox.Profile{Image: img, Network: egress.ModeAllowlist, Allow: []string{"api.test"}}})
			t.Cleanup(m.Close)
			ctx := context.Background()
			booted := make(chan error, 1)
			go func() {
				_, _, err := m.Get(ctx, "box")
				booted <- err
			}()
			// The agent's hello gives up after 30 s: a boot or destroy
			// that waits for it takes that long, one that does not takes
			// a few seconds on a loaded machine.
			const bound = 20 * time.Second
			select {
			case err := <-booted:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(bound):
				t.Fatalf("the boot waited past %s for an agent that never answers", bound)
			}
			destroyed := make(chan error, 1)
			go func() {
				_, err := m.Destroy(ctx, "box")
				destroyed <- err
			}()
			select {
			case err := <-destroyed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(bound):
				t.Fatalf("the destroy waited past %s for an agent that never answers", bound)
			}
		})
	}
}
