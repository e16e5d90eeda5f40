package mcpserver

import (
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
)

// TestCallsAreMeasured: every tool call lands in the MCP operation
// histogram by tool and outcome, exec in its own, the other requests by
// method (a failed one by its JSON-RPC error code), and no metric names
// a sandbox.
func TestCallsAreMeasured(t *testing.T) {
	m := telemetry.NewMetrics()
	s := connect(t, &fake{}, Options{Toolsets: []string{"all"}, Telemetry: telemetry.New(m, nil)})
	s.call("exec", map[string]any{"sandbox": "box-one", "command": "true"})
	s.call("exec", map[string]any{"command": 42}) // refused: bad arguments
	s.call("list_all", nil)
	read := mcp.ReadResourceRequest{}
	read.Params.URI = "sandbox-mcp://output/nothing-here"
	if _, err := s.c.ReadResource(t.Context(), read); err == nil {
		t.Fatal("reading a resource that does not exist succeeded")
	}
	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		`mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="exec",network_transport="pipe"} 1`,
		`mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="exec",network_transport="pipe",error_type="tool_error"} 1`,
		`mcp_server_operation_duration_seconds_count{mcp_method_name="tools/call",gen_ai_tool_name="list_all",network_transport="pipe"} 1`,
		`sandbox_mcp_exec_duration_seconds_count 2`,
		`mcp_server_operation_duration_seconds_count{mcp_method_name="server/discover",network_transport="pipe"} 1`,
		`mcp_server_operation_duration_seconds_count{mcp_method_name="tools/list",network_transport="pipe"} 1`,
		// No resource has that URI (files are sandbox://NAME/PATH).
		`mcp_server_operation_duration_seconds_count{mcp_method_name="resources/read",network_transport="pipe",error_type="-32602"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "box-one") {
		t.Errorf("a metric names a sandbox:\n%s", out)
	}
}

// TestRemoteClientsGetNoRoots: when clients may be on other machines,
// neither the roots they declare nor the start directory open the host
// to them; only the allowed directories do.
func TestRemoteClientsGetNoRoots(t *testing.T) {
	dir := t.TempDir()
	allowed := t.TempDir()
	h := newHostRoots([]string{allowed}, dir, true, nil)
	if len(h.start) != 0 || h.offersRoots(t.Context()) {
		t.Fatalf("remote: start %v, client roots count", h.start)
	}
	s := &Server{hostRoots: h}
	if r := s.roots(t.Context()); len(r) != 1 {
		t.Fatalf("remote roots %v, want only the allowed directory", r)
	}
	if local := newHostRoots(nil, dir, false, nil); len(local.start) != 1 {
		t.Fatalf("local: start %v", local.start)
	}
}
