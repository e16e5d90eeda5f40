package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// TestDestroyAndRecreateOnPodman destroys one name and boots it again, 20
// times in a row, as an agent that keeps starting over does. A destroy
// removes the container and then, at once, its workspace volume, while
// the cleanup podman runs for the removed container may still be going.
// Removing that volume with --force took the volume's lock and then the
// container's, the reverse of the cleanup's order, and podman 4.3 could
// deadlock: every later call then waited out the engine timeout. Each
// cycle must succeed (an engine call that timed out fails it) and find a
// fresh workspace, so the volume really went.
func TestDestroyAndRecreateOnPodman(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Name != "podman" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}})
			t.Cleanup(m.Close)
			// 20: each cycle is about a dozen podman calls, and the suite
			// shares two cores with the others; 50 took 9 minutes there.
			const cycles = 20
			var slowest time.Duration
			for i := range cycles {
				start := time.Now()
				var so bytes.Buffer
				res, err := m.Exec(context.Background(), "again", shell.Request{
					Command: fmt.Sprintf("test ! -e /workspace/mark || echo left; echo %d > /workspace/mark; cat /workspace/mark", i),
					Stdout:  &so, Timeout: enginetest.HangGuard,
				})
				if err != nil {
					enginetest.LogIfHung(t, err.Error())
					t.Fatalf("cycle %d: boot and exec: %v", i, err)
				}
				if res.ExitCode != 0 || strings.TrimSpace(so.String()) != fmt.Sprint(i) {
					t.Fatalf("cycle %d: exit %d, output %q; want %d in a fresh workspace", i, res.ExitCode, so.String(), i)
				}
				existed, err := m.Destroy(context.Background(), "again")
				if err != nil {
					enginetest.LogIfHung(t, err.Error())
					t.Fatalf("cycle %d: destroy: %v", i, err)
				}
				if !existed {
					t.Fatalf("cycle %d: destroy found no sandbox", i)
				}
				slowest = max(slowest, time.Since(start))
			}
			vols, err := rt.(sandbox.VolumeLister).VolumeNames(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vols {
				if strings.HasPrefix(v, prefix) {
					t.Errorf("volume %s outlived its sandbox's destroy", v)
				}
			}
			t.Logf("%d cycles of boot, exec and destroy; the slowest took %v", cycles, slowest.Round(time.Millisecond))
		})
	}
}
