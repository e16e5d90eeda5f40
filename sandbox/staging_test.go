package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKilledServersStagingRemoved: what a server listed as staging and
// never finished (a download's staging directory, a snapshot's partial
// file) is removed once a later server finds it gone; what it finished,
// what is not a staging name, and a live server's staging are left.
func TestKilledServersStagingRemoved(t *testing.T) {
	const prefix = "smtstg"
	locks, user, snaps := t.TempDir(), t.TempDir(), t.TempDir()
	rt := staleListing{}
	killed := NewManager(rt, Config{Prefix: prefix, LockDir: locks, SnapshotDir: snaps})
	live := NewManager(rt, Config{Prefix: prefix, LockDir: locks, SnapshotDir: snaps})
	t.Cleanup(live.Close)

	mk := func(m *Manager, p string, dir bool) string {
		t.Helper()
		if err := m.TrackStaging(p); err != nil {
			t.Fatal(err)
		}
		if dir {
			if err := os.MkdirAll(filepath.Join(p, "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(p, "sub", "f"), []byte("piece"), 0o600)
		} else {
			os.WriteFile(p, []byte("piece"), 0o600)
		}
		return p
	}
	left := []string{
		mk(killed, filepath.Join(user, ".sandbox-mcp-incoming-aa"), true),
		mk(killed, filepath.Join(snaps, ".sandbox-mcp-partial-bb-snap.workspace.tar"), false),
	}
	done := mk(killed, filepath.Join(user, ".sandbox-mcp-incoming-cc"), true)
	os.Rename(done, filepath.Join(user, "finished"))
	notOurs := mk(killed, filepath.Join(user, "precious"), false)
	livePath := mk(live, filepath.Join(user, ".sandbox-mcp-incoming-dd"), true)
	legacy := filepath.Join(snaps, ".old.workspace.tar.partial")
	os.WriteFile(legacy, []byte("old piece"), 0o600)
	old := time.Now().Add(-3 * transferTimeout)
	os.Chtimes(legacy, old, old)

	// Killed: its lock goes with its process, which Close stands for
	// here without removing the staging file.
	killed.server.Release()
	killed.server = nil
	killed.Close()

	next := NewManager(rt, Config{Prefix: prefix, LockDir: locks, SnapshotDir: snaps})
	t.Cleanup(next.Close)
	if err := next.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(left, legacy) {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left", p)
		}
	}
	for _, p := range []string{filepath.Join(user, "finished", "sub", "f"), notOurs, livePath} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if _, err := os.Stat(killed.stagingFile(killed.serverID)); err == nil {
		t.Error("the killed server's staging file is left")
	}
}
