package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlaceAgent: the agent binary lands whole in a channel directory,
// read-only to others and named after its content; placed again it is
// kept as it is; another binary (a server upgraded) replaces it, and what
// a killed write left is swept once it is old.
func TestPlaceAgent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "0123456789abcdef")
	if err := ensureChannelDir(dir); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, ".sandbox-ctl-killed")
	if err := os.WriteFile(left, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	_ = os.Chtimes(left, old, old)
	bins := func() []string {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			if strings.Contains(e.Name(), "sandbox-ctl") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	first, err := placeAgent(dir, []byte("old build"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := placeAgent(dir, []byte("old build")); err != nil || again != first {
		t.Fatalf("placed again: %q %v, want %q", again, err, first)
	}
	p := filepath.Join(dir, filepath.Base(first))
	if b, err := os.ReadFile(p); err != nil || string(b) != "old build" {
		t.Fatalf("the placed binary: %q %v", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if !strings.HasPrefix(first, ChannelMount+"/"+agentFilePrefix) {
		t.Fatalf("path as the sandbox sees it: %q", first)
	}
	second, err := placeAgent(dir, []byte("new build"))
	if err != nil || second == first {
		t.Fatalf("another binary: %q %v", second, err)
	}
	if got := bins(); len(got) != 1 || got[0] != filepath.Base(second) {
		t.Fatalf("agent files after an upgrade: %q", got)
	}
	if _, err := placeAgent(filepath.Join(t.TempDir(), "not-a-channel"), []byte("x")); err == nil {
		t.Fatal("placed in a directory that is not a channel's")
	}
}
