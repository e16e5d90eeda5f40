package main

import (
	"fmt"
	"os/exec"
	"time"
)

// benchSnapshots: a snapshot of a sandbox with 200 MB of changed files
// (outside /workspace) against `commit` of the same container; restore
// to the first command against a cold boot of the base image; a clone
// against a snapshot plus a cold boot.
func (b *bench) benchSnapshots() error {
	const box = "snapbench"
	if _, err := b.main.execTrue(b.ctx, box); err != nil {
		return err
	}
	defer b.call("destroy", map[string]any{"sandbox": box})
	if _, _, err := b.call("exec", map[string]any{"sandbox": box, "timeout": 600, "command": "mkdir -p /opt/fixture && for i in $(seq 200); do head -c 1048576 /dev/urandom >/opt/fixture/f$i; done && sync"}); err != nil {
		return err
	}
	ctr := b.launch.prefix + "-" + box
	floorRef := b.launch.prefix + "-floor:commit"
	commit, err := timeCmd(b.engine, "commit", ctr, floorRef)
	if err != nil {
		return err
	}
	_ = exec.Command(b.engine, "rmi", floorRef).Run()
	_, snap, err := b.call("snapshot", map[string]any{"sandbox": box, "snapshot_name": "bench1"})
	if err != nil {
		return err
	}
	defer b.call("delete_snapshot", map[string]any{"snapshot_name": "bench1"})
	report("snapshot, 200 MB changed", ms(snap), ms(commit)+" ("+b.engine+" commit)", ratio(snap, commit), "<= 1.5x", ratio(snap, commit) <= 1.5)

	// Restore and cold boot, interleaved, five times each: medians.
	var colds, restores []time.Duration
	for i := range 5 {
		name := fmt.Sprintf("coldboot%d", i)
		c, err := b.main.execTrue(b.ctx, name)
		if err != nil {
			return err
		}
		b.call("destroy", map[string]any{"sandbox": name})
		colds = append(colds, c)
		start := time.Now()
		if _, _, err := b.call("restore", map[string]any{"sandbox": box, "snapshot_name": "bench1"}); err != nil {
			return err
		}
		if _, err := b.main.execTrue(b.ctx, box); err != nil {
			return err
		}
		restores = append(restores, time.Since(start))
	}
	cold, restore := median(colds), median(restores)
	report("restore to first command (median of 5)", ms(restore), ms(cold)+" (cold boot of the base image)", ratio(restore, cold), "<= 1.3x", ratio(restore, cold) <= 1.3)

	start := time.Now()
	if _, _, err := b.call("clone", map[string]any{"source": box, "target": "snapclone"}); err != nil {
		return err
	}
	defer b.call("destroy", map[string]any{"sandbox": "snapclone"})
	clone := time.Since(start)
	report("clone of that sandbox", ms(clone), ms(snap+cold)+" (snapshot + cold boot)", ratio(clone, snap+cold), "<= 2x", ratio(clone, snap+cold) <= 2)
	return nil
}
