package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// appleTarget returns the first target on Apple's container CLI, the
// stand-in or the real one (a Mac), or skips.
func appleTarget(t *testing.T) enginetest.Target {
	t.Helper()
	if tgs := enginetest.TargetsOf(t, "container"); len(tgs) > 0 {
		return tgs[0]
	}
	t.Skipf("needs Apple's container CLI: add container (the stand-in) or %s to %s (`make test` does)", enginetest.RealContainer, enginetest.EnvRuntimes)
	return enginetest.Target{}
}

// standInTarget returns the stand-in container target, or skips: for
// tests that use its switches (a simulated system stop, an argv log).
func standInTarget(t *testing.T, why string) enginetest.Target {
	t.Helper()
	for _, tg := range enginetest.TargetsOf(t, "container") {
		if tg.StandIn {
			return tg
		}
	}
	t.Skipf("needs the container stand-in (%s): add container to %s (`make test` does)", why, enginetest.EnvRuntimes)
	return enginetest.Target{}
}

// TestContainerMissing: --runtime container without Apple's CLI on PATH
// answers with where to get it, and the server stays up.
func TestContainerMissing(t *testing.T) {
	skipIfEngineOutsidePath(t, "container") // /usr/local/bin/container on a Mac
	cs := connectRaw(t, []string{"PATH=/nonexistent"},
		"serve", "--runtime", "container", "--state-dir", t.TempDir(), "--no-boot-default", "--prefix", "smtnocontainer")
	for tool, args := range map[string]map[string]any{"exec": {"command": "true"}, "health": {}} {
		text, isErr := callText(t, cs, tool, args)
		if !isErr || !strings.Contains(text, "github.com/apple/container/releases") {
			t.Fatalf("%s: %v %q", tool, isErr, text)
		}
	}
}

// TestContainerSystemNotStarted: with Apple's system service stopped,
// tools answer with the exact command to run; once it is run, the same
// server works without a restart.
func TestContainerSystemNotStarted(t *testing.T) {
	// Stopping the real system service would stop every VM on the Mac.
	tg := standInTarget(t, "it stops the container system service, which the stand-in simulates per test")
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "system-stopped"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := append([]string{enginetest.EnvStandInHome + "=" + home}, tg.Env...)
	prefix := enginetest.Prefix(t, tg.New())
	cs := connectRaw(t, env, "serve", "--runtime", "container", "--image", tg.Image, "--prefix", prefix,
		"--state-dir", t.TempDir(), "--no-boot-default")
	const want = "container system start --enable-kernel-install"
	for tool, args := range map[string]map[string]any{"exec": {"command": "true"}, "health": {}, "list_all": {}} {
		text, isErr := callText(t, cs, tool, args)
		if !isErr || !strings.Contains(text, want) {
			t.Fatalf("%s with the system stopped: %v %q", tool, isErr, text)
		}
	}
	// Run what the hint says, with the same CLI the server uses.
	start := exec.Command(enginetest.StandIn(t), strings.Fields(want)[1:]...)
	start.Env = append(os.Environ(), env...)
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v %s", want, err, out)
	}
	text, isErr := callText(t, cs, "exec", map[string]any{"command": "echo up"})
	if isErr || !strings.Contains(text, "up\n") {
		t.Fatalf("exec after system start: %v %q", isErr, text)
	}
}

// TestContainerNamesNeverReachTheCLI: names Apple rejects (leading dot,
// over 63 bytes) fail in the server, and no argv carrying them reaches the
// CLI (the stand-in logs every argv; Apple's own CLI keeps no such log);
// the longest allowed name works, on Apple's own CLI too.
func TestContainerNamesNeverReachTheCLI(t *testing.T) {
	tg := appleTarget(t)
	logFile := filepath.Join(t.TempDir(), "argv.log")
	env := tg.Env
	if tg.StandIn {
		env = enginetest.WithArgvLog(tg.Env, logFile)
	}
	prefix := enginetest.Prefix(t, tg.New())
	cs := connectRaw(t, env, "serve", "--runtime", "container", "--image", tg.Image, "--prefix", prefix,
		"--state-dir", t.TempDir(), "--no-boot-default")
	long := strings.Repeat("a", 64)
	for _, bad := range []string{".hidden", long, "a/b", "-rm", "x y"} {
		text, isErr := callText(t, cs, "exec", map[string]any{"command": "true", "sandbox": bad})
		if !isErr || !strings.Contains(text, `"sandbox" must be a name`) {
			t.Fatalf("exec in %q: %v %q", bad, isErr, text)
		}
	}
	longest := strings.Repeat("b", 63)
	text, isErr := callText(t, cs, "exec", map[string]any{"command": "echo ok", "sandbox": longest})
	if isErr || !strings.Contains(text, "ok\n") {
		t.Fatalf("exec in a 63-byte name: %v %q", isErr, text)
	}
	if tg.StandIn {
		log, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(log), ".hidden") || strings.Contains(string(log), long) || !strings.Contains(string(log), `"run"`) {
			t.Fatalf("argv log:\n%s", log)
		}
	}
	if _, isErr := callText(t, cs, "destroy", map[string]any{"sandbox": longest}); isErr {
		t.Fatal("destroy")
	}
}
