package transfer

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type entry struct {
	name, link string
	typ        byte
	body       string
	mode       int64
}

func stream(t *testing.T, ents ...entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			io.WriteString(tw, e.body)
		}
	}
	tw.Close()
	return &b
}

func openRoot(t *testing.T) (string, *os.Root) {
	t.Helper()
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return dir, r
}

func skippedWith(c Counts, name, reason string) bool {
	for _, s := range c.Skipped {
		if s.Path == name && strings.Contains(s.Reason, reason) {
			return true
		}
	}
	return false
}

// A hostile stream cannot write outside the target: "..", absolute names,
// a symlink followed by a file through it, hard links and devices are
// skipped, and everything else lands.
func TestUnpackHostileStream(t *testing.T) {
	outer := t.TempDir()
	dir, root := openRoot(t)
	ents := []entry{
		{name: "top/", typ: tar.TypeDir, mode: 0o755},
		{name: "top/ok.txt", typ: tar.TypeReg, body: "fine"},
		{name: "top/../escape.txt", typ: tar.TypeReg, body: "x"},
		{name: "../escape2.txt", typ: tar.TypeReg, body: "x"},
		{name: "/etc/escape3", typ: tar.TypeReg, body: "x"},
		{name: "top/link", typ: tar.TypeSymlink, link: outer},
		{name: "top/link/through.txt", typ: tar.TypeReg, body: "x"},
		{name: "top/rel", typ: tar.TypeSymlink, link: ".."},
		{name: "top/rel/up.txt", typ: tar.TypeReg, body: "x"},
		{name: "top/hard", typ: tar.TypeLink, link: "/etc/passwd"},
		{name: "top/dev", typ: tar.TypeChar},
		{name: "top/suid", typ: tar.TypeReg, body: "s", mode: 0o4755},
		{name: "other/x", typ: tar.TypeReg, body: "x"},
	}
	c, err := Unpack(root, "dl", stream(t, ents...), UnpackOptions{Top: "top"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "dl", "ok.txt")); err != nil || string(b) != "fine" {
		t.Fatalf("ok.txt: %q %v", b, err)
	}
	for _, want := range []struct{ name, why string }{
		{"top/../escape.txt", `".."`}, {"../escape2.txt", `".."`}, {"/etc/escape3", "absolute"},
		{"top/link/through.txt", "symlink the stream created"}, {"top/rel/up.txt", "symlink the stream created"},
		{"top/hard", "hard link"}, {"top/dev", "device"}, {"top/suid", "set-user-id"}, {"other/x", "not under top"},
	} {
		if !skippedWith(c, want.name, want.why) {
			t.Errorf("%s not skipped for %q: %+v", want.name, want.why, c.Skipped)
		}
	}
	if ents, _ := os.ReadDir(outer); len(ents) != 0 {
		t.Fatalf("wrote outside the root: %v", ents)
	}
	for _, p := range []string{"escape.txt", "escape2.txt", "up.txt", "dl/up.txt", "dl/hard", "dl/dev"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s was created", p)
		}
	}
	if fi, err := os.Lstat(filepath.Join(dir, "dl", "link")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("link kept as a link: %v %v", fi, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "dl", "suid")); fi.Mode()&fs.ModeSetuid != 0 || fi.Mode().Perm() != 0o755 {
		t.Fatalf("suid mode: %v", fi.Mode())
	}
	if c.Files != 2 || c.Symlinks != 2 || c.Dirs != 1 {
		t.Fatalf("counts: %+v", c)
	}
}

