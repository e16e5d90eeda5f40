package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestStats: stats sees a CPU burner, a file written to /workspace and the
// sandbox's processes, on every engine (Apple's through its engine stats).
func TestStats(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			s := startServer(t, tg, prefix, "")
			r := s.call(t, "exec", map[string]any{"command": "nohup sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 & echo $!; " +
				"head -c 5000000 /dev/urandom >/workspace/stats.bin"})
			pid := strings.TrimSpace(r.str("stdout"))
			if r.isError || pid == "" {
				t.Fatalf("start burner: %+v", r)
			}

			// A rootless engine on cgroup v1 gives the sandbox no cgroup:
			// what it would read is the host's, so stats says unknown and why.
			if r = s.call(t, "stats", map[string]any{}); strings.Contains(r.str("note"), "no cgroup of its own") {
				s.call(t, "exec", map[string]any{"command": "kill " + pid})
				if r.isError || r.num("cpu_percent") != -1 || r.num("memory_bytes") != -1 || r.num("pids") < 2 ||
					r.num("disk_workspace_used_bytes") < 5_000_000 || !strings.Contains(r.text, "cpu and memory use unknown") {
					t.Fatalf("stats without a cgroup of the sandbox's own: %+v", r)
				}
				return
			}
			// On a loaded host one 0.5 s sample may find the burner starved;
			// it burns on, so a later sample must see it.
			enginetest.WaitFor(t, "a stats sample that sees the CPU burner", func() error {
				start := time.Now()
				r = s.call(t, "stats", map[string]any{})
				t.Logf("stats took %v: %s", time.Since(start).Round(time.Millisecond), r.text)
				if !r.isError && r.num("cpu_percent") <= 20 {
					return fmt.Errorf("cpu %v%%", r.num("cpu_percent"))
				}
				return nil
			})
			if k := s.call(t, "exec", map[string]any{"command": "kill " + pid}); k.isError {
				t.Errorf("kill the burner: %s", k.text)
			}
			if r.isError {
				t.Fatal(r.text)
			}
			if r.num("cpu_percent") <= 20 || r.num("memory_bytes") <= 0 || r.num("pids") < 2 ||
				r.num("disk_workspace_used_bytes") < 5_000_000 || !strings.Contains(r.text, "cpu") {
				t.Fatalf("%+v", r)
			}
			wantSource := "vm"
			if tg.Runtime == "container" {
				wantSource = "engine+vm"
			}
			if r.str("source") != wantSource || r.str("sandbox") != "default" {
				t.Fatalf("source %q, sandbox %q", r.str("source"), r.str("sandbox"))
			}

			// With the burner gone, the sandbox is idle again.
			start := time.Now()
			r = s.call(t, "stats", map[string]any{})
			t.Logf("stats took %v: %s", time.Since(start).Round(time.Millisecond), r.text)
			if r.isError || r.num("cpu_percent") < 0 || r.num("cpu_percent") > 50 {
				t.Fatalf("after kill: %+v", r)
			}

			r = s.call(t, "stats", map[string]any{"sandbox": "../x"})
			if !r.isError || !strings.Contains(r.text, `"sandbox" must be a name`) {
				t.Fatalf("invalid name: %+v", r)
			}
		})
	}
}
