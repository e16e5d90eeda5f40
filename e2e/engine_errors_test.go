package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/app"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// engineOutsidePath returns where the server finds the CLI name with no
// engine on PATH: the directories it searches after PATH (app.EngineDirs,
// where a Mac keeps Apple's container and Homebrew's podman), or "". A
// test of a missing engine cannot run where one is found so.
func engineOutsidePath(name string) string {
	for _, d := range app.EngineDirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// skipIfEngineOutsidePath skips t when the server would find the CLI name
// with PATH emptied.
func skipIfEngineOutsidePath(t *testing.T, name string) {
	t.Helper()
	if p := engineOutsidePath(name); p != "" {
		t.Skipf("the server finds %s even without PATH (as it must for an app started from the macOS Dock): no missing %s to report on this host", p, name)
	}
}

// connectRaw starts the binary with args and env and returns a go-sdk session.
func connectRaw(t *testing.T, env []string, args ...string) *mcp.ClientSession {
	t.Helper()
	cs, _ := connectKillable(t, env, args...)
	return cs
}

// connectKillable is connectRaw that also returns the server process.
func connectKillable(t *testing.T, env []string, args ...string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &prefixWriter{t: t}
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "0"}, nil)
	// The connect includes the server's start: a hang guard, not seconds.
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, cmd
}

// callText calls a tool and returns its text and whether it is an error.
func callText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callGuard)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		enginetest.LogIfExpired(t, ctx)
		t.Fatalf("%s: protocol error %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		enginetest.LogIfHung(t, b.String())
	}
	return b.String(), res.IsError
}

// TestEngineNotStarted: a docker CLI whose daemon is not running gives a
// tool error that says what to start, and the server stays up.
func TestEngineNotStarted(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("needs the docker CLI on PATH (the daemon must not be reachable at the test's DOCKER_HOST)")
	}
	cs := connectRaw(t, []string{"DOCKER_HOST=unix:///nonexistent/docker.sock"},
		"serve", "--runtime", "docker", "--state-dir", t.TempDir(), "--no-boot-default", "--prefix", "smtnostart")
	text, isErr := callText(t, cs, "exec", map[string]any{"command": "true"})
	if !isErr || !strings.Contains(text, "Docker daemon") || !strings.Contains(text, "try:") {
		t.Fatalf("exec: %v %q", isErr, text)
	}
	text, isErr = callText(t, cs, "health", map[string]any{})
	if !isErr || !strings.Contains(text, "engine:") {
		t.Fatalf("health: %v %q", isErr, text)
	}
}

// TestEngineMissing: no engine CLI at all gives a tool error saying what to install.
func TestEngineMissing(t *testing.T) {
	skipIfEngineOutsidePath(t, "podman")
	cs := connectRaw(t, []string{"PATH=/nonexistent"},
		"serve", "--runtime", "podman", "--state-dir", t.TempDir(), "--no-boot-default", "--prefix", "smtmissing")
	text, isErr := callText(t, cs, "exec", map[string]any{"command": "true"})
	if !isErr || !strings.Contains(text, "install podman") {
		t.Fatalf("exec: %v %q", isErr, text)
	}
}

// TestNoEngineAuto: in auto mode with no engine on PATH, the server still
// completes initialize, lists its tools, and each tool says what to do. (On
// a machine with an engine in /usr/local/bin, auto finds it there, as a
// macOS GUI app with launchd's PATH would; its daemon is then unreachable
// here, which the tools also explain.)
func TestNoEngineAuto(t *testing.T) {
	// A docker found there is unreachable at the DOCKER_HOST below; a
	// podman, or Apple's container (auto's first choice on macOS), works.
	skipIfEngineOutsidePath(t, "podman")
	if runtime.GOOS == "darwin" {
		skipIfEngineOutsidePath(t, "container")
	}
	cs := connectRaw(t, []string{"PATH=/nonexistent", "DOCKER_HOST=unix:///nonexistent/docker.sock"},
		"serve", "--state-dir", t.TempDir(), "--prefix", "smtnoengine")
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) < 10 {
		t.Fatalf("tools/list without an engine: %v", err)
	}
	text, isErr := callText(t, cs, "exec", map[string]any{"command": "true"})
	if !isErr || !strings.Contains(text, "try:") && !strings.Contains(text, "install") {
		t.Fatalf("exec: %v %q", isErr, text)
	}
}

// TestMCPGoClient drives the binary with mcp-go's own stdio client.
func TestMCPGoClient(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	prefix := enginetest.Prefix(t, tg.New())
	c, err := mcpclient.NewStdioMCPClient(binary, append(os.Environ(), tg.Env...), "serve", "--runtime", tg.Runtime, "--image", tg.Image,
		"--prefix", prefix, "--state-dir", t.TempDir(), "--no-boot-default")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The initialize includes the server's start: a hang guard, not seconds.
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	defer cancel()
	init := mcpgo.InitializeRequest{}
	init.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go-e2e", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	// The exec boots the sandbox: a guard of its own, from here.
	ctx, cancel = context.WithTimeout(context.Background(), callGuard)
	defer cancel()
	req := mcpgo.CallToolRequest{}
	req.Params.Name = "exec"
	req.Params.Arguments = map[string]any{"command": "echo from-mcp-go"}
	res, err := c.CallTool(ctx, req)
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	if got := mcpgo.GetTextFromContent(res.Content[0]); !strings.Contains(got, "from-mcp-go\n") {
		t.Fatalf("%q", got)
	}
}

// TestHistorySurvivesRestart: a second server on the same state directory
// sees the first one's history (written in batches, off the exec path).
func TestHistorySurvivesRestart(t *testing.T) {
	enginetest.RunFirstAndKubernetes(t, testHistorySurvivesRestart)
}

// testHistorySurvivesRestart is TestHistorySurvivesRestart on one target.
func testHistorySurvivesRestart(t *testing.T, tg enginetest.Target) {
	prefix := enginetest.Prefix(t, tg.New())
	stateDir := t.TempDir()
	args := []string{"serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", stateDir, "--no-boot-default"}
	first := connectRaw(t, tg.Env, args...)
	if text, isErr := callText(t, first, "exec", map[string]any{"command": "echo persisted-entry"}); isErr {
		t.Fatal(text)
	}
	first.Close() // a clean exit flushes history
	second := connectRaw(t, tg.Env, args...)
	text, isErr := callText(t, second, "history", map[string]any{})
	if isErr || !strings.Contains(text, "echo persisted-entry") {
		t.Fatalf("history after restart: %v %q", isErr, text)
	}
	info, err := os.Stat(stateDir + "/state.db")
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", info, err)
	}
}
