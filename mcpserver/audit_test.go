package mcpserver

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/internal/redact"
)

type auditSink struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (a *auditSink) Append(r audit.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, r)
	return nil
}

// TestAuditRecordsEveryCall: each tool call, good or refused for its
// arguments, leaves one record naming the tool, the sandbox (the default
// one when the call names none), the client, its status and its size;
// secrets, tokens and file contents never reach the record.
func TestAuditRecordsEveryCall(t *testing.T) {
	sink := &auditSink{}
	s := connect(t, &fake{}, Options{Toolsets: []string{"all"}, Audit: sink,
		// As the Manager does: the sandbox's secrets, and text shaped like
		// a credential.
		Redact: func(_, text string) string { return redact.Text(text, "known-secret") }})
	const token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
	s.call("exec", map[string]any{"command": "echo hi; curl -H 'Authorization: Bearer " + token + "' x; echo known-secret"})
	s.call("write_file", map[string]any{"sandbox": "box", "path": "/tmp/f", "content": "the-file-body"})
	s.call("env", map[string]any{"sandbox": "box", "action": "set", "key": "API", "value": "plain-looking-value", "secret": true})
	s.call("git_clone", map[string]any{"repo": "https://github.com/a/b", "token": "tok-123456"})
	s.call("exec", map[string]any{"command": 42}) // refused: bad arguments
	s.call("list_all", nil)
	s.call("env", map[string]any{"sandbox": "box", "action": "set", "key": "K", "value": "egress-only-value", "hosts": []any{"api.example.com"}})
	s.call("exec", map[string]any{"sandbox": "\x1b]0;pwned\x07", "command": "true"})

	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.recs) != 8 {
		t.Fatalf("%d records for 8 calls: %+v", len(sink.recs), sink.recs)
	}
	all := ""
	for _, r := range sink.recs {
		all += fmtRecord(r)
		if r.Client != "test 0" || r.Session == "" || r.Time.IsZero() || r.DurationMS < 0 {
			t.Errorf("record without its client, session or time: %+v", r)
		}
	}
	for _, leak := range []string{token, "known-secret", "the-file-body", "plain-looking-value", "tok-123456", "egress-only-value"} {
		if strings.Contains(all, leak) {
			t.Errorf("%q reached the audit records: %s", leak, all)
		}
	}
	first := sink.recs[0]
	if first.Tool != "exec" || first.Sandbox != "default" || first.Status != "ok" || first.ResultBytes == 0 ||
		!strings.Contains(first.Args["command"].(string), "echo hi") {
		t.Errorf("the exec call: %+v", first)
	}
	if w := sink.recs[1]; w.Sandbox != "box" || w.Args["content"] != "<13 bytes>" {
		t.Errorf("write_file: %+v", w)
	}
	if bad := sink.recs[4]; bad.Status != "error" || bad.Error == "" {
		t.Errorf("a call refused for its arguments: %+v", bad)
	}
	if l := sink.recs[5]; l.Tool != "list_all" || l.Sandbox != "" {
		t.Errorf("a call on no sandbox: %+v", l)
	}
	if bad := sink.recs[7]; bad.Sandbox != "" || bad.Status != "error" {
		t.Errorf("a call on a sandbox name that is none: %+v", bad)
	}
}

func fmtRecord(r audit.Record) string {
	var b strings.Builder
	b.WriteString(r.Tool + " " + r.Error + " ")
	for k, v := range r.Args {
		b.WriteString(k + "=")
		b.WriteString(strings.TrimSpace(strings.ReplaceAll(strings.ReplaceAll(toString(v), "\n", " "), "\t", " ")) + " ")
	}
	return b.String()
}

func toString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var parts []string
		for _, e := range v {
			parts = append(parts, toString(e))
		}
		return strings.Join(parts, ",")
	case map[string]any:
		var parts []string
		for k, e := range v {
			parts = append(parts, k+":"+toString(e))
		}
		return strings.Join(parts, ",")
	default:
		return ""
	}
}

// TestAuditLeavesOutLongAndNestedArguments: long strings are cut, batch
// contents give their size, and nested values keep their shape.
func TestAuditLeavesOutLongAndNestedArguments(t *testing.T) {
	hide := func(s string) string { return s }
	got := auditArgs("batch_write", map[string]any{
		"files": []any{map[string]any{"path": "/a", "content": "12345"}, map[string]any{"path": "/b", "content": "678"}},
	}, hide)
	if got["files"] != "<2 files, 8 bytes>" {
		t.Errorf("batch_write files: %v", got["files"])
	}
	long := strings.Repeat("é", 2000)
	got = auditArgs("exec", map[string]any{"command": long, "timeout": 5.0, "list": []any{"a", 1.0}}, hide)
	c := got["command"].(string)
	if len(c) > auditArgCut+40 || !strings.Contains(c, "4000 bytes in all") || !strings.HasPrefix(c, "éé") {
		t.Errorf("a long command: %d bytes, %q...", len(c), c[:20])
	}
	if got["timeout"] != 5.0 || len(got["list"].([]any)) != 2 {
		t.Errorf("other values: %+v", got)
	}
}

// BenchmarkAuditCall is what recording costs one exec call: its
// arguments hidden and cut, and the record written.
func BenchmarkAuditCall(b *testing.B) {
	l, err := audit.Open(b.TempDir(), audit.DefaultCap, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	s := &Server{sandboxTools: map[string]bool{"exec": true}}
	done := func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok\n"), nil
	}
	h := s.auditCalls(l, func(_, text string) string { return redact.Text(text) })(done)
	req := mcp.CallToolRequest{}
	req.Params.Name = "exec"
	req.Params.Arguments = map[string]any{"command": "cd /workspace && go test ./... 2>&1 | tail -20", "timeout": 120.0}
	for b.Loop() {
		if _, err := h(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
