package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
	"github.com/sandbox-mcp/sandbox-mcp/portfwd"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Ports is what the port tools need (*portfwd.Set in production).
type Ports interface {
	// Expose makes a forward, or returns the one there was (existing).
	Expose(sandbox string, port, hostPort int) (info portfwd.Info, existing bool, err error)
	Unexpose(sandbox string, port int) (portfwd.Info, error)
	List(sandbox string) []portfwd.Info
	// AllowsPrivileged reports whether host ports below 1024 are used.
	AllowsPrivileged() bool
}

// Forwards is the structured result of list_ports.
type Forwards struct {
	Forwards []portfwd.Info `json:"forwards"`
}

func (s *Server) exposeTool() tool {
	return tool{group: "ports", handler: s.handleExpose, def: newTool[portfwd.Info]("expose", "Expose a sandbox port",
		"Forward a host port (127.0.0.1 by default) to a TCP port inside a sandbox and return its URL, e.g. a web server the sandbox "+
			"runs on 8000. Works with no network in the sandbox; lasts until unexpose or destroy (another or the next server takes it over).",
		mutating(true),
		mcp.WithNumber("port", mcp.Required(), mcp.Description("TCP port inside the sandbox (1-65535)."), mcp.Min(1), mcp.Max(65535)),
		mcp.WithNumber("host_port", mcp.Description("Host port; 0: the sandbox port's number when free on the host, else a free one."), mcp.DefaultNumber(0), mcp.Min(0), mcp.Max(65535)),
		sandboxParam(),
	)}
}

func (s *Server) unexposeTool() tool {
	return tool{group: "ports", handler: s.handleUnexpose, def: newTool[portfwd.Info]("unexpose", "Stop exposing a port",
		"End the forward of a sandbox port and its open connections.",
		mutating(true),
		mcp.WithNumber("port", mcp.Required(), mcp.Description("The sandbox port given to expose."), mcp.Min(1), mcp.Max(65535)),
		sandboxParam(),
	)}
}

func (s *Server) listPortsTool() tool {
	return tool{group: "ports", handler: s.handleListPorts, def: newTool[Forwards]("list_ports", "List exposed ports",
		"List the port forwards: sandbox port, host URL, which server serves it, connections.",
		readOnly(),
	)}
}

func (s *Server) networkInfoTool() tool {
	return tool{group: "ports", handler: s.handleNetworkInfo, def: newTool[sandbox.NetworkReport]("network_info", "Show sandbox networking",
		"Each sandbox's addresses and which sandboxes it reaches by name or address; says where the platform allows none.",
		readOnly(),
		mcp.WithString("sandbox", mcp.Description("Only this sandbox; all when omitted."),
			mcp.Pattern(sandboxPattern), mcp.MaxLength(sandbox.MaxNameLen)),
	)}
}

func (s *Server) handleNetworkInfo(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name := ""
	if _, ok := req.GetArguments()["sandbox"]; ok {
		n, err := sandboxArg(req)
		if err != nil {
			return argError("network_info: %v", err), nil
		}
		name = n
	}
	rep, err := s.m.NetworkInfo(ctx, name)
	if err != nil {
		return failure(ctx, "network_info", err), nil
	}
	var b strings.Builder
	b.WriteString(rep.Platform)
	if len(rep.Sandboxes) == 0 {
		b.WriteString("\nno sandboxes")
	}
	for _, sn := range rep.Sandboxes {
		fmt.Fprintf(&b, "\n%s (%s)", sn.Name, sn.State)
		switch {
		case sn.Isolated:
			b.WriteString(": no network")
		case len(sn.Networks) > 0:
			var addrs []string
			for _, a := range sn.Networks {
				if a.IP != "" {
					addrs = append(addrs, a.IP+" on "+a.Network)
				}
			}
			if len(addrs) > 0 {
				b.WriteString(": " + strings.Join(addrs, ", "))
			}
		}
		if sn.Egress != nil {
			b.WriteString("; " + describeEgress(*sn.Egress))
		}
		if len(sn.ReachesByName) > 0 {
			b.WriteString("; reaches by name: " + strings.Join(sn.ReachesByName, ", "))
		}
		if len(sn.ReachesByAddress) > 0 {
			b.WriteString("; reaches by address only: " + strings.Join(sn.ReachesByAddress, ", "))
		}
	}
	return mcp.NewToolResultStructured(rep, b.String()), nil
}

