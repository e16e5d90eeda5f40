package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/state"
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

// flakySnapshots is a runtime whose volume snapshots cannot be removed
// while fails is above 0 (each try takes one off); removed lists those
// that were.
type flakySnapshots struct {
	staleListing
	mu      *sync.Mutex
	fails   *int
	removed *[]string
}

func (flakySnapshots) VolumeSnapshotsWhyNot(context.Context) string { return "" }
func (flakySnapshots) SnapshotVolume(context.Context, string, string, map[string]string) (int64, error) {
	return 0, errors.New("not in this test")
}
func (flakySnapshots) VolumeFromSnapshot(context.Context, string, string, map[string]string, int64) error {
	return errors.New("not in this test")
}
func (r flakySnapshots) RemoveVolumeSnapshot(_ context.Context, ref string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.HasPrefix(ref, ".vsnap-x-") {
		return fmt.Errorf("%s is not ours: left alone: %w", ref, ErrInUse)
	}
	if *r.fails > 0 {
		*r.fails--
		return errors.New("the cluster is unreachable")
	}
	*r.removed = append(*r.removed, ref)
	return nil
}

// TestKilledServersVolumeSnapshotsRetried: the volume snapshots a killed
// server listed (a clone's, a snapshot's it never recorded) that cannot
// be removed when a later server sweeps are kept in its staging list, and
// its lock file with them, for the next sweep, which removes them; a
// recorded snapshot's is never removed, and one the runtime leaves alone
// (not its own) is not tried again.
func TestKilledServersVolumeSnapshotsRetried(t *testing.T) {
	const prefix = "smtvsr"
	locks, snaps := t.TempDir(), t.TempDir()
	store, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fails, removed := 2, []string{}
	rt := flakySnapshots{mu: &sync.Mutex{}, fails: &fails, removed: &removed}
	cfg := Config{Prefix: prefix, LockDir: locks, SnapshotDir: snaps, Snapshots: store}
	killed := NewManager(rt, cfg)
	const (
		clone    = ".clone-t-0123456789abcdef"
		unrec    = ".vsnap-s-0123456789abcdef"
		recorded = ".vsnap-r-fedcba9876543210"
		foreign  = ".vsnap-x-00112233445566aa"
	)
	if err := store.AddSnapshot(state.Snapshot{Name: "r", VolumeSnapshot: recorded}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{clone + "-00000000.workspace.tar", unrec, recorded, foreign} {
		if err := killed.TrackStaging(filepath.Join(snaps, p)); err != nil {
			t.Fatal(err)
		}
	}
	list, lock := killed.stagingFile(killed.serverID), killed.serverLockPath(killed.serverID)
	killed.server.Release()
	killed.server = nil
	killed.Close()

	sweep := func() {
		t.Helper()
		next := NewManager(rt, cfg)
		defer next.Close()
		if err := next.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sweep() // both removals fail
	if len(removed) != 0 {
		t.Fatalf("removed while the cluster was unreachable: %v", removed)
	}
	data, err := os.ReadFile(list)
	if err != nil || !strings.Contains(string(data), clone) || !strings.Contains(string(data), unrec) ||
		strings.Contains(string(data), recorded) || strings.Contains(string(data), foreign) {
		t.Fatalf("the staging list after a failed sweep: %q %v", data, err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("the killed server's lock file after a failed sweep: %v", err)
	}
	sweep()
	slices.Sort(removed)
	if !slices.Equal(removed, []string{clone, unrec}) {
		t.Fatalf("removed at the next sweep: %v", removed)
	}
	for _, p := range []string{list, lock} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after the sweep that removed everything", p)
		}
	}
}
