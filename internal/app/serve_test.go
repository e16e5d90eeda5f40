package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestSignalDuringBootExitsPromptly: a server stopped (Ctrl-C, SIGTERM)
// while its first boot is under way does not wait for the boot: it says
// the engine finishes it and the next server adopts the sandbox, and
// returns. The engine here is a podman whose `run` never ends.
func TestSignalDuringBootExitsPromptly(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	script := `#!/bin/sh
echo "$*" >> ` + calls + `
case "$1" in
version) echo 4.3.1 ;;
run) echo $$ > ` + calls + `.run; exec /bin/sleep 600 ;;
container|inspect) echo "Error: no such container" >&2; exit 125 ;;
*) echo "[]" ;;
esac
`
	podman := filepath.Join(dir, "podman")
	if err := os.WriteFile(podman, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Runtime, cfg.EnginePath = "podman", podman
	cfg.StateDir = filepath.Join(t.TempDir(), "state")
	cfg.Prefix = "smtsig"

	// Capture the server's log (it goes to stderr).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldStderr := os.Stderr
	os.Stderr = w
	logged := make(chan string)
	go func() { b, _ := io.ReadAll(r); logged <- string(b) }()

	ctx, cancel := context.WithCancel(context.Background())
	in, inW := io.Pipe()
	defer inW.Close()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, cfg, in, io.Discard) }()
	enginetest.WaitFor(t, "the boot to reach the engine's run", func() error {
		if _, err := os.Stat(calls + ".run"); err != nil {
			b, _ := os.ReadFile(calls)
			return fmt.Errorf("no run yet; calls:\n%s", b)
		}
		return nil
	})
	t.Cleanup(func() {
		if b, err := os.ReadFile(calls + ".run"); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	cancel() // as SIGINT does
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(enginetest.HangGuard):
		t.Fatal("the server waited for the boot")
	}
	os.Stderr = oldStderr
	w.Close()
	if log := <-logged; !strings.Contains(log, "exiting while sandboxes boot") || !strings.Contains(log, "sandboxes=default") {
		t.Errorf("the log does not say why the server exits during the boot:\n%s", log)
	}
}
