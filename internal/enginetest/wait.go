package enginetest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// HangGuard bounds a test's wait for a condition. It is no speed check: a
// wait ends as soon as its condition holds, so the guard only decides how
// long a run that hangs takes to fail. Minutes, not seconds: on a loaded
// 2-core machine one boot through the Apple stand-in has taken 36 s, and a
// podman that stalls on a lock recovers within a few minutes.
const HangGuard = 3 * time.Minute

// pollEvery bounds the pause between two looks at a condition; the first
// looks come sooner, so a condition that holds at once costs little.
const pollEvery = time.Second

// WaitFor polls cond until it returns nil, and fails t with what and cond's
// last error once HangGuard has passed, with the host's engine processes
// logged (a wait that outlives its guard may be one on a stalled engine).
//
// The guard counts from this call: call it once whatever must come first
// (a boot, a first command) has returned, not before, so that a slow start
// does not eat the wait's time.
func WaitFor(t testing.TB, what string, cond func() error) {
	t.Helper()
	if err := Poll(context.Background(), HangGuard, cond); err != nil {
		t.Fatalf("waiting for %s: %v\nengine processes now:\n%s", what, err, EngineProcesses())
	}
}

// Poll calls cond until it returns nil, for at most guard, pausing between
// looks (50 ms at first, growing to a second). It returns nil once cond
// holds, else an error carrying cond's last error. It does not fail a test,
// so a goroutine other than the test's may use it.
func Poll(ctx context.Context, guard time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	pause := 50 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still not so after %v: %w", guard, err)
		case <-time.After(pause):
		}
		pause = min(2*pause, pollEvery)
	}
}
