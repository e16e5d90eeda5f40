package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Host bounds: what a sandbox's output and a client's large requests cost
// the host. The defaults under test: 256 MiB of saved outputs, 64 MiB per
// call, 32 MiB per JSON-RPC message.
const (
	outputsCap   = 256 << 20
	messageLimit = 32 << 20
	catFor       = 30 * time.Second
	manyCatFor   = 15 * time.Second
	manyCats     = 6
)

// benchBounds runs a fresh server on its own state directory, so its
// figures are its own: `cat /dev/zero` against the saved-output caps, and
// the memory of large requests and of a large output.
func (b *bench) benchBounds() error {
	stateDir := filepath.Join(b.dir, "bounds-state")
	s, err := b.launch.start(b.ctx, stateDir)
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := s.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	if _, err := s.execTrue(b.ctx, "bounds2"); err != nil {
		return err
	}

	// One cat /dev/zero with an hour's timeout, canceled after 30 s.
	outputs := filepath.Join(stateDir, "outputs")
	peak, err := sampleDir(outputs, func() error {
		return catZero(b.ctx, s, "default", catFor)
	})
	if err != nil {
		return err
	}
	b.reportOutputs("cat /dev/zero 30 s: outputs peak / after", stateDir, peak)

	// Many at once, over two sandboxes: the directory cap, not the
	// per-call one, is what holds.
	peak, err = sampleDir(outputs, func() error {
		var wg sync.WaitGroup
		errs := make([]error, manyCats)
		for i := range manyCats {
			name := "default"
			if i%2 == 1 {
				name = "bounds2"
			}
			wg.Go(func() { errs[i] = catZero(b.ctx, s, name, manyCatFor) })
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		return err
	}
	b.reportOutputs(fmt.Sprintf("%d x cat /dev/zero at once: outputs", manyCats), stateDir, peak)

	pid := s.pid()
	// A 24 MB write_file: a message of about 32 MB.
	data := make([]byte, 24_000_000)
	_, _ = rand.Read(data)
	args := map[string]any{"path": "/tmp/bench-big", "content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"}
	msg := messageSize("write_file", args)
	start, hwm, after, err := memoryOf(s, pid, func() error {
		_, _, err := s.call(b.ctx, "write_file", args)
		return err
	})
	if err != nil {
		return err
	}
	report("24 MB write_file: peak RSS vs message", mib(hwm), fmt.Sprintf("message %s, RSS before %s", mib(msg), mib(start)),
		float64(hwm)/float64(msg), "<= 4x", hwm <= 4*msg)
	report("24 MB write_file: RSS after vs before", mib(after), "before "+mib(start), 0, "<= before + 50 MiB", after <= start+50<<20)

	// A 150 MB write_file: refused at the message limit.
	args = map[string]any{"path": "/tmp/bench-huge", "content": strings.Repeat("a", 150_000_000)}
	start, hwm, after, err = memoryOf(s, pid, func() error {
		_, _, err := s.call(b.ctx, "write_file", args)
		if err == nil || !strings.Contains(err.Error(), "message too large") {
			return fmt.Errorf("150 MB write_file: want the message limit's error, got %v", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	report("150 MB write_file (refused): peak RSS", mib(hwm), "limit "+mib(messageLimit)+", before "+mib(start),
		float64(hwm)/float64(messageLimit), "<= 4x limit", hwm <= 4*messageLimit)
	report("150 MB write_file (refused): RSS after", mib(after), "before "+mib(start), 0, "<= before + 50 MiB", after <= start+50<<20)

	// A command with 10 MB of output.
	start, hwm, after, err = memoryOf(s, pid, func() error {
		_, _, err := s.call(b.ctx, "exec", map[string]any{"command": "head -c 10000000 /dev/zero | tr '\\0' x"})
		return err
	})
	if err != nil {
		return err
	}
	report("10 MB command output: peak RSS growth", mib(hwm-start), "before "+mib(start)+", after "+mib(after), 0,
		"<= 20 MiB", hwm-start <= 20<<20)
	return nil
}

// reportOutputs reports the saved outputs' peak and present size against
// the cap, with the whole state directory's size beside them.
func (b *bench) reportOutputs(what, stateDir string, peak int64) {
	final := duBytes(filepath.Join(stateDir, "outputs"))
	report(what, fmt.Sprintf("%s / %s", mib(peak), mib(final)),
		fmt.Sprintf("state dir %s; cap %s", mib(duBytes(stateDir)), mib(outputsCap)), 0, "<= cap", peak <= outputsCap && final <= outputsCap)
}

// catZero runs `cat /dev/zero` with an hour's timeout and cancels the call
// after d, as a client that gives up would.
func catZero(ctx context.Context, s *benchServer, sandbox string, d time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, _, err := s.call(cctx, "exec", map[string]any{"sandbox": sandbox, "command": "cat /dev/zero", "timeout": 3600})
	if err != nil && cctx.Err() == nil {
		return err
	}
	// The server stops the command on the cancel; wait until it has.
	for range 50 {
		res, _, err := s.call(ctx, "exec", map[string]any{"sandbox": sandbox, "command": "pgrep -x cat >/dev/null && echo running || echo stopped"})
		if err != nil {
			return err
		}
		if strings.Contains(text(res), "stopped") {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("cat /dev/zero in %s still runs 5 s after its call was canceled", sandbox)
}

// sampleDir runs f and returns the most the directory held meanwhile.
func sampleDir(dir string, f func() error) (int64, error) {
	var peak int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			peak = max(peak, duBytes(dir))
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	err := f()
	close(stop)
	<-done
	return max(peak, duBytes(dir)), err
}

// duBytes is the disk space the files under dir take, as du counts it.
func duBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// memoryOf runs f and returns the server's RSS before, its peak during
// (the peak is reset first) and its RSS a second after, in bytes.
func memoryOf(s *benchServer, pid int, f func() error) (start, hwm, after int64, err error) {
	time.Sleep(500 * time.Millisecond)
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return 0, 0, 0, fmt.Errorf("reset the server's peak RSS: %w", err)
	}
	start = rssKB(pid, "VmRSS") << 10
	if err := f(); err != nil {
		return 0, 0, 0, err
	}
	hwm = rssKB(pid, "VmHWM") << 10
	time.Sleep(time.Second)
	after = rssKB(pid, "VmRSS") << 10
	return start, hwm, after, nil
}

// messageSize is the size of the JSON-RPC message of a tools/call.
func messageSize(tool string, args map[string]any) int64 {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
		"params": &mcp.CallToolParams{Name: tool, Arguments: args}})
	return int64(len(b))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
