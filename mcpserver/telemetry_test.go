package mcpserver

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
)

// TestCallsAreMeasured: every tool call lands in the MCP operation
// histogram by tool and outcome, exec in its own, and no metric names a
// sandbox.
func TestCallsAreMeasured(t *testing.T) {
	m := telemetry.NewMetrics()
	s := connect(t, &fake{}, Options{Toolsets: []string{"all"}, Telemetry: telemetry.New(m, nil)})
	s.call("exec", map[string]any{"sandbox": "box-one", "command": "true"})
	s.call("exec", map[string]any{"command": 42}) // refused: bad arguments
	s.call("list_all", nil)
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
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "box-one") {
		t.Errorf("a metric names a sandbox:\n%s", out)
	}
}
