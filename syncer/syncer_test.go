package syncer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// dirRemote is a Remote whose "sandbox" is a host directory: changes are
// applied there as the sandbox's tar would apply them.
type dirRemote struct {
	mu      sync.Mutex
	dir     string
	exists  bool
	running bool
	batches int
}

func (r *dirRemote) Presence(context.Context, string) (bool, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exists, r.running, nil
}

func (r *dirRemote) SyncList(_ context.Context, _, dir string, ignore []string) ([]string, error) {
	var out []string
	root := filepath.Join(r.dir, dir)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		for _, n := range ignore {
			if d.Name() == n {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, "./"+filepath.ToSlash(rel))
		return nil
	})
	return out, err
}

func (r *dirRemote) SyncApply(_ context.Context, _, dir string, remove []string, _ int64, pack func(io.Writer) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.running {
		return errors.New("container is not running")
	}
	r.batches++
	root := filepath.Join(r.dir, dir)
	os.MkdirAll(root, 0o755)
	for _, p := range remove {
		os.RemoveAll(filepath.Join(root, p))
	}
	if pack == nil {
		return nil
	}
	var b bytes.Buffer
	if err := pack(&b); err != nil {
		return err
	}
	tr := tar.NewReader(&b)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		dst := filepath.Join(root, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			os.MkdirAll(filepath.Dir(dst), 0o755)
			data, _ := io.ReadAll(tr)
			os.WriteFile(dst, data, 0o644)
		case tar.TypeSymlink:
			os.Remove(dst)
			os.Symlink(h.Linkname, dst)
		}
	}
}

func (r *dirRemote) set(exists, running bool) {
	r.mu.Lock()
	r.exists, r.running = exists, running
	r.mu.Unlock()
}

func newManager(t *testing.T, remote Remote, store Store, lockDir string, maxWatches int) *Manager {
	m := New(Options{Remote: remote, Store: store, Locks: locks.Dir{Path: lockDir}, MaxWatches: maxWatches,
		Poll: 100 * time.Millisecond, Resume: 200 * time.Millisecond})
	t.Cleanup(m.Close)
	return m
}

func tree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			lines = append(lines, rel+"/")
			return nil
		}
		b, _ := os.ReadFile(p)
		lines = append(lines, rel+"="+string(b))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, " ")
}

// eventually waits for the sandbox side to read want; a hang is the failure.
func eventually(t *testing.T, dir, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for tree(t, dir) != want {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox side:\n got %s\nwant %s", tree(t, dir), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func setup(t *testing.T) (host, sbx string, remote *dirRemote, store *state.Store, lockDir string) {
	host, sbx, lockDir = t.TempDir(), t.TempDir(), t.TempDir()
	remote = &dirRemote{dir: sbx, exists: true, running: true}
	store, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return
}

// TestSyncMirrorsAndFollows: the first copy mirrors (removing what the host
// lacks, keeping ignored names), then creates, changes, deletes, renames
// and new directories follow; with a watch limit of one directory the
// rest are polled, and nothing is missed.
func TestSyncMirrorsAndFollows(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxWatches int
	}{{"inotify", 0}, {"polling past the watch limit", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			host, sbx, remote, store, lockDir := setup(t)
			m := newManager(t, remote, store, lockDir, tc.maxWatches)
			os.MkdirAll(filepath.Join(host, "src"), 0o755)
			os.WriteFile(filepath.Join(host, "src", "a.go"), []byte("a1"), 0o644)
			os.MkdirAll(filepath.Join(host, ".git"), 0o755)
			os.WriteFile(filepath.Join(host, ".git", "HEAD"), []byte("ref"), 0o644)
			os.MkdirAll(filepath.Join(sbx, "w", "node_modules"), 0o755)
			os.WriteFile(filepath.Join(sbx, "w", "node_modules", "kept"), []byte("k"), 0o644)
			os.WriteFile(filepath.Join(sbx, "w", "stale.txt"), []byte("s"), 0o644)
			// Links are synced as links: a loop and one out of the tree are
			// never followed.
			os.Symlink("loop", filepath.Join(host, "loop"))
			os.Symlink(t.TempDir(), filepath.Join(host, "out"))

			st, err := m.Start(context.Background(), "default", host, "/w", nil)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mirror.Files != 1 || st.Mirror.Removed != 1 || st.Mirror.Bytes != 2 {
				t.Fatalf("mirror %+v", st.Mirror)
			}
			w := filepath.Join(sbx, "w")
			eventually(t, w, "loop= node_modules/ node_modules/kept=k out= src/ src/a.go=a1")

			os.WriteFile(filepath.Join(host, "src", "a.go"), []byte("a2"), 0o644)
			os.WriteFile(filepath.Join(host, "b.txt"), []byte("b"), 0o644)
			eventually(t, w, "b.txt=b loop= node_modules/ node_modules/kept=k out= src/ src/a.go=a2")
			os.Rename(filepath.Join(host, "b.txt"), filepath.Join(host, "c.txt"))
			os.MkdirAll(filepath.Join(host, "new", "deeper"), 0o755)
			os.WriteFile(filepath.Join(host, "new", "deeper", "d.txt"), []byte("d"), 0o644)
			eventually(t, w, "c.txt=b loop= new/ new/deeper/ new/deeper/d.txt=d node_modules/ node_modules/kept=k out= src/ src/a.go=a2")
			// Later changes inside the new directory are seen too.
			os.WriteFile(filepath.Join(host, "new", "deeper", "e.txt"), []byte("e"), 0o644)
			os.RemoveAll(filepath.Join(host, "src"))
			eventually(t, w, "c.txt=b loop= new/ new/deeper/ new/deeper/d.txt=d new/deeper/e.txt=e node_modules/ node_modules/kept=k out=")
			if tc.maxWatches > 0 {
				if l := m.List(); len(l) != 1 || l[0].Polled == 0 {
					t.Fatalf("polled directories not reported: %+v", l)
				}
			}
			if _, err := m.Stop(st.ID); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(host, "after-stop"), []byte("x"), 0o644)
			time.Sleep(300 * time.Millisecond)
			if _, err := os.Stat(filepath.Join(w, "after-stop")); err == nil {
				t.Fatal("a stopped sync sent a change")
			}
			if len(m.List()) != 0 {
				t.Fatal("a stopped job is still listed")
			}
		})
	}
}

