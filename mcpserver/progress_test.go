package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestGitCloneProgress: a long git_clone sends progress notifications
// with git's newest output when the client asked for them.
func TestGitCloneProgress(t *testing.T) {
	s := connect(t, &fake{cloneFor: 2500 * time.Millisecond}, Options{Toolsets: []string{"transfer"}})
	var mu sync.Mutex
	var msgs []string
	s.c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			mu.Lock()
			msgs = append(msgs, fmt.Sprint(n.Params.AdditionalFields["message"]))
			mu.Unlock()
		}
	})
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "git_clone", map[string]any{"repo": "https://example.com/r.git"}
	req.Params.Meta = &mcp.Meta{ProgressToken: "g1"}
	if res, err := s.c.CallTool(context.Background(), req); err != nil || res.IsError {
		t.Fatalf("git_clone: %v %+v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) == 0 || !strings.Contains(msgs[0], "Receiving objects:  50%") {
		t.Fatalf("progress: %q", msgs)
	}
}
