package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// spareRounds is how many new names the spare section times.
const spareRounds = 7

// spareSettle is how long after its container runs a spare is taken.
const spareSettle = 2 * time.Second

// benchSpares: a new name's first command when a warm spare is ready (the
// server renames it instead of booting), egress open and allowlist,
// against the engine's own run -d + exec measured in the same run.
func (b *bench) benchSpares() error {
	var floors []time.Duration
	for i := range 3 {
		floors = append(floors, engineFirst(b.engine, b.image, b.launch.prefix+"-sfloor"+fmt.Sprint(i)))
	}
	fl := median(floors)
	for _, mode := range []string{"open", "allowlist"} {
		s, err := b.launch.start(b.ctx, filepath.Join(b.dir, "state-spares-"+mode), "--spares", "1", "--network", mode)
		if err != nil {
			return err
		}
		var takes []time.Duration
		for i := range spareRounds {
			if err := waitSpare(b.ctx, b.engine, b.launch.prefix); err != nil {
				s.close()
				return err
			}
			// Ready: the server inspects a spare once it runs, and an
			// allowlist spare's agent starts then; a spare waits far longer
			// than this for its name in use.
			time.Sleep(spareSettle)
			took, err := s.execTrue(b.ctx, fmt.Sprintf("spare-%s-%d", mode, i))
			if err != nil {
				s.close()
				return err
			}
			takes = append(takes, took)
		}
		s.close()
		p50 := median(takes)
		report(fmt.Sprintf("new name, spare ready, egress %s (p50 of %d)", mode, spareRounds), ms(p50), ms(fl)+" (run -d + exec)", ratio(p50, fl), "<= 150 ms", p50 <= 150*time.Millisecond)
	}
	return nil
}

// waitSpare waits until prefix has a running spare that no name took.
func waitSpare(ctx context.Context, engine, prefix string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		out, err := exec.CommandContext(ctx, engine, "ps", "--filter", "label=io.sandbox-mcp.owner="+prefix,
			"--filter", "label=io.sandbox-mcp.role=spare", "--format", "{{.Names}}").Output()
		if err == nil {
			for _, n := range strings.Fields(string(out)) {
				if strings.HasPrefix(n, prefix+"_spare_") {
					return nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no spare of %s within 2 minutes", prefix)
}
