package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// TestStateFileAbuse: the state file locked by a stuck process, deleted,
// or truncated while a server runs never blocks or breaks exec; the tools
// that need the file say what is wrong, and recover once it is fixed.
func TestStateFileAbuse(t *testing.T) {
	enginetest.QuietDisk(t) // it asserts what the state file does
	tg := enginetest.Targets(t)[0]
	prefix := enginetest.Prefix(t, tg.New())
	stateDir := t.TempDir()
	db := filepath.Join(stateDir, "state.db")
	cs := connectRaw(t, tg.Env, "serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix,
		"--state-dir", stateDir, "--no-boot-default")
	call := func(tool string, args map[string]any) (string, bool) { return callText(t, cs, tool, args) }
	if text, isErr := call("bg", map[string]any{"name": "one", "command": "sleep 100"}); isErr {
		t.Fatal(text)
	}

	// Locked by another process: exec is not held up; bg reports the lock.
	// The server takes the lock only for a moment at a time; a hang guard
	// bounds the wait for it.
	held, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: enginetest.HangGuard})
	if err != nil {
		t.Fatal(err)
	}
	if text, isErr := call("exec", map[string]any{"command": "echo fine"}); isErr || !strings.Contains(text, "fine") {
		t.Fatalf("exec with the state locked: %v %q", isErr, text)
	}
	text, isErr := call("bg", map[string]any{"name": "two", "command": "sleep 100"})
	if !isErr || !strings.Contains(text, "locked") {
		t.Fatalf("bg with the state locked: %v %q", isErr, text)
	}
	held.Close()
	if text, isErr := call("logs", map[string]any{"name": "one"}); isErr || !strings.Contains(text, "running") {
		t.Fatalf("logs once the lock is gone: %v %q", isErr, text)
	}

	// Deleted: a new file is made; the records in it are gone, which logs says.
	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	if text, isErr := call("logs", map[string]any{"name": "one"}); !isErr || !strings.Contains(text, "no such job") {
		t.Fatalf("logs after the state file was deleted: %v %q", isErr, text)
	}
	if text, isErr := call("bg", map[string]any{"name": "three", "command": "echo three"}); isErr {
		t.Fatalf("bg after the state file was deleted: %q", text)
	}
	if info, err := os.Stat(db); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("recreated state file: %v %v", info, err)
	}

	// Truncated mid-file: it is moved aside, never overwritten, and a fresh
	// one is used. Cut just past the first page: whether a cut at half
	// leaves every page the next operation reads depends on the layout
	// the earlier writes left, and then nothing is wrong to find.
	if err := os.Truncate(db, int64(os.Getpagesize())+512); err != nil {
		t.Fatal(err)
	}
	// The call that found it says so, and what was recovered.
	if text, isErr := call("bg", map[string]any{"name": "four", "command": "echo four"}); isErr ||
		!strings.Contains(text, "[sandbox-mcp: the state file was damaged") || !strings.Contains(text, "doctor") {
		t.Fatalf("bg after truncation: %q", text)
	}
	moved, _ := filepath.Glob(db + ".corrupt-*[0-9]Z")
	reports, _ := filepath.Glob(db + ".corrupt-*.report")
	if len(moved) != 1 || len(reports) != 1 {
		t.Fatalf("corrupt file not moved aside with its report: %v %v", moved, reports)
	}
	doctor := exec.Command(binary, "doctor", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", stateDir)
	doctor.Env = append(os.Environ(), tg.Env...)
	out, err := doctor.CombinedOutput()
	if !strings.Contains(string(out), "repaired: the state file was damaged") {
		t.Errorf("doctor does not name the repair (%v):\n%s", err, out)
	}
	if text, _ := call("jobs", map[string]any{}); strings.Contains(text, "state file was damaged") {
		t.Errorf("told twice: %q", text)
	}
	if text, isErr := call("exec", map[string]any{"command": "echo still"}); isErr || !strings.Contains(text, "still") {
		t.Fatalf("exec after truncation: %v %q", isErr, text)
	}
}

// TestReconcileForgetsLostSandboxes: job records of a sandbox whose
// container was removed by hand are dropped by the next server, and the
// sandbox comes back empty on first use.
func TestReconcileForgetsLostSandboxes(t *testing.T) {
	enginetest.RunFirstAndKubernetes(t, testReconcileForgetsLostSandboxes)
}

// testReconcileForgetsLostSandboxes is TestReconcileForgetsLostSandboxes on one target.
func testReconcileForgetsLostSandboxes(t *testing.T, tg enginetest.Target) {
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	stateDir := t.TempDir()
	args := []string{"serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", stateDir, "--no-boot-default"}
	first := connectRaw(t, tg.Env, args...)
	if text, isErr := callText(t, first, "bg", map[string]any{"sandbox": "gone", "name": "j", "command": "sleep 100"}); isErr {
		t.Fatal(text)
	}
	first.Close()
	st, err := state.New(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.Sandboxes()
	if err != nil || len(recs) != 1 || recs[0].Name != "gone" || !strings.Contains(string(recs[0].Profile), tg.Image) || recs[0].IdleTTL != "30m0s" {
		t.Fatalf("sandbox record: %+v %v", recs, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	defer cancel()
	if err := rt.Remove(ctx, sandbox.ContainerName(prefix, "gone")); err != nil {
		t.Fatal(err)
	}
	second := connectRaw(t, tg.Env, args...)
	enginetest.WaitFor(t, "the jobs of the removed sandbox to be dropped", func() error {
		text, isErr := callText(t, second, "jobs", map[string]any{"sandbox": "gone"})
		if isErr || !strings.Contains(text, "no background jobs") {
			return fmt.Errorf("jobs: %v %q", isErr, text)
		}
		return nil
	})
	enginetest.WaitFor(t, "the record of the removed sandbox to be dropped", func() error {
		if recs, err := st.Sandboxes(); err != nil || len(recs) != 0 {
			return fmt.Errorf("records %+v %v", recs, err)
		}
		return nil
	})
}
