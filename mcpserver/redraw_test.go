package mcpserver

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

func TestRedrawWriter(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain\ntext\n", "plain\ntext\n"},
		{"0%\r50%\r100%\ndone\n", "100%\ndone\n"},
		{"crlf\r\nline\r\n", "crlf\nline\n"},
		{"Progress: [ 10%]\rProgress: [ 90%]\r", "Progress: [ 90%]"},
		{"no newline at end", "no newline at end"},
		{"a\r\r\nb", "\nb"},
	} {
		for _, size := range []int{1, 3, 1 << 10} { // any split of the writes
			var b strings.Builder
			w := newRedrawWriter(&b)
			for in := tc.in; in != ""; {
				n := min(size, len(in))
				if _, err := w.Write([]byte(in[:n])); err != nil {
					t.Fatal(err)
				}
				in = in[n:]
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("%q in writes of %d: got %q, want %q", tc.in, size, b.String(), tc.want)
			}
		}
	}
	var b strings.Builder
	w := newRedrawWriter(&b)
	long := strings.Repeat("x", 3*maxRedrawLine)
	_, _ = w.Write([]byte(long))
	_ = w.Close()
	if b.String() != long {
		t.Errorf("a long line without newline: %d bytes of %d", b.Len(), len(long))
	}
}

// TestInstallCollapsesRedraws: install's result keeps the last state of a
// progress line; exec's keeps every byte.
func TestInstallCollapsesRedraws(t *testing.T) {
	const printed = "Reading 0%\rReading 50%\rReading 100%\nDone\n"
	f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		_, _ = req.Stdout.Write([]byte(printed))
		return sandbox.ExecResult{}, nil
	}}
	s := connect(t, f, Options{})
	if r := s.call("install", map[string]any{"packages": []any{"jq"}}); r.data["stdout"] != "Reading 100%\nDone\n" {
		t.Errorf("install: %q", r.data["stdout"])
	}
	if r := s.call("exec", map[string]any{"command": "x"}); r.data["stdout"] != printed {
		t.Errorf("exec: %q", r.data["stdout"])
	}
}
