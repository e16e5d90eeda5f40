package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestTerminals: a terminal session in a real sandbox: a curses program
// draws where it says and takes a key; the login shell has a terminal of
// the size asked, the env tool's variables and keeps state between sends;
// a resize reaches it; a session whose sandbox is destroyed answers a read
// at once, as ended.
func TestTerminals(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "", "--toolsets", "core,lifecycle,terminals")
			terminalScenario(t, s)
		})
	}
}

// terminalScenario is TestTerminals on server s (its toolsets include
// terminals).
func terminalScenario(t *testing.T, s *server) {
	read := func(id, want string) result {
		t.Helper()
		var r result
		enginetest.WaitFor(t, fmt.Sprintf("%q on the screen of %s, or its end", want, id), func() error {
			r = s.call(t, "terminal_read", map[string]any{"id": id, "wait_ms": 2000})
			if !strings.Contains(r.text, want) && r.data["exited"] != true {
				return errors.New(r.text)
			}
			return nil
		})
		return r
	}

	curses := `python3 -c '
import curses
def main(w):
    w.addstr(5, 10, "hello curses")
    w.refresh()
    return w.getch()
raise SystemExit(curses.wrapper(main) - 96)'`
	r := s.call(t, "terminal_open", map[string]any{"command": curses, "cols": 80, "rows": 24})
	id, _ := r.data["id"].(string)
	if r.isError || id == "" {
		t.Fatalf("open: %s", r.text)
	}
	r = read(id, "hello curses")
	lines, _ := r.data["screen"].([]any)
	if len(lines) < 6 || !strings.HasPrefix(lines[5].(string), strings.Repeat(" ", 10)+"hello curses") {
		t.Fatalf("the curses screen: %s", r.text)
	}
	s.call(t, "terminal_send", map[string]any{"id": id, "text": "c"})
	if r = read(id, "exited"); r.data["exit_code"] != 3.0 {
		t.Fatalf("the key did not reach the program: %s", r.text)
	}

	if r := s.call(t, "env", map[string]any{"action": "set", "key": "GREETING", "value": "hi-there"}); r.isError {
		t.Fatalf("env: %s", r.text)
	}
	r = s.call(t, "terminal_open", map[string]any{"cols": 100, "rows": 30})
	sh, _ := r.data["id"].(string)
	if r.isError || sh == "" {
		t.Fatalf("open a shell: %s", r.text)
	}
	s.call(t, "terminal_send", map[string]any{"id": sh, "text": "cd /tmp; X=kept; tty; stty size; echo $GREETING", "keys": []any{"Enter"}})
	r = read(sh, "hi-there")
	if !strings.Contains(r.text, "/dev/pts/") || !strings.Contains(r.text, "30 100") {
		t.Fatalf("the shell's terminal: %s", r.text)
	}
	if r := s.call(t, "terminal_list", map[string]any{}); !strings.Contains(r.text, sh+"  default  100x30  running") ||
		!strings.Contains(r.text, id+"  default  80x24  exited 3") {
		t.Fatalf("list: %s", r.text)
	}
	if r := s.call(t, "terminal_resize", map[string]any{"id": sh, "cols": 90, "rows": 25}); r.isError {
		t.Fatalf("resize: %s", r.text)
	}
	// The engine passes the new size on asynchronously (docker's CLI
	// calls its API on SIGWINCH): ask until the program sees it.
	enginetest.WaitFor(t, "the program to see the new size", func() error {
		r := s.call(t, "terminal_send", map[string]any{"id": sh, "text": "echo $X-$(pwd)-$(stty size)", "keys": []any{"Enter"}, "wait_ms": 1000})
		if !strings.Contains(r.text, "kept-/tmp-25 90") {
			return errors.New(r.text)
		}
		return nil
	})

	// Closing a session ends its processes in the sandbox, those it
	// put in the background too.
	r = s.call(t, "terminal_open", map[string]any{"command": "sleep 777 & sleep 778"})
	bg, _ := r.data["id"].(string)
	count := `for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 77[78] $'`
	sleeps := func(want string) func() error {
		return func() error {
			if r := s.call(t, "exec", map[string]any{"command": count}); r.str("stdout") != want {
				return fmt.Errorf("%q of them run: %s", r.str("stdout"), r.text)
			}
			return nil
		}
	}
	enginetest.WaitFor(t, "the session's sleeps to run", sleeps("2\n"))
	if r := s.call(t, "terminal_close", map[string]any{"id": bg}); r.isError {
		t.Fatalf("close: %s", r.text)
	}
	enginetest.WaitFor(t, "the closed session's processes to end in the sandbox", sleeps("0\n"))

	if r := s.call(t, "destroy", map[string]any{}); r.isError {
		t.Fatalf("destroy: %s", r.text)
	}
	// read gives up (fails) if the session never ends.
	if r = read(sh, "exited"); r.data["exited"] != true {
		t.Fatalf("after the destroy: %s", r.text)
	}
}
