package mcpserver

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/diskguard"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// writeOut is a fake command that writes n bytes to w in 32 KiB pieces:
// "HEAD", then filler, then "TAIL".
func writeOut(w interface{ Write([]byte) (int, error) }, n int) {
	data := []byte("HEAD" + strings.Repeat("x", n-8) + "TAIL")
	for len(data) > 0 {
		k := min(32<<10, len(data))
		_, _ = w.Write(data[:k])
		data = data[k:]
	}
}

// dirBytes is what the spill files in dir hold.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += info.Size()
	}
	return n
}

// TestSpillCutAtCallCap: a call whose output passes the per-call cap keeps
// an exact head and tail and a saved copy cut at the cap, and says so.
func TestSpillCutAtCallCap(t *testing.T) {
	const total = 3 << 20
	f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		writeOut(req.Stdout, total)
		return sandbox.ExecResult{}, nil
	}}
	dir := t.TempDir()
	s := connect(t, f, Options{OutputDir: dir, OutputCallCap: 1 << 20, OutputsCap: 8 << 20})
	r := s.call("exec", map[string]any{"command": "yes", "max_output": 2048})
	stdout := r.data["stdout"].(string)
	if !strings.HasPrefix(stdout, "HEAD") || !strings.HasSuffix(stdout, "TAIL") || r.data["stdout_bytes"] != float64(total) {
		t.Fatalf("head and tail: %.300s", r.text)
	}
	if !strings.Contains(r.text, "the full output was cut at 1048576 bytes (one command saves at most 1 MiB)") {
		t.Fatalf("no cut note: %.600s", r.text)
	}
	id, _ := r.data["output_id"].(string)
	o := s.call("output", map[string]any{"id": id, "offset": 1<<20 - 4, "length": 100})
	if o.isError || o.data["total_bytes"] != float64(1<<20) || o.data["data"] != "xxxx" || o.data["more"] != false {
		t.Fatalf("output: %+v", o)
	}
	if n := dirBytes(t, dir); n != 1<<20 {
		t.Fatalf("outputs directory holds %d bytes, want the cap 1 MiB", n)
	}
}

// TestSpillStopsAtTheHostFloor: a host whose disk nears the floor the
// disk watcher keeps gets no more saved output; the result says why.
func TestSpillStopsAtTheHostFloor(t *testing.T) {
	f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		writeOut(req.Stdout, 3<<20)
		return sandbox.ExecResult{}, nil
	}}
	dir := t.TempDir()
	const total = 100 << 30
	free := func(string) (int64, int64, error) {
		return diskguard.Floor(total) + 1<<20 - dirBytes(t, dir), total, nil
	}
	s := connect(t, f, Options{OutputDir: dir, HostFree: free})
	r := s.call("exec", map[string]any{"command": "yes", "max_output": 2048})
	if !strings.Contains(r.text, "must stay free for the host") {
		t.Fatalf("no floor note: %.600s", r.text)
	}
	if n := dirBytes(t, dir); n > 1<<20 {
		t.Fatalf("saved %d bytes past the floor", n)
	}
}

// TestSpillCallCapCoversBothStreams: stdout and stderr share one call's cap.
func TestSpillCallCapCoversBothStreams(t *testing.T) {
	f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		writeOut(req.Stdout, 768<<10)
		writeOut(req.Stderr, 768<<10)
		return sandbox.ExecResult{}, nil
	}}
	dir := t.TempDir()
	s := connect(t, f, Options{OutputDir: dir, OutputCallCap: 1 << 20, OutputsCap: 8 << 20})
	r := s.call("exec", map[string]any{"command": "yes", "max_output": 2048})
	if n := dirBytes(t, dir); n != 1<<20 {
		t.Fatalf("outputs directory holds %d bytes, want 1 MiB\n%.2000s", n, r.text)
	}
	if !strings.Contains(r.text, "--- stderr ---") || !strings.HasSuffix(r.data["stderr"].(string), "TAIL") ||
		!strings.Contains(r.data["stderr"].(string), "the full output was cut at 262144 bytes") {
		t.Fatalf("%.2000s", r.text)
	}
}

