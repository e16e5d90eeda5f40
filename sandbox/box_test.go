package sandbox

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// TestSandboxEndJoinsOwnedWork: work started with Go sees its context end
// when the sandbox ends, end waits for it, and nothing starts afterwards.
func TestSandboxEndJoinsOwnedWork(t *testing.T) {
	sb := newSandbox("x", "ctr", Profile{}, 0, shell.NewPool(nil, shell.Options{}, 1))
	var finished atomic.Bool
	started := make(chan struct{})
	if !sb.Go(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		finished.Store(true)
	}) {
		t.Fatal("Go refused work on a live sandbox")
	}
	<-started
	sb.end(endedByReset)
	if !finished.Load() {
		t.Fatal("end returned before the owned work did")
	}
	if sb.Ended() != endedByReset {
		t.Fatalf("Ended() = %q", sb.Ended())
	}
	if sb.Go(func(context.Context) { t.Error("work ran on an ended sandbox") }) {
		t.Fatal("Go accepted work on an ended sandbox")
	}
	sb.end(endedByDestroy) // once only: the first reason stays
	if sb.Ended() != endedByReset {
		t.Fatalf("Ended() after a second end = %q", sb.Ended())
	}
}
