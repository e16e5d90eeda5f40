package main

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"
)

// pairCalls is how many `exec true` calls each server makes, alone and
// then both at once.
const pairCalls = 200

// benchPair measures two server processes on the same state directory and
// prefix (two MCP client sessions) running commands in the same sandbox at
// the same time, against one of them alone in the same run.
func (b *bench) benchPair() error {
	const name = "pair"
	stateDir := filepath.Join(b.dir, "pair-state")
	var srvs [2]*benchServer
	for i := range srvs {
		srv, err := b.launch.start(b.ctx, stateDir)
		if err != nil {
			return fmt.Errorf("pair: server %d: %w", i+1, err)
		}
		defer srv.close()
		// The first boots the sandbox, the second adopts it; then both are warm.
		if _, err := srv.execTrueN(b.ctx, name, 20); err != nil {
			return fmt.Errorf("pair: server %d warm-up: %w", i+1, err)
		}
		srvs[i] = srv
	}
	lone, err := srvs[0].execTrueN(b.ctx, name, pairCalls)
	if err != nil {
		return fmt.Errorf("pair: lone server: %w", err)
	}
	loneP50 := median(lone)
	lats, failed := runPair(b, srvs, name)
	floor := us(loneP50) + " (lone server p50)"
	for i, lat := range lats {
		what := fmt.Sprintf("two servers at once: server %d p50", i+1)
		if len(lat) == 0 {
			report(what, "no call succeeded", floor, 0, "<= 2x", false)
			continue
		}
		p := median(lat)
		report(what, us(p), floor, ratio(p, loneP50), "<= 2x", ratio(p, loneP50) <= 2)
	}
	total := len(srvs) * pairCalls
	report("two servers at once: calls that succeed", fmt.Sprintf("%d of %d", total-len(failed), total), "", 0, "all", len(failed) == 0)
	for _, err := range failed[:min(len(failed), 3)] {
		fmt.Printf("%-44s %v\n", "", err)
	}
	return nil
}

// runPair has each server make pairCalls sequential `exec true` calls in
// sandbox name, both servers at once, and returns each server's call
// times and every failure.
func runPair(b *bench, srvs [2]*benchServer, name string) ([2][]time.Duration, []error) {
	var (
		lats   [2][]time.Duration
		mu     sync.Mutex
		failed []error
		wg     sync.WaitGroup
	)
	gate := make(chan struct{})
	for i, srv := range srvs {
		wg.Go(func() {
			<-gate
			for range pairCalls {
				took, err := srv.execTrue(b.ctx, name)
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Errorf("server %d: %w", i+1, err))
					mu.Unlock()
					continue
				}
				lats[i] = append(lats[i], took)
			}
		})
	}
	close(gate)
	wg.Wait()
	return lats, failed
}
