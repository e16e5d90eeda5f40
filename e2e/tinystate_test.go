package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestStateOnATinyDisk: a state directory on a 5 MB tmpfs. Commands run;
// a large output is not saved there, and the result says so; a snapshot
// is refused for the host's room, saying so; with the disk full, a call
// that must write state works or fails with the cause, and nothing else
// breaks; once there is room again all works.
func TestStateOnATinyDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; this test runs in CI as root")
	}
	tg := enginetest.Targets(t)[0]
	prefix := enginetest.Prefix(t, tg.New())
	stateDir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=5m,mode=0700", "tmpfs", stateDir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", stateDir).Run() })
	cs := connectRaw(t, tg.Env, "serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix,
		"--state-dir", stateDir, "--no-boot-default", "--toolsets", "all")
	call := func(tool string, args map[string]any) (string, bool) { return callText(t, cs, tool, args) }

	if text, isErr := call("exec", map[string]any{"command": "echo hi"}); isErr || !strings.Contains(text, "hi") {
		t.Fatalf("exec: %q", text)
	}
	text, isErr := call("exec", map[string]any{"command": "head -c 20000000 /dev/zero | tr '\\0' x", "max_output": 2000})
	if isErr || !strings.Contains(text, "not saved") {
		t.Errorf("a large output: %v %q", isErr, text[:min(len(text), 2000)])
	}
	if text, isErr := call("bg", map[string]any{"name": "one", "command": "sleep 100"}); isErr {
		t.Fatalf("bg: %q", text)
	}
	if text, isErr := call("snapshot", map[string]any{"snapshot_name": "s1"}); !isErr || !strings.Contains(text, "free") {
		t.Errorf("a snapshot on a 5 MB state disk: %v %q", isErr, text)
	}

	// Full: what must write state fails with the cause; commands run on.
	filler := filepath.Join(stateDir, "filler")
	_ = exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=64k").Run()
	// The state file may have room inside it for a record; if not, the
	// call says why.
	if text, isErr := call("bg", map[string]any{"name": "two", "command": "sleep 100"}); isErr && !strings.Contains(strings.ToLower(text), "no space") {
		t.Errorf("bg with the state disk full: %q", text)
	}
	if text, isErr := call("exec", map[string]any{"command": "echo still"}); isErr || !strings.Contains(text, "still") {
		t.Errorf("exec with the state disk full: %v %q", isErr, text)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if text, isErr := call("bg", map[string]any{"name": "three", "command": "sleep 100"}); isErr {
		t.Errorf("bg once there is room again: %q", text)
	}
	if text, isErr := call("jobs", map[string]any{}); isErr || !strings.Contains(text, "one") || !strings.Contains(text, "three") {
		t.Errorf("jobs: %q", text)
	}
}
