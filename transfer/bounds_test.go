package transfer

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox/diskguard"
)

// A name skipped before it exists cannot become a way through: a fifo
// entry under top/a (skipped, so top/a is never made), then a symlink
// top/a to the root's parent, then a file under top/a.
func TestUnpackSkippedNameThenSymlink(t *testing.T) {
	dir, root := openRoot(t)
	os.Mkdir(filepath.Join(dir, "mine"), 0o755)
	c, err := Unpack(root, "dl", stream(t,
		entry{name: "top/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "top/a/fifo", typ: tar.TypeFifo},
		entry{name: "top/a", typ: tar.TypeSymlink, link: "../../mine"},
		entry{name: "top/a/planted", typ: tar.TypeReg, body: "x"},
	), UnpackOptions{Top: "top"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "mine", "planted")); err == nil {
		t.Fatal("a file was written through a symlink the stream made")
	}
	if !skippedWith(c, "top/a/planted", "symlink the stream created") {
		t.Fatalf("skipped: %+v", c.Skipped)
	}
}

// An entry under a name the stream made a file is skipped, not an error
// that ends the download.
func TestUnpackEntryUnderAFile(t *testing.T) {
	dir, root := openRoot(t)
	c, err := Unpack(root, "dl", stream(t,
		entry{name: "top/", typ: tar.TypeDir},
		entry{name: "top/r", typ: tar.TypeReg, body: "file"},
		entry{name: "top/r/escape", typ: tar.TypeReg, body: "x"},
		entry{name: "top/r/d/", typ: tar.TypeDir},
		entry{name: "top/ok", typ: tar.TypeReg, body: "ok"},
	), UnpackOptions{Top: "top"})
	if err != nil {
		t.Fatal(err)
	}
	if !skippedWith(c, "top/r/escape", "not a directory") || !skippedWith(c, "top/r/d/", "not a directory") {
		t.Fatalf("skipped: %+v", c.Skipped)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "dl", "ok")); string(b) != "ok" {
		t.Fatal("the rest of the stream was not kept")
	}
}

// Directories come back with their modes and times, files inside them
// notwithstanding, and an owner who can always remove them.
func TestUnpackDirectoryModesAndTimes(t *testing.T) {
	dir, root := openRoot(t)
	var ents []entry
	ents = append(ents, entry{name: "top/", typ: tar.TypeDir, mode: 0o750})
	for i := range 50 {
		ents = append(ents, entry{name: fmt.Sprintf("top/d%d/", i), typ: tar.TypeDir, mode: 0o555},
			entry{name: fmt.Sprintf("top/d%d/f", i), typ: tar.TypeReg, body: "x"})
	}
	if _, err := Unpack(root, "dl", stream(t, ents...), UnpackOptions{Top: "top"}); err != nil {
		t.Fatal(err)
	}
	want := time.Unix(1700000000, 0)
	for _, p := range []string{"dl", "dl/d0", "dl/d49"} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil || !fi.ModTime().Equal(want) {
			t.Fatalf("%s: %v %v", p, fi.ModTime(), err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "dl", "d7")); fi.Mode().Perm() != 0o755 {
		t.Fatalf("d7 mode %v, want 0755 (0555 with the owner's rwx)", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left beside the download: %v", ents)
	}
}

// Entries cost the host what they take, data or not: a stream of empty
// directories stops at the bound like one of data.
func TestUnpackCountsEntriesAgainstTheBound(t *testing.T) {
	dir, root := openRoot(t)
	ents := []entry{{name: "top/", typ: tar.TypeDir}}
	for i := range 20_000 {
		ents = append(ents, entry{name: fmt.Sprintf("top/d%d/", i), typ: tar.TypeDir})
	}
	_, err := Unpack(root, "dl", stream(t, ents...), UnpackOptions{Top: "top", MaxBytes: 1 << 20, MaxWhy: "what the sandbox's disk holds"})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "on the host, what the sandbox's disk holds") {
		t.Fatalf("20,000 directories under a 64 MiB floor of the bound: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	// A small bound on the data still lets a small tree through.
	if _, err := Unpack(root, "ok", stream(t, entry{name: "top/", typ: tar.TypeDir}, entry{name: "top/a", typ: tar.TypeReg, body: "hi"}),
		UnpackOptions{Top: "top", MaxBytes: 10}); err != nil {
		t.Fatal(err)
	}
}

// A download stops before the host's free space falls under the floor,
// and leaves nothing.
func TestUnpackKeepsTheHostFloor(t *testing.T) {
	dir, root := openRoot(t)
	var written atomic.Int64
	const total = 100 << 30
	free := func(string) (int64, int64, error) {
		// The floor of a 100 GiB disk is 5 GiB; 40 MiB above it now.
		return diskguard.Floor(total) + 40<<20 - written.Load(), total, nil
	}
	body := strings.Repeat("z", 1<<20)
	var ents []entry
	ents = append(ents, entry{name: "top/", typ: tar.TypeDir})
	for i := range 100 {
		ents = append(ents, entry{name: fmt.Sprintf("top/f%d", i), typ: tar.TypeReg, body: body})
	}
	r := &countingReader{r: stream(t, ents...), n: &written}
	_, err := Unpack(root, "dl", r, UnpackOptions{Top: "top", Free: free})
	if !errors.Is(err, diskguard.ErrHostFull) || !strings.Contains(err.Error(), "must stay free") {
		t.Fatalf("past the floor: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// symlinkStream writes a tar of n symlinks with long names under deep
// directories, made as it is read (no copy of it in memory).
func symlinkStream(n int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		long := strings.Repeat("n", 200)
		mt := time.Unix(1700000000, 0)
		err := tw.WriteHeader(&tar.Header{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mt})
		for i := 0; i < n && err == nil; i++ {
			d := fmt.Sprintf("top/%s%d/", long[:50], i/1000)
			if i%1000 == 0 {
				err = tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mt})
			}
			if err == nil {
				err = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("%s%s%d", d, long, i), Typeflag: tar.TypeSymlink,
					Linkname: "../" + long, Mode: 0o777, ModTime: mt})
			}
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// heapPeak samples the live heap until stop is closed and returns its
// largest value above the start.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	base, peak := s[0].Value.Uint64(), uint64(0)
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > base && v-base > peak {
				peak = v - base
			}
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// The unpacker's memory does not grow with the stream: 60,000 symlinks
// with 250-character names take a few MiB of heap (when it held every
// path, 100,000 grew the server by 428 MiB). `make bench` runs 1,000,000.
func TestUnpackMemoryDoesNotGrowWithEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 60,000 symlinks; -short leaves it out")
	}
	_, root := openRoot(t)
	stop := make(chan struct{})
	peak := heapPeak(stop)
	c, err := Unpack(root, "dl", symlinkStream(60_000), UnpackOptions{Top: "top"})
	close(stop)
	if err != nil {
		t.Fatal(err)
	}
	p := <-peak
	t.Logf("60,000 symlinks: heap peak %.1f MiB over the start", float64(p)/(1<<20))
	if c.Symlinks != 60_000 {
		t.Fatalf("counts %+v", c)
	}
	if p > 12<<20 {
		t.Fatalf("heap grew by %d MiB for 60,000 entries", p>>20)
	}
	if fi, err := root.Lstat(filepath.Join("dl", strings.Repeat("n", 50)+"59")); err != nil || !fi.IsDir() {
		t.Fatalf("last directory: %v", err)
	}
}
