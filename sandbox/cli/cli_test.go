package cli

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func TestRunnerBoundsAStuckCLI(t *testing.T) {
	r := &Runner{Binary: "sleep", Timeout: 200 * time.Millisecond}
	start := time.Now()
	_, err := r.Output(context.Background(), nil, "10")
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("took %v", took)
	}
	var ee *sandbox.EngineError
	if !errors.As(err, &ee) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer") || ee.Hint == "" {
		t.Fatalf("%v", err)
	}
	// A caller's own deadline wins over the default.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.Output(ctx, nil, "0.5"); err != nil {
		t.Fatalf("with the caller's deadline: %v", err)
	}
}

func TestRunnerClassifiesAndKeepsStderr(t *testing.T) {
	r := &Runner{Binary: "sh", Classify: func(code int, stderr string) (error, string) {
		if code == 3 && strings.Contains(stderr, "gone") {
			return sandbox.ErrNotFound, "look elsewhere"
		}
		return nil, ""
	}}
	_, err := r.Output(context.Background(), nil, "-c", "echo gone >&2; exit 3")
	if !errors.Is(err, sandbox.ErrNotFound) || sandbox.HintOf(err) != "look elsewhere" || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("%v", err)
	}
	_, err = (&Runner{Binary: "/nonexistent/cli", MissingHint: "install it"}).Output(context.Background(), nil)
	if !errors.Is(err, sandbox.ErrEngineMissing) || sandbox.HintOf(err) != "install it" {
		t.Fatalf("%v", err)
	}
}

func TestCancelKillsTheWholeGroup(t *testing.T) {
	dir := t.TempDir()
	r := &Runner{Binary: "sh"}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := r.Command(ctx, "-c", "sleep 300 & echo $! > "+dir+"/child; wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for i := 0; i < 300 && pid == 0; i++ {
		time.Sleep(10 * time.Millisecond)
		b, _ := os.ReadFile(dir + "/child")
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid == 0 {
		t.Fatal("the child never started")
	}
	cancel()
	_ = cmd.Wait()
	for i := 0; i < 300; i++ {
		if syscall.Kill(pid, 0) != nil {
			return // gone
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("child %d of a canceled CLI run is still alive", pid)
}
