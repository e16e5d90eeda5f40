package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/terminal"
)

// benchTerminals: keystroke to echo on the rendered screen, through the
// path a terminal session takes (a host pseudo-terminal, the engine's
// exec with a TTY, the shell's echo, the emulator), and the server's
// memory while a session prints 100 MB.
func (b *bench) benchTerminals() error {
	if _, err := b.main.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	ctr := b.launch.prefix + "-default"
	cmd := exec.Command(b.engine, "exec", "-it", "-e", "TERM=xterm-256color", ctr, "sh")
	sess, err := terminal.Start("bench", "default", "sh", proc.FromCmd(cmd), 120, 40)
	if err != nil {
		return err
	}
	defer sess.Close(2 * time.Second)
	if !sess.Await(30*time.Second, func(l []string) bool { return len(l) > 0 }) {
		return fmt.Errorf("the shell showed no prompt")
	}
	var lat []time.Duration
	typed := ""
	for i := range 220 {
		c := string(rune('a' + i%26))
		typed += c
		want := typed
		start := time.Now()
		if err := sess.Send(c, nil); err != nil {
			return err
		}
		if !sess.Await(10*time.Second, func(l []string) bool { return len(l) > 0 && strings.HasSuffix(l[len(l)-1], want) }) {
			return fmt.Errorf("keystroke %d never showed", i)
		}
		if i >= 20 { // the first warm up
			lat = append(lat, time.Since(start))
		}
		if len(typed) >= 60 {
			if err := sess.Send("", []string{"Ctrl-U"}); err != nil {
				return err
			}
			typed = ""
			if !sess.Await(10*time.Second, func(l []string) bool { return len(l) > 0 && !strings.HasSuffix(l[len(l)-1], "z") }) {
				return fmt.Errorf("the line was not cleared")
			}
		}
	}
	slices.Sort(lat)
	p50 := lat[len(lat)/2]
	report("terminal: keystroke to echo on the screen, p50 of 200", ms3(p50), "", 0, "<= 5 ms", p50 <= 5*time.Millisecond)

	// 100 MB through a session of a fresh server: its memory.
	s, err := b.launch.start(b.ctx, filepath.Join(b.dir, "terminal-state"))
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := s.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	pid := s.pid()
	start, hwm, _, err := memoryOf(s, pid, func() error {
		res, _, err := s.call(b.ctx, "terminal_open", map[string]any{"command": "yes 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxy | head -c 100000000"})
		if err != nil {
			return err
		}
		id, _ := structured(res)["id"].(string)
		for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); {
			res, _, err := s.call(b.ctx, "terminal_read", map[string]any{"id": id, "wait_ms": 2000})
			if err != nil {
				return err
			}
			if structured(res)["exited"] == true {
				return nil
			}
		}
		return fmt.Errorf("100 MB took over 10 minutes")
	})
	if err != nil {
		return err
	}
	report("terminal printing 100 MB: server RSS growth", mib(hwm-start), "before "+mib(start), 0, "<= 20 MiB", hwm-start <= 20<<20)
	return nil
}

// structured is a tool result's structured content as a map.
func structured(res *mcp.CallToolResult) map[string]any {
	raw, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m
}
