package sandbox

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/diskguard"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/hostkill"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// This file is the Manager's snapshots: a sandbox's root filesystem saved
// as an image in the engine (ImageSaver) plus its workspace as a tar
// beside the state file, restored into a new container; and clones. A
// runtime without an ImageSaver (Kubernetes) keeps the workspace tar
// alone, and its restores and clones boot the base image afresh.

// Labels of snapshot images and of containers restored from one.
const (
	LabelSnapshot = "io.sandbox-mcp.snapshot" // on a snapshot's image: its name
	LabelParent   = "io.sandbox-mcp.parent"   // on a restored container: the snapshot
	LabelClone    = "io.sandbox-mcp.clone"    // on a clone's image: the clone
)

// SnapshotStore keeps snapshot records (state.Store in production).
type SnapshotStore interface {
	AddSnapshot(sn state.Snapshot) error
	Snapshot(name string) (state.Snapshot, bool, error)
	Snapshots() ([]state.Snapshot, error)
	DeleteSnapshot(name string) (bool, error)
}

// Why commands end when their sandbox is restored or snapshotted.
const (
	endedByRestore  = "was restored from a snapshot"
	endedBySnapshot = "was stopped to be snapshotted (this engine saves stopped containers only)"
	endedByStop     = "was stopped outside this server"
)

// ErrNoSnapshot marks an unknown snapshot name.
var ErrNoSnapshot = errors.New("no such snapshot")

var snapshotName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)

// ValidateSnapshotName accepts names that are valid image tags: letters,
// digits, '_', '.', '-', starting with a letter or digit, at most 100.
func ValidateSnapshotName(name string) error {
	if !snapshotName.MatchString(name) {
		return fmt.Errorf("%w: snapshot name %q: use 1-100 letters, digits, '_', '.', '-', starting with a letter or digit", ErrInvalidName, name)
	}
	return nil
}

// lockSnapshot holds snapshot name snap, across server processes, while
// it is made or deleted: the same name taken twice at once would share
// one image tag. A name held elsewhere is refused at once, not waited for.
func (m *Manager) lockSnapshot(snap, purpose string) (release func(), err error) {
	// The name becomes a file's: one that is not a snapshot's never
	// reaches the lock directory.
	if err := ValidateSnapshotName(snap); err != nil {
		return nil, &ArgError{Err: err}
	}
	// '@' is in neither sandbox nor snapshot names: no clash with lockKey.
	// Not the prefix's: snapshot records and tars are the state
	// directory's, shared by servers of every prefix that use it.
	h, err := m.locks.TryLock(snapshotLockKey(snap), purpose+" "+snap)
	if errors.Is(err, locks.ErrHeld) {
		return nil, &ArgError{Err: fmt.Errorf("snapshot %q is being made, restored or deleted right now (%w); try again once that is done, or pick another name", snap, err)}
	}
	if err != nil {
		return nil, err
	}
	return h.Release, nil
}

// snapshotLockKey is the lock of snapshot snap.
func snapshotLockKey(snap string) string { return "@snapshot-" + snap }

// holdSnapshotWait bounds how long a restore waits for a snapshot being
// made or deleted.
const holdSnapshotWait = 5 * time.Minute

// holdSnapshot takes snapshot snap's lock shared, for a restore from it:
// the snapshot is then neither deleted from under the restore (a volume
// made from a volume snapshot deleted meanwhile would wait for it until
// the boot's time is up) nor made anew, while restores from it run side
// by side. It waits, within holdSnapshotWait, for a making or a deletion
// under way.
func (m *Manager) holdSnapshot(ctx context.Context, snap string) (release func(), err error) {
	if err := ValidateSnapshotName(snap); err != nil {
		return nil, &ArgError{Err: err}
	}
	wctx, cancel := context.WithTimeout(ctx, holdSnapshotWait)
	defer cancel()
	h, err := m.locks.LockShared(wctx, snapshotLockKey(snap), "restore from "+snap)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("it is being made or deleted (%w); try again once that is done", err)
		}
		return nil, fmt.Errorf("snapshot %q: %w", snap, err)
	}
	return h.Release, nil
}

// SnapshotRef is the image reference of a snapshot.
func (m *Manager) SnapshotRef(snap string) string {
	return strings.ToLower(m.cfg.Prefix) + "-snapshot:" + snap
}

// SnapshotRequest is one snapshot.
type SnapshotRequest struct {
	Name             string
	IncludeWorkspace bool
	Note             string
}

// saveTimeout bounds saving a container as an image.
const saveTimeout = 30 * time.Minute

// maxWorkspaceTar bounds a saved workspace.
const maxWorkspaceTar = 64 << 30

// bootOverride makes the next boot of a name use another image and profile
// (restore, clone); set and cleared under the name's lifecycle lock.
type bootOverride struct {
	prof   Profile
	labels map[string]string
}

func (m *Manager) setOverride(name string, o *bootOverride) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.overrides == nil {
		m.overrides = map[string]*bootOverride{}
	}
	if o == nil {
		delete(m.overrides, name)
		return
	}
	m.overrides[name] = o
}

func (m *Manager) override(name string) *bootOverride {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.overrides[name]
}

// snapshotter returns what snapshots are made with: the runtime's
// ImageSaver, or nil where the runtime cannot save a container as an
// image (Kubernetes: a pod's root filesystem cannot be committed), whose
// snapshots keep the workspace only (state.Snapshot.WorkspaceOnly).
func (m *Manager) snapshotter() (ImageSaver, SnapshotStore, error) {
	if m.cfg.Snapshots == nil || m.cfg.SnapshotDir == "" {
		return nil, nil, fmt.Errorf("%w: this server keeps no snapshot records", ErrUnsupported)
	}
	saver, _ := m.rt.(ImageSaver)
	return saver, m.cfg.Snapshots, nil
}

// snapshotOf returns snapshot snap's record, if this server keeps
// records and has one.
func (m *Manager) snapshotOf(snap string) (state.Snapshot, bool, error) {
	if m.cfg.Snapshots == nil {
		return state.Snapshot{}, false, nil
	}
	return m.cfg.Snapshots.Snapshot(snap)
}

// rootNotKept says, for an error or a result, that the runtime keeps no
// root filesystem in a snapshot or clone.
func (m *Manager) rootNotKept() string {
	return m.rt.Kind() + " cannot save a sandbox's root filesystem (installed packages, files outside /workspace, " +
		"variables set with env): snapshots and clones keep the workspace, and boot the sandbox's base image afresh"
}

