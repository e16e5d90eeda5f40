package app

import (
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
)

// TestAuditLineTellsTheTerminalNothing: whatever a record holds, its line
// for a person is one line without control characters.
func TestAuditLineTellsTheTerminalNothing(t *testing.T) {
	esc := "\x1b]0;pwned\x07\x1b[2J\r\n\u009b31m"
	r := audit.Record{Time: time.Now(), Tool: "exec" + esc, Sandbox: "box" + esc, Client: "client" + esc, Status: "error", Error: "boom" + esc,
		Args: map[string]any{"command": "echo" + esc, "k" + esc: []any{esc}}, Lost: 2}
	line := auditLine(r)
	body := line[strings.Index(line, "\n")+1:] // after the line about lost records
	if strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") {
		t.Fatalf("not one line: %q", line)
	}
	for _, c := range strings.TrimSuffix(body, "\n") {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			t.Fatalf("control character %U in %q", c, body)
		}
	}
	if !strings.Contains(line, "2 records lost") || !strings.Contains(body, `\x1b]0;pwned`) {
		t.Fatalf("line: %q", line)
	}
}
