package e2e

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// runCLI runs the binary with args and the target's environment, and
// returns what it printed and whether it exited 0.
func runCLI(t *testing.T, tg enginetest.Target, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), tg.Env...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestDoctorAndPruneCLI: doctor passes on a working engine and prints the
// set-up to paste with the flags it was given; prune --dry-run names the
// workspace of a sandbox whose container was removed behind the server's
// back and removes nothing, and prune removes it and leaves a live
// sandbox's workspace alone.
func TestDoctorAndPruneCLI(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	stateDir := t.TempDir()
	flags := []string{"--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", stateDir}

	out, ok := runCLI(t, tg, append([]string{"doctor"}, flags...)...)
	if !ok || !strings.Contains(out, "engine:   ok") || !strings.Contains(out, "image:    ok") ||
		!strings.Contains(out, "claude mcp add --scope user") || !strings.Contains(out, "--prefix "+prefix) {
		t.Fatalf("doctor:\n%s", out)
	}

	s := startServer(t, tg, prefix, "")
	for _, box := range []string{"keep", "gone"} {
		if r := s.call(t, "exec", map[string]any{"command": "true", "sandbox": box}); r.isError {
			t.Fatal(r.text)
		}
	}
	if err := rt.Remove(t.Context(), sandbox.ContainerName(prefix, "gone")); err != nil {
		t.Fatal(err)
	}
	gone, keep := prefix+"-ws-gone", prefix+"-ws-keep"
	volumes := func() []string {
		names, err := rt.(sandbox.VolumeLister).VolumeNames(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return names
	}

	out, ok = runCLI(t, tg, append([]string{"prune", "--dry-run"}, flags...)...)
	if !ok || !strings.Contains(out, "would remove volume "+gone) || strings.Contains(out, keep) {
		t.Fatalf("prune --dry-run:\n%s", out)
	}
	if !slices.Contains(volumes(), gone) {
		t.Fatal("the dry run removed a volume")
	}
	out, ok = runCLI(t, tg, append([]string{"prune"}, flags...)...)
	if !ok || !strings.Contains(out, "removed volume "+gone) {
		t.Fatalf("prune:\n%s", out)
	}
	if vols := volumes(); slices.Contains(vols, gone) || !slices.Contains(vols, keep) {
		t.Fatalf("volumes after prune: %v", vols)
	}
	if r := s.call(t, "exec", map[string]any{"command": "echo still", "sandbox": "keep"}); r.str("stdout") != "still\n" {
		t.Fatalf("the kept sandbox after prune: %+v", r)
	}
}
