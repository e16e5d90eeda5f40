package mcpserver

import (
	"context"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

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

// rootsWait bounds asking the client for its roots.
const rootsWait = 5 * time.Second

// roots returns the roots in force for this call.
func (s *Server) roots(ctx context.Context) transfer.Roots {
	h := s.hostRoots
	out := slices.Clone(h.allowed)
	client, ok := s.clientRoots(ctx)
	if !ok {
		client = h.start
	}
	for _, r := range client {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// clientRoots asks the client for its roots once (again after it says
// they changed); ok is false when the client offers none.
func (s *Server) clientRoots(ctx context.Context) (transfer.Roots, bool) {
	sess, _ := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	if sess == nil || sess.GetClientCapabilities().Roots == nil || s.ms == nil {
		return nil, false
	}
	h := s.hostRoots
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fetched {
		return h.client, true
	}
	rctx, cancel := context.WithTimeout(ctx, rootsWait)
	defer cancel()
	res, err := s.ms.RequestRoots(rctx, mcp.ListRootsRequest{})
	if err != nil {
		s.log.Warn("roots/list failed; using the start directory", "err", err)
		return nil, false
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
	return h.client, true
}

// forgetClientRoots makes the next transfer ask the client again.
func (s *Server) forgetClientRoots() {
	s.hostRoots.mu.Lock()
	s.hostRoots.fetched = false
	s.hostRoots.mu.Unlock()
}
