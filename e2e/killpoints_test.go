package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/killpoint"
)

// TestKillPoints: the server killed with SIGKILL at 20 points of each of
// write_file, upload, download, sync, snapshot, restore, clone and the
// agent's installation, each followed by the next server on the same state
// directory: every file the operation touched is as it was or as the
// operation leaves it, and nothing of the operation is left behind in the
// sandbox or on the host. (SANDBOX_MCP_KILLPOINTS sets fewer points and
// SANDBOX_MCP_KILLPOINT_OPS fewer operations, for a quick look; CI runs
// all.)
func TestKillPoints(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	points := 20
	if v, err := strconv.Atoi(os.Getenv("SANDBOX_MCP_KILLPOINTS")); err == nil && v > 0 {
		points = v
	}
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
		StateDir: filepath.Join(dir, "state"), HostDir: host, Points: points, Size: 2 << 20,
		Logf: t.Logf,
	}, ops...)
	for _, r := range results {
		t.Logf("%s: %d points over %s: %d old, %d new, %d torn, %d left something", r.Op, r.Points, r.Took, r.Old, r.New, r.Torn, r.Leftovers)
		for _, f := range r.Failures {
			t.Errorf("%s: %s", r.Op, f)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}
