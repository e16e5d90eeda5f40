package agent

import (
	"bufio"
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

// The outputs exchange (OpOutputs): the PNG files of a directory that are
// new or changed since the last look, by the stamp file's time (the look
// before), or, with no stamp yet, within the request's window. After the
// OK reply (whose Omitted counts the files left out past MaxOutputs) the
// agent writes, for each file, one JSON line (an outputHeader) and then
// Len bytes of the file, and closes the stream; then it sets the stamp's
// time to that of the look, a little earlier for the files' coarse clock
// (a file seen twice is told apart by its identity: see OutputFile).

const (
	// MaxOutputs is how many files one exchange sends at most: the newest.
	MaxOutputs = 8
	// MaxOutputSize is the largest file sent; a larger one is named, with
	// its size, and its bytes left out.
	MaxOutputSize = 1 << 20
	// maxOutputEntries bounds the directory entries read.
	maxOutputEntries = 1 << 16
	// stampMargin is how much earlier than the look the stamp is set: a
	// file's time comes from the kernel's coarse clock, which may read a
	// tick behind the look's.
	stampMargin = 50 * time.Millisecond
)

// OutputFile is one PNG file of the outputs directory.
type OutputFile struct {
	Name string // base name
	Size int64  // its size when looked at
	// Ino and ModNs (its modification time by the sandbox's clock) tell
	// one version of the file from another.
	Ino   uint64
	ModNs int64
	// Data is the file, or nil when it was over MaxOutputSize or could
	// not be read (Skipped says why).
	Data    []byte
	Skipped string
}

type outputHeader struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Ino     uint64 `json:"ino"`
	ModNs   int64  `json:"mod_ns"`
	Len     int    `json:"len"`
	Skipped string `json:"skipped,omitempty"`

	changed int64 // its change time, by which files are ordered
}

// serveOutputs answers OpOutputs for the directory dir and the stamp file
// stamp.
func serveOutputs(w io.Writer, dir, stamp string, window time.Duration) {
	if !filepath.IsAbs(dir) || !filepath.IsAbs(stamp) || window <= 0 {
		_ = writeJSON(w, Reply{Error: fmt.Sprintf("outputs: want an absolute directory and stamp and a window (%q, %q, %v)", dir, stamp, window)})
		return
	}
	look := time.Now()
	since := look.Add(-window).UnixNano()
	if st, err := os.Stat(stamp); err == nil {
		since = st.ModTime().UnixNano()
	}
	found := changedPNGs(dir, since)
	omitted := max(len(found)-MaxOutputs, 0)
	found = found[omitted:]
	if writeJSON(w, Reply{OK: true, Omitted: omitted}) != nil {
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
	setStamp(stamp, look.Add(-stampMargin))
}

// changedPNGs lists the regular files named *.png (in any case, not
// hidden) directly in dir whose change time (which no one sets by hand, as
// mtime can be) is at or after since, oldest first.
func changedPNGs(dir string, since int64) []outputHeader {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	entries, _ := d.ReadDir(maxOutputEntries)
	var found []outputHeader
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(strings.ToLower(name), ".png") || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		ino, changed := fileIdentity(info)
		if changed < since {
			continue
		}
		found = append(found, outputHeader{Name: name, Size: info.Size(), Ino: ino, ModNs: info.ModTime().UnixNano(), changed: changed})
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].changed != found[j].changed {
			return found[i].changed < found[j].changed
		}
		return found[i].Name < found[j].Name // files of one clock tick
	})
	return found
}

// setStamp makes the stamp file (and its directory) if missing and sets
// its time to at.
func setStamp(stamp string, at time.Time) {
	if err := os.Chtimes(stamp, at, at); err == nil {
		return
	}
	_ = os.MkdirAll(filepath.Dir(stamp), 0o1777)
	if f, err := os.OpenFile(stamp, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o644); err == nil {
		f.Close()
	}
	_ = os.Chtimes(stamp, at, at)
}

// readOutput reads a file of at most MaxOutputSize bytes, refusing to
// follow a symlink put in its place or to wait on a FIFO.
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
	case len(data) == 0:
		return nil, "empty"
	}
	return data, ""
}

// outputsTimeout bounds one outputs exchange.
const outputsTimeout = 30 * time.Second

// ErrMisbehaving marks an agent that broke the protocol; its session is
// ended, so that the next request starts another.
var ErrMisbehaving = errors.New("the agent broke the protocol")

// Outputs returns the PNG files in dir inside the sandbox that are new or
// changed since the last call (by the stamp file, which the agent sets;
// with none yet, those changed within window by the sandbox's clock), at
// most MaxOutputs of them, oldest first, and how many more there were.
// What the agent sends is checked: names are base names, sizes within
// bounds, nothing after the last file; an agent that breaks that has its
// session ended.
func (c *Client) Outputs(ctx context.Context, dir, stamp string, window time.Duration) (files []OutputFile, omitted int, err error) {
	conn, rep, err := c.open(ctx, Request{Op: OpOutputs, Path: dir, Stamp: stamp, Window: int64(window)})
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	if !rep.OK {
		return nil, 0, fmt.Errorf("outputs: %s", textLimit(rep.Error, 300))
	}
	_ = conn.SetDeadline(time.Now().Add(outputsTimeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	misbehaved := func(what string) (OutputFile, error) {
		c.sess.Close()
		return OutputFile{}, fmt.Errorf("outputs: %w: %s", ErrMisbehaving, what)
	}
	br := bufio.NewReader(conn)
	next := func() (OutputFile, error) {
		line, err := readLine(br)
		if err != nil {
			return OutputFile{}, err
		}
		var h outputHeader
		if err := json.Unmarshal(line, &h); err != nil {
			return misbehaved("a malformed entry")
		}
		if h.Name == "" || h.Name != filepath.Base(h.Name) || h.Name == "." || h.Name == ".." || strings.ContainsRune(h.Name, 0) ||
			len(h.Name) > 1024 || h.Len < 0 || h.Len > MaxOutputSize || h.Size < 0 {
			return misbehaved("an entry out of bounds")
		}
		f := OutputFile{Name: h.Name, Size: h.Size, Ino: h.Ino, ModNs: h.ModNs, Skipped: textLimit(h.Skipped, 200)}
		f.Data = make([]byte, h.Len)
		if _, err := io.ReadFull(br, f.Data); err != nil {
			return misbehaved(h.Name + " cut short")
		}
		if h.Len == 0 {
			f.Data = nil
			if f.Skipped == "" {
				f.Skipped = "empty"
			}
		}
		return f, nil
	}
	for {
		f, err := next()
		if errors.Is(err, io.EOF) {
			return files, max(rep.Omitted, 0), nil
		}
		if err != nil {
			return files, 0, fmt.Errorf("outputs: %w", err)
		}
		if len(files) == MaxOutputs {
			_, err := misbehaved("more than " + fmt.Sprint(MaxOutputs) + " files")
			return files, 0, err
		}
		files = append(files, f)
	}
}

// textLimit cuts s to at most n bytes of valid UTF-8.
func textLimit(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "?")
}
