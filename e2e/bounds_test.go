package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// dirSize is the bytes of the regular files in dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// TestCatDevZeroIsBounded: `cat /dev/zero` saves its output only up to the
// per-call cap while it runs on to its timeout with an exact head and tail;
// more such calls keep the outputs directory within its cap by removing
// the oldest saved output.
func TestCatDevZeroIsBounded(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			s := startServer(t, tg, prefix, "", "--outputs-cap", "8M", "--output-cap-per-call", "4M")
			outputs := filepath.Join(s.stateDir, "outputs")
			var peak int64
			stop, sampled := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					peak = max(peak, dirSize(outputs))
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
			catZero := func() result {
				return s.call(t, "exec", map[string]any{"command": "cat /dev/zero", "timeout": 3, "max_output": 4096})
			}

			r := catZero()
			if r.data["timed_out"] != true || r.num("stdout_bytes") <= 4<<20 {
				t.Fatalf("the command should run on past the cap to its timeout: %+v / %s", r.data, r.text)
			}
			if !strings.Contains(r.text, "the full output was cut at 4194304 bytes (one command saves at most 4 MiB)") {
				t.Fatalf("no cut note: %q", r.text)
			}
			if out := r.str("stdout"); strings.Count(out, "\x00") != 4096 {
				t.Fatalf("head and tail should be 4096 NUL bytes: %q", out)
			}
			first := r.str("output_id")
			o := s.call(t, "output", map[string]any{"id": first, "offset": 4<<20 - 4, "length": 100})
			if o.isError || o.num("total_bytes") != 4<<20 || o.str("data") != "\x00\x00\x00\x00" {
				t.Fatalf("output: %+v", o)
			}

			var wg sync.WaitGroup
			later := make([]result, 2)
			for i := range later {
				wg.Go(func() { later[i] = catZero() })
			}
			wg.Wait()
			close(stop)
			<-sampled
			if peak > 8<<20 || dirSize(outputs) > 8<<20 {
				t.Fatalf("outputs directory held %d bytes at most (now %d), over its 8 MiB cap", peak, dirSize(outputs))
			}
			if o := s.call(t, "output", map[string]any{"id": first}); !o.isError || !strings.Contains(o.text, "no saved stdout") {
				t.Fatalf("the oldest saved output should be gone: %+v", o)
			}
			for _, r := range later {
				if o := s.call(t, "output", map[string]any{"id": r.str("output_id"), "length": 10}); o.isError {
					t.Fatalf("a newer saved output is gone: %+v / %s", o, r.text)
				}
			}
		})
	}
}

// serverPID asks the server's health tool for its process id.
func serverPID(t *testing.T, s *server) int {
	t.Helper()
	r := s.call(t, "health", map[string]any{})
	srv, _ := r.data["server"].(map[string]any)
	pid, _ := srv["pid"].(float64)
	if pid == 0 {
		t.Fatalf("health: no server pid: %+v", r.data)
	}
	return int(pid)
}

