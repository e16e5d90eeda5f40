package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// Leak test sizes: calls before the first reading, calls between readings,
// and how much each of the server's figures may grow.
const (
	leakWarmup         = 50
	leakCalls          = 1000
	leakFDSlack        = 5
	leakGoroutineSlack = 10
)

// serverStats is the `server` part of health's structured result.
type serverStats struct {
	PID        int `json:"pid"`
	Goroutines int `json:"goroutines"`
	OpenFDs    int `json:"open_fds"`
}

// TestNoLeaks: a thousand commands leave the server with the descriptors
// and goroutines it had after warming up (each command borrows a shell and
// its pipes, and must give them back).
func TestNoLeaks(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	prefix := enginetest.Prefix(t, tg.New())
	s := &server{cs: connectRaw(t, tg.Env, "serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix,
		"--state-dir", t.TempDir(), "--no-boot-default")}
	execChecked(t, s, leakWarmup)
	before := healthStats(t, s)
	if before.OpenFDs < 0 {
		t.Skip("the server cannot count its descriptors here (no /proc/self/fd)")
	}
	execChecked(t, s, leakCalls)
	after := healthStats(t, s)
	t.Logf("after %d calls: fds %d -> %d, goroutines %d -> %d", leakCalls,
		before.OpenFDs, after.OpenFDs, before.Goroutines, after.Goroutines)
	if d := after.OpenFDs - before.OpenFDs; d > leakFDSlack {
		t.Errorf("open fds grew by %d (%d -> %d) over %d calls; allowed %d", d, before.OpenFDs, after.OpenFDs, leakCalls, leakFDSlack)
	}
	if d := after.Goroutines - before.Goroutines; d > leakGoroutineSlack {
		t.Errorf("goroutines grew by %d (%d -> %d) over %d calls; allowed %d", d, before.Goroutines, after.Goroutines, leakCalls, leakGoroutineSlack)
	}
}

// execChecked runs n sequential commands that each print a fresh random
// number plus one (shell arithmetic: the image's sh may have no $RANDOM),
// and checks each answer exactly.
func execChecked(t *testing.T, s *server, n int) {
	t.Helper()
	for i := range n {
		v := rand.Int32N(1 << 30)
		r := s.call(t, "exec", map[string]any{"command": fmt.Sprintf("echo $((%d + 1))", v)})
		if want := fmt.Sprintf("%d\n", v+1); r.isError || r.num("exit_code") != 0 || r.str("stdout") != want {
			t.Fatalf("call %d: stdout %q, want %q: %s", i, r.str("stdout"), want, r.text)
		}
	}
}

// healthStats calls health and returns its `server` figures.
func healthStats(t *testing.T, s *server) serverStats {
	t.Helper()
	r := s.call(t, "health", map[string]any{})
	if r.isError || !strings.Contains(r.text, "server: pid ") {
		t.Fatalf("health: %s", r.text)
	}
	var st serverStats
	b, err := json.Marshal(r.data["server"])
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil || r.data["server"] == nil {
		t.Fatalf("health: no server figures in %v (%v)", r.data, err)
	}
	return st
}
