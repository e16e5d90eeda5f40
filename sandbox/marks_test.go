package sandbox

import (
	"context"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// deadHost is a machine where no shell starts (a container that is gone,
// or whose process table is full): it counts the tries.
type deadHost struct{ tries atomic.Int32 }

func (h *deadHost) Command(ctx context.Context) proc.Process {
	h.tries.Add(1)
	return proc.FromCmd(exec.CommandContext(ctx, "false"))
}

func (h *deadHost) KillRun(context.Context, int, string, bool) error { return nil }

// TestFailedMarksBackOff: while a sandbox is in use and its activity mark
// fails, the mark is tried again after 1 s, then after twice as long each
// time; once the sandbox is no longer in use, a failed mark is the last
// until its next use (a sandbox whose container is gone costs no try a
// second).
func TestFailedMarksBackOff(t *testing.T) {
	m := NewManager(nil, Config{Prefix: "smtmarks", LockDir: t.TempDir()})
	t.Cleanup(m.Close)
	host := &deadHost{}
	sb := newSandbox("x", "smtmarks-x", Profile{}, time.Hour, shell.NewPool(host, shell.Options{}, 1))
	t.Cleanup(func() { sb.end(endedByDestroy) })
	m.mu.Lock()
	m.slotLocked("x").sb = sb
	m.mu.Unlock()

	// In use: a command runs throughout.
	done := sb.busy()
	// Each failed mark doubles the wait before the next: by the time the
	// wait is 4 s, three marks have failed, each one try to start a shell.
	deadline := time.Now().Add(2 * time.Minute) // a hang, not a pace
	for time.Duration(sb.markWait.Load()) < 4*time.Second {
		if time.Now().After(deadline) {
			t.Fatalf("the wait after failed marks is %s after %d tries", time.Duration(sb.markWait.Load()), host.tries.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := host.tries.Load(); n != 3 {
		t.Fatalf("%d tries to start a shell by the time the wait reached 4 s, want 3 (1 s, 2 s, 4 s)", n)
	}
	if sb.lastTouched.Load() != 0 {
		t.Fatal("a failed mark was recorded as a mark")
	}

	// No longer in use, last used long ago: the next failed mark is the
	// last until the sandbox is used again.
	done()
	used := time.Now().Add(-time.Hour).UnixNano()
	sb.lastUsed.Store(used)
	for sb.lastTouched.Load() != used {
		if time.Now().After(deadline) {
			t.Fatalf("the marks of a sandbox no longer in use did not stop (%d tries)", host.tries.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := host.tries.Load()
	time.Sleep(3 * time.Second) // the window watched: three ticks, no try in it
	if n := host.tries.Load(); n != before {
		t.Fatalf("%d more tries to mark a sandbox no longer in use", n-before)
	}
}
