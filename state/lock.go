package state

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockDir takes an exclusive lock on the directory dir (a flock on the
// directory itself, so no lock file is left behind), waiting up to
// timeout. It serialises repairs of the state file between goroutines,
// which each open the directory anew, and between processes. Waiting too
// long is an error wrapping ErrLocked; a directory that cannot be locked
// at all gives another error.
func lockDir(dir string, timeout time.Duration) (unlock func(), err error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock state dir: %w", err)
	}
	if err := flockWait(d, syscall.LOCK_EX, timeout); err != nil {
		d.Close()
		return nil, fmt.Errorf("the state directory %s, for a repair: %w", dir, err)
	}
	return func() {
		_ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
		d.Close()
	}, nil
}

// flockWait takes a flock of kind how (LOCK_SH or LOCK_EX) on f, waiting
// up to timeout; waiting too long is an error wrapping ErrLocked.
func flockWait(f *os.File, how int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR):
			return fmt.Errorf("flock: %w", err)
		case time.Now().After(deadline):
			return fmt.Errorf("%w (waited %s)", ErrLocked, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
