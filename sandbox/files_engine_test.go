package sandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/pysession"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// The sandbox of the file tests has small filesystems in memory, so the
// tests fill them and never the host's disk:
//
//	/data  1 MiB, filled and emptied by the tests
//	/ro    read-only
//	/tmp   4 MiB, room for the input of a 1 MB write while it is staged
const (
	dataSize = 1 << 20
	tmpSize  = 4 << 20
)

func filesManager(t *testing.T, tg enginetest.Target) *sandbox.Manager {
	t.Helper()
	rt := enginetest.WithTmpfs(t, tg.New(),
		enginetest.Tmpfs{Target: "/data", Size: dataSize},
		enginetest.Tmpfs{Target: "/ro", Size: 64 << 10, ReadOnly: true},
		enginetest.Tmpfs{Target: "/tmp", Size: tmpSize},
	)
	prefix := enginetest.Prefix(t, rt)
	m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}})
	t.Cleanup(m.Close)
	return m
}

// guarded is a context that ends a hung call; it is no speed check. It
// counts from now: take it for a call in a sandbox already booted.
func guarded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// guardedSequence is guarded for a context that a test's whole sequence
// of calls shares (boots, snapshots, restores, clones, one after the
// other): a hang of any of them ends it, and the sum of calls that each
// take a minute on a loaded machine does not.
func guardedSequence(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*hangGuard)
	t.Cleanup(cancel)
	return ctx
}

// writeErr asserts that err is a *WriteError with cause and returns it.
func writeErr(t *testing.T, err error, cause string) *sandbox.WriteError {
	t.Helper()
	var we *sandbox.WriteError
	if !errors.As(err, &we) {
		t.Fatalf("want a write error (%s), got %T %v", cause, err, err)
	}
	if we.Cause != cause || !strings.Contains(err.Error(), cause) {
		t.Fatalf("cause %q, want %q: %v", we.Cause, cause, err)
	}
	t.Log(err)
	return we
}

// size is a file's size as the sandbox sees it, or -1 when it is missing.
func size(t *testing.T, m *sandbox.Manager, box, path string) int64 {
	t.Helper()
	o := run(t, m, box, shell.Request{Command: "if [ -e '" + path + "' ]; then wc -c <'" + path + "'; else echo -1; fi"})
	n, err := strconv.ParseInt(strings.TrimSpace(o.stdout), 10, 64)
	if err != nil {
		t.Fatalf("size of %s: %q", path, o.stdout)
	}
	return n
}

