package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestTwoServersShareLifecycleAndSecrets drives two real server processes
// on one state directory, as two MCP client sessions do: a secret set
// through A is used but never shown through B, and a destroy through B
// cuts A's running command short with a result that says so.
func TestTwoServersShareLifecycleAndSecrets(t *testing.T) {
	enginetest.RunFirstAndKubernetes(t, testTwoServersShareLifecycleAndSecrets)
}

// testTwoServersShareLifecycleAndSecrets is TestTwoServersShareLifecycleAndSecrets on one target.
func testTwoServersShareLifecycleAndSecrets(t *testing.T, tg enginetest.Target) {
	enginetest.QuietDisk(t) // history lives in the state file
	prefix := enginetest.Prefix(t, tg.New())
	stateDir := t.TempDir()
	args := []string{"serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", stateDir, "--no-boot-default"}
	a := connectRaw(t, tg.Env, args...)
	b := connectRaw(t, tg.Env, args...)
	const secret = "sk-live-4242abcdabcd4242"
	if text, isErr := callText(t, a, "env", map[string]any{"action": "set", "key": "API_KEY", "value": secret, "secret": true, "sandbox": "two"}); isErr {
		t.Fatal(text)
	}
	if text, isErr := callText(t, b, "exec", map[string]any{"command": `test "$API_KEY" = ` + secret + ` && echo same`, "sandbox": "two"}); isErr || !strings.Contains(text, "same") {
		t.Fatalf("b's command does not see a's variable: %q", text)
	}
	text, isErr := callText(t, b, "env", map[string]any{"sandbox": "two"})
	if isErr || strings.Contains(text, secret) || !strings.Contains(text, "API_KEY=*** (secret)") {
		t.Fatalf("b's env listing: %q", text)
	}
	// History is flushed in batches: each server's history is read once
	// it shows b's command (or the secret, which fails at once).
	for _, srv := range []struct {
		name string
		cs   *mcp.ClientSession
	}{{"b", b}, {"a", a}} {
		name := srv.name
		var text string
		enginetest.WaitFor(t, name+"'s history to show b's command", func() error {
			text, _ = callText(t, srv.cs, "history", map[string]any{"sandbox": "two"})
			if !strings.Contains(text, "&& echo same") && !strings.Contains(text, secret) {
				return fmt.Errorf("history: %q", text)
			}
			return nil
		})
		if strings.Contains(text, secret) {
			t.Fatalf("%s's history shows the secret: %q", name, text)
		}
	}

	// A runs a long command; B destroys the sandbox meanwhile.
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := a.CallTool(context.Background(), &mcp.CallToolParams{Name: "exec",
			Arguments: map[string]any{"command": "sleep 984", "timeout": 120, "sandbox": "two"}})
		if err != nil {
			res = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "protocol error: " + err.Error()}}}
		}
		done <- res
	}()
	enginetest.WaitFor(t, "a's command to run", func() error {
		text, _ := callText(t, b, "exec", map[string]any{"command": "ps -eo args | grep -c '^sleep 984' || true", "sandbox": "two"})
		if !strings.Contains(text, "\n1\n") {
			return fmt.Errorf("processes: %q", text)
		}
		return nil
	})
	if text, isErr := callText(t, b, "destroy", map[string]any{"sandbox": "two"}); isErr || !strings.Contains(text, "destroyed") {
		t.Fatalf("destroy through b: %q", text)
	}
	select {
	case res := <-done:
		text, isErr := "", res.IsError
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		if !isErr || !strings.Contains(text, "cut short") || !strings.Contains(text, "destroyed by another server") {
			t.Fatalf("a's command after b's destroy: %v %q", isErr, text)
		}
	case <-time.After(enginetest.HangGuard):
		t.Fatalf("a's command hung after b's destroy\nengine processes now:\n%s", enginetest.EngineProcesses())
	}
}
