package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOutputsSendsRecentPNGs: the PNG files modified within the window
// come back, oldest first, whole; older ones, other names, directories,
// symlinks and FIFOs do not; a file over the cap is named without its
// bytes; a missing directory has none.
func TestOutputsSendsRecentPNGs(t *testing.T) {
	c := pair(t)
	dir := t.TempDir()
	write := func(name string, data []byte, age time.Duration) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(-age)
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	write("old.png", []byte("old"), time.Hour)
	write("b.png", []byte("second"), time.Second)
	write("a.PNG", []byte("first"), 2*time.Second)
	write("notes.txt", []byte("text"), 0)
	big := bytes.Repeat([]byte{7}, MaxOutputSize+1)
	write("big.png", big, 0)
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

	files, err := c.Outputs(context.Background(), dir, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range files {
		got = append(got, fmt.Sprintf("%s:%d:%q:%s", f.Name, f.Size, f.Data, f.Skipped))
	}
	want := []string{`a.PNG:5:"first":`, `b.png:6:"second":`, fmt.Sprintf(`big.png:%d:"":over 1 MiB`, MaxOutputSize+1)}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("outputs:\n got %v\nwant %v", got, want)
	}

	if files, err = c.Outputs(context.Background(), filepath.Join(dir, "none"), time.Minute); err != nil || len(files) != 0 {
		t.Fatalf("a missing directory: %v %v", files, err)
	}
	if _, err = c.Outputs(context.Background(), "relative", time.Minute); err == nil {
		t.Fatal("a relative directory was accepted")
	}
}

// TestOutputsKeepsTheNewest: past MaxOutputs files, the newest come back.
func TestOutputsKeepsTheNewest(t *testing.T) {
	c := pair(t)
	dir := t.TempDir()
	for i := range MaxOutputs + 3 {
		p := filepath.Join(dir, fmt.Sprintf("f%02d.png", i))
		os.WriteFile(p, []byte{byte(i)}, 0o644)
		when := time.Now().Add(time.Duration(i-40) * time.Second)
		os.Chtimes(p, when, when)
	}
	files, err := c.Outputs(context.Background(), dir, time.Hour)
	if err != nil || len(files) != MaxOutputs || files[0].Name != "f03.png" || files[MaxOutputs-1].Name != "f10.png" {
		t.Fatalf("%d files (%v), first %q", len(files), err, files[0].Name)
	}
}

// TestOutputsRefusesForgedEntries: what a replaced agent sends is
// checked: a name with a directory in it, a length past the cap, bytes
// cut short.
func TestOutputsRefusesForgedEntries(t *testing.T) {
	for _, forged := range []string{
		`{"name":"../../etc/passwd.png","size":1,"len":1}` + "\nx",
		fmt.Sprintf(`{"name":"a.png","size":1,"len":%d}`, MaxOutputSize+1) + "\n",
		`{"name":"a.png","size":10,"len":10}` + "\nshort",
		`{"name":"..","size":1,"len":1}` + "\nx",
	} {
		c := fakeAgent(t, func(req Request, w io.Writer) {
			writeJSON(w, Reply{OK: true})
			io.WriteString(w, forged)
		})
		if files, err := c.Outputs(context.Background(), "/tmp/outputs", time.Minute); err == nil {
			t.Errorf("forged %q was taken: %+v", forged, files)
		}
	}
}

// fakeAgent is a Client whose agent answers each stream after the hello
// with answer: a stand-in for an agent the sandbox replaced.
func fakeAgent(t *testing.T, answer func(Request, io.Writer)) *Client {
	t.Helper()
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	go func() {
		sess, err := yamuxServer(toAgentR, fromAgentW)
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
	}()
	c, err := NewClient(fromAgentR, toAgentW, func() error {
		toAgentW.Close()
		return fromAgentR.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