// Snapshot saves sandbox name: its root filesystem (with deletions,
// modes, owners, links, and the env tool's variables, which live there) as
// an image, and its workspace unless left out (the workspace alone where
// the runtime has no image of a sandbox: see snapshotter). A stopped
// sandbox is started; a missing one is an error. Nothing half-made is
// kept: the record is written last, and a failure removes the image and
// tar.
func (m *Manager) Snapshot(ctx context.Context, name string, req SnapshotRequest) (state.Snapshot, error) {
	if err := ValidateName(name); err != nil {
		return state.Snapshot{}, err
	}
	if err := ValidateSnapshotName(req.Name); err != nil {
		return state.Snapshot{}, &ArgError{Err: err}
	}
	if req.IncludeWorkspace {
		m.eachObserver(func(o Observer) {
			if o.Saving != nil {
				o.Saving(ctx, name)
			}
		})
	}
	return m.snapshot(ctx, name, req)
}

// snapshot is Snapshot of checked names.
func (m *Manager) snapshot(ctx context.Context, name string, req SnapshotRequest) (state.Snapshot, error) {
	saver, store, err := m.snapshotter()
	if err != nil {
		return state.Snapshot{}, err
	}
	unlock, err := m.lockSnapshot(req.Name, "snapshot "+name+" as")
	if err != nil {
		return state.Snapshot{}, err
	}
	defer unlock()
	if _, ok, _ := store.Snapshot(req.Name); ok {
		return state.Snapshot{}, &ArgError{Err: fmt.Errorf("%w: %q; pick another name or delete_snapshot it first", state.ErrSnapshotExists, req.Name)}
	}
	if saver == nil && !req.IncludeWorkspace {
		return state.Snapshot{}, &ArgError{Err: fmt.Errorf("%s; without the workspace, the snapshot would keep nothing", m.rootNotKept())}
	}
	live := true
	if ls, ok := saver.(LiveSaver); ok {
		if live, err = ls.SavesRunning(ctx); err != nil {
			return state.Snapshot{}, err
		}
	}
	release, err := m.lockName(ctx, name, "snapshot")
	if err != nil {
		return state.Snapshot{}, err
	}
	defer release()
	c, err := m.inspectOwned(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return state.Snapshot{}, fmt.Errorf("sandbox %q does not exist: nothing to snapshot", name)
	}
	if err != nil {
		return state.Snapshot{}, err
	}
	sb, err := m.runningLocked(ctx, name, c)
	if err != nil {
		return state.Snapshot{}, err
	}
	defer sb.busy()()
	var env []string
	if saver != nil {
		env = m.pid1Env(ctx, sb.own.target())
	}
	rec := state.Snapshot{Name: req.Name, Image: m.SnapshotRef(req.Name), Sandbox: name, BaseImage: c.Image,
		Parent: c.Labels[LabelParent], Created: time.Now().UTC(), Note: req.Note, Workspace: req.IncludeWorkspace}
	if base := c.Labels[LabelBaseImage]; base != "" {
		rec.BaseImage = base
	}
	if saver == nil {
		rec.Image, rec.WorkspaceOnly = "", true
	}
	rec.Profile, _ = json.Marshal(sb.Profile)
	// Straight through the shell: the lifecycle lock is held, so the
	// recovery of a lost shell (which takes it) must not run here. A
	// snapshot of the workspace alone keeps no variable.
	if saver != nil {
		if out, err := sb.housekeep(ctx, guest.EnvListScript, scriptTimeout); err == nil {
			for _, v := range guest.ParseEnvList(out) {
				rec.Env = append(rec.Env, v.Name)
			}
		}
	}
	cleanup := func() {
		if rec.WorkspaceFile != "" {
			os.Remove(filepath.Join(m.cfg.SnapshotDir, rec.WorkspaceFile))
		}
		if saver == nil {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := saver.RemoveImage(rctx, rec.Image); err != nil && !errors.Is(err, ErrNotFound) {
			m.log.Warn("remove the image of a failed snapshot", "image", rec.Image, "err", err)
		}
	}
	var vs VolumeSnapshotter
	if saver == nil {
		// The workspace is kept by the runtime's storage where it can.
		var why string
		if vs, why = m.volumeSnapshotter(ctx); vs == nil {
			m.log.Info("a snapshot's workspace is kept as a tar on the server's host", "sandbox", name, "snapshot", req.Name, "why", why)
		}
	}
	switch {
	case vs != nil:
		key := volumeSnapshotKey(req.Name)
		// Listed first: a server killed before the record is written
		// leaves it for the next to remove (staging.go).
		if err := m.TrackStaging(filepath.Join(m.cfg.SnapshotDir, key)); err != nil {
			return state.Snapshot{}, err
		}
		n, err := m.snapshotWorkspace(ctx, vs, sb, m.volumeOf(name, c), key, map[string]string{LabelOwner: m.cfg.Prefix, LabelSnapshot: req.Name})
		if err != nil {
			return state.Snapshot{}, fmt.Errorf("snapshot %q of sandbox %q: snapshot the workspace: %w", req.Name, name, err)
		}
		rec.VolumeSnapshot, rec.WorkspaceBytes = key, n
		cleanup = func() { m.dropVolumeSnapshot(ctx, vs, key) }
	case req.IncludeWorkspace:
		n, file, err := m.saveWorkspace(ctx, sb, req.Name)
		if err != nil {
			return state.Snapshot{}, fmt.Errorf("snapshot %q of sandbox %q: save the workspace: %w", req.Name, name, err)
		}
		rec.WorkspaceFile, rec.WorkspaceBytes = file, n
	}
	if saver != nil {
		labels := map[string]string{LabelOwner: m.cfg.Prefix, LabelSnapshot: req.Name, LabelName: name, LabelBaseImage: rec.BaseImage}
		if err := m.saveImage(ctx, saver, sb, rec.Image, labels, env, live); err != nil {
			cleanup()
			return state.Snapshot{}, fmt.Errorf("snapshot %q of sandbox %q: %w; nothing was kept", req.Name, name, err)
		}
	}
	if keptByEngine(rec) {
		rec.Engine = m.snapshotEngine()
	}
	if err := store.AddSnapshot(rec); err != nil {
		cleanup()
		return state.Snapshot{}, fmt.Errorf("snapshot %q: %w", req.Name, err)
	}
	return rec, nil
}

// keptByEngine reports whether snapshot rec keeps a part in an engine
// (an image, a volume snapshot), which only a server driving that
// engine reaches; a workspace tar alone boots on any runtime.
func keptByEngine(rec state.Snapshot) bool {
	return (rec.Image != "" && !rec.WorkspaceOnly) || rec.VolumeSnapshot != ""
}

// snapshotEngine is where this server's runtime keeps a snapshot's
// engine parts (state.Snapshot.Engine).
func (m *Manager) snapshotEngine() string {
	if s, ok := m.rt.(Scoped); ok {
		return m.rt.Kind() + " " + s.Scope()
	}
	return m.rt.Kind()
}

// SnapshotElsewhere says, for snapshot rec, where its engine parts are
// when that is not where this server's runtime keeps them (a snapshot
// made on docker, listed by a podman server sharing the state
// directory; one made in another namespace); "" when they are here, or
// the record does not say.
func (m *Manager) SnapshotElsewhere(rec state.Snapshot) string {
	if !keptByEngine(rec) {
		return ""
	}
	if rec.Engine == "" {
		// A record made before it said: what this runtime cannot hold at
		// all is elsewhere.
		_, vs := m.rt.(VolumeSnapshotter)
		_, saver := m.rt.(ImageSaver)
		switch {
		case rec.VolumeSnapshot != "" && !vs:
			return "a Kubernetes cluster"
		case rec.VolumeSnapshot == "" && !saver:
			return "an engine that saves images"
		}
		return ""
	}
	if engineHere(rec.Engine, m.snapshotEngine()) {
		return ""
	}
	return rec.Engine
}

// snapshotHere refuses to act (doing what) on snapshot rec from a server
// that does not reach where its engine parts are: an image looked for
// in another engine reads as gone, and a deletion there would forget a
// snapshot whose image or volume snapshot stays behind. A volume
// snapshot the runtime finds here is here, whatever the record says.
func (m *Manager) snapshotHere(ctx context.Context, rec state.Snapshot, doing string) error {
	if where := m.SnapshotElsewhere(rec); where != "" {
		if f, ok := m.rt.(VolumeSnapshotFinder); ok && rec.VolumeSnapshot != "" {
			if there, err := f.HasVolumeSnapshot(ctx, rec.VolumeSnapshot); err == nil && there {
				return nil // here after all
			}
		}
		return fmt.Errorf("%w: snapshot %q was made on %s, and this server runs on %s: %s it from a server there "+
			"(where that is gone for good, `sandbox-mcp delete-snapshot --forget %s` drops its record here)",
			ErrUnsupported, rec.Name, where, m.snapshotEngine(), doing, rec.Name)
	}
	return nil
}

// ForgetSnapshot drops the record, and the workspace tar, of snapshot
// snap, whose image or volume snapshot lives where this server does not
// reach (SnapshotElsewhere): for a snapshot whose engine or namespace is
// gone for good. What it kept there stays. A snapshot this server
// reaches is refused: DeleteSnapshot removes it whole.
func (m *Manager) ForgetSnapshot(ctx context.Context, snap string) (state.Snapshot, error) {
	_, store, rec, unlock, err := m.lockedSnapshot(snap, "forget")
	if err != nil {
		return rec, err
	}
	defer unlock()
	if m.snapshotHere(ctx, rec, "forget") == nil {
		return rec, &ArgError{Err: fmt.Errorf("snapshot %q is kept where this server reaches it: delete it (without --forget), which removes it whole", snap)}
	}
	if _, err := store.DeleteSnapshot(snap); err != nil {
		return rec, err
	}
	if rec.WorkspaceFile != "" {
		os.Remove(filepath.Join(m.cfg.SnapshotDir, rec.WorkspaceFile))
	}
	return rec, nil
}

// runningLocked returns sandbox name, whose container is c, running: a
// container stopped behind the server's back is started, and the shells
// of its earlier run are dropped. The caller holds the lifecycle lock.
func (m *Manager) runningLocked(ctx context.Context, name string, c Container) (*Sandbox, error) {
	if !c.Running() {
		if old := m.detach(name); old != nil {
			old.end(endedByStop)
		}
	}
	sb, _, err := m.bootLocked(ctx, name, bootFind)
	return sb, err
}

// saveImage saves sb's container as image ref. Where the engine saves
// stopped containers only (live false), the container is stopped for the
// save, its commands ended and told why, and started again after.
func (m *Manager) saveImage(ctx context.Context, saver ImageSaver, sb *Sandbox, ref string, labels map[string]string, env []string, live bool) error {
	target := sb.own.target()
	if !live {
		m.bumpGen(sb.Name, "snapshotted")
		if old := m.detach(sb.Name); old != nil {
			old.end(endedBySnapshot)
		}
		if err := m.rt.Stop(ctx, target, 10*time.Second); err != nil {
			return fmt.Errorf("stop the sandbox to save it: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, saveTimeout)
	err := saver.SaveImage(sctx, target, ref, labels, env, sb.inflight.Load() > 1)
	cancel()
	if !live {
		if serr := m.rt.Start(context.WithoutCancel(ctx), target); serr != nil {
			m.log.Warn("start sandbox again after saving it", "sandbox", sb.Name, "err", serr)
		}
	}
	if err != nil {
		return fmt.Errorf("save the image: %w", err)
	}
	return nil
}

// LabelBaseImage names, on a container or snapshot image, the image the
// chain started from.
const LabelBaseImage = "io.sandbox-mcp.base-image"

// pid1Env is the environment of the container's PID 1: the image's ENV
// and the run's -e, which an engine that rebuilds the image config needs.
func (m *Manager) pid1Env(ctx context.Context, target string) []string {
	out, err := m.rt.Exec(ctx, target, ExecSpec{Argv: []string{"sh", "-c", "cat /proc/1/environ"}})
	if err != nil || out.ExitCode != 0 {
		return nil
	}
	var env []string
	for kv := range strings.SplitSeq(string(out.Stdout), "\x00") {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" && !strings.HasPrefix(k, "SANDBOX_MCP_") {
			env = append(env, kv)
		}
	}
	return env
}

// workspaceFileName names the workspace tar of a snapshot (or of a clone
// under way) after it and a hash of its exact name, so that names that
// differ only in case ("Foo", "foo") do not share one file where the file
// system ignores case (macOS's default). A record keeps its file's name,
// so tars saved under the older plain name still load.
func workspaceFileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return key + "-" + hex.EncodeToString(sum[:4]) + ".workspace.tar"
}

// saveWorkspace streams the workspace as a tar into the snapshot
// directory, without its volume's lost+found (see package guest), as an
// exact copy (guest.Exact); the file appears under its final name only
// when whole. The stream is the sandbox's and untrusted: it is kept only
// up to what the sandbox's disk limit holds (hostCap) and while the host
// keeps its free floor, and its size is what the host wrote.
func (m *Manager) saveWorkspace(ctx context.Context, sb *Sandbox, snap string) (int64, string, error) {
	if err := os.MkdirAll(m.cfg.SnapshotDir, 0o700); err != nil {
		return 0, "", err
	}
	file := workspaceFileName(snap)
	tmp := filepath.Join(m.cfg.SnapshotDir, StagingPrefixes[1]+randomHex()+"-"+file)
	if err := m.TrackStaging(tmp); err != nil {
		return 0, "", fmt.Errorf("list %s for cleaning up: %w", tmp, err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, "", err
	}
	defer os.Remove(tmp)
	var n int64
	ctx, cancel := context.WithTimeout(ctx, transferTimeout) // a tar that stalls holds no lock for ever
	defer cancel()
	limit := m.hostCap(ctx, sb, true)
	if limit.Bytes <= 0 || limit.Bytes > maxWorkspaceTar {
		limit = HostCap{Bytes: maxWorkspaceTar, Why: "the most a snapshot keeps of a workspace"}
	}
	err, failed := m.execOut(ctx, sb, []string{"sh", "-c", guest.TarScript, "sh", m.cfg.Workdir, ".", guest.SkipLostFound, guest.Exact},
		func(r io.Reader, _ func() *streamFailure) error {
			bw := bufio.NewWriterSize(f, streamBuffer)
			w := &diskguard.Writer{W: bw, Dir: m.cfg.SnapshotDir, Limit: limit.Bytes, What: "the workspace's tar", LimitWhy: limit.Why, Free: m.cfg.HostFree}
			// Read as a tar archive, kept up to its end marker: tar pads
			// its output to whole records (1 MiB here), which is not kept.
			// Next skips an entry's data as stored (a sparse file's holes
			// are not expanded).
			tr := tar.NewReader(io.TeeReader(r, w))
			for {
				_, err := tr.Next()
				if err == io.EOF {
					break
				}
				if werr := w.Err(); werr != nil {
					return werr
				}
				if err != nil {
					return fmt.Errorf("the workspace's tar stream: %w", err)
				}
			}
			n = w.N()
			if err := bw.Flush(); err != nil {
				return fmt.Errorf("write %s: %w", tmp, err)
			}
			return f.Sync()
		})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return 0, "", err
	case failed != nil:
		return 0, "", m.transferFailed(ctx, sb, "save the workspace of", m.cfg.Workdir, failed, "nothing was kept")
	}
	if err := os.Rename(tmp, filepath.Join(m.cfg.SnapshotDir, file)); err != nil {
		return 0, "", err
	}
	return n, file, nil
}

// loadWorkspace makes a saved workspace tar the content of the sandbox's
// workspace (a new sandbox's, for a clone), whole or not at all: it is
// staged beside the workspace and swapped in (intent.go). The volume's
// lost+found is neither removed nor extracted over.
//
// staged says, when it fails, whether the workspace had arrived whole
// (and the record says so): what is left is then the swap.
func (m *Manager) loadWorkspace(ctx context.Context, sb *Sandbox, file string, in state.Intent) (staged bool, err error) {
	if err := m.stageWorkspace(ctx, sb, file, in); err != nil {
		return false, err
	}
	in.Phase = intentStaged
	if err := m.putIntent(in); err != nil {
		return false, err
	}
	if err := m.swapWorkspace(ctx, sb, in); err != nil {
		return true, err
	}
	m.endIntent(in.Sandbox)
	return true, nil
}

// Restore replaces sandbox name's container with one from snapshot snap,
// and its workspace with the snapshot's (when it saved one; else the
// workspace is kept). Commands running in the sandbox are ended first and
// told why; its jobs are gone with the old container.
func (m *Manager) Restore(ctx context.Context, snap, name string) (BootInfo, state.Snapshot, error) {
	if err := ValidateName(name); err != nil {
		return BootInfo{}, state.Snapshot{}, err
	}
	info, rec, err := m.restore(ctx, snap, name)
	if err == nil && rec.Workspace {
		m.eachObserver(func(o Observer) {
			if o.Restored != nil {
				o.Restored(ctx, name)
			}
		})
	}
	return info, rec, err
}

// restore is Restore of a checked name.
func (m *Manager) restore(ctx context.Context, snap, name string) (BootInfo, state.Snapshot, error) {
	saver, store, err := m.snapshotter()
	if err != nil {
		return BootInfo{}, state.Snapshot{}, err
	}
	unlock, err := m.holdSnapshot(ctx, snap)
	if err != nil {
		return BootInfo{}, state.Snapshot{}, err
	}
	defer unlock()
	rec, err := m.snapshotRecord(store, snap)
	if err != nil {
		return BootInfo{}, rec, err
	}
	if err := m.snapshotHere(ctx, rec, "restore"); err != nil {
		return BootInfo{}, rec, err
	}
	if saver == nil && !rec.WorkspaceOnly {
		return BootInfo{}, rec, fmt.Errorf("%w: snapshot %q is an image (%s) an engine saved, which %s does not run", ErrUnsupported, snap, rec.Image, m.rt.Kind())
	}
	if rec.VolumeSnapshot != "" {
		info, err := m.restoreVolume(ctx, rec, name) // volsnap.go
		return info, rec, err
	}
	image := rec.Image
	gone := fmt.Errorf("snapshot %q: its image %s is gone from the engine; delete_snapshot it", snap, rec.Image)
	if rec.WorkspaceOnly {
		// Its workspace on the base image the sandbox booted from.
		image = rec.BaseImage
		gone = fmt.Errorf("snapshot %q: its base image %s is gone from the engine; the snapshot keeps the workspace only and boots that image", snap, image)
	}
	imageGone := func() bool { ok, err := m.rt.ImageExists(ctx, image); return err == nil && !ok }
	if rec.Workspace {
		// Before anything moves: where the old container cannot be put
		// back, a tar found missing later would cost its root filesystem.
		if fi, err := os.Stat(filepath.Join(m.cfg.SnapshotDir, rec.WorkspaceFile)); err != nil || !fi.Mode().IsRegular() {
			return BootInfo{}, rec, fmt.Errorf("snapshot %q: its saved workspace (%s) is gone from %s; delete_snapshot it", snap, rec.WorkspaceFile, m.cfg.SnapshotDir)
		}
	}
	_, undoable := RenamerOf(m.rt)
	if !undoable && imageGone() {
		return BootInfo{}, rec, gone
	}
	release, err := m.lockName(ctx, name, "restore")
	if err != nil {
		return BootInfo{}, rec, err
	}
	defer release()
	known := ""
	if sb, ok := m.Lookup(name); ok && sb.own != nil {
		known = sb.own.ID() // booted here: no need to look it up
	}
	// The old container is moved aside (killed once the new one runs,
	// deleted in the background); the workspace volume stays and is
	// refilled from the snapshot. Where that move can be undone, the image
	// is checked meanwhile, and a missing one puts the container back
	// before anything in it was touched.
	endOld := func() { m.endRestored(name, snap, undoable) }
	// The restore is recorded before the container moves: a server killed
	// from here on leaves it for the next one to undo or finish (intent.go).
	in := newIntent(name, "restore", snap)
	if undoable {
		in.Trash = m.trashName()
	}
	if err := m.putIntent(in); err != nil {
		return BootInfo{}, rec, err
	}
	defer func() {
		if in.Phase == intentBegun {
			m.endIntent(name) // undone here, or never begun
		}
	}()
	checked := make(chan bool, 1)
	if undoable {
		go func() { checked <- imageGone() }()
	} else {
		endOld() // retire removes the container: its commands end first, told why
	}
	finish, undo, err := m.retire(ctx, name, known, in.Trash)
	if undoable && <-checked {
		if err == nil && !undo() {
			finish()
		}
		return BootInfo{}, rec, gone
	}
	if err != nil {
		return BootInfo{}, rec, err
	}
	defer finish()
	if undoable {
		endOld()
	}
	prof := m.ProfileFor(name)
	prof.Image = image
	m.setOverride(name, &bootOverride{prof: prof, labels: map[string]string{LabelParent: snap, LabelBaseImage: rec.BaseImage}})
	defer m.setOverride(name, nil)
	// The image was checked above and the workspace volume is kept: the
	// boot need not look for either.
	sb, info, err := m.bootLocked(ctx, name, bootReplace)
	if rec.WorkspaceOnly {
		info.FreshBase = image
	}
	if err != nil {
		if undo() {
			return info, rec, fmt.Errorf("restore sandbox %q from snapshot %q: %w; the sandbox was put back as it was (the commands it ran had ended; its jobs run on)", name, snap, err)
		}
		m.forgetJobs(name)
		return info, rec, err
	}
	if !rec.Workspace {
		m.forgetJobs(name)
		finish()
		return info, rec, nil
	}
	// The snapshot's workspace arrives beside the old one, which stays
	// until it is whole: a failure until then puts the sandbox back as it
	// was where the engine can.
	if err := m.stageWorkspace(ctx, sb, rec.WorkspaceFile, in); err != nil {
		if derr := m.dropStage(context.WithoutCancel(ctx), sb, in); derr != nil {
			m.log.Warn("remove a staged workspace", "sandbox", name, "err", derr)
		}
		// The snapshot's container is not the sandbox any more: the next
		// call adopts the old one put back.
		if nsb := m.detach(name); nsb != nil {
			nsb.end(endedByRestore + " (" + snap + "), which failed")
		}
		if undo() {
			return info, rec, fmt.Errorf("restore sandbox %q from snapshot %q: %w; the sandbox was put back as it was (the commands it ran had ended; its jobs run on)", name, snap, err)
		}
		m.forgetJobs(name)
		runs := "the snapshot's image"
		if rec.WorkspaceOnly {
			runs = "its base image booted afresh"
		}
		return info, rec, fmt.Errorf("restore sandbox %q from snapshot %q: %w; the sandbox runs from %s with its workspace as it was", name, snap, err, runs)
	}
	in.Phase = intentStaged
	if err := m.putIntent(in); err != nil {
		m.log.Warn("record a restore's progress", "sandbox", name, "err", err)
	}
	m.forgetJobs(name)
	finish() // the old container's processes are gone before the workspace changes
	if err := m.swapWorkspace(context.WithoutCancel(ctx), sb, in); err != nil {
		return info, rec, fmt.Errorf("restore sandbox %q from snapshot %q: %w; the next boot of the sandbox finishes it", name, snap, err)
	}
	m.endIntent(name)
	return info, rec, nil
}

// endRestored ends what runs in sandbox name's container as a restore
// from snap replaces it: its commands, told why, and what lives beside
// it (runHooks). Its jobs end with it: their records go when it does,
// so here only where it cannot be put back (undoable false), and
// otherwise once the restore no longer may undo (finish).
func (m *Manager) endRestored(name, snap string, undoable bool) {
	m.bumpGen(name, "restored")
	if !undoable {
		m.forgetJobs(name)
	}
	if sb := m.detach(name); sb != nil {
		sb.end(endedByRestore + " (" + snap + ")")
	}
	m.runHooks(name, "restore")
}

// retire frees name for a new container and returns finish, which ends
// the old one: where the engine can rename, the container is moved aside
// at once, and finish kills it (nothing in it writes to the workspace
// after finish returns) and deletes it in the background, so the new
// container boots without competing with the kill; elsewhere the container
// is removed before retire returns. Until finish, undo moves the old
// container back and reports whether it could. The workspace volume is
// kept. The caller holds the lifecycle lock and must call finish. id is
// the container's ID when known (booted by this server), else it is
// looked up.
func (m *Manager) retire(ctx context.Context, name, id, trash string) (finish func(), undo func() bool, err error) {
	done, cannot := func() {}, func() bool { return false }
	target := id
	if target == "" {
		c, err := m.inspectOwned(ctx, name)
		if errors.Is(err, ErrNotFound) {
			return done, cannot, nil
		}
		if err != nil {
			return done, cannot, err
		}
		target = idOr(c)
	}
	r, ok := RenamerOf(m.rt)
	if !ok {
		if err := m.rt.Remove(ctx, target); err != nil && !errors.Is(err, ErrNotFound) {
			return done, cannot, fmt.Errorf("remove sandbox %q: %w", name, err)
		}
		return done, cannot, nil
	}
	if trash == "" {
		trash = m.trashName()
	}
	if err := r.Rename(ctx, target, trash); err != nil {
		if errors.Is(err, ErrNotFound) {
			return done, cannot, nil
		}
		return done, cannot, fmt.Errorf("move sandbox %q aside: %w", name, err)
	}
	// Where the container runs on this kernel, finish kills it from the
	// host (a signal, not an engine call); its init is looked up while the
	// new container boots.
	hostView := make(chan *hostkill.Container, 1)
	if hp, ok := m.rt.(HostPIDs); ok {
		go func() {
			var c *hostkill.Container
			if pid, err := hp.InitPID(ctx, target); err == nil {
				c, _ = hostkill.Open(pid)
			}
			hostView <- c
		}()
	} else {
		hostView <- nil
	}
	var once sync.Once
	undo = func() (back bool) {
		once.Do(func() {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			// The failed boot's container, if it got that far, is this
			// restore's own (the caller holds the lifecycle lock).
			if err := m.rt.Remove(uctx, m.ContainerFor(name)); err != nil && !errors.Is(err, ErrNotFound) {
				m.log.Warn("remove the container of a failed restore", "sandbox", name, "err", err)
			}
			if err := r.Rename(uctx, trash, m.ContainerFor(name)); err != nil {
				m.log.Warn("put a sandbox back after a failed restore", "sandbox", name, "container", trash, "err", err)
				m.spawn(func() { m.removeRetired(trash) })
				return
			}
			back = true
		})
		return back
	}
	return func() {
		once.Do(func() {
			if c := <-hostView; c != nil {
				if err := c.KillAll(10 * time.Second); err == nil {
					m.spawn(func() { m.removeRetired(trash) })
					return
				}
			}
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := m.rt.Stop(kctx, trash, 0); err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotRunning) {
				m.log.Warn("stop replaced container", "container", trash, "err", err)
			}
			m.spawn(func() { m.removeRetired(trash) })
		})
	}, undo, nil
}

// removeRetired deletes a container that reset or retire moved aside. It
// is not cut short when the Manager closes (Close waits for it, a minute
// at most): an engine removal stopped halfway leaves the container stuck
// in "removing" until the engine's own cleanup, and a command-line
// restore closes its Manager at once.
func (m *Manager) removeRetired(trash string) {
	rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, ierr := m.rt.Inspect(rctx, trash)
	if err := m.rt.Remove(rctx, trash); err != nil && !errors.Is(err, ErrNotFound) {
		m.log.Warn("remove replaced container", "container", trash, "err", err)
		return
	}
	if ierr == nil {
		m.dropRetiredChannel(c) // channel.go
	}
}

// lockedSnapshot takes snapshot snap's lock for doing (a deletion) and
// reads its record; the caller releases the lock with unlock, which is
// nil when err is not.
func (m *Manager) lockedSnapshot(snap, doing string) (saver ImageSaver, store SnapshotStore, rec state.Snapshot, unlock func(), err error) {
	if saver, store, err = m.snapshotter(); err != nil {
		return nil, nil, rec, nil, err
	}
	if unlock, err = m.lockSnapshot(snap, doing); err != nil {
		return nil, nil, rec, nil, err
	}
	if rec, err = m.snapshotRecord(store, snap); err != nil {
		unlock()
		return nil, nil, rec, nil, err
	}
	return saver, store, rec, unlock, nil
}

// snapshotRecord is snapshot snap's record; an error names those there
// are when it has none.
func (m *Manager) snapshotRecord(store SnapshotStore, snap string) (state.Snapshot, error) {
	if err := ValidateSnapshotName(snap); err != nil {
		return state.Snapshot{}, &ArgError{Err: err}
	}
	rec, ok, err := store.Snapshot(snap)
	if err != nil {
		return rec, err
	}
	if !ok {
		var names []string
		if all, err := store.Snapshots(); err == nil {
			for _, s := range all {
				names = append(names, s.Name)
			}
		}
		known := "there are none"
		if len(names) > 0 {
			known = "the snapshots are " + strings.Join(names, ", ")
		}
		return rec, fmt.Errorf("%w: %q (%s)", ErrNoSnapshot, snap, known)
	}
	return rec, nil
}

// Snapshots lists the recorded snapshots.
func (m *Manager) Snapshots() ([]state.Snapshot, error) {
	_, store, err := m.snapshotter()
	if err != nil {
		return nil, err
	}
	return store.Snapshots()
}

// DeleteSnapshot removes a snapshot's image, workspace tar and record. A
// sandbox restored from it keeps running: where the engine keeps the
// image for it, the image goes when that sandbox does.
func (m *Manager) DeleteSnapshot(ctx context.Context, snap string) (state.Snapshot, error) {
	saver, store, rec, unlock, err := m.lockedSnapshot(snap, "delete")
	if err != nil {
		return rec, err
	}
	defer unlock()
	if err := m.snapshotHere(ctx, rec, "delete"); err != nil {
		return rec, err
	}
	// A snapshot of the workspace alone has no image: its record names
	// the base image, which is not its to remove.
	if rec.Image != "" && !rec.WorkspaceOnly {
		if saver == nil {
			return rec, fmt.Errorf("delete snapshot %q: %w: its image %s was made by an engine this server does not drive (%s)", snap, ErrUnsupported, rec.Image, m.rt.Kind())
		}
		if err := saver.RemoveImage(ctx, rec.Image); err != nil && !errors.Is(err, ErrNotFound) {
			return rec, fmt.Errorf("delete snapshot %q: %w", snap, err)
		}
	}
	if rec.VolumeSnapshot != "" {
		vs, ok := m.rt.(VolumeSnapshotter)
		if !ok {
			return rec, fmt.Errorf("delete snapshot %q: %w: its workspace is a volume snapshot (%s) of a cluster's storage, which %s does not reach; delete it from a server on that cluster (--runtime kubernetes)",
				snap, ErrUnsupported, rec.VolumeSnapshot, m.rt.Kind())
		}
		if err := vs.RemoveVolumeSnapshot(ctx, rec.VolumeSnapshot); err != nil {
			return rec, fmt.Errorf("delete snapshot %q: %w", snap, err)
		}
	}
	if rec.WorkspaceFile != "" {
		os.Remove(filepath.Join(m.cfg.SnapshotDir, rec.WorkspaceFile))
	}
	if _, err := store.DeleteSnapshot(snap); err != nil {
		return rec, err
	}
	return rec, nil
}

// CloneSandbox makes sandbox target from source's current state: its
// root filesystem and a copy of its workspace, its profile unless prof is
// given, and no volume shared with it.
func (m *Manager) CloneSandbox(ctx context.Context, source, target string, prof *Profile) (BootInfo, error) {
	for _, n := range []string{source, target} {
		if err := ValidateName(n); err != nil {
			return BootInfo{}, err
		}
	}
	if source == target {
		return BootInfo{}, &ArgError{Err: errors.New("a clone needs a name of its own")}
	}
	saver, _, err := m.snapshotter()
	if err != nil {
		return BootInfo{}, err
	}
	if err := m.cloneTargetFree(ctx, target); err != nil {
		return BootInfo{}, err
	}
	live := true
	if ls, ok := saver.(LiveSaver); ok {
		if live, err = ls.SavesRunning(ctx); err != nil {
			return BootInfo{}, err
		}
	}
	ref := m.cloneRef(target)
	// The source's workspace is copied by the runtime's storage where it
	// can (volsnap.go), else kept on the host as a tar while the clone is
	// made. Either is listed first under the clone's key, for the next
	// server to remove if this one is killed.
	vs, why := m.volumeSnapshotter(ctx)
	if _, can := m.rt.(VolumeSnapshotter); can && vs == nil {
		m.log.Info("a clone's workspace is copied as a tar through the server", "source", source, "target", target, "why", why)
	}
	key := cloneKey(target)
	if err := m.TrackStaging(filepath.Join(m.cfg.SnapshotDir, workspaceFileName(key))); err != nil {
		return BootInfo{}, err
	}
	srcProf, file, base, err := m.saveForClone(ctx, saver, vs, source, target, key, ref, live)
	if err != nil {
		return BootInfo{}, err
	}
	if vs != nil {
		defer m.dropVolumeSnapshot(ctx, vs, key)
	} else {
		defer os.Remove(filepath.Join(m.cfg.SnapshotDir, file))
	}
	if prof == nil {
		prof = &srcProf
	}
	p := *prof
	p.Image = ref
	if saver == nil {
		// No image of the source: the clone boots its base image.
		p.Image = base
	} else {
		// The image's tag goes however the clone ends: once booted, the
		// container holds its root filesystem (an engine that keeps the
		// image for the container keeps it untagged); before, nothing
		// needs it.
		defer m.dropCloneImage(ctx, saver, ref)
	}
	release, err := m.lockName(ctx, target, "clone")
	if err != nil {
		return BootInfo{}, err
	}
	defer release()
	// Again under the target's lock: a command may have booted the name
	// while the source was saved, and a clone must not pour the source's
	// workspace into it. bootNew refuses one another server creates now.
	if err := m.cloneTargetFree(ctx, target); err != nil {
		return BootInfo{}, err
	}
	// Recorded before the sandbox is made: a server killed from here on
	// leaves it for the next one to remove or finish (intent.go).
	in := newIntent(target, "clone", source)
	if err := m.putIntent(in); err != nil {
		return BootInfo{}, err
	}
	if vs != nil {
		// The workspace is there before the sandbox boots on it.
		size, _ := ParseSize(p.Disk) // validated with the profile
		if err := vs.VolumeFromSnapshot(ctx, m.volumeFor(target), key, m.labels(target), size); err != nil {
			if errors.Is(err, ErrAlreadyExists) {
				m.endIntent(target)
				return BootInfo{}, fmt.Errorf("clone %q: %w; no sandbox %q uses it: destroy %q (or prune) and clone again", source, err, target, target)
			}
			// A claim that landed all the same goes.
			if derr := m.dropFailedClone(ctx, source, target); derr != nil {
				return BootInfo{}, fmt.Errorf("clone %q: make the workspace of %q from the snapshot of %q's: %w; and what was made of it could not be removed (%v): destroy %q",
					source, target, source, err, derr, target)
			}
			m.endIntent(target)
			return BootInfo{}, fmt.Errorf("clone %q: make the workspace of %q from the snapshot of %q's: %w; nothing of the clone is left", source, target, source, err)
		}
	}
	m.setOverride(target, &bootOverride{prof: p, labels: map[string]string{LabelBaseImage: base}})
	defer m.setOverride(target, nil)
	sb, info, err := m.bootLocked(ctx, target, bootNew)
	if saver == nil {
		info.FreshBase = base
	}
	if vs != nil {
		info.WorkspaceCopy = "a volume snapshot of the source's workspace, and a volume made from it by the storage"
	}
	if err != nil {
		if vs != nil {
			// Its workspace, made above, goes with it.
			if derr := m.dropFailedClone(ctx, source, target); derr != nil {
				return info, fmt.Errorf("clone %q: %w; and its workspace could not be removed (%v): destroy %q", source, err, derr, target)
			}
		}
		m.endIntent(target)
		return info, err
	}
	if vs != nil {
		m.endIntent(target) // whole: the next server must not take it for a half-made clone
		return info, nil
	}
	if staged, err := m.loadWorkspace(ctx, sb, file, in); err != nil {
		if !staged {
			return info, m.undoClone(context.WithoutCancel(ctx), source, target, err)
		}
		// Staged: the workspace arrived whole. Let go of the sandbox, so
		// that its next boot (an adoption) finishes the swap (intent.go).
		if sb := m.detach(target); sb != nil {
			sb.end("the clone's new workspace is not in place yet; the next command finishes it")
		}
		return info, fmt.Errorf("clone %q: sandbox %q runs, but its new workspace is not in place yet: %w; its next command finishes it", source, target, err)
	}
	return info, nil
}

// dropFailedClone removes what a failed clone of source made of target,
// its workspace included, bounded in time even when ctx has ended; the
// caller ends the clone's record once it succeeds.
func (m *Manager) dropFailedClone(ctx context.Context, source, target string) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	err := m.dropHalfClone(dctx, target, "removed: the clone of sandbox "+fmt.Sprintf("%q", source)+" into it failed")
	if err != nil {
		m.log.Warn("remove the sandbox of a failed clone", "sandbox", target, "err", err)
	}
	return err
}

