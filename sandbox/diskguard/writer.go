package diskguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
)

// ErrOverLimit marks a host write stopped at its byte limit.
var ErrOverLimit = errors.New("over its limit")

// ErrHostFull marks a host write stopped at the free-space floor.
var ErrHostFull = errors.New("the host's disk is too full")

// checkEvery is how many bytes a Writer passes between looks at the
// host's free space; each look asks for that much room above the floor.
const checkEvery = 16 << 20

// Writer passes writes on to W while at most Limit bytes have passed (0:
// no limit) and the filesystem holding Dir keeps Floor free. It is for
// host writes whose bytes come from a sandbox (a workspace tar, a
// download): they stop with a clear error instead of filling the host.
type Writer struct {
	W     io.Writer
	Dir   string
	Limit int64
	// What names the write in errors ("the workspace tar").
	What string
	// LimitWhy says where Limit comes from ("the sandbox's 1G disk limit
	// and tar's overhead").
	LimitWhy string
	// Free reports the free and total bytes of the filesystem holding
	// dir; default statfs.
	Free func(dir string) (free, total int64, err error)

	n    int64
	next int64
	err  error
}

// N is the number of bytes passed on.
func (w *Writer) N() int64 { return w.n }

// Write passes p on whole, or returns the error that stops the write (and
// every later one).
func (w *Writer) Write(p []byte) (int, error) {
	if err := w.check(int64(len(p))); err != nil {
		return 0, err
	}
	n, err := w.W.Write(p)
	w.n += int64(n)
	if err != nil {
		w.err = err
	}
	return n, err
}

// Reserve counts n bytes the host spends on the write's behalf without
// passing them through (a directory made, a note kept), against the limit
// and the floor alike.
func (w *Writer) Reserve(n int64) error {
	if err := w.check(n); err != nil {
		return err
	}
	w.n += n
	return nil
}

// check says whether n more bytes may go, and keeps the first refusal.
func (w *Writer) check(n int64) error {
	if w.err != nil {
		return w.err
	}
	if w.Limit > 0 && w.n+n > w.Limit {
		w.err = fmt.Errorf("%s passed %s, %s: %w", w.What, units.Human(w.Limit), w.LimitWhy, ErrOverLimit)
		return w.err
	}
	if w.n+n > w.next {
		// Room for these bytes and every one until the next look.
		if err := belowFloor(w.Free, w.Dir, n+checkEvery, w.What+" stopped at "+units.Human(w.n)); err != nil {
			w.err = err
			return err
		}
		w.next = w.n + n + checkEvery
	}
	return nil
}

// belowFloor says, as ErrHostFull, when the filesystem holding dir (as
// free reports it; nil: statfs) would keep less than Floor free after need
// more bytes; what names the write in the error. A filesystem that cannot
// be measured is not held up.
func belowFloor(free func(dir string) (free, total int64, err error), dir string, need int64, what string) error {
	if free == nil {
		free = statfs
	}
	f, total, err := free(dir)
	if err != nil || f-need >= Floor(total) {
		return nil
	}
	return fmt.Errorf("%s: the disk holding %s has %s free, and %s must stay free for the host: %w",
		what, dir, units.Human(f), units.Human(Floor(total)), ErrHostFull)
}

// Err is the error that stopped the writer, if any.
func (w *Writer) Err() error { return w.err }

// FreeSpace reports the free bytes (for an unprivileged user) and total
// bytes of the filesystem holding dir.
func FreeSpace(dir string) (free, total int64, err error) { return statfs(dir) }

// watchEvery is how often Watch looks at the host's free space.
const watchEvery = 200 * time.Millisecond

// Watch runs f, a host write another program makes (an engine's export),
// with a context that ends as soon as the filesystem holding dir has less
// than Floor free; it then returns an error that says so (ErrHostFull)
// whatever f returned. free nil: statfs.
func Watch(ctx context.Context, dir, what string, free func(dir string) (free, total int64, err error), f func(ctx context.Context) error) error {
	full := func() error { return belowFloor(free, dir, 0, what+" stopped") }
	if err := full(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(watchEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := full(); err != nil {
				cancel(err)
				return
			}
		}
	}()
	err := f(ctx)
	if cause := context.Cause(ctx); errors.Is(cause, ErrHostFull) {
		return cause
	}
	return err
}