// procKB reads a field of /proc/pid/status in KiB.
func procKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestLargeMessages: a 150 MB write_file is refused with the message
// limit's error, which says how to send large files, without the server's
// memory following the message; the server serves the next call; a 24 MB
// write_file (a 32 MB message) lands intact, and the memory it took is
// returned after it.
func TestLargeMessages(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to read the server's memory")
	}
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			s := startServer(t, tg, prefix, "")
			pid := serverPID(t, s)
			if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
				t.Fatalf("reset the peak RSS: %v", err)
			}

			ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
			defer cancel()
			_, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{
				"path": "/tmp/huge", "content": strings.Repeat("a", 150_000_000)}})
			if err == nil || !strings.Contains(err.Error(), "message too large: over the 32 MiB limit") ||
				!strings.Contains(err.Error(), "write_file and append=true") {
				t.Fatalf("want the message limit's error, got %v", err)
			}
			hwm := procKB(t, pid, "VmHWM")
			t.Logf("peak RSS while refusing a 150 MB message: %d KiB", hwm)
			if hwm > 4*32<<10 {
				t.Errorf("peak RSS %d KiB while refusing the message, over 4x the 32 MiB limit", hwm)
			}
			if r := s.call(t, "exec", map[string]any{"command": "test -e /tmp/huge || echo absent"}); r.str("stdout") != "absent\n" {
				t.Fatalf("after the refused message: %+v", r)
			}

			data := make([]byte, 24_000_000)
			_, _ = rand.Read(data)
			sum := sha256.Sum256(data)
			before := procKB(t, pid, "VmRSS")
			r := s.call(t, "write_file", map[string]any{"path": "/tmp/big", "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"})
			if r.isError || r.num("bytes") != 24_000_000 {
				t.Fatalf("24 MB write_file: %+v", r)
			}
			if r := s.call(t, "exec", map[string]any{"command": "sha256sum </tmp/big"}); !strings.HasPrefix(r.str("stdout"), hex.EncodeToString(sum[:])) {
				t.Fatalf("the file differs: %q", r.str("stdout"))
			}
			// Long text full of escapes, alone and nested in batch_write,
			// lands byte for byte too.
			text := strings.Repeat("line \"quoted\" \\ back\tslash é ✓ </x>\n", 100_000)
			tsum := sha256.Sum256([]byte(text))
			if r := s.call(t, "write_file", map[string]any{"path": "/tmp/text", "content": text}); r.isError {
				t.Fatalf("long text write_file: %s", r.text)
			}
			if r := s.call(t, "batch_write", map[string]any{"files": map[string]any{"/tmp/b1": text, "/tmp/b2": "short"}}); r.isError {
				t.Fatalf("long text batch_write: %s", r.text)
			}
			if r := s.call(t, "exec", map[string]any{"command": "sha256sum </tmp/text; sha256sum </tmp/b1; cat /tmp/b2"}); r.str("stdout") !=
				strings.Repeat(hex.EncodeToString(tsum[:])+"  -\n", 2)+"short" {
				t.Fatalf("the long text differs: %q", r.str("stdout"))
			}
			enginetest.WaitFor(t, "the memory of the 24 MB write_file to be returned", func() error {
				after := procKB(t, pid, "VmRSS")
				if after > before+50<<10 {
					return fmt.Errorf("RSS %d KiB after the call, %d KiB before", after, before)
				}
				t.Logf("RSS %d KiB before the 24 MB write_file, %d KiB after", before, after)
				return nil
			})
		})
	}
}

// TestBadArgumentsAreRefused: an empty or non-string sandbox name, a
// timeout outside 1-3600 or of the wrong type and an unknown argument are
// tool errors that name the argument, and no sandbox is booted for them.
func TestBadArgumentsAreRefused(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			s := startServer(t, tg, prefix, "")
			for _, c := range []struct {
				args map[string]any
				want string
			}{
				{map[string]any{"command": "true", "sandbox": ""}, `"sandbox" must be a name (names are 1-63 letters, digits, '_', '.', '-', starting with a letter or digit); got the string ""`},
				{map[string]any{"command": "true", "sandbox": 5}, `"sandbox" must be a name (names are 1-63`},
				{map[string]any{"command": "true", "timeout": 0.001}, `"timeout" must be a number from 1 to 3600; got the number 0.001`},
				{map[string]any{"command": "true", "timeout": 7200}, `"timeout" must be a number from 1 to 3600; got the number 7200`},
				{map[string]any{"command": "true", "timeout": "5"}, `"timeout" must be a number from 1 to 3600; got the string "5"`},
				{map[string]any{"command": "true", "timout": 5}, `unknown argument "timout"; exec takes command,`},
			} {
				if r := s.call(t, "exec", c.args); !r.isError || !strings.Contains(r.text, c.want) {
					t.Errorf("%v: want a tool error containing %q, got %+v", c.args, c.want, r)
				}
			}
			if r := s.call(t, "list_all", map[string]any{}); r.isError || strings.Contains(r.text, "default") {
				t.Fatalf("a bad call booted a sandbox: %s", r.text)
			}
		})
	}
}