// describeEgress tells a sandbox's egress in a line.
func describeEgress(st sandbox.NetState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "egress %s", st.Mode)
	if st.Wanted != "" {
		fmt.Fprintf(&b, " (its policy now says %s: reset it to apply)", st.Wanted)
	}
	if st.Mode != egress.ModeOpen && len(st.Policy) > 0 {
		fmt.Fprintf(&b, ": %s", strings.Join(st.Policy, "; "))
	}
	if st.Proxy != "" {
		fmt.Fprintf(&b, "; proxy %s", st.Proxy)
	}
	if len(st.Refused) > 0 {
		var hs []string
		for _, r := range st.Refused[:min(5, len(st.Refused))] {
			hs = append(hs, fmt.Sprintf("%s (%d×)", r.Host, r.Times))
		}
		fmt.Fprintf(&b, "; refused lately: %s", strings.Join(hs, ", "))
	}
	if len(st.Bytes) > 0 {
		var hs []string
		for _, h := range st.Bytes[:min(5, len(st.Bytes))] {
			hs = append(hs, fmt.Sprintf("%s %s in, %s out", h.Host, units.Human(h.Down), units.Human(h.Up)))
		}
		fmt.Fprintf(&b, "; traffic: %s", strings.Join(hs, ", "))
	}
	return b.String()
}

// NetworkLog is the structured result of network_log.
type NetworkLog struct {
	Events []egress.Event `json:"events"`
}

func (s *Server) networkLogTool() tool {
	return tool{group: "ports", handler: s.handleNetworkLog, def: newTool[NetworkLog]("network_log", "Read a sandbox's network log",
		"The egress proxy's decisions for a sandbox, newest last: host, port, allowed or refused and why, bytes of ended connections.",
		readOnly(),
		mcp.WithNumber("limit", mcp.Description("Most recent entries to return."), mcp.DefaultNumber(50), mcp.Min(1), mcp.Max(1000)),
		mcp.WithBoolean("refused_only", mcp.Description("Only refused connections.")),
		sandboxParam(),
	)}
}

