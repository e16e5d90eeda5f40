package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
				errType = strconv.Itoa(mcp.INTERNAL_ERROR) // what mcp-go answers a handler's error with
			case res != nil && res.IsError:
				errType = "tool_error"
			}
			attrs := make([]telemetry.Attr, 0, 10)
			attrs = append(attrs, telemetry.Attr{Key: "mcp.method.name", Value: "tools/call"},
				telemetry.Attr{Key: "gen_ai.tool.name", Value: tool}, telemetry.Attr{Key: "network.transport", Value: transport})
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
			traceparent := ""
			if m := req.Params.Meta; m != nil {
				traceparent, _ = m.AdditionalFields["traceparent"].(string)
			}
			span := telemetry.Span{Name: "tools/call " + tool, Start: start, End: end, Error: errType}
			recordOperation(ctx, t, span, traceparent, attrs, func() []telemetry.Attr {
				more := []telemetry.Attr{{Key: "gen_ai.operation.name", Value: "execute_tool"}}
				if name := s.callSandbox(tool, req.GetArguments()); name != "" {
					more = append(more, telemetry.Attr{Key: "sandbox.name", Value: name})
				}
				return more
			})
			return res, err
		}
	}
}

// maxInflight bounds the requests observeRequests keeps a start time for:
// one whose answer never came (its handler panicked past the recovery, a
// transport dropped it) must not hold memory for ever.
const maxInflight = 4096

// observeRequests adds to h the measuring of the requests other than
// tools/call (which observe measures, with the tool's outcome):
// initialize, ping, tools/list, resources/read and the rest land in the
// same operation histogram by method and outcome, and each gets a span
// when spans are exported. error.type is the JSON-RPC error code, as the
// MCP semantic conventions ask.
func observeRequests(h *server.Hooks, t *telemetry.Telemetry, transport string) {
	var mu sync.Mutex
	started := map[string]time.Time{}
	key := func(ctx context.Context, id any) string { return sessionID(ctx) + "\x00" + fmt.Sprint(id) }
	h.AddBeforeAny(func(ctx context.Context, id any, method mcp.MCPMethod, _ any) {
		if method == mcp.MethodToolsCall {
			return
		}
		now := time.Now()
		mu.Lock()
		if len(started) >= maxInflight {
			for k, at := range started {
				if now.Sub(at) > 10*time.Minute || len(started) >= maxInflight {
					delete(started, k)
				}
			}
		}
		started[key(ctx, id)] = now
		mu.Unlock()
	})
	done := func(ctx context.Context, id any, method mcp.MCPMethod, message any, errType string) {
		if method == mcp.MethodToolsCall {
			return
		}
		end := time.Now()
		k := key(ctx, id)
		mu.Lock()
		start, ok := started[k]
		delete(started, k)
		mu.Unlock()
		if !ok {
			start = end // refused before its handler ran: unparsable, an unknown method
		}
		attrs := make([]telemetry.Attr, 0, 7)
		attrs = append(attrs, telemetry.Attr{Key: "mcp.method.name", Value: string(method)},
			telemetry.Attr{Key: "network.transport", Value: transport})
		span := telemetry.Span{Name: string(method), Start: start, End: end, Error: errType}
		recordOperation(ctx, t, span, "", attrs, func() []telemetry.Attr {
			more := []telemetry.Attr{{Key: "jsonrpc.request.id", Value: fmt.Sprint(id)}}
			if r, ok := message.(*mcp.ReadResourceRequest); ok {
				more = append(more, telemetry.Attr{Key: "mcp.resource.uri", Value: r.Params.URI})
			}
			return more
		})
	}
	h.AddOnSuccess(func(ctx context.Context, id any, method mcp.MCPMethod, message, _ any) {
		done(ctx, id, method, message, "")
	})
	h.AddOnError(func(ctx context.Context, id any, method mcp.MCPMethod, message any, err error) {
		errType := "_OTHER"
		var rpc interface{ ToJSONRPCError() mcp.JSONRPCError }
		if errors.As(err, &rpc) {
			errType = strconv.Itoa(rpc.ToJSONRPCError().Error.Code)
		}
		done(ctx, id, method, message, errType)
	})
}

// recordOperation records one MCP request, span's name, times and
// error type filled in: in the operation histogram, labelled with attrs
// and its error.type, and, when spans are exported, as span, in the
// caller's trace when traceparent names one, with attrs, what spanAttrs
// adds (asked only then: a metric never carries them) and the protocol
// revision.
func recordOperation(ctx context.Context, t *telemetry.Telemetry, span telemetry.Span, traceparent string, attrs []telemetry.Attr, spanAttrs func() []telemetry.Attr) {
	if span.Error != "" {
		attrs = append(attrs, telemetry.Attr{Key: "error.type", Value: span.Error})
	}
	t.Operations.Record(span.End.Sub(span.Start).Seconds(), attrs...)
	if !t.Tracing() {
		return
	}
	span.TraceID, span.ParentID, span.SpanID = telemetry.NewIDs(traceparent)
	attrs = append(attrs, spanAttrs()...)
	if v := server.RequestProtocolVersion(ctx); v != "" {
		attrs = append(attrs, telemetry.Attr{Key: "mcp.protocol.version", Value: v})
	}
	span.Attrs = attrs
	t.Exporter.Offer(span)
}
