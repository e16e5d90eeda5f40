// Package locks serialises work across sandbox-mcp server processes with
// lock files in the state directory.
//
// Several servers run at once for one user (an MCP client starts one per
// session), so "one at a time" must hold between processes, not only
// between goroutines. A lock here is an exclusive flock(2) on a file
// <dir>/<key>.lock; the kernel drops it when its holder exits, however it
// exits, so a killed server never leaves a lock behind. The file holds the
// holder's pid and purpose, for error messages and for `doctor` ("shared"
// in place of the pid for a lock held shared, whose holders are several).
//
// Two uses:
//   - Lock waits for the lock (a lifecycle change of one sandbox: boot,
//     destroy, reset) and is released when the change is done (LockShared
//     takes it beside other readers: restores from one snapshot, which
//     its deletion waits for);
//   - TryLock takes it only if free, and is held for as long as a process
//     does a background duty (a lease): whoever holds it does the duty, the
//     others try again from time to time and take over when the holder dies.
//
// Files are created 0600 in a 0700 directory and never deleted while in use
// (deleting a locked file would let a second process lock a new inode).
package locks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrHeld is returned by TryLock when another holder has the lock.
var ErrHeld = errors.New("held by another holder")

// pollEvery is how often Lock retries a lock held elsewhere.
const pollEvery = 25 * time.Millisecond

// Dir is a directory of lock files. The zero Dir (no path) hands out locks
// that serialise nothing across processes: for a Manager without a state
// directory, where in-process locking is all there is.
type Dir struct {
	Path string
}

// Held is a lock this process holds. Release it exactly once.
type Held struct {
	f   *os.File
	key string
}

// Holder describes who holds a lock, as written in its file.
type Holder struct {
	PID     int
	Purpose string
	// Shared: the lock is (or was last) held shared, by one process or
	// more, each holding it for Purpose; PID is 0, for no one of them is
	// the holder.
	Shared bool
}

// sharedPID is what a shared holder writes in place of its pid.
const sharedPID = "shared"

func (h Holder) String() string {
	if h.Shared {
		if h.Purpose == "" {
			return "one or more processes"
		}
		return "one or more processes, to " + h.Purpose
	}
	if h.PID == 0 {
		return "an unknown process"
	}
	s := "pid " + strconv.Itoa(h.PID)
	if h.Purpose != "" {
		s += " (" + h.Purpose + ")"
	}
	return s
}

func validKey(key string) error {
	if key == "" || strings.ContainsAny(key, "/\x00") || key == "." || key == ".." {
		return fmt.Errorf("locks: invalid key %q", key)
	}
	return nil
}

func (d Dir) path(key string) string { return filepath.Join(d.Path, key+".lock") }

func (d Dir) open(key string) (*os.File, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return nil, fmt.Errorf("lock dir: %w", err)
	}
	f, err := os.OpenFile(d.path(key), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", key, err)
	}
	return f, nil
}

// TryLock takes the lock if it is free; otherwise it returns an error
// wrapping ErrHeld. purpose is recorded for whoever finds it held.
func (d Dir) TryLock(key, purpose string) (*Held, error) {
	if d.Path == "" {
		return &Held{key: key}, validKey(key)
	}
	f, err := d.open(key)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s %w: %s", key, ErrHeld, d.Holder(key))
		}
		return nil, fmt.Errorf("lock %s: %w", key, err)
	}
	record(f, strconv.Itoa(os.Getpid()), purpose)
	return &Held{f: f, key: key}, nil
}

// Lock waits until it holds the lock or ctx ends.
func (d Dir) Lock(ctx context.Context, key, purpose string) (*Held, error) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		h, err := d.TryLock(key, purpose)
		if !errors.Is(err, ErrHeld) {
			return h, err
		}
		t.Reset(pollEvery)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s (held by %s): %w", key, d.Holder(key), ctx.Err())
		case <-t.C:
		}
	}
}

// LockShared waits until it holds the lock shared or ctx ends: any number
// of holders share it, and TryLock and Lock (exclusive) wait for, or are
// refused by, all of them. A shared holder records its purpose too (the
// file names the last one).
func (d Dir) LockShared(ctx context.Context, key, purpose string) (*Held, error) {
	if d.Path == "" {
		return &Held{key: key}, validKey(key)
	}
	f, err := d.open(key)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			// Holders side by side would overwrite each other's pid:
			// the file says the lock is shared, and for what.
			record(f, sharedPID, purpose)
			return &Held{f: f, key: key}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", key, err)
		}
		t.Reset(pollEvery)
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for %s (held by %s): %w", key, d.Holder(key), ctx.Err())
		case <-t.C:
		}
	}
}

// Holder reads who holds (or last held) a lock.
func (d Dir) Holder(key string) Holder {
	if d.Path == "" || validKey(key) != nil {
		return Holder{}
	}
	b, err := os.ReadFile(d.path(key))
	if err != nil {
		return Holder{}
	}
	pid, purpose, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	if pid == sharedPID {
		return Holder{Purpose: purpose, Shared: true}
	}
	n, _ := strconv.Atoi(pid)
	return Holder{PID: n, Purpose: purpose}
}

// HeldBy reports who holds a lock now, and whether anyone does: Holder
// alone names the last holder too. (It takes the lock shared for a moment
// to find out, so a TryLock at that instant fails as if it were held.)
func (d Dir) HeldBy(key string) (Holder, bool) {
	if d.Path == "" || validKey(key) != nil {
		return Holder{}, false
	}
	f, err := os.OpenFile(d.path(key), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return Holder{}, false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return Holder{}, false
	}
	return d.Holder(key), true
}

// record writes "<pid> <purpose>" into a lock file this process holds
// (pid is sharedPID for a shared holder).
func record(f *os.File, pid, purpose string) {
	line := pid + " " + strings.Map(func(r rune) rune {
		if r < ' ' {
			return ' '
		}
		return r
	}, purpose) + "\n"
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(line), 0)
	}
}

// Remove deletes key's lock file, for a key no one will lock again (a
// name used once, whose holder is done with it): a later TryLock of the
// key would make a new file and get it. A missing file is not an error.
func (d Dir) Remove(key string) {
	if d.Path == "" || validKey(key) != nil {
		return
	}
	_ = os.Remove(d.path(key))
}

// Release drops the lock.
func (h *Held) Release() {
	if h == nil || h.f == nil {
		return
	}
	_ = unix.Flock(int(h.f.Fd()), unix.LOCK_UN)
	_ = h.f.Close()
	h.f = nil
}
