package diskguard

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A Writer stops at its limit and at the host's floor, says which, and
// writes nothing more after.
func TestWriterStops(t *testing.T) {
	const total = 100 << 30
	roomy := func(string) (int64, int64, error) { return 50 << 30, total, nil }
	var b bytes.Buffer
	w := &Writer{W: &b, Dir: "/x", Limit: 10, What: "the tar", LimitWhy: "the sandbox's 1G disk limit", Free: roomy}
	if n, err := w.Write([]byte("0123456789")); n != 10 || err != nil {
		t.Fatalf("within the limit: %d %v", n, err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrOverLimit) || !strings.Contains(err.Error(), "the tar passed 10 B, the sandbox's 1G disk limit") {
		t.Fatalf("past the limit: %v", err)
	}
	if _, err := w.Write(nil); !errors.Is(err, ErrOverLimit) || b.Len() != 10 {
		t.Fatalf("after the limit: %v, %d bytes", err, b.Len())
	}

	low := func(string) (int64, int64, error) { return Floor(total) + checkEvery/2, total, nil }
	b.Reset()
	w = &Writer{W: &b, Dir: "/state", What: "the tar", Free: low}
	if _, err := w.Write([]byte("abc")); !errors.Is(err, ErrHostFull) || !strings.Contains(err.Error(), "must stay free") || b.Len() != 0 {
		t.Fatalf("near the floor: %v, %d bytes", err, b.Len())
	}
}

// Watch ends a write another program makes once the host passes its
// floor, and says why.
func TestWatchEndsAWriteAtTheFloor(t *testing.T) {
	const total = 100 << 30
	var full atomic.Bool
	free := func(string) (int64, int64, error) {
		if full.Load() {
			return Floor(total) - 1, total, nil
		}
		return 50 << 30, total, nil
	}
	err := Watch(context.Background(), "/tmp", "the export", free, func(ctx context.Context) error {
		time.AfterFunc(50*time.Millisecond, func() { full.Store(true) })
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute): // a hang guard, not a duration
			return errors.New("not stopped")
		}
	})
	if !errors.Is(err, ErrHostFull) || !strings.Contains(err.Error(), "the export stopped") {
		t.Fatalf("got %v", err)
	}
	if err := Watch(context.Background(), "/tmp", "x", free, func(context.Context) error { return nil }); !errors.Is(err, ErrHostFull) {
		// full is still set: the first look stops it.
		t.Fatalf("a host already full: %v", err)
	}
	full.Store(false)
	if err := Watch(context.Background(), "/tmp", "x", free, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("a roomy host: %v", err)
	}
}
