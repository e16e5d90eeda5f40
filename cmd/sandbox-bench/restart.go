package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// restartRounds is how many kill-and-restart rounds the restart figure is
// the median of.
const restartRounds = 7

// benchRestart measures the first command after a server is killed with
// SIGKILL and a new one starts on the same state directory and prefix: it
// should adopt the running sandbox (one inspect and one shell open), not
// reboot it. The floor is one shell open on the engine plus a warm exec.
func (b *bench) benchRestart() error {
	const name = "restart"
	ctr := b.launch.prefix + "-" + name
	stateDir := filepath.Join(b.dir, "restart-state")
	srv, err := b.launch.start(b.ctx, stateDir)
	if err != nil {
		return err
	}
	if _, _, err := srv.call(b.ctx, "exec", map[string]any{"sandbox": name, "command": "echo booted"}); err != nil {
		srv.close()
		return err
	}
	booted, err := startedAt(b.engine, ctr)
	if err != nil {
		srv.close()
		return err
	}
	firsts, kept, err := b.killAndRestart(srv, restartCase{stateDir: stateDir, sandbox: name, ctr: ctr, booted: booted})
	if err != nil {
		return err
	}
	open, err := shellOpenMedian(b.engine, ctr, 5)
	if err != nil {
		return fmt.Errorf("restart floor: %w", err)
	}
	r, floor := median(firsts), open+b.warmP50
	report(fmt.Sprintf("first exec after SIGKILL+restart (med. of %d)", restartRounds), ms(r),
		ms(floor)+" (shell open + p50)", ratio(r, floor), "<= 1.5x", ratio(r, floor) <= 1.5)
	fmt.Printf("%-44s floor: `%s exec -i` sh answering `true` %s (median of 5) + warm exec p50 %s\n",
		"", b.engine, ms(open), us(b.warmP50))
	rounds := make([]string, len(firsts))
	for i, d := range firsts {
		rounds[i] = ms(d)
	}
	fmt.Printf("%-44s rounds: %s\n", "", strings.Join(rounds, ", "))
	report("restart: sandbox adopted, not rebooted", fmt.Sprintf("%d of %d", kept, restartRounds),
		"(StartedAt unchanged)", 0, "all", kept == restartRounds)
	return nil
}

// restartCase is the sandbox the restart rounds run against.
type restartCase struct {
	stateDir string // shared by every server of the rounds
	sandbox  string // sandbox name
	ctr      string // its container
	booted   string // the container's StartedAt when first booted
}

// killAndRestart kills srv and starts a new server on the same state
// directory restartRounds times, timing each new server's first
// `exec true` in the sandbox from the call (after the handshake). It
// returns those times and how many rounds left the container's StartedAt
// unchanged. The last server is closed before it returns.
func (b *bench) killAndRestart(srv *benchServer, rc restartCase) ([]time.Duration, int, error) {
	var firsts []time.Duration
	kept := 0
	for i := range restartRounds {
		if err := srv.kill(); err != nil {
			return nil, 0, err
		}
		var err error
		if srv, err = b.launch.start(b.ctx, rc.stateDir); err != nil {
			return nil, 0, fmt.Errorf("restart %d: %w", i+1, err)
		}
		took, err := srv.execTrue(b.ctx, rc.sandbox)
		if err != nil {
			srv.close()
			return nil, 0, fmt.Errorf("restart %d: first exec: %w", i+1, err)
		}
		firsts = append(firsts, took)
		now, err := startedAt(b.engine, rc.ctr)
		if err != nil {
			srv.close()
			return nil, 0, fmt.Errorf("restart %d: %w", i+1, err)
		}
		if now == rc.booted {
			kept++
		}
	}
	srv.close()
	return firsts, kept, nil
}