// TestWriteFileOnEngine: a write is reported as done only when every byte
// is in the file; a failure names its cause and what is left.
func TestWriteFileOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			m := filesManager(t, tg)
			const box = "files"
			mb := bytes.Repeat([]byte("0123456789"), 100000) // 1,000,000 bytes
			// Boot first, so that no write's guard counts the boot.
			run(t, m, box, shell.Request{Command: "true"})

			t.Run("a clean write is checked", func(t *testing.T) {
				w, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/data/sub/dir/a.txt", Data: mb})
				if err != nil || w.Bytes != int64(len(mb)) || w.Size != int64(len(mb)) {
					t.Fatalf("%+v %v", w, err)
				}
				if got := size(t, m, box, "/data/sub/dir/a.txt"); got != int64(len(mb)) {
					t.Fatalf("size in the sandbox %d", got)
				}
				run(t, m, box, shell.Request{Command: "rm -r /data/sub"})
			})
			exists := func(p string) string {
				return strings.TrimSpace(run(t, m, box, shell.Request{Command: "test -e " + p + " && cat " + p + " || echo none"}).stdout)
			}
			t.Run("full tmpfs", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "head -c 2000000 /dev/zero >/data/fill; df /data"})
				_, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/data/big", Data: mb})
				we := writeErr(t, err, guest.CauseNoSpace)
				if we.Landed > 0 || we.Sent != int64(len(mb)) || !strings.Contains(err.Error(), "nothing was written") {
					t.Fatalf("%+v: %v", we, err)
				}
				if got := exists("/data/big"); got != "none" {
					t.Fatalf("a write that failed left a new file: %q", got)
				}
				// A 1 MiB write into a full 1 MiB tmpfs.
				_, err = m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/data/mib", Data: make([]byte, dataSize)})
				writeErr(t, err, guest.CauseNoSpace)
			})
			t.Run("partial space", func(t *testing.T) {
				// 100 KiB free: the write fails whole, and the file it was to
				// replace keeps its content (a write is all or nothing).
				run(t, m, box, shell.Request{Command: "rm -f /data/*; printf keep >/data/big; head -c 946176 /dev/zero >/data/fill; df /data"})
				_, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/data/big", Data: mb})
				we := writeErr(t, err, guest.CauseNoSpace)
				if we.Landed > 0 || !strings.Contains(err.Error(), "nothing was written") {
					t.Fatalf("%+v: %v", we, err)
				}
				if got := exists("/data/big"); got != "keep" {
					t.Fatalf("the file after a failed replace: %q", got)
				}
				if got := run(t, m, box, shell.Request{Command: "ls -A /data | grep -c sandbox-mcp-w || true"}).stdout; strings.TrimSpace(got) != "0" {
					t.Fatalf("temporary files left: %s", got)
				}
			})
			t.Run("append checks the growth", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "rm -f /data/*; printf 'head\\n' >/data/log"})
				w, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/data/log", Data: []byte("more\n"), Append: true})
				if err != nil || w.Size != 10 {
					t.Fatalf("%+v %v", w, err)
				}
				// Fill the rest, then append more than fits.
				run(t, m, box, shell.Request{Command: "head -c 946176 /dev/zero >/data/fill"})
				_, err = m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/data/log", Data: mb, Append: true})
				we := writeErr(t, err, guest.CauseNoSpace)
				if !we.Append || we.Landed <= 0 || we.Landed >= we.Sent || we.Size != 10+we.Landed ||
					!strings.Contains(err.Error(), "the file grew by") {
					t.Fatalf("%+v: %v", we, err)
				}
				if got := size(t, m, box, "/data/log"); got != we.Size {
					t.Fatalf("reported size %d, the sandbox has %d", we.Size, got)
				}
				run(t, m, box, shell.Request{Command: "rm -f /data/*"})
			})
			t.Run("batch into a full tmpfs", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "head -c 2000000 /dev/zero >/data/fill"})
				outs, err := m.WriteFiles(guarded(t), box, []sandbox.WriteRequest{
					{Path: "/data/a.txt", Data: []byte("small")},
					{Path: "/data/b.bin", Data: mb},
					{Path: "/workspace/ok.txt", Data: []byte("fine\n")},
				})
				if err != nil || len(outs) != 3 {
					t.Fatalf("%+v %v", outs, err)
				}
				for _, o := range outs[:2] {
					writeErr(t, o.Err, guest.CauseNoSpace)
				}
				if !errors.Is(outs[2].Err, sandbox.ErrBatchUndone) {
					t.Fatalf("the file with room: %+v", outs[2])
				}
				left := run(t, m, box, shell.Request{Command: "ls -A /workspace /data " + guest.BatchManifestDir + " 2>/dev/null | grep -c -e ok.txt -e sandbox-mcp-w -e batch-"})
				if got := strings.TrimSpace(left.stdout); got != "0" {
					t.Fatalf("a failed batch left %s files (its own, held ones or its manifest)", got)
				}
				run(t, m, box, shell.Request{Command: "rm -f /data/*"})
			})
			t.Run("batch lands whole or not at all", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "mkdir -p /workspace/bw && cd /workspace/bw && echo old-a >a && echo old-b >b && chmod 0600 b && ln -sf b link && echo x >plain"})
				batch := []sandbox.WriteRequest{
					{Path: "/workspace/bw/a", Data: []byte("new-a\n")},
					{Path: "/workspace/bw/link", Data: []byte("new-b\n")},
					{Path: "/workspace/bw/sub/c", Data: []byte("new-c\n")},
					{Path: "/workspace/bw/plain/d", Data: []byte("no")},
				}
				outs, err := m.WriteFiles(guarded(t), box, batch)
				if err != nil {
					t.Fatal(err)
				}
				writeErr(t, outs[3].Err, guest.CauseNotDir)
				for _, o := range outs[:3] {
					if !errors.Is(o.Err, sandbox.ErrBatchUndone) {
						t.Errorf("%s: %v", o.Path, o.Err)
					}
				}
				const show = "cd /workspace/bw && ls -A | tr '\\n' ' ' && cat a b && stat -c %a b"
				if got := run(t, m, box, shell.Request{Command: show}).stdout; got != "a b link plain old-a\nold-b\n600\n" {
					t.Fatalf("after a failed batch: %q", got)
				}
				outs, err = m.WriteFiles(guarded(t), box, batch[:3])
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range outs {
					if o.Err != nil || o.Size != 6 {
						t.Errorf("%s: %+v", o.Path, o)
					}
				}
				if got := run(t, m, box, shell.Request{Command: show + " && cat sub/c && readlink link"}).stdout; got != "a b link plain sub new-a\nnew-b\n600\nnew-c\nb\n" {
					t.Fatalf("after the batch: %q", got)
				}
			})
			t.Run("read-only", func(t *testing.T) {
				for _, p := range []string{"/ro/x", "/proc/sys/kernel/hostname"} {
					_, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: p, Data: []byte("x")})
					we := writeErr(t, err, guest.CauseReadOnly)
					if we.Landed > 0 {
						t.Fatalf("%s: %+v", p, we)
					}
				}
				_, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/ro/sub/x", Data: []byte("x")})
				writeErr(t, err, guest.CauseReadOnly)
			})
			t.Run("permission denied", func(t *testing.T) {
				// Lowering the OOM score needs CAP_SYS_RESOURCE, which no
				// container here has.
				_, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/proc/1/oom_score_adj", Data: []byte("-1000")})
				writeErr(t, err, guest.CausePermission)
			})
			t.Run("not a directory", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "echo x >/workspace/plain"})
				_, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/workspace/plain/a/b", Data: []byte("x")})
				writeErr(t, err, guest.CauseNotDir)
				_, err = m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/workspace", Data: []byte("x")})
				writeErr(t, err, guest.CauseIsDir)
			})
			t.Run("devices and fifos are refused", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "rm -f /tmp/wfifo; mkfifo /tmp/wfifo"})
				for _, p := range []string{"/dev/null", "/tmp/wfifo", "/dev/full"} {
					_, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: p, Data: []byte("x")})
					writeErr(t, err, guest.CauseNotRegular)
				}
			})
			t.Run("a kernel file is written, its size not claimed", func(t *testing.T) {
				// Raising one's own OOM score is allowed; /proc/self is the
				// writer's, so go through the shell's pid.
				w, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/proc/1/oom_score_adj", Data: []byte("500")})
				if err != nil || w.Size != -1 {
					t.Fatalf("%+v %v", w, err)
				}
			})
			t.Run("sha256", func(t *testing.T) {
				sum := sha256.Sum256(mb)
				hexSum := hex.EncodeToString(sum[:])
				w, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/workspace/h", Data: mb, SHA256: strings.ToUpper(hexSum)})
				if err != nil || w.SHA256 != hexSum {
					t.Fatalf("%+v %v", w, err)
				}
				// A hash that is not the content's: nothing is written.
				_, err = m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/workspace/h2", Data: mb, SHA256: strings.Repeat("0", 64)})
				var ae *sandbox.ArgError
				if !errors.As(err, &ae) || size(t, m, box, "/workspace/h2") != -1 {
					t.Fatalf("%v", err)
				}
				// Chunks appended, the last one checks the whole file.
				half := len(mb) / 2
				if _, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/workspace/h3", Data: mb[:half]}); err != nil {
					t.Fatal(err)
				}
				w, err = m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/workspace/h3", Data: mb[half:], Append: true, SHA256: hexSum})
				if err != nil || w.Size != int64(len(mb)) || w.SHA256 != hexSum {
					t.Fatalf("%+v %v", w, err)
				}
				_, err = m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/workspace/h3", Data: []byte("x"), Append: true, SHA256: hexSum})
				we := writeErr(t, err, sandbox.CauseHashMismatch)
				if we.GotSHA == hexSum || we.Landed != 1 {
					t.Fatalf("%+v", we)
				}
			})
			t.Run("full /tmp, write to /workspace", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "head -c 8000000 /dev/zero >/tmp/fill; df /tmp"})
				t.Cleanup(func() { run(t, m, box, shell.Request{Command: "rm -f /tmp/fill"}) })
				// Input comes through a pipe, so a full /tmp costs nothing.
				w, err := m.WriteFile(guarded(t), box, sandbox.WriteRequest{Path: "/workspace/after-tmp-full", Data: mb})
				if err != nil || w.Size != int64(len(mb)) || size(t, m, box, "/workspace/after-tmp-full") != int64(len(mb)) {
					t.Fatalf("%+v %v", w, err)
				}
				// exec's stdin and python's code take the same path.
				o := run(t, m, box, shell.Request{Command: "wc -c", Stdin: bytes.Repeat([]byte("x"), 5000)})
				if o.stdout != "5000\n" {
					t.Fatalf("stdin with /tmp full: %q", o.stdout)
				}
				res, err := m.RunPython(guarded(t), box, "default", pysession.Request{Code: "import sys\nprint('py', 6*7)\nsys.exit(3)", Timeout: time.Minute, Limit: 4096})
				if err != nil || res.Error == nil || res.Error.Type != "SystemExit" || res.Stdout.Text() != "py 42\n" {
					t.Fatalf("python with /tmp full: %+v %v", res, err)
				}
			})
		})
	}
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
