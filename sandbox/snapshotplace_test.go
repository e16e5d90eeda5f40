package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// scopedSnapshots is a runtime with volume snapshots in a scope of its
// engine (as a Kubernetes namespace is), whose volume made from a
// snapshot held waits for release to be closed, and then fails.
type scopedSnapshots struct {
	flakySnapshots
	scope   string
	held    string
	making  chan struct{}
	release chan struct{}
}

func (r scopedSnapshots) Kind() string                               { return "kubernetes" }
func (r scopedSnapshots) Scope() string                              { return r.scope }
func (r scopedSnapshots) VolumeRemove(context.Context, string) error { return nil }
func (r scopedSnapshots) VolumeFromSnapshot(ctx context.Context, _, ref string, _ map[string]string, _ int64) error {
	if ref != r.held {
		return fmt.Errorf("made a volume from %s", ref)
	}
	close(r.making)
	select {
	case <-r.release:
	case <-ctx.Done():
	}
	return errors.New("the driver failed")
}

// TestSnapshotsElsewhereRefused: a snapshot whose image or volume
// snapshot another engine, or another namespace, keeps is neither
// restored nor deleted by this server (an image looked for here would
// read as gone, and a deletion would forget what stays there); it says
// where, and nothing is touched. A workspace tar alone, and a record
// that does not say, are this server's as before. A restore holds its
// snapshot: a deletion meanwhile is refused, another restore is not.
func TestSnapshotsElsewhereRefused(t *testing.T) {
	store, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fails, removed := 0, []string{}
	const here = "namespace sandboxes, id 0f0f-aaaa"
	rt := scopedSnapshots{flakySnapshots: flakySnapshots{mu: &sync.Mutex{}, fails: &fails, removed: &removed}, scope: here,
		held: ".vsnap-mine-0123456789abcdef", making: make(chan struct{}), release: make(chan struct{})}
	m := NewManager(rt, Config{Prefix: "smtplace", LockDir: t.TempDir(), SnapshotDir: t.TempDir(), Snapshots: store})
	t.Cleanup(m.Close)
	if got := m.snapshotEngine(); got != "kubernetes "+here {
		t.Fatalf("this server's snapshot engine: %q", got)
	}
	recs := []state.Snapshot{
		{Name: "ondocker", Image: "smtplace-snapshot:ondocker", Engine: "docker"},
		{Name: "otherns", WorkspaceOnly: true, VolumeSnapshot: ".vsnap-otherns-0123456789abcdef", Engine: "kubernetes namespace other, id 0f0f-bbbb"},
		{Name: "othercluster", WorkspaceOnly: true, VolumeSnapshot: ".vsnap-othercluster-0123456789abcdef", Engine: "kubernetes namespace sandboxes, id 0f0f-cccc"},
		{Name: "tar", WorkspaceOnly: true, Workspace: true, Engine: ""},
		{Name: "noid", WorkspaceOnly: true, VolumeSnapshot: ".vsnap-noid-0123456789abcdef", Engine: "kubernetes namespace sandboxes"},
		{Name: "legacy", WorkspaceOnly: true, VolumeSnapshot: ".vsnap-legacy-0123456789abcdef"},
		{Name: "mine", WorkspaceOnly: true, VolumeSnapshot: ".vsnap-mine-0123456789abcdef", Engine: "kubernetes " + here},
	}
	for _, r := range recs {
		if err := store.AddSnapshot(r); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, r := range recs[:3] {
		if got := m.SnapshotElsewhere(r); got != r.Engine {
			t.Errorf("%s: elsewhere %q, want %q", r.Name, got, r.Engine)
		}
		if _, _, err := m.Restore(ctx, r.Name, "box"); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), r.Engine) {
			t.Errorf("restore from %s: %v", r.Name, err)
		}
		if _, err := m.DeleteSnapshot(ctx, r.Name); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), r.Engine) {
			t.Errorf("delete %s: %v", r.Name, err)
		}
		if _, ok, _ := store.Snapshot(r.Name); !ok {
			t.Errorf("%s's record went", r.Name)
		}
	}
	if len(removed) != 0 {
		t.Fatalf("volume snapshots removed from elsewhere: %v", removed)
	}
	for _, r := range recs[3:] {
		if got := m.SnapshotElsewhere(r); got != "" {
			t.Errorf("%s: elsewhere %q", r.Name, got)
		}
	}
	if _, err := m.DeleteSnapshot(ctx, "legacy"); err != nil {
		t.Fatalf("delete a record that does not say where: %v", err)
	}
	// A snapshot elsewhere can be forgotten (its image stays there); one
	// here cannot (it is deleted whole).
	if _, err := m.ForgetSnapshot(ctx, "noid"); err == nil {
		t.Fatal("a snapshot this server reaches was forgotten")
	}
	if rec, err := m.ForgetSnapshot(ctx, "ondocker"); err != nil || rec.Image == "" {
		t.Fatalf("forget a snapshot made on docker: %+v %v", rec, err)
	}
	if _, ok, _ := store.Snapshot("ondocker"); ok {
		t.Fatal("the forgotten snapshot's record is still there")
	}

	// A restore holds its snapshot: a deletion meanwhile is refused, and
	// the snapshot is whole after it.
	done := make(chan error, 1)
	go func() { _, _, err := m.Restore(ctx, "mine", "box"); done <- err }()
	select {
	case <-rt.making:
	case err := <-done:
		t.Fatalf("the restore ended before it made its volume: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the restore never made its volume")
	}
	if _, err := m.DeleteSnapshot(ctx, "mine"); err == nil || !strings.Contains(err.Error(), "restored") {
		t.Fatalf("a deletion during a restore: %v", err)
	}
	// Another restore from it goes on beside it.
	hctx, hcancel := context.WithTimeout(ctx, 10*time.Second)
	release, err := m.holdSnapshot(hctx, "mine")
	hcancel()
	if err != nil {
		t.Fatalf("a second restore's hold beside the first: %v", err)
	}
	release()
	close(rt.release)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "the driver failed") {
		t.Fatalf("the restore: %v", err)
	}
	if _, err := m.DeleteSnapshot(ctx, "mine"); err != nil {
		t.Fatalf("a deletion after the restore: %v", err)
	}
	if want := []string{".vsnap-legacy-0123456789abcdef", ".vsnap-mine-0123456789abcdef"}; strings.Join(removed, " ") != strings.Join(want, " ") {
		t.Fatalf("volume snapshots removed: %v, want %v", removed, want)
	}
}

