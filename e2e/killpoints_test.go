package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/killpoint"
)

// TestKillPoints: the server killed with SIGKILL at 6 points of each of
// write_file, upload, download, sync, snapshot, restore, clone and the
// agent's installation, each followed by the next server on the same state
// directory: every file the operation touched is as it was or as the
// operation leaves it, and nothing of the operation is left behind in the
// sandbox or on the host. Each run places its kills at a random phase of
// their slots, so that runs together try instants one run does not; the
// phase is logged. SANDBOX_MCP_KILLPOINTS sets more or fewer points,
// SANDBOX_MCP_KILLPOINT_PHASE (0 to 1) repeats a run's phase, and
// SANDBOX_MCP_KILLPOINT_OPS names fewer operations.
func TestKillPoints(t *testing.T) {
	runBeside(t)
	tg := enginetest.Targets(t)[0]
	points := 6
	if v, err := strconv.Atoi(os.Getenv("SANDBOX_MCP_KILLPOINTS")); err == nil && v > 0 {
		points = v
	}
	phase := 0.05 + 0.9*rand.Float64()
	if v, err := strconv.ParseFloat(os.Getenv("SANDBOX_MCP_KILLPOINT_PHASE"), 64); err == nil && v > 0 && v < 1 {
		phase = v
	}
	t.Logf("%d points per operation at phase %.3f (SANDBOX_MCP_KILLPOINT_PHASE=%.3f repeats it)", points, phase, phase)
	prefix := enginetest.Prefix(t, tg.New())
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	if err := os.MkdirAll(host, 0o755); err != nil {
		t.Fatal(err)
	}
	var ops []string
	if v := os.Getenv("SANDBOX_MCP_KILLPOINT_OPS"); v != "" {
		ops = strings.Split(v, ",")
	}
	results, err := killpoint.Run(context.Background(), killpoint.Config{
		Bin: binary, Args: []string{"--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix}, Env: tg.Env,
		StateDir: filepath.Join(dir, "state"), HostDir: host, Points: points, Phase: phase, Size: 2 << 20,
		Logf: t.Logf,
	}, ops...)
	var summary []string
	for _, r := range results {
		t.Logf("%s: %d points over %s: %d old, %d new, %d torn, %d left something", r.Op, r.Points, r.Took, r.Old, r.New, r.Torn, r.Leftovers)
		for _, f := range r.Failures {
			t.Logf("%s: %s", r.Op, f)
		}
		for _, l := range r.Summary {
			summary = append(summary, r.Op+": "+l)
		}
	}
	// Last, without the servers' logs (above), so that a report that
	// keeps only the end of the output still says what failed.
	if len(summary) > 0 {
		t.Errorf("%d rounds failed (phase %.3f):\n%s", len(summary), phase, strings.Join(summary, "\n"))
	}
	if err != nil {
		t.Fatal(err)
	}
}