func (s *Server) handleNetworkLog(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("network_log: %v", err), nil
	}
	limit, err := intArg(req, "limit", 50, 1, 1000)
	if err != nil {
		return argError("network_log: %v", err), nil
	}
	refused := req.GetBool("refused_only", false)
	evs, err := s.m.NetworkLog(ctx, name, int(limit), refused)
	if err != nil {
		return failure(ctx, "network_log", err), nil
	}
	if evs == nil {
		evs = []egress.Event{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d entries for %s", len(evs), name)
	for _, ev := range evs {
		fmt.Fprintf(&b, "\n%s %s:%d via %s: ", ev.Time.Format(time.RFC3339), ev.Host, ev.Port, ev.Via)
		switch {
		case !ev.Allowed:
			b.WriteString("refused: " + ev.Reason)
		case ev.Ended && ev.Reason != "":
			fmt.Fprintf(&b, "failed: %s", ev.Reason)
		case ev.Ended:
			fmt.Fprintf(&b, "ended, %s in, %s out", units.Human(ev.Down), units.Human(ev.Up))
		default:
			b.WriteString("allowed by " + ev.Rule)
		}
	}
	return mcp.NewToolResultStructured(NetworkLog{Events: evs}, b.String()), nil
}

var errNoPorts = errors.New("port forwarding is not available in this server")

func (s *Server) handleExpose(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("expose: %v", err), nil
	}
	port, err := intArg(req, "port", 0, 1, 65535)
	if err != nil {
		return argError("expose: %v", err), nil
	}
	hostPort, err := intArg(req, "host_port", 0, 0, 65535)
	if err != nil {
		return argError("expose: %v", err), nil
	}
	if s.ports == nil {
		return failure(ctx, "expose", errNoPorts), nil
	}
	if refused := s.childGuard(name, "expose"); refused != nil {
		return refused, nil
	}
	// Start the sandbox and its agent now, so that the first connection
	// does not pay for them and a sandbox the agent cannot reach says so.
	conn, derr := s.m.Dial(ctx, name, int(port))
	if derr != nil && !errors.Is(derr, sandbox.ErrPortClosed) {
		return failure(ctx, fmt.Sprintf("expose port %d of sandbox %q", port, name), derr), nil
	}
	via := sandbox.ViaAgent
	if conn != nil {
		via = sandbox.Via(conn)
		conn.Close()
	}
	info, existing, err := s.ports.Expose(name, int(port), int(hostPort))
	if err != nil {
		return failure(ctx, fmt.Sprintf("expose port %d of sandbox %q", port, name), err), nil
	}
	info.Via = via
	text := fmt.Sprintf("%s -> port %d in sandbox %q (each connection is one stream through the sandbox's agent)", info.URL, port, name)
	if via == sandbox.ViaExec {
		text = fmt.Sprintf("%s -> port %d in sandbox %q (each connection starts an exec in the sandbox, slower to open: the agent cannot run there: %s)",
			info.URL, port, name, s.m.AgentProblem(name))
	}
	switch {
	case existing:
		text += fmt.Sprintf("\nport %d was already exposed: this is its forward", port)
	case hostPort == 0 && info.HostPort != int(port) && portfwd.Privileged(int(port)) && !s.ports.AllowsPrivileged():
		text += fmt.Sprintf("\nhost port %d is below 1024, which is not used without --allow-privileged-ports: a free one was picked", port)
	case hostPort == 0 && info.HostPort != int(port):
		text += fmt.Sprintf("\nhost port %d is taken: a free one was picked", port)
	}
	if derr != nil {
		text += fmt.Sprintf("\nnothing listens on port %d in the sandbox yet: start the server there (bind 127.0.0.1 or 0.0.0.0); the forward waits for it", port)
	}
	return mcp.NewToolResultStructured(info, text), nil
}

func (s *Server) handleUnexpose(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("unexpose: %v", err), nil
	}
	port, err := intArg(req, "port", 0, 1, 65535)
	if err != nil {
		return argError("unexpose: %v", err), nil
	}
	if s.ports == nil {
		return failure(ctx, "unexpose", errNoPorts), nil
	}
	info, err := s.ports.Unexpose(name, int(port))
	if err != nil {
		return failure(ctx, "unexpose", err), nil
	}
	return mcp.NewToolResultStructured(info, fmt.Sprintf("stopped forwarding %s to port %d in sandbox %q after %d connections", info.URL, port, name, info.Connections)), nil
}

func (s *Server) handleListPorts(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	out := Forwards{Forwards: []portfwd.Info{}}
	if s.ports == nil {
		return mcp.NewToolResultStructured(out, "no forwards (port forwarding is not available in this server)"), nil
	}
	out.Forwards = s.ports.List("")
	if len(out.Forwards) == 0 {
		return mcp.NewToolResultStructured(out, "no ports exposed: expose forwards one"), nil
	}
	var b strings.Builder
	for _, f := range out.Forwards {
		fmt.Fprintf(&b, "%s -> %q:%d  %s", f.URL, f.Sandbox, f.Port, f.Server)
		if f.Server == "this server" {
			fmt.Fprintf(&b, ", %d connections (%d open)", f.Connections, f.Active)
		}
		if f.Via != "" {
			fmt.Fprintf(&b, ", via %s", f.Via)
		}
		b.WriteString("\n")
	}
	return mcp.NewToolResultStructured(out, strings.TrimSuffix(b.String(), "\n")), nil
}
