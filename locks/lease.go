package locks

import (
	"context"
	"time"
)

// Lease runs a background duty in exactly one process at a time: the one
// holding the lock named key. A process that finds the lock held keeps
// trying every retry and takes the duty over when the holder dies (the
// kernel releases a dead process's lock).
//
// duty runs with a context that ends when ctx does; when duty returns, the
// lock is released and Lease returns. Lease returns when ctx ends, whether
// or not this process ever held the lock.
func (d Dir) Lease(ctx context.Context, key, purpose string, retry time.Duration, duty func(context.Context)) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h, err := d.TryLock(key, purpose)
		if err == nil {
			duty(ctx)
			h.Release()
			return
		}
		t.Reset(retry)
	}
}
