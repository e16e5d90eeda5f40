package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// guarded is a context that ends a hung call; it is no speed check.
func guarded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// TestReadFileOnEngine: read_file refuses what is not a regular file at
// once, reads kernel files up to its bound, and never hangs.
func TestReadFileOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			m := newManager(t, tg, enginetest.Prefix(t, tg.New()))
			const box = "reads"
			run(t, m, box, shell.Request{Command: "mkfifo /tmp/rfifo && head -c 1048577 /dev/zero >/workspace/over && printf 0123456789 >/workspace/ten"})

			for _, c := range []struct{ path, want string }{
				{"/dev/zero", "a character device"},
				{"/dev/urandom", "a character device"},
				{"/tmp/rfifo", "a fifo"},
				{"/proc/self/fd/0", "not a regular file"},
				{"/workspace", "is a directory"},
				{"/nonexistent", "no such file"},
			} {
				start := time.Now()
				_, err := m.ReadFile(guarded(t), box, c.path, 0, 0)
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: %v", c.path, err)
				}
				if took := time.Since(start); took > hangGuard {
					t.Errorf("%s: answered after %v", c.path, took)
				}
			}
			_, err := m.ReadFile(guarded(t), box, "/dev/zero", 0, 10)
			if err == nil || !strings.Contains(err.Error(), "use exec") {
				t.Errorf("/dev/zero with a length: %v", err)
			}

			data, err := m.ReadFile(guarded(t), box, "/proc/self/status", 0, 0)
			if err != nil || !bytes.Contains(data, []byte("Name:")) {
				t.Errorf("/proc/self/status: %q %v", data, err)
			}
			data, err = m.ReadFile(guarded(t), box, "/proc/self/status", 2, 3)
			if err != nil || len(data) != 3 {
				t.Errorf("/proc/self/status from 2: %q %v", data, err)
			}
			data, err = m.ReadFile(guarded(t), box, "/workspace/ten", 4, 3)
			if err != nil || string(data) != "456" {
				t.Errorf("range: %q %v", data, err)
			}
			data, err = m.ReadFile(guarded(t), box, "/workspace/ten", 20, 0)
			if err != nil || len(data) != 0 {
				t.Errorf("past the end: %q %v", data, err)
			}
			if _, err := m.ReadFile(guarded(t), box, "/workspace/over", 0, 0); !errors.Is(err, sandbox.ErrTooLarge) {
				t.Errorf("over the cap: %v", err)
			}
			data, err = m.ReadFile(guarded(t), box, "/workspace/over", 1, 0)
			if err != nil || len(data) != sandbox.MaxReadFile {
				t.Errorf("exactly the cap: %d %v", len(data), err)
			}
		})
	}
}
