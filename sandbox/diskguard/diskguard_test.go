package diskguard

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is a directory whose usage the test sets.
type fake struct {
	used  atomic.Int64
	free  atomic.Int64
	kills atomic.Int32
	mu    sync.Mutex
	msgs  []string
}

func (f *fake) start(limit int64) *Guard {
	return Start(Options{
		Sandbox: "box",
		Targets: []Target{{What: "/workspace", Dir: "/x", Limit: limit, LimitText: "1G"}},
		Every:   time.Millisecond,
		Usage:   func(string) (int64, error) { return f.used.Load(), nil },
		Free:    func(string) (int64, int64, error) { return f.free.Load(), 100 << 30, nil },
		Kill:    func(context.Context) error { f.kills.Add(1); return nil },
		Report: func(m string) {
			f.mu.Lock()
			f.msgs = append(f.msgs, m)
			f.mu.Unlock()
		},
	})
}

// waitFor polls cond with a generous hang guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestGuardStopsWritersOnceOverLimit(t *testing.T) {
	f := &fake{}
	f.free.Store(50 << 30)
	f.used.Store(100 << 20)
	g := f.start(1 << 30)
	defer g.Close()
	f.used.Store(1<<30 + 1)
	waitFor(t, "a kill", func() bool { return f.kills.Load() == 1 })
	f.mu.Lock()
	msg := f.msgs[0]
	f.mu.Unlock()
	if !strings.Contains(msg, "sandbox box passed its disk limit of 1G") || !strings.Contains(msg, "remove files to continue") {
		t.Fatalf("message %q", msg)
	}
	// Still over but not growing (the user runs rm): no more kills.
	time.Sleep(20 * time.Millisecond)
	if n := f.kills.Load(); n != 1 {
		t.Fatalf("%d kills while not growing", n)
	}
	// Growing again past the slack: stopped again.
	f.used.Store(1<<30 + 2*slack)
	waitFor(t, "a second kill", func() bool { return f.kills.Load() == 2 })
	// Back under the limit, then over again.
	f.used.Store(10 << 20)
	time.Sleep(20 * time.Millisecond)
	f.used.Store(1<<30 + 1)
	waitFor(t, "a third kill", func() bool { return f.kills.Load() == 3 })
}

// TestGuardCountsSlackFromAfterTheKill: a writer that goes on writing
// while it is being stopped (more than the slack, at a fast write rate and
// a slow engine exec) is stopped once; the user's next command (rm) is not
// stopped again.
func TestGuardCountsSlackFromAfterTheKill(t *testing.T) {
	f := &fake{}
	f.free.Store(50 << 30)
	f.used.Store(100 << 20)
	g := Start(Options{
		Sandbox: "box",
		Targets: []Target{{What: "/workspace", Dir: "/x", Limit: 1 << 30, LimitText: "1G"}},
		Every:   time.Millisecond,
		Usage:   func(string) (int64, error) { return f.used.Load(), nil },
		Free:    func(string) (int64, int64, error) { return f.free.Load(), 100 << 30, nil },
		Kill: func(context.Context) error {
			f.kills.Add(1)
			f.used.Add(3 * slack) // written while the kill ran
			return nil
		},
		Report: func(string) {},
	})
	defer g.Close()
	f.used.Store(1<<30 + 1)
	waitFor(t, "a kill", func() bool { return f.kills.Load() >= 1 })
	time.Sleep(20 * time.Millisecond)
	if n := f.kills.Load(); n != 1 {
		t.Fatalf("%d kills for one writer", n)
	}
}

func TestGuardKeepsHostFloor(t *testing.T) {
	f := &fake{}
	f.free.Store(1 << 30) // below the 5 GiB floor of a 100 GiB disk
	f.used.Store(10 << 20)
	g := f.start(20 << 30)
	defer g.Close()
	time.Sleep(20 * time.Millisecond)
	if f.kills.Load() != 0 {
		t.Fatal("killed a sandbox that is not growing")
	}
	f.used.Store(20 << 20)
	waitFor(t, "a kill", func() bool { return f.kills.Load() >= 1 })
	f.mu.Lock()
	defer f.mu.Unlock()
	if !strings.Contains(f.msgs[0], "below its floor") {
		t.Fatalf("message %q", f.msgs[0])
	}
}

func TestFloor(t *testing.T) {
	if Floor(10<<30) != 2<<30 || Floor(1000<<30) != 50<<30 {
		t.Fatal(Floor(10<<30), Floor(1000<<30))
	}
}

func TestDirUsage(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = 1
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
		t.Fatal(err)
	}
	n, err := DirUsage(dir)
	if err != nil || n < 1<<20 || n > 2<<20 {
		t.Fatalf("usage %d, %v (want about 1 MiB: a hard link counts once)", n, err)
	}
}

func TestCloseJoins(t *testing.T) {
	f := &fake{}
	g := f.start(1 << 30)
	g.Close()
	g.Close() // twice is fine
	select {
	case <-g.done:
	default:
		t.Fatal("goroutine still running after Close")
	}
}

func TestNextPollComesSoonerNearTheLimit(t *testing.T) {
	const lo, hi = 50 * time.Millisecond, time.Second
	for _, c := range []struct {
		name  string
		grown int64
		dt    time.Duration
		left  int64
		want  time.Duration
	}{
		{"idle", 0, time.Second, 1 << 30, hi},
		{"slow writer, far away", 1 << 20, time.Second, 1 << 30, hi},
		{"1 GB/s, 1 GB left", 1 << 30, time.Second, 1 << 30, 500 * time.Millisecond},
		{"1 GB/s, 200 MB left", 1 << 30, time.Second, 200 << 20, 97656250 * time.Nanosecond},
		{"2 GB/s, 10 MB left", 2 << 30, time.Second, 10 << 20, lo},
		{"over the limit", 1 << 30, time.Second, -5, hi},
		{"no time passed", 1 << 20, 0, 1 << 30, hi},
	} {
		if got := nextPoll(c.grown, c.dt, c.left, lo, hi); got != c.want {
			t.Errorf("%s: nextPoll = %v, want %v", c.name, got, c.want)
		}
	}
}