// TestSpillDirectoryCapRemovesOldestFirst: past the directory cap the
// oldest saved outputs go, and newer ones stay retrievable.
func TestSpillDirectoryCapRemovesOldestFirst(t *testing.T) {
	f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		writeOut(req.Stdout, 900<<10)
		return sandbox.ExecResult{}, nil
	}}
	dir := t.TempDir()
	s := connect(t, f, Options{OutputDir: dir, OutputCallCap: 1 << 20, OutputsCap: 2 << 20})
	var ids []string
	for i := range 4 {
		r := s.call("exec", map[string]any{"command": "yes", "max_output": 2048})
		id, _ := r.data["output_id"].(string)
		if id == "" || strings.Contains(r.text, "cut at") {
			t.Fatalf("call %d: %.600s", i, r.text)
		}
		ids = append(ids, id)
		if n := dirBytes(t, dir); n > 2<<20 {
			t.Fatalf("after call %d the directory holds %d bytes, over its 2 MiB cap", i, n)
		}
	}
	for i, id := range ids {
		o := s.call("output", map[string]any{"id": id, "offset": 0, "length": 4})
		kept := !o.isError && o.data["data"] == "HEAD"
		if want := i >= 2; kept != want {
			t.Fatalf("output %d (of 4) kept=%v, want %v: %+v", i, kept, want, o)
		}
	}
}

// TestSpillNeverRemovesAFileBeingWritten: a second server on the same
// directory that needs room does not remove a spill still being written
// (it holds a lock); its own copy is cut instead, and says why.
func TestSpillNeverRemovesAFileBeingWritten(t *testing.T) {
	dir := t.TempDir()
	release, wrote := make(chan struct{}), make(chan struct{})
	slow := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		writeOut(req.Stdout, 1500<<10)
		close(wrote)
		<-release
		return sandbox.ExecResult{}, nil
	}}
	a := connect(t, slow, Options{OutputDir: dir, OutputCallCap: 2 << 20, OutputsCap: 2 << 20})
	done := make(chan result)
	go func() { done <- a.call("exec", map[string]any{"command": "slow", "max_output": 2048}) }()
	<-wrote

	b := connect(t, &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		writeOut(req.Stdout, 1<<20)
		return sandbox.ExecResult{}, nil
	}}, Options{OutputDir: dir, OutputCallCap: 2 << 20, OutputsCap: 2 << 20})
	rb := b.call("exec", map[string]any{"command": "fast", "max_output": 2048})
	if !strings.Contains(rb.text, "saved outputs are at their cap of 2 MiB") || !strings.HasSuffix(rb.data["stdout"].(string), "TAIL") {
		t.Fatalf("second server: %.800s", rb.text)
	}
	close(release)
	ra := <-done
	id, _ := ra.data["output_id"].(string)
	o := a.call("output", map[string]any{"id": id, "offset": 1500<<10 - 4, "length": 4})
	if o.isError || o.data["data"] != "TAIL" || strings.Contains(ra.text, "cut at") {
		t.Fatalf("first server's output: %+v\n%.600s", o, ra.text)
	}
	if n := dirBytes(t, dir); n > 2<<20 {
		t.Fatalf("directory holds %d bytes, over its 2 MiB cap", n)
	}
}