// A stream that breaks part way leaves the host as it was: no target, no
// staging directory.
func TestUnpackTruncatedLeavesNothing(t *testing.T) {
	dir, root := openRoot(t)
	full := stream(t, entry{name: "top/", typ: tar.TypeDir}, entry{name: "top/a", typ: tar.TypeReg, body: strings.Repeat("a", 5000)})
	cut := bytes.NewReader(full.Bytes()[:1500])
	if _, err := Unpack(root, "dl", cut, UnpackOptions{Top: "top"}); err == nil {
		t.Fatal("a truncated stream was accepted")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

func TestUnpackBoundsAndOverwrite(t *testing.T) {
	dir, root := openRoot(t)
	big := stream(t, entry{name: "top", typ: tar.TypeReg, body: strings.Repeat("b", 2000)})
	if _, err := Unpack(root, "f", big, UnpackOptions{Top: "top", MaxBytes: 1000}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over max bytes: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o644)
	one := func() io.Reader { return stream(t, entry{name: "top", typ: tar.TypeReg, body: "new"}) }
	if _, err := Unpack(root, "f", one(), UnpackOptions{Top: "top"}); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "overwrite=true") {
		t.Fatalf("existing target: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "old" {
		t.Fatalf("refused overwrite changed the file: %q", b)
	}
	if _, err := Unpack(root, "f", one(), UnpackOptions{Top: "top", Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "new" {
		t.Fatalf("overwrite: %q", b)
	}
	if _, err := Unpack(root, "g", stream(t), UnpackOptions{Top: "top"}); err == nil {
		t.Fatal("an empty stream was accepted")
	}
}

// Pack copies links as links (never following one out of the root), keeps
// modes and mtimes, skips fifos, and round-trips through Unpack.
func TestPackRoundTrip(t *testing.T) {
	src, sroot := openRoot(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("TOPSECRETDATA"), 0o600)
	os.MkdirAll(filepath.Join(src, "tree", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "tree", "a b\n'q\".txt"), []byte("spaces"), 0o640)
	os.WriteFile(filepath.Join(src, "tree", "sub", "x.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(src, "tree", "bad\xffname"), []byte("raw"), 0o644)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "tree", "out"))
	os.Symlink("sub/x.sh", filepath.Join(src, "tree", "in"))
	os.Symlink("loop", filepath.Join(src, "tree", "loop"))
	mt := time.Unix(1600000000, 0)
	os.Chtimes(filepath.Join(src, "tree", "sub", "x.sh"), mt, mt)
	var b bytes.Buffer
	c, err := Pack(sroot, "tree", "tree", &b, PackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Files != 3 || c.Symlinks != 3 || c.Dirs != 2 {
		t.Fatalf("counts %+v", c)
	}
	if bytes.Contains(b.Bytes(), []byte("TOPSECRETDATA")) {
		t.Fatal("the link's target was read")
	}
	dst, droot := openRoot(t)
	if _, err := Unpack(droot, "copy", &b, UnpackOptions{Top: "tree"}); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "copy", "out")); err != nil || l != filepath.Join(outside, "secret") {
		t.Fatalf("out link: %q %v", l, err)
	}
	fi, err := os.Stat(filepath.Join(dst, "copy", "sub", "x.sh"))
	if err != nil || fi.Mode().Perm() != 0o755 || !fi.ModTime().Equal(mt) {
		t.Fatalf("x.sh: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "copy", "bad\xffname")); string(b) != "raw" {
		t.Fatalf("non-UTF-8 name: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "copy", "a b\n'q\".txt")); string(b) != "spaces" {
		t.Fatalf("odd name: %q", b)
	}
}

func TestPackRefusesSymlinkOutOfRoot(t *testing.T) {
	src, root := openRoot(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "f"), []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(src, "door"))
	_, err := Pack(root, "door/f", "f", io.Discard, PackOptions{})
	if !errors.Is(err, ErrOutsideRoots) {
		t.Fatalf("through a link out of the root: %v", err)
	}
	if _, err := Pack(root, "missing", "m", io.Discard, PackOptions{}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing: %v", err)
	}
}

func TestRoots(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	roots, dropped := CleanRoots([]string{a, b, a, "/", filepath.Join(a, "nope")})
	if len(roots) != 2 || len(dropped) != 2 {
		t.Fatalf("roots %v dropped %v", roots, dropped)
	}
	os.MkdirAll(filepath.Join(a, "x"), 0o755)
	if r, rel, err := roots.Resolve(filepath.Join(a, "x", "y")); err != nil || r != roots[0] || rel != filepath.Join("x", "y") {
		t.Fatalf("resolve: %q %q %v", r, rel, err)
	}
	for _, p := range []string{"/etc/passwd", filepath.Join(a, "..", "z"), a + "x/y"} {
		_, _, err := roots.Resolve(p)
		if err == nil || !strings.Contains(err.Error(), "--allow-dir") && !strings.Contains(err.Error(), `".."`) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, _, err := Roots(nil).Resolve(a); !errors.Is(err, ErrOutsideRoots) || !strings.Contains(err.Error(), "no host directory") {
		t.Fatalf("no roots: %v", err)
	}
	home, _ := os.UserHomeDir()
	for _, d := range []string{"/", home, ""} {
		if _, ok := StartDirRoot(d, home); ok {
			t.Errorf("%q allowed implicitly", d)
		}
	}
	if d, ok := StartDirRoot(a, home); !ok || d != a {
		t.Fatal("a project directory is not allowed")
	}
}
