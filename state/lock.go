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
// timeout (0 means 2 s). It serialises repairs of the state file between
// goroutines, which each open the directory anew, and between processes.
func lockDir(dir string, timeout time.Duration) (unlock func(), err error) {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("lock state dir: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			d.Close()
			return nil, fmt.Errorf("lock state dir %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			d.Close()
			return nil, fmt.Errorf("%w (the state directory %s, for a repair; waited %s)", ErrLocked, dir, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func() {
		_ = syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
		d.Close()
	}, nil
}
