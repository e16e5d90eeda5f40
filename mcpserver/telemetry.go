package mcpserver

import (
	"context"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
)

// observe records every tool call in t: the duration of MCP operations
// (by tool, transport and error type; never by sandbox, whose names are
// unbounded), exec's duration and transfer bytes, and, when spans are
// exported, a span per call named and attributed after the MCP semantic
// conventions, with the sandbox's name among its attributes (not the
// session id: over HTTP it is a credential of sorts). A call that
// carries a W3C traceparent in its _meta joins the caller's trace.
func (s *Server) observe(t *telemetry.Telemetry, transport string) server.ToolHandlerMiddleware {
	return func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			start := time.Now()
			res, err := next(ctx, req)
			end := time.Now()
			took := end.Sub(start).Seconds()
			tool := req.Params.Name
			errType := ""
			switch {
			case err != nil:
				errType = "jsonrpc_error"
			case res != nil && res.IsError:
				errType = "tool_error"
			}
			attrs := make([]telemetry.Attr, 0, 10)
			attrs = append(attrs, telemetry.Attr{Key: "mcp.method.name", Value: "tools/call"},
				telemetry.Attr{Key: "gen_ai.tool.name", Value: tool}, telemetry.Attr{Key: "network.transport", Value: transport})
			if errType != "" {
				attrs = append(attrs, telemetry.Attr{Key: "error.type", Value: errType})
			}
			t.Operations.Record(took, attrs...)
			if tool == "exec" {
				t.Exec.Record(took)
			}
			if res != nil && !res.IsError {
				if tr, ok := res.StructuredContent.(Transfer); ok {
					dir := "in"
					if tr.Direction == "download" {
						dir = "out"
					}
					t.Bytes.Add(float64(tr.Bytes), telemetry.Attr{Key: "direction", Value: dir})
				}
			}
			if !t.Tracing() {
				return res, err
			}
			traceparent := ""
			if m := req.Params.Meta; m != nil {
				traceparent, _ = m.AdditionalFields["traceparent"].(string)
			}
			span := telemetry.Span{Name: "tools/call " + tool, Start: start, End: end, Error: errType}
			span.TraceID, span.ParentID, span.SpanID = telemetry.NewIDs(traceparent)
			attrs = append(attrs, telemetry.Attr{Key: "gen_ai.operation.name", Value: "execute_tool"})
			if name := s.callSandbox(tool, req.GetArguments()); name != "" {
				attrs = append(attrs, telemetry.Attr{Key: "sandbox.name", Value: name})
			}
			if v := server.RequestProtocolVersion(ctx); v != "" {
				attrs = append(attrs, telemetry.Attr{Key: "mcp.protocol.version", Value: v})
			}
			span.Attrs = attrs
			t.Exporter.Offer(span)
			return res, err
		}
	}
}
