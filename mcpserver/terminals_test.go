package mcpserver

import (
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/terminal"
)

// TestTerminalTools: open, type with keys, read the screen, resize, list
// and close, over MCP (the program runs on the host here); bad input is
// refused with what to do.
func TestTerminalTools(t *testing.T) {
	sessions := &terminal.Sessions{Max: 2}
	t.Cleanup(sessions.CloseAll)
	s := connect(t, &fake{}, Options{Toolsets: []string{"terminals"}, Terminals: sessions})

	r := s.call("terminal_open", map[string]any{"command": `printf 'name? '; read -r n; echo "hello $n"; read -r x; exit 5`, "cols": 60, "rows": 10})
	id, _ := r.data["id"].(string)
	if r.isError || id == "" || !strings.Contains(r.text, "name?") {
		t.Fatalf("open: %s", r.text)
	}
	if r := s.call("terminal_send", map[string]any{"id": id, "text": "ann", "keys": []any{"Enter"}, "wait_ms": 2000}); r.isError ||
		!strings.Contains(r.text, "hello ann") {
		t.Fatalf("send: %s", r.text)
	}
	if r := s.call("terminal_resize", map[string]any{"id": id, "cols": 80, "rows": 20}); r.isError || r.data["cols"] != 80.0 {
		t.Fatalf("resize: %s", r.text)
	}
	for args, want := range map[string]map[string]any{
		"unknown key":      {"id": id, "keys": []any{"Hyper"}},
		"no such terminal": {"id": "t00000000", "text": "x"},
		`"id" is required`: {"text": "x"},
		"from 1 to 400":    {"id": id, "cols": 500, "rows": 500},
	} {
		tool := "terminal_send"
		if _, ok := want["cols"]; ok {
			tool = "terminal_resize"
		}
		if r := s.call(tool, want); !r.isError || !strings.Contains(r.text, args) {
			t.Errorf("%s %v: %s", tool, want, r.text)
		}
	}
	if r := s.call("terminal_resize", map[string]any{"id": id, "cols": 0, "rows": 0}); !r.isError {
		t.Errorf("a 0x0 resize: %s", r.text)
	}
	if r := s.call("terminal_list", map[string]any{}); !strings.Contains(r.text, id) || !strings.Contains(r.text, "running") {
		t.Fatalf("list: %s", r.text)
	}
	s.call("terminal_send", map[string]any{"id": id, "keys": []any{"Enter"}})
	var last result
	for deadline := time.Now().Add(30 * time.Second); ; {
		last = s.call("terminal_read", map[string]any{"id": id, "wait_ms": 1000})
		if last.data["exited"] == true || time.Now().After(deadline) {
			break
		}
	}
	if last.data["exit_code"] != 5.0 || !strings.Contains(last.text, "exited with status 5") {
		t.Fatalf("the end: %s", last.text)
	}
	if r := s.call("terminal_send", map[string]any{"id": id, "text": "late"}); !r.isError || !strings.Contains(r.text, "ended") {
		t.Fatalf("typing into an ended session: %s", r.text)
	}
	if r := s.call("terminal_close", map[string]any{"id": id}); r.isError || !strings.Contains(r.text, "exit 5") {
		t.Fatalf("close: %s", r.text)
	}
	if r := s.call("terminal_read", map[string]any{"id": id}); !r.isError {
		t.Fatalf("a read of a closed session: %s", r.text)
	}
}
