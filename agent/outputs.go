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
	"sort"
	"strings"
	"syscall"
	"time"
)

// The outputs exchange: after the OK reply the agent writes, for each PNG
// file it sends, one JSON line (an outputHeader) and then Len bytes of
// the file, and closes the stream.

const (
	// MaxOutputs is how many files one exchange sends at most: the newest.
	MaxOutputs = 8
	// MaxOutputSize is the largest file sent; a larger one is named, with
	// its size, and its bytes left out.
	MaxOutputSize = 1 << 20
	// maxOutputEntries bounds the directory entries read.
	maxOutputEntries = 4096
)

// OutputFile is one PNG file of the outputs directory.
type OutputFile struct {
	Name    string    // base name
	Size    int64     // its size when looked at
	ModTime time.Time // by the sandbox's clock
	// Data is the file, or nil when it was over MaxOutputSize or could
	// not be read (Skipped says why).
	Data    []byte
	Skipped string
}

type outputHeader struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	ModNs   int64  `json:"mod_ns"`
	Len     int    `json:"len"`
	Skipped string `json:"skipped,omitempty"`
}

// serveOutputs answers OpOutputs: the regular files named *.png directly
// in dir modified no longer than window ago, newest MaxOutputs of them,
// oldest first (by name within one clock tick). A missing directory has
// none.
func serveOutputs(w io.Writer, dir string, window time.Duration) {
	if !filepath.IsAbs(dir) || window <= 0 {
		_ = writeJSON(w, Reply{Error: fmt.Sprintf("outputs: want an absolute directory and a window (%q, %v)", dir, window)})
		return
	}
	since := time.Now().Add(-window)
	var found []outputHeader
	if d, err := os.Open(dir); err == nil {
		entries, _ := d.ReadDir(maxOutputEntries)
		d.Close()
		for _, e := range entries {
			if !strings.HasSuffix(strings.ToLower(e.Name()), ".png") || !e.Type().IsRegular() {
				continue
			}
			info, err := e.Info()
			if err != nil || info.ModTime().Before(since) {
				continue
			}
			found = append(found, outputHeader{Name: e.Name(), Size: info.Size(), ModNs: info.ModTime().UnixNano()})
		}
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].ModNs != found[j].ModNs {
			return found[i].ModNs < found[j].ModNs
		}
		return found[i].Name < found[j].Name // files of one clock tick
	})
	if len(found) > MaxOutputs {
		found = found[len(found)-MaxOutputs:]
	}
	if writeJSON(w, Reply{OK: true}) != nil {
		return
	}
	for _, h := range found {
		data, skipped := readOutput(filepath.Join(dir, h.Name))
		h.Len, h.Skipped = len(data), skipped
		if writeJSON(w, h) != nil {
			return
		}
		if _, err := w.Write(data); err != nil {
			return
		}
	}
}

// readOutput reads a file of at most MaxOutputSize bytes, refusing to
// follow a symlink put in its place.
func readOutput(path string) ([]byte, string) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, "could not be read: " + err.Error()
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		return nil, "not a regular file"
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxOutputSize+1))
	switch {
	case err != nil:
		return nil, "could not be read: " + err.Error()
	case len(data) > MaxOutputSize:
		return nil, "over 1 MiB"
	}
	return data, ""
}

// outputsTimeout bounds one outputs exchange.
const outputsTimeout = 30 * time.Second

// Outputs returns the PNG files in dir inside the sandbox modified within
// window (by the sandbox's clock), at most MaxOutputs of them, oldest
// first. What the agent sends is checked: names are base names, sizes
// within bounds.
func (c *Client) Outputs(ctx context.Context, dir string, window time.Duration) ([]OutputFile, error) {
	conn, rep, err := c.open(ctx, Request{Op: OpOutputs, Path: dir, Window: int64(window)})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if !rep.OK {
		return nil, fmt.Errorf("outputs: %s", rep.Error)
	}
	_ = conn.SetDeadline(time.Now().Add(outputsTimeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	br := bufio.NewReader(conn)
	var files []OutputFile
	for len(files) < MaxOutputs {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return files, fmt.Errorf("outputs: %w", err)
		}
		var h outputHeader
		if err := json.Unmarshal(line, &h); err != nil {
			return files, fmt.Errorf("outputs: %w", err)
		}
		if h.Name == "" || h.Name != filepath.Base(h.Name) || h.Name == "." || h.Name == ".." || strings.ContainsAny(h.Name, "\x00") ||
			h.Len < 0 || h.Len > MaxOutputSize || h.Size < 0 {
			return files, fmt.Errorf("outputs: the agent sent a malformed entry")
		}
		f := OutputFile{Name: h.Name, Size: h.Size, ModTime: time.Unix(0, h.ModNs), Skipped: textLimit(h.Skipped, 200)}
		if h.Len > 0 {
			f.Data = make([]byte, h.Len)
			if _, err := io.ReadFull(br, f.Data); err != nil {
				return files, fmt.Errorf("outputs: %s: %w", h.Name, err)
			}
		}
		files = append(files, f)
	}
	return files, nil
}

// textLimit cuts s to at most n bytes of valid UTF-8.
func textLimit(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return string(bytes.ToValidUTF8([]byte(s), []byte("?")))
}
