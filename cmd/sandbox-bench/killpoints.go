package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandbox-mcp/sandbox-mcp/internal/killpoint"
)

// killPoints is how many points each operation is killed at.
const killPoints = 20

// benchKillPoints: the server killed with SIGKILL at killPoints points of
// each operation that changes a sandbox or the host, each followed by the
// next server; counts the rounds that ended torn or left something behind.
func (b *bench) benchKillPoints() error {
	dir, err := os.MkdirTemp("", "killpoints")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	host := filepath.Join(dir, "host")
	if err := os.MkdirAll(host, 0o755); err != nil {
		return err
	}
	prefix := b.launch.prefix + "kp"
	defer sweep(b.engine, prefix)
	results, err := killpoint.Run(b.ctx, killpoint.Config{
		Bin: b.launch.bin, Args: []string{"--runtime", b.engine, "--image", b.image, "--prefix", prefix},
		StateDir: filepath.Join(dir, "state"), HostDir: host, Points: killPoints, Size: 16 << 20,
	})
	if err != nil {
		return err
	}
	torn, left, rounds := 0, 0, 0
	for _, r := range results {
		torn += r.Torn
		left += r.Leftovers
		rounds += r.Points
		fmt.Printf("%-44s %d points over %s: %d old, %d new, %d torn, %d left something\n", "  kill -9 during "+r.Op, r.Points, r.Took.Round(1e6), r.Old, r.New, r.Torn, r.Leftovers)
		for _, f := range r.Failures {
			fmt.Printf("%-44s   %s\n", "", f)
		}
	}
	report(fmt.Sprintf("kill -9 at %d points of %d operations", rounds, len(results)), fmt.Sprintf("%d torn, %d leftovers", torn, left), "", 0,
		"0 torn, 0 leftovers", torn == 0 && left == 0)
	return nil
}
