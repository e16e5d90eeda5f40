package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/internal/redact"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Auditor keeps a record of each tool call (audit.Log).
type Auditor interface {
	Append(audit.Record) error
}

// auditArgCut bounds one string of a call's arguments in its record, and
// auditErrorCut its error.
const (
	auditArgCut   = 1 << 10
	auditErrorCut = 300
)

// auditSizeOnly are the arguments whose content an audit record leaves out,
// giving only its size: file contents and a command's input.
var auditSizeOnly = map[string]map[string]bool{
	"write_file":    {"content": true},
	"batch_write":   {"files": true},
	"exec":          {"stdin": true, "stdin_base64": true},
	"terminal_send": {"text": true}, // a password typed at a prompt
	"build_image":   {"containerfile": true},
}

// auditMasked are the arguments an audit record never shows: a token, and
// every env value (a secret, a value swapped in at egress for some hosts,
// or a value the call was refused for before its secret flag was read).
var auditMasked = map[string]map[string]bool{
	"git_clone": {"token": true},
	"env":       {"value": true},
}

// auditCalls records each tool call with a (an outer middleware: the
// arguments as the client sent them, and calls refused for bad arguments
// too). The record is written when the call has its answer; a record that
// cannot be written does not fail the call.
// callSandbox is the sandbox a call acts on: its valid sandbox argument,
// "default" for a tool that takes one when none is given, else "".
func (s *Server) callSandbox(tool string, args map[string]any) string {
	if name, ok := args["sandbox"].(string); ok && name != "" {
		if sandbox.ValidateName(name) == nil {
			return name
		}
		return ""
	}
	if s.sandboxTools[tool] {
		return "default"
	}
	return ""
}

func (s *Server) auditCalls(a Auditor, redactFor func(sandbox, text string) string) server.ToolHandlerMiddleware {
	return func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			start := time.Now()
			res, err := next(ctx, req)
			tool := req.Params.Name
			args := req.GetArguments()
			r := audit.Record{Time: start.UTC(), Tool: tool, Status: "ok",
				DurationMS: float64(time.Since(start).Microseconds()) / 1000}
			// A name the call was refused for shows among the arguments,
			// hidden and cut as they are.
			r.Sandbox = s.callSandbox(tool, args)
			hide := func(text string) string {
				if redactFor != nil {
					return redactFor(r.Sandbox, text)
				}
				return redact.Text(text)
			}
			r.Args = auditArgs(tool, args, hide)
			if cs := server.ClientSessionFromContext(ctx); cs != nil {
				r.Session = cs.SessionID()
				if ci, ok := cs.(server.SessionWithClientInfo); ok {
					info := ci.GetClientInfo()
					r.Client = cutText(strings.TrimSpace(info.Name+" "+info.Version), 128)
				}
			}
			switch {
			case err != nil:
				r.Status, r.Error = "error", cutHidden(err.Error(), hide, auditErrorCut)
			case res != nil && res.IsError:
				r.Status = "error"
				if len(res.Content) > 0 {
					if tc, ok := res.Content[0].(mcp.TextContent); ok {
						r.Error = cutHidden(tc.Text, hide, auditErrorCut)
					}
				}
			}
			if res != nil {
				r.ResultBytes = contentBytes(res.Content)
			}
			_ = a.Append(r) // the log says so once; the call goes on
			return res, err
		}
	}
}

// auditArgs is what a record shows of a call's arguments: secrets hidden,
// contents by their size, long strings cut.
func auditArgs(tool string, args map[string]any, hide func(string) string) map[string]any {
	if len(args) == 0 {
		return nil
	}
	out := make(map[string]any, len(args))
	for k, v := range args {
		switch {
		case auditMasked[tool][k]:
			out[k] = redact.Mask
		case auditSizeOnly[tool][k]:
			out[k] = sizeOf(v)
		default:
			out[k] = auditValue(v, hide, 0)
		}
	}
	return out
}

// auditValue hides and cuts the strings in v, to a depth.
func auditValue(v any, hide func(string) string, depth int) any {
	switch v := v.(type) {
	case string:
		return cutHidden(v, hide, auditArgCut)
	case []any:
		if depth > 4 {
			return fmt.Sprintf("<%d items>", len(v))
		}
		out := make([]any, 0, min(len(v), 64))
		for _, e := range v[:min(len(v), 64)] {
			out = append(out, auditValue(e, hide, depth+1))
		}
		if len(v) > 64 {
			out = append(out, fmt.Sprintf("<%d more>", len(v)-64))
		}
		return out
	case map[string]any:
		if depth > 4 {
			return fmt.Sprintf("<%d keys>", len(v))
		}
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[cutHidden(k, hide, 128)] = auditValue(e, hide, depth+1)
		}
		return out
	default:
		return v // numbers, booleans, null
	}
}

// cutHidden is s with secrets hidden, cut to n bytes. Only its first
// few KiB are searched: a megabyte of code is not searched on every call,
// and a secret that straddles that cut lies past what is shown.
func cutHidden(s string, hide func(string) string, n int) string {
	head := s
	if len(head) > 4*auditArgCut {
		head = head[:4*auditArgCut]
	}
	head = hide(head)
	if len(head) > n {
		head = head[:n]
	}
	head = strings.ToValidUTF8(head, "")
	if len(s) > n {
		head += fmt.Sprintf("…(%d bytes in all)", len(s))
	}
	return head
}

// sizeOf says how big a content argument is, without its content.
func sizeOf(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("<%d bytes>", len(v))
	case []any:
		n := 0
		for _, e := range v {
			if m, ok := e.(map[string]any); ok {
				if c, ok := m["content"].(string); ok {
					n += len(c)
				}
			}
		}
		return fmt.Sprintf("<%d files, %d bytes>", len(v), n)
	default:
		return "<left out>"
	}
}

// cutText cuts s to at most n bytes (valid UTF-8), saying how much went.
func cutText(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "?")
	}
	return strings.ToValidUTF8(s[:n], "") + fmt.Sprintf("…(%d bytes more)", len(s)-n)
}

// contentBytes counts the text and data of a result's content.
func contentBytes(cs []mcp.Content) int64 {
	var n int64
	for _, c := range cs {
		switch c := c.(type) {
		case mcp.TextContent:
			n += int64(len(c.Text))
		case mcp.ImageContent:
			n += int64(len(c.Data))
		case mcp.AudioContent:
			n += int64(len(c.Data))
		case mcp.EmbeddedResource:
			switch r := c.Resource.(type) {
			case mcp.TextResourceContents:
				n += int64(len(r.Text))
			case mcp.BlobResourceContents:
				n += int64(len(r.Blob))
			}
		}
	}
	return n
}