// undoClone removes the half-made sandbox target of a clone whose
// workspace did not arrive (loadErr), under target's lifecycle lock: a
// clone is there whole or not at all. The record of the clone goes only
// once the sandbox is gone, so a server killed meanwhile leaves the
// removal to the next (intent.go).
func (m *Manager) undoClone(ctx context.Context, source, target string, loadErr error) error {
	if err := m.dropHalfClone(ctx, target, "removed: the clone of sandbox "+fmt.Sprintf("%q", source)+" into it failed"); err != nil {
		m.log.Warn("remove the sandbox of a failed clone", "sandbox", target, "err", err)
		return fmt.Errorf("clone %q: the workspace did not load into %q: %w; and the half-made sandbox could not be removed (%v): destroy %q and clone again",
			source, target, loadErr, err, target)
	}
	m.endIntent(target)
	return fmt.Errorf("clone %q: the workspace did not load into %q: %w; the half-made sandbox was removed (nothing of the clone is left)",
		source, target, loadErr)
}

// cloneKey names the workspace tar a clone into target keeps while it
// runs (workspaceFileName); it begins with ClonePrefix.
// The name is this clone's own (random bytes): a later server that
// removes what a killed one listed never takes another clone's tar.
func cloneKey(target string) string { return clonePrefix + target + "-" + randomHex() }