// TestSpillDirectoryTidiedAtStart: a starting server removes spills older
// than a day, then the oldest until the rest fits the cap; other files and
// spills held by a writer stay.
func TestSpillDirectoryTidiedAtStart(t *testing.T) {
	dir := t.TempDir()
	put := func(name string, size int, age time.Duration) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.Repeat([]byte{'a'}, size), 0o600); err != nil {
			t.Fatal(err)
		}
		mt := time.Now().Add(-age)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := put("aaaaaaaaaaaa.stdout", 10, 25*time.Hour)
	oldHeld := put("bbbbbbbbbbbb.stdout", 10, 26*time.Hour)
	big1 := put("cccccccccccc.stdout", 600<<10, 3*time.Hour)
	big1err := put("cccccccccccc.stderr", 100<<10, 3*time.Hour)
	big2 := put("dddddddddddd.stdout", 600<<10, 2*time.Hour)
	big3 := put("eeeeeeeeeeee.stdout", 600<<10, time.Hour)
	other := put("notes.txt", 5, 48*time.Hour)

	held, err := os.Open(oldHeld)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}

	connect(t, &fake{}, Options{OutputDir: dir, OutputsCap: 1300 << 10})
	for _, c := range []struct {
		path string
		want bool
	}{{old, false}, {oldHeld, true}, {big1, false}, {big1err, false}, {big2, true}, {big3, true}, {other, true}} {
		_, err := os.Stat(c.path)
		if exists := err == nil; exists != c.want {
			t.Errorf("%s: exists=%v, want %v", filepath.Base(c.path), exists, c.want)
		}
	}
}

// TestSpillOffKeepsHeadAndTail: with saving off (cap below 0) a long output
// still has its head and tail, and the result offers no output id.
func TestSpillOffKeepsHeadAndTail(t *testing.T) {
	f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		writeOut(req.Stdout, 100000)
		return sandbox.ExecResult{}, nil
	}}
	dir := t.TempDir()
	s := connect(t, f, Options{OutputDir: dir, OutputsCap: -1})
	r := s.call("exec", map[string]any{"command": "yes", "max_output": 2048})
	stdout := r.data["stdout"].(string)
	if !strings.HasPrefix(stdout, "HEAD") || !strings.HasSuffix(stdout, "TAIL") || r.data["output_id"] != nil ||
		strings.Contains(r.text, "output(") {
		t.Fatalf("%.600s", r.text)
	}
	if n := dirBytes(t, dir); n != 0 {
		t.Fatalf("saved %d bytes with saving off", n)
	}
}

func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{100: "100 bytes", 2048: "2 KiB", 256 << 20: "256 MiB", 3 << 29: "1.5 GiB"} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, fmt.Sprint(want))
		}
	}
}

// Truncated text output stays text: the kept parts are valid UTF-8 with no
// note saying otherwise, and paging the saved rest in text from the offset
// the result names never splits a character.
func TestTruncatedTextStaysText(t *testing.T) {
	all := "a" + strings.Repeat("é", 8000) // valid UTF-8, 16,001 bytes
	f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		fmt.Fprint(req.Stdout, all)
		return sandbox.ExecResult{}, nil
	}}
	s := connect(t, f, Options{OutputDir: t.TempDir()})
	r := s.call("exec", map[string]any{"command": "x", "max_output": 1024})
	if strings.Contains(r.text, "not valid UTF-8") || strings.ContainsRune(str(r.data["stdout"]), utf8.RuneError) {
		t.Fatalf("valid UTF-8 shown as invalid:\n%.300s", r.text)
	}
	m := regexp.MustCompile(`offset=(\d+)\)`).FindStringSubmatch(r.text)
	if m == nil {
		t.Fatalf("no offset named:\n%s", r.text)
	}
	offset, _ := strconv.Atoi(m[1])
	var got strings.Builder
	got.WriteString(all[:offset])
	for {
		o := s.call("output", map[string]any{"id": str(r.data["output_id"]), "offset": offset, "length": 101})
		d := str(o.data["data"])
		if o.isError || strings.ContainsRune(d, utf8.RuneError) {
			t.Fatalf("page at %d: %v %q", offset, o.isError, d)
		}
		got.WriteString(d)
		offset += len(d)
		if more, _ := o.data["more"].(bool); !more {
			break
		}
	}
	if got.String() != all {
		t.Fatalf("paged %d bytes, want %d", got.Len(), len(all))
	}
}

func str(v any) string { s, _ := v.(string); return s }
