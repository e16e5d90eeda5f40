package main

import (
	"fmt"
	"time"
)

// benchPython: a call on a warm Python session (a small expression)
// against a warm exec of true on the same sandbox, one of each in turn.
func (b *bench) benchPython() error {
	python := func() error {
		res, _, err := b.call("python", map[string]any{"code": "n = 6 * 7\nn"})
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("python: %v", res.Content)
		}
		return nil
	}
	if err := python(); err != nil { // the session's start
		return err
	}
	lat, err := timeInterleaved(b.n,
		func() error { _, err := b.main.execTrue(b.ctx, "default"); return err },
		python)
	if err != nil {
		return err
	}
	ex, py := pct(lat[0], 0.5), pct(lat[1], 0.5)
	report("python on a warm session, p50", us(py), us(ex)+" (warm exec true)", float64(py)/float64(ex), "<= 2x", py <= 2*ex)
	fmt.Printf("%-44s p95 python %s, exec %s\n", "", us(pct(lat[1], 0.95)), us(pct(lat[0], 0.95)))
	start := time.Now()
	if _, _, err := b.call("python", map[string]any{"code": "1", "session": "bench-cold"}); err != nil {
		return err
	}
	fmt.Printf("%-44s a new session's first call: %s\n", "", ms(time.Since(start)))
	return nil
}
