package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestDynamicToolsets: a server started with --toolsets core
// --dynamic-toolsets hides the job tools, refuses a call to one, lists its
// toolsets, and after enable_toolset tells the client the list changed and
// serves the job tools on a real engine.
func TestDynamicToolsets(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	prefix := enginetest.Prefix(t, tg.New())
	cmd := exec.Command(binary, "serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix,
		"--state-dir", t.TempDir(), "--no-boot-default", "--toolsets", "core", "--dynamic-toolsets")
	cmd.Env = append(os.Environ(), tg.Env...)
	cmd.Stderr = &prefixWriter{t: t}
	changed := make(chan struct{}, 4)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	// The connect includes the server's start: a hang guard, not seconds.
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	names := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), callGuard)
		defer cancel()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, tl := range res.Tools {
			n = append(n, tl.Name)
		}
		return " " + strings.Join(n, " ") + " "
	}
	if got := names(); strings.Contains(got, " bg ") || !strings.Contains(got, " exec ") || !strings.Contains(got, " enable_toolset ") {
		t.Fatalf("tools before enabling: %s", got)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bg", Arguments: map[string]any{"command": "sleep 1"}}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("bg outside the enabled toolsets: %v", err)
	}
	if text, isErr := callText(t, cs, "toolsets", nil); isErr || !strings.Contains(text, "jobs [off]") {
		t.Fatalf("toolsets: %q", text)
	}
	if text, isErr := callText(t, cs, "enable_toolset", map[string]any{"toolset": "jobs"}); isErr || !strings.Contains(text, "bg") {
		t.Fatalf("enable_toolset: %q", text)
	}
	select {
	case <-changed:
	case <-time.After(enginetest.HangGuard):
		t.Fatal("no tools/list_changed after enable_toolset")
	}
	if got := names(); !strings.Contains(got, " bg ") || !strings.Contains(got, " logs ") {
		t.Fatalf("tools after enabling: %s", got)
	}
	if text, isErr := callText(t, cs, "bg", map[string]any{"name": "hello", "command": "echo from-a-job"}); isErr {
		t.Fatalf("bg: %q", text)
	}
	enginetest.WaitFor(t, "the job's output and exit in logs", func() error {
		text, isErr := callText(t, cs, "logs", map[string]any{"name": "hello"})
		if isErr || !strings.Contains(text, "from-a-job") || !strings.Contains(text, "exited with code 0") {
			return fmt.Errorf("logs: %v %q", isErr, text)
		}
		return nil
	})
}
