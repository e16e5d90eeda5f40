package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOutputsSendsChangedPNGs: with no stamp yet, the PNG files changed
// within the window come back, oldest first, whole; other names, hidden
// files, directories, symlinks and FIFOs do not; a file over the cap or
// empty is named without its bytes; a missing directory has none. The
// look sets the stamp, and the next look sends only what changed since.
func TestOutputsSendsChangedPNGs(t *testing.T) {
	c := pair(t)
	dir := t.TempDir()
	stamp := filepath.Join(t.TempDir(), "state", "seen")
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // one clock tick and more: a distinct change time
	}
	write("a.PNG", []byte("first"))
	write("b.png", []byte("second"))
	write("notes.txt", []byte("text"))
	write(".hidden.png", []byte("hidden"))
	write("empty.png", nil)
	write("big.png", bytes.Repeat([]byte{7}, MaxOutputSize+1))
	if err := os.Mkdir(filepath.Join(dir, "dir.png"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("secret"), 0o600)
	if err := os.Symlink(secret, filepath.Join(dir, "link.png")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.png"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Files changed within the margin before a look come again with the
	// next one (the server tells them apart by identity): these are not.
	time.Sleep(stampMargin + 10*time.Millisecond)
	list := func(files []OutputFile) string {
		var got []string
		for _, f := range files {
			got = append(got, fmt.Sprintf("%s:%d:%q:%s", f.Name, f.Size, f.Data, f.Skipped))
		}
		return strings.Join(got, " ")
	}
	files, omitted, err := c.Outputs(context.Background(), dir, stamp, time.Minute)
	want := fmt.Sprintf(`a.PNG:5:"first": b.png:6:"second": empty.png:0:"":empty big.png:%d:"":over 1 MiB`, MaxOutputSize+1)
	if err != nil || omitted != 0 || list(files) != want {
		t.Fatalf("the first look (%v, %d omitted):\n got %s\nwant %s", err, omitted, list(files), want)
	}
	if _, err := os.Stat(stamp); err != nil {
		t.Fatalf("the look left no stamp: %v", err)
	}
	time.Sleep(stampMargin + 10*time.Millisecond)
	if files, _, err = c.Outputs(context.Background(), dir, stamp, time.Minute); err != nil || len(files) != 0 {
		t.Fatalf("nothing changed since the look: %s %v", list(files), err)
	}
	write("b.png", []byte("SECOND"))                                        // rewritten
	os.Rename(filepath.Join(dir, "notes.txt"), filepath.Join(dir, "c.png")) // renamed in: its mtime is old
	if files, _, err = c.Outputs(context.Background(), dir, stamp, time.Minute); err != nil || list(files) != `b.png:6:"SECOND": c.png:4:"text":` {
		t.Fatalf("after a rewrite and a rename: %s %v", list(files), err)
	}

	if files, _, err = c.Outputs(context.Background(), filepath.Join(dir, "none"), stamp, time.Minute); err != nil || len(files) != 0 {
		t.Fatalf("a missing directory: %v %v", files, err)
	}
	if _, _, err = c.Outputs(context.Background(), "relative", stamp, time.Minute); err == nil {
		t.Fatal("a relative directory was accepted")
	}
}

// TestReadOutputRefusesSymlinksAndFIFOs: a file swapped for a symlink or
// a FIFO after the listing is not followed, or waited on.
func TestReadOutputRefusesSymlinksAndFIFOs(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "secret"), []byte("secret"), 0o600)
	os.Symlink(filepath.Join(dir, "secret"), filepath.Join(dir, "link.png"))
	syscall.Mkfifo(filepath.Join(dir, "fifo.png"), 0o644)
	for _, name := range []string{"link.png", "fifo.png"} {
		done := make(chan struct{})
		var data []byte
		var why string
		go func() { data, why = readOutput(filepath.Join(dir, name)); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the read waited", name)
		}
		if data != nil || why == "" {
			t.Errorf("%s: read %q (%s)", name, data, why)
		}
	}
}

// TestOutputsKeepsTheNewest: past MaxOutputs files, the newest come back
// and the rest are counted.
func TestOutputsKeepsTheNewest(t *testing.T) {
	c := pair(t)
	dir := t.TempDir()
	for i := range MaxOutputs + 3 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.png", i)), []byte{byte(i)}, 0o644)
		time.Sleep(5 * time.Millisecond)
	}
	files, omitted, err := c.Outputs(context.Background(), dir, filepath.Join(t.TempDir(), "seen"), time.Hour)
	if err != nil || len(files) != MaxOutputs || omitted != 3 {
		t.Fatalf("%d files, %d omitted (%v)", len(files), omitted, err)
	}
	if files[0].Name != "f03.png" || files[MaxOutputs-1].Name != "f10.png" {
		t.Fatalf("kept %q … %q", files[0].Name, files[MaxOutputs-1].Name)
	}
}

// TestOutputsRefusesForgedEntries: what a replaced agent sends is
// checked: a name with a directory in it, a length past the cap, bytes
// cut short, more files than asked for; each ends the agent's session.
func TestOutputsRefusesForgedEntries(t *testing.T) {
	entry := func(name string) string { return fmt.Sprintf(`{"name":%q,"size":1,"len":1}`, name) + "\nx" }
	for _, forged := range []string{
		entry("../../etc/passwd.png"),
		fmt.Sprintf(`{"name":"a.png","size":1,"len":%d}`, MaxOutputSize+1) + "\n",
		`{"name":"a.png","size":10,"len":10}` + "\nshort",
		entry(".."),
		strings.Repeat(entry("a.png"), MaxOutputs+1),
		"not json\n",
	} {
		c := fakeAgent(t, func(req Request, w io.Writer) {
			writeJSON(w, Reply{OK: true})
			io.WriteString(w, forged)
		})
		if files, _, err := c.Outputs(context.Background(), "/tmp/outputs", "/tmp/seen", time.Minute); !errors.Is(err, ErrMisbehaving) {
			t.Errorf("forged %.60q was taken: %d files, %v", forged, len(files), err)
		}
		select {
		case <-c.Done():
		case <-time.After(time.Minute):
			t.Errorf("forged %.60q: the session goes on", forged)
		}
	}
}

// fakeAgent is a Client whose agent answers each stream after the hello
// with answer: a stand-in for an agent the sandbox replaced.
func fakeAgent(t *testing.T, answer func(Request, io.Writer)) *Client {
	t.Helper()
	return clientOf(t, func(r io.Reader, w io.Writer) {
		sess, err := yamuxServer(r, w)
		if err != nil {
			return
		}
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				line, err := readLine(bufio.NewReader(st))
				var req Request
				if err != nil || json.Unmarshal(line, &req) != nil {
					return
				}
				if req.Op == OpHello {
					writeJSON(st, Reply{OK: true, Version: Version})
					return
				}
				answer(req, st)
			}()
		}
	})
}
