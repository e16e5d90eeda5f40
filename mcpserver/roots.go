package mcpserver

import (
	"context"
	"fmt"
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
// Each client has its own roots: they are kept per session, and a client
// without one (an HTTP client of a sessionless protocol revision) is
// asked on each call that needs them.
type hostRoots struct {
	allowed transfer.Roots
	start   transfer.Roots // the start directory, when it may serve as a root
	// remote: clients may be on other machines; their roots and the
	// start directory do not count.
	remote bool
	canAsk func(context.Context) bool

	mu      sync.Mutex
	clients map[string]transfer.Roots // by session id, once fetched
}

func newHostRoots(allow []string, startDir string, remote bool, canAsk func(context.Context) bool) *hostRoots {
	h := &hostRoots{clients: map[string]transfer.Roots{}, remote: remote, canAsk: canAsk}
	h.allowed, _ = transfer.CleanRoots(allow)
	home, _ := os.UserHomeDir()
	if d, ok := transfer.StartDirRoot(startDir, home); ok && !remote {
		h.start, _ = transfer.CleanRoots([]string{d})
	}
	return h
}

// offersRoots reports whether the roots of the call's client count: it
// offers them, it is not remote, and it can be asked now (a client of an
// earlier revision over HTTP without its listening stream cannot: the
// request would go nowhere).
func (h *hostRoots) offersRoots(ctx context.Context) bool {
	return !h.remote && clientOffersRoots(ctx) && (h.canAsk == nil || h.canAsk(ctx))
}

// rootsKey names the roots request in a multi round-trip exchange.
const rootsKey = "roots"

// rootsWait bounds a roots request the server sends a client itself.
const rootsWait = 30 * time.Second

// callRoots carries the roots a client sent with this very call.
type callRoots struct{}

// askRoots returns a result that asks the client for its roots when it
// offers them and they are not known for its session yet (again after
// roots/list_changed), or nil to go on, with a context that carries the
// roots the call brought. The client answers and calls the tool again
// (SEP-2322; for clients of earlier protocol versions mcp-go sends
// roots/list and calls the handler again itself), and the answer is kept
// for the session.
func (s *Server) askRoots(ctx context.Context, req mcp.CallToolRequest) (context.Context, *mcp.CallToolResult) {
	h := s.hostRoots
	if !h.offersRoots(ctx) {
		return ctx, nil
	}
	id := sessionID(ctx)
	res := server.RootsResponse(req.Params.InputResponses, rootsKey)
	if res == nil {
		h.mu.Lock()
		_, known := h.clients[id]
		h.mu.Unlock()
		if known && id != "" {
			return ctx, nil
		}
		if h.canAsk == nil || mcp.IsModernProtocol(server.RequestProtocolVersion(ctx)) {
			return ctx, server.NewInputRequestBuilder("").Roots(rootsKey).ToolResult()
		}
		// A client of an earlier revision over HTTP gets roots/list on its
		// listening stream, where a reconnect can lose it: asked here,
		// with a bound, rather than by mcp-go for as long as the call runs.
		actx, cancel := context.WithTimeout(ctx, rootsWait)
		defer cancel()
		var err error
		if res, err = s.ms.RequestRoots(actx, mcp.ListRootsRequest{}); err != nil {
			return ctx, mcp.NewToolResultError(fmt.Sprintf("%s: the client did not answer its roots request (the directories transfers may use) within %s: %v; "+
				"call again, or have the server started with --allow-dir", req.Params.Name, rootsWait, err))
		}
	}
	var dirs []string
	for _, r := range res.Roots {
		u, err := url.Parse(r.URI)
		if err != nil || u.Scheme != "file" || u.Path == "" {
			continue
		}
		dirs = append(dirs, u.Path)
	}
	roots, dropped := transfer.CleanRoots(dirs)
	if len(dropped) > 0 {
		s.log.Info("client roots not used", "dropped", dropped)
	}
	if id != "" {
		h.mu.Lock()
		h.clients[id] = roots
		h.mu.Unlock()
	}
	return context.WithValue(ctx, callRoots{}, roots), nil
}

func clientOffersRoots(ctx context.Context) bool {
	sess, _ := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	return sess != nil && sess.GetClientCapabilities().Roots != nil
}

func sessionID(ctx context.Context) string {
	if sess := server.ClientSessionFromContext(ctx); sess != nil {
		return sess.SessionID()
	}
	return ""
}

// roots returns the roots in force for this call: --allow-dir, and the
// client's roots when it offers them (askRoots fetched them), else the
// start directory.
func (s *Server) roots(ctx context.Context) transfer.Roots {
	h := s.hostRoots
	out := slices.Clone(h.allowed)
	client := h.start
	if h.offersRoots(ctx) {
		var ok bool
		if client, ok = ctx.Value(callRoots{}).(transfer.Roots); !ok {
			h.mu.Lock()
			client = h.clients[sessionID(ctx)]
			h.mu.Unlock()
		}
	}
	for _, r := range client {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// forgetClientRoots makes the session's next transfer ask its client
// again (roots/list_changed), or forgets an ended session's.
func (s *Server) forgetClientRoots(id string) {
	s.hostRoots.mu.Lock()
	delete(s.hostRoots.clients, id)
	s.hostRoots.mu.Unlock()
}