// clonePrefix begins the names of the workspace tars clones keep.
const clonePrefix = ".clone-"

// cloneRef names the image a clone into target saves its source to: the
// time for people, and random bytes so that two clones into one name in
// the same second never share it.
func (m *Manager) cloneRef(target string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(m.cfg.Prefix) + "-clone:" + strings.ToLower(target) + "-" +
		time.Now().UTC().Format("20060102t150405") + "-" + hex.EncodeToString(b[:])
}

// dropCloneImage removes a clone's image tag, bounded in time even when
// ctx has ended: an engine that does not answer must not hold the clone.
func (m *Manager) dropCloneImage(ctx context.Context, saver ImageSaver, ref string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := saver.RemoveImage(rctx, ref); err != nil && !errors.Is(err, ErrNotFound) {
		m.log.Info("clone image kept", "image", ref, "err", err)
	}
}

// cloneTargetFree fails unless no sandbox of the name target runs here
// or exists on the engine.
func (m *Manager) cloneTargetFree(ctx context.Context, target string) error {
	exists := &ArgError{Err: fmt.Errorf("sandbox %q exists: destroy it first or name another clone", target)}
	if sb, ok := m.Lookup(target); ok {
		if _, changed := m.changedElsewhere(sb); !changed {
			return exists
		}
	}
	if _, err := m.inspectOwned(ctx, target); err == nil {
		return exists
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// saveForClone saves source's root filesystem as image ref and its
// workspace as a tar named after key (cloneKey), or, with vs, as the
// volume snapshot key, under source's lifecycle lock.
func (m *Manager) saveForClone(ctx context.Context, saver ImageSaver, vs VolumeSnapshotter, source, target, key, ref string, live bool) (Profile, string, string, error) {
	release, err := m.lockName(ctx, source, "clone")
	if err != nil {
		return Profile{}, "", "", err
	}
	defer release()
	c, err := m.inspectOwned(ctx, source)
	if errors.Is(err, ErrNotFound) {
		return Profile{}, "", "", fmt.Errorf("sandbox %q does not exist: nothing to clone", source)
	}
	if err != nil {
		return Profile{}, "", "", err
	}
	sb, err := m.runningLocked(ctx, source, c)
	if err != nil {
		return Profile{}, "", "", err
	}
	defer sb.busy()()
	base := c.Image
	if b := c.Labels[LabelBaseImage]; b != "" {
		base = b
	}
	file := ""
	if vs != nil {
		labels := map[string]string{LabelOwner: m.cfg.Prefix, LabelClone: target}
		if _, err := m.snapshotWorkspace(ctx, vs, sb, m.volumeOf(source, c), key, labels); err != nil {
			return Profile{}, "", "", fmt.Errorf("clone %q: snapshot the workspace: %w", source, err)
		}
	} else if _, file, err = m.saveWorkspace(ctx, sb, key); err != nil {
		return Profile{}, "", "", fmt.Errorf("clone %q: save the workspace: %w", source, err)
	}
	dropWorkspace := func() {
		if vs != nil {
			m.dropVolumeSnapshot(ctx, vs, key)
		} else {
			os.Remove(filepath.Join(m.cfg.SnapshotDir, file))
		}
	}
	if saver == nil {
		return sb.Profile, file, base, nil
	}
	env := m.pid1Env(ctx, sb.own.target())
	labels := map[string]string{LabelOwner: m.cfg.Prefix, LabelClone: target, LabelBaseImage: base}
	if err := m.saveImage(ctx, saver, sb, ref, labels, env, live); err != nil {
		dropWorkspace()
		m.dropCloneImage(ctx, saver, ref) // a save that timed out may have landed
		return Profile{}, "", "", fmt.Errorf("clone %q: %w", source, err)
	}
	return sb.Profile, file, base, nil
}

// runHooks tells what lives beside a sandbox (port forwards, children,
// once they exist) that it is being restored, reset or destroyed.
func (m *Manager) runHooks(name, event string) {
	m.mu.Lock()
	hooks := slices.Clone(m.hooks)
	m.mu.Unlock()
	for _, h := range hooks {
		h(name, event)
	}
}

// OnLifecycle registers fn to run when a sandbox is restored, reset or
// destroyed (event "restore", "reset", "destroy"), under its lifecycle
// lock, before the old container goes.
func (m *Manager) OnLifecycle(fn func(name, event string)) {
	m.mu.Lock()
	m.hooks = append(m.hooks, fn)
	m.mu.Unlock()
}

// imageRef is what build_image accepts as an image name: a lowercase
// repository path and an optional tag.
var imageRef = regexp.MustCompile(`^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$`)

// maxContainerfile bounds build_image's Containerfile.
const maxContainerfile = 1 << 20

// BuildImage builds image tag from a Containerfile's text with contextDir
// (a host directory the caller has checked, or "" for an empty context),
// streaming the build's output to log. The image is labelled as ours.
func (m *Manager) BuildImage(ctx context.Context, tag, containerfile, contextDir string, log io.Writer) error {
	b, ok := m.rt.(ImageBuilder)
	if !ok {
		return fmt.Errorf("%w: %s cannot build images", ErrUnsupported, m.rt.Kind())
	}
	if len(tag) > 200 || !imageRef.MatchString(tag) {
		return &ArgError{Err: fmt.Errorf("image name %q: use a lowercase name like my-tools or team/tools:1.0", tag)}
	}
	if strings.TrimSpace(containerfile) == "" || len(containerfile) > maxContainerfile {
		return &ArgError{Err: fmt.Errorf("the Containerfile must be 1 byte to %d bytes of text", maxContainerfile)}
	}
	dir, err := os.MkdirTemp("", "sandbox-mcp-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if contextDir == "" {
		contextDir = filepath.Join(dir, "context")
		if err := os.Mkdir(contextDir, 0o700); err != nil {
			return err
		}
	}
	text := strings.TrimRight(containerfile, "\n") + fmt.Sprintf("\nLABEL %q=%q\n", LabelOwner, m.cfg.Prefix)
	file := filepath.Join(dir, "Containerfile")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		return err
	}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	return b.BuildImage(bctx, BuildSpec{Tag: tag, File: file, ContextDir: contextDir}, log)
}

// ImageEntry is an image of the engine, with its snapshot when it is one.
type ImageEntry struct {
	ImageInfo
	Snapshot *state.Snapshot
}

// Images lists the engine's images, marking snapshots with their records.
func (m *Manager) Images(ctx context.Context) ([]ImageEntry, error) {
	l, ok := m.rt.(ImageLister)
	if !ok {
		return nil, fmt.Errorf("%w: %s cannot list images", ErrUnsupported, m.rt.Kind())
	}
	imgs, err := l.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	snaps := map[string]state.Snapshot{}
	if m.cfg.Snapshots != nil {
		if all, err := m.cfg.Snapshots.Snapshots(); err == nil {
			for _, sn := range all {
				if sn.Image != "" { // a snapshot of the workspace alone has no image
					snaps[shortRef(sn.Image)] = sn
				}
			}
		}
	}
	out := make([]ImageEntry, 0, len(imgs))
	for _, img := range imgs {
		e := ImageEntry{ImageInfo: img}
		if sn, ok := snaps[shortRef(img.Ref)]; ok {
			e.Snapshot = &sn
		}
		out = append(out, e)
	}
	return out, nil
}

// shortRef drops the registry engines add to a local name.
func shortRef(ref string) string {
	for _, p := range []string{"localhost/", "docker.io/library/", "docker.io/"} {
		ref = strings.TrimPrefix(ref, p)
	}
	return ref
}