// TestKilledServersSnapshotsElsewhereLeft: the volume snapshots a killed
// server listed are left, listed, by a later server whose runtime does not
// reach them (another namespace, sharing the lock directory and prefix),
// which still removes the host files the list names; a server in the
// killed one's namespace removes them.
func TestKilledServersSnapshotsElsewhereLeft(t *testing.T) {
	const prefix = "smtvse"
	locks, snaps, user := t.TempDir(), t.TempDir(), t.TempDir()
	store, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fails, removed := 0, []string{}
	inNS := func(ns string) scopedSnapshots {
		return scopedSnapshots{flakySnapshots: flakySnapshots{mu: &sync.Mutex{}, fails: &fails, removed: &removed}, scope: "namespace " + ns + ", id " + ns + "-uid"}
	}
	cfg := Config{Prefix: prefix, LockDir: locks, SnapshotDir: snaps, Snapshots: store}
	killed := NewManager(inNS("a"), cfg)
	const unrec = ".vsnap-s-0123456789abcdef"
	staging := filepath.Join(user, ".sandbox-mcp-incoming-ee")
	for _, p := range []string{filepath.Join(snaps, unrec), staging} {
		if err := killed.TrackStaging(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(staging, 0o700); err != nil {
		t.Fatal(err)
	}
	list, lock := killed.stagingFile(killed.serverID), killed.serverLockPath(killed.serverID)
	killed.server.Release()
	killed.server = nil
	killed.Close()

	sweep := func(ns string) {
		t.Helper()
		next := NewManager(inNS(ns), cfg)
		defer next.Close()
		if err := next.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sweep("b")
	if len(removed) != 0 {
		t.Fatalf("a server in another namespace removed %v", removed)
	}
	if _, err := os.Lstat(staging); err == nil {
		t.Fatal("the host staging directory is left")
	}
	data, err := os.ReadFile(list)
	if err != nil || !strings.Contains(string(data), unrec) || !strings.HasPrefix(string(data), "engine:kubernetes namespace a, id a-uid\x00") ||
		strings.Contains(string(data), staging) {
		t.Fatalf("the staging list after a sweep elsewhere: %q %v", data, err)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("the killed server's lock file after a sweep elsewhere: %v", err)
	}
	sweep("a")
	if strings.Join(removed, " ") != unrec {
		t.Fatalf("removed by a server in the killed one's namespace: %v", removed)
	}
	for _, p := range []string{list, lock} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after the sweep that removed everything", p)
		}
	}
}

// dockerListing is staleListing on docker.
type dockerListing struct{ staleListing }

func (dockerListing) Kind() string { return "docker" }

// TestKilledEngineServersStagingDone: an engine without volume snapshots
// lists no engine in its staging file, so a later server on another
// engine is done with its list (a clone's staging tar), lock file and all.
func TestKilledEngineServersStagingDone(t *testing.T) {
	const prefix = "smtvsd"
	locks, snaps := t.TempDir(), t.TempDir()
	cfg := Config{Prefix: prefix, LockDir: locks, SnapshotDir: snaps}
	killed := NewManager(staleListing{}, cfg)
	tarPath := filepath.Join(snaps, ".clone-t-0123456789abcdef-00000000.workspace.tar")
	if err := killed.TrackStaging(tarPath); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tarPath, []byte("piece"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, lock := killed.stagingFile(killed.serverID), killed.serverLockPath(killed.serverID)
	if data, _ := os.ReadFile(list); strings.Contains(string(data), stagingEngine) {
		t.Fatalf("a podman server's staging list names its engine: %q", data)
	}
	killed.server.Release()
	killed.server = nil
	killed.Close()
	next := NewManager(dockerListing{}, cfg)
	defer next.Close()
	if err := next.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tarPath, list, lock} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after a docker server's sweep", p)
		}
	}
}

