package mcpserver

import (
	"context"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Notices are what the server must tell the agent once, whatever it calls
// next: the state file was found damaged and repaired, say. Each is added
// to the next tool result as a line of text of its own.
type Notices struct {
	mu      sync.Mutex
	pending []string
}

// Add queues msg for the next tool result.
func (n *Notices) Add(msg string) {
	if n == nil || msg == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pending = append(n.pending, msg)
}

func (n *Notices) take() []string {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := n.pending
	n.pending = nil
	return out
}

// middleware adds the pending notices to a tool's result.
func (n *Notices) middleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := next(ctx, req)
		if res == nil || err != nil {
			return res, err
		}
		for _, msg := range n.take() {
			res.Content = append(res.Content, mcp.NewTextContent("[sandbox-mcp: "+msg+"]"))
		}
		return res, err
	}
}
