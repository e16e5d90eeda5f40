package atomicfile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWrite: the file holds the new data with the mode asked, replaces
// what was there, and a write that cannot land leaves the old file and no
// temporary file behind.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Write(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "two" {
		t.Fatalf("read %q %v", got, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v %v", fi.Mode(), err)
	}
	// A directory in the way of the rename: the write fails whole.
	blocked := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Write(blocked, []byte("three"), 0o600); err == nil {
		t.Fatal("a write over a directory that is not empty succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("left in the directory: %v", entries)
	}
}

// TestWriteRemovesWhatAKilledWriterLeft: a temporary file of a write
// killed midway, once stale, goes with the next write of its path; a
// fresh one (a write under way elsewhere) and files that only look alike
// stay.
func TestWriteRemovesWhatAKilledWriterLeft(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	old := time.Now().Add(-2 * StaleAfter)
	for name, stale := range map[string]bool{".f.123456": true, ".f.987": false, ".f.lock": true, ".g.123": true, ".f.": true} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
		if stale {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := Write(path, []byte("whole"), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{".f.", ".f.987", ".f.lock", ".g.123", "f"}; !slices.Equal(names, want) {
		t.Fatalf("left %q, want %q", names, want)
	}
}