// TestBadSnapshotNamesMakeNoLock: a name that is not a snapshot's (as
// the people's CLI passes it on) is refused as a bad argument by a
// deletion and a forgetting, and no lock file is made for it (names like
// "" and ".hidden" made one before).
func TestBadSnapshotNamesMakeNoLock(t *testing.T) {
	store, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	lockDir := filepath.Join(root, "a", "b", "locks")
	if err := os.MkdirAll(lockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	fails, removed := 0, []string{}
	rt := flakySnapshots{mu: &sync.Mutex{}, fails: &fails, removed: &removed}
	m := NewManager(rt, Config{Prefix: "smtname", LockDir: lockDir, SnapshotDir: t.TempDir(), Snapshots: store})
	t.Cleanup(m.Close)
	for _, snap := range []string{"../../../escaped", "x/../../y", "", ".hidden"} {
		var ae *ArgError
		if _, err := m.DeleteSnapshot(context.Background(), snap); !errors.As(err, &ae) {
			t.Errorf("delete %q: %v, want a bad name", snap, err)
		}
		if _, err := m.ForgetSnapshot(context.Background(), snap); !errors.As(err, &ae) {
			t.Errorf("forget %q: %v, want a bad name", snap, err)
		}
	}
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (filepath.Dir(p) != lockDir || strings.Contains(d.Name(), "snapshot")) {
			t.Errorf("made %s", p) // the server's own lock in lockDir aside
		}
		return nil
	})
}
