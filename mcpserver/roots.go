package mcpserver

import (
	"context"
	"net/url"
	"os"
	"slices"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/transfer"
)

// hostRoots decides which host directories transfers may use: those the
// user allowed (--allow-dir), plus the client's MCP roots when it offers
// them, else the directory the server was started in (never / or $HOME).
type hostRoots struct {
	allowed transfer.Roots
	start   transfer.Roots // the start directory, when it may serve as a root

	mu      sync.Mutex
	fetched bool
	client  transfer.Roots
}

func newHostRoots(allow []string, startDir string) *hostRoots {
	h := &hostRoots{}
	h.allowed, _ = transfer.CleanRoots(allow)
	home, _ := os.UserHomeDir()
	if d, ok := transfer.StartDirRoot(startDir, home); ok {
		h.start, _ = transfer.CleanRoots([]string{d})
	}
	return h
}

// rootsKey names the roots request in a multi round-trip exchange.
const rootsKey = "roots"

// askRoots returns a result that asks the client for its roots when it
// offers them and they are not known yet (again after roots/list_changed),
// or nil to go on. The client answers and calls the tool again (SEP-2322;
// for clients of earlier protocol versions mcp-go sends roots/list and
// calls the handler again itself), and the answer is kept.
func (s *Server) askRoots(ctx context.Context, req mcp.CallToolRequest) *mcp.CallToolResult {
	if !clientOffersRoots(ctx) {
		return nil
	}
	h := s.hostRoots
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fetched {
		return nil
	}
	res := server.RootsResponse(req.Params.InputResponses, rootsKey)
	if res == nil {
		return server.NewInputRequestBuilder("").Roots(rootsKey).ToolResult()
	}
	var dirs []string
	for _, r := range res.Roots {
		u, err := url.Parse(r.URI)
		if err != nil || u.Scheme != "file" || u.Path == "" {
			continue
		}
		dirs = append(dirs, u.Path)
	}
	var dropped []string
	h.client, dropped = transfer.CleanRoots(dirs)
	if len(dropped) > 0 {
		s.log.Info("client roots not used", "dropped", dropped)
	}
	h.fetched = true
	return nil
}

func clientOffersRoots(ctx context.Context) bool {
	sess, _ := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	return sess != nil && sess.GetClientCapabilities().Roots != nil
}

// roots returns the roots in force for this call: --allow-dir, and the
// client's roots when it offers them (askRoots fetched them), else the
// start directory.
func (s *Server) roots(ctx context.Context) transfer.Roots {
	h := s.hostRoots
	out := slices.Clone(h.allowed)
	client := h.start
	if clientOffersRoots(ctx) {
		h.mu.Lock()
		client = h.client
		h.mu.Unlock()
	}
	for _, r := range client {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// forgetClientRoots makes the next transfer ask the client again.
func (s *Server) forgetClientRoots() {
	s.hostRoots.mu.Lock()
	s.hostRoots.fetched = false
	s.hostRoots.mu.Unlock()
}