// TestSyncResumesInAnotherServer: a job whose server ended is taken over
// by another (one at a time), which copies everything first; a stopped
// sandbox makes it wait; a destroyed one or a deleted host directory
// ends it with the reason kept.
func TestSyncResumesInAnotherServer(t *testing.T) {
	host, sbx, remote, store, lockDir := setup(t)
	a := New(Options{Remote: remote, Store: store, Locks: locks.Dir{Path: lockDir}, Resume: 100 * time.Millisecond})
	st, err := a.Start(context.Background(), "default", host, "/w", nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Close() // the first server exits; the record stays
	os.WriteFile(filepath.Join(host, "while-away"), []byte("w"), 0o644)
	b := newManager(t, remote, store, lockDir, 0)
	c := newManager(t, remote, store, lockDir, 0)
	b.Resume()
	c.Resume()
	w := filepath.Join(sbx, "w")
	eventually(t, w, "while-away=w")
	here := 0
	for _, m := range []*Manager{b, c} {
		for _, s := range m.List() {
			if s.Here {
				here++
			}
		}
	}
	if here != 1 {
		t.Fatalf("%d servers run the job", here)
	}

	remote.set(true, false) // stopped
	os.WriteFile(filepath.Join(host, "later"), []byte("l"), 0o644)
	waitState(t, b, st.ID, StateWaiting)
	remote.set(true, true)
	eventually(t, w, "later=l while-away=w")

	os.RemoveAll(host)
	s := waitState(t, b, st.ID, StateStopped)
	if !strings.Contains(s.LastError, "is gone") {
		t.Fatalf("host directory deleted: %+v", s)
	}
	if tree(t, w) != "later=l while-away=w" {
		t.Fatal("the sandbox's copy changed after the host directory went")
	}
}

func TestSyncEndsWhenSandboxDestroyed(t *testing.T) {
	host, _, remote, store, lockDir := setup(t)
	m := newManager(t, remote, store, lockDir, 0)
	st, err := m.Start(context.Background(), "default", host, "/w", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(context.Background(), "default", host, "/w", nil); err == nil || !strings.Contains(err.Error(), "already syncs") {
		t.Fatalf("a second job on the same directory: %v", err)
	}
	remote.set(false, false)
	os.WriteFile(filepath.Join(host, "x"), []byte("x"), 0o644)
	s := waitState(t, m, st.ID, StateStopped)
	if !strings.Contains(s.LastError, "destroyed") {
		t.Fatalf("%+v", s)
	}
}

func waitState(t *testing.T, m *Manager, id, want string) Status {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, s := range m.List() {
			if s.ID == id && s.State == want {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never reached %s: %+v", id, want, m.List())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The first copy removes what the host lacks: a sandbox directory that is
// "/" in any spelling, relative or not clean, is refused before anything
// runs in the sandbox.
func TestStartRefusesTheRootAndUncleanPaths(t *testing.T) {
	host, _, remote, store, lockDir := setup(t)
	m := newManager(t, remote, store, lockDir, 0)
	for _, dir := range []string{"/", "//", "/workspace/..", "/.", "w", "", "/w/"} {
		if _, err := m.Start(context.Background(), "default", host, dir, nil); err == nil {
			t.Errorf("Start(%q) was accepted", dir)
		}
	}
	if remote.batches != 0 {
		t.Fatalf("%d batches ran in the sandbox", remote.batches)
	}
}
