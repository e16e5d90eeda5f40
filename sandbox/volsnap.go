package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// This file is the Manager's use of a VolumeSnapshotter, where the
// runtime has one and can: a clone's workspace copied by the runtime's
// storage (a snapshot of the source's volume and a new volume made from
// it) instead of a tar through the server, and a snapshot's workspace
// kept as a volume snapshot, restored as a new volume (restoreVolume).

// volumeSnapshotPrefix begins the names of the volume snapshots that
// snapshots keep (volumeSnapshotKey).
const volumeSnapshotPrefix = ".vsnap-"

// volumeSnapshotKey names the volume snapshot a snapshot snap keeps of
// its workspace: the snapshot's name, and random bytes of its own, so
// that one a killed server left never shares a name with a later one.
func volumeSnapshotKey(snap string) string { return volumeSnapshotPrefix + snap + "-" + randomHex() }

// volumeSnapshotKeyOf reports whether base, a name a server listed in
// its staging file, is a snapshot's volume snapshot key.
func volumeSnapshotKeyOf(base string) bool {
	rest, ok := strings.CutPrefix(base, volumeSnapshotPrefix)
	i := strings.LastIndexByte(rest, '-')
	return ok && i > 0 && len(rest)-i == 17 && isHex(rest[i+1:])
}

// snapshotWorkspace snapshots vol, sb's workspace volume, as ref, once
// what sb's processes wrote has reached it; it returns the size the
// storage says a volume made from it needs.
func (m *Manager) snapshotWorkspace(ctx context.Context, vs VolumeSnapshotter, sb *Sandbox, vol, ref string, labels map[string]string) (int64, error) {
	if _, err := sb.housekeep(ctx, "sync", scriptTimeout); err != nil {
		m.log.Warn("sync a workspace before its snapshot", "sandbox", sb.Name, "err", err)
	}
	return vs.SnapshotVolume(ctx, vol, ref, labels)
}

// removeUnrecordedSnapshot removes volume snapshot key, which a killed
// server listed while it made a snapshot, unless a snapshot record names
// it (the snapshot was made whole) or the records cannot be read.
func (m *Manager) removeUnrecordedSnapshot(key string) error {
	vs, ok := m.rt.(VolumeSnapshotter)
	if !ok || m.cfg.Snapshots == nil {
		return nil
	}
	recs, err := m.cfg.Snapshots.Snapshots()
	if err != nil {
		m.log.Warn("look for the record of a volume snapshot a killed server made", "snapshot", key, "err", err)
		return err
	}
	for _, r := range recs {
		if r.VolumeSnapshot == key {
			return nil
		}
	}
	if err := m.dropVolumeSnapshot(context.Background(), vs, key); err != nil {
		return err
	}
	m.log.Info("removed the volume snapshot of a snapshot a killed server did not finish", "snapshot", key)
	return nil
}

// volumeSnapshotter is the runtime as a VolumeSnapshotter when it is one
// and can snapshot volumes as it is set up; else nil, and why not.
func (m *Manager) volumeSnapshotter(ctx context.Context) (VolumeSnapshotter, string) {
	vs, ok := m.rt.(VolumeSnapshotter)
	if !ok {
		return nil, m.rt.Kind() + " copies a workspace as a tar through the server"
	}
	if why := vs.VolumeSnapshotsWhyNot(ctx); why != "" {
		return nil, why
	}
	return vs, ""
}

// dropVolumeSnapshot removes volume snapshot ref, bounded in time even
// when ctx has ended; a failure is logged, and returned.
func (m *Manager) dropVolumeSnapshot(ctx context.Context, vs VolumeSnapshotter, ref string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	err := vs.RemoveVolumeSnapshot(rctx, ref)
	if err != nil {
		m.log.Warn("remove a volume snapshot", "snapshot", ref, "err", err)
	}
	return err
}

// cloneKeyOf is the clone key (cloneKey) whose workspace tar is named
// base (workspaceFileName), if it is one.
func cloneKeyOf(base string) (string, bool) {
	rest, ok := strings.CutSuffix(base, ".workspace.tar")
	if !ok || !strings.HasPrefix(rest, clonePrefix) {
		return "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 || len(rest)-i != 9 {
		return "", false
	}
	return rest[:i], true
}

// removeCloneSnapshot removes the volume snapshot a killed server's clone
// (key) may have left, where the runtime makes them.
func (m *Manager) removeCloneSnapshot(key string) error {
	vs, ok := m.rt.(VolumeSnapshotter)
	if !ok {
		return nil
	}
	return m.dropVolumeSnapshot(context.Background(), vs, key)
}

// DescribeClones says how a clone's workspace is copied on rt, and why
// not by the storage where rt could but is not set up to.
func DescribeClones(ctx context.Context, rt Runtime) string {
	const tar = "workspace copied as a tar through the server"
	vs, ok := rt.(VolumeSnapshotter)
	if !ok {
		return tar
	}
	if why := vs.VolumeSnapshotsWhyNot(ctx); why != "" {
		return tar + " (" + why + ")"
	}
	return "workspace copied by the storage: a volume snapshot, and a volume made from it"
}

// restoreVolume is the restore of snapshot rec, whose workspace is the
// volume snapshot rec.VolumeSnapshot, into sandbox name: the storage
// makes a new workspace volume from it, and a container of rec's base
// image boots afresh on that volume; the old container and workspace go
// once it runs. The new volume is made before anything moves, so a
// snapshot gone from the cluster leaves the sandbox untouched; a boot
// that fails puts the old container back where the runtime can move it.
// The restore is recorded first, with both volumes: a server killed on
// the way leaves it for the next to undo or finish (intent.go).
func (m *Manager) restoreVolume(ctx context.Context, rec state.Snapshot, name string) (BootInfo, error) {
	snap := rec.Name
	vs, ok := m.rt.(VolumeSnapshotter)
	if !ok {
		return BootInfo{}, fmt.Errorf("%w: snapshot %q keeps its workspace as a volume snapshot of a cluster's storage (%s), which %s does not reach",
			ErrUnsupported, snap, rec.VolumeSnapshot, m.rt.Kind())
	}
	release, err := m.lockName(ctx, name, "restore")
	if err != nil {
		return BootInfo{}, err
	}
	defer release()
	// The container the restore replaces, and the workspace it mounts:
	// the one booted here, unless another server replaced it since.
	known, oldVol := "", ""
	if sb, ok := m.Lookup(name); ok && sb.own != nil && m.current(sb) {
		known, oldVol = sb.own.ID(), sb.volume
	} else if c, err := m.inspectOwned(ctx, name); err == nil {
		known, oldVol = idOr(c), m.volumeOf(name, c)
	} else if !errors.Is(err, ErrNotFound) {
		return BootInfo{}, err
	} else if oldVol, err = m.recordedVolume(name); err != nil {
		return BootInfo{}, err
	}
	_, undoable := RenamerOf(m.rt)
	in := newIntent(name, "restore", snap)
	in.Volume, in.OldVolume = m.spareVolume(randomHex()), oldVol
	if undoable {
		in.Trash = m.trashName()
	}
	if err := m.putIntent(in); err != nil {
		return BootInfo{}, err
	}
	// undone drops the new workspace, has the sandbox's record name the
	// old one again (a boot records the workspace it mounts), and ends
	// the restore's record.
	undone := func() {
		m.recordVolume(name, in.OldVolume)
		m.dropRestoredVolume(ctx, in.Volume)
		m.endIntent(name)
	}
	size, _ := ParseSize(m.ProfileFor(name).Disk) // validated with the profile
	if err := vs.VolumeFromSnapshot(ctx, in.Volume, rec.VolumeSnapshot, m.labels(name), size); err != nil {
		undone() // one that landed all the same goes
		if errors.Is(err, ErrNotFound) {
			return BootInfo{}, fmt.Errorf("snapshot %q: its volume snapshot %s is gone from the cluster; delete_snapshot it (sandbox %q was left as it was)", snap, rec.VolumeSnapshot, name)
		}
		return BootInfo{}, fmt.Errorf("restore sandbox %q from snapshot %q: make its workspace from the volume snapshot: %w; the sandbox was left as it was", name, snap, err)
	}
	if !undoable {
		m.endRestored(name, snap, false) // retire removes the container: its commands end first, told why
	}
	finish, undo, err := m.retire(ctx, name, known, in.Trash)
	if err != nil {
		undone()
		if !undoable {
			return BootInfo{}, fmt.Errorf("restore sandbox %q from snapshot %q: %w; its commands had ended, its workspace is as it was", name, snap, err)
		}
		return BootInfo{}, fmt.Errorf("restore sandbox %q from snapshot %q: %w; the sandbox was left as it was", name, snap, err)
	}
	defer finish()
	if undoable {
		m.endRestored(name, snap, true)
	}
	prof := m.ProfileFor(name)
	prof.Image = rec.BaseImage
	m.setOverride(name, &bootOverride{prof: prof, labels: map[string]string{LabelParent: snap, LabelBaseImage: rec.BaseImage}})
	defer m.setOverride(name, nil)
	defer m.setKnownVolume(name, in.Volume)()
	sb, info, err := m.bootLocked(ctx, name, bootReplace)
	info.FreshBase = rec.BaseImage
	if err == nil && (!info.Created || sb.volume != in.Volume) {
		// Not the container this restore made on the new workspace.
		if nsb := m.detach(name); nsb != nil {
			nsb.end(endedByRestore + " (" + snap + "), which failed")
		}
		err = fmt.Errorf("the sandbox booted on workspace %s, not on the one made from the snapshot (%s)", sb.volume, in.Volume)
	}
	if err != nil {
		back := undo()
		if !back {
			// The failed boot's container, if it got that far, goes
			// before its workspace (undo removes it where it can rename).
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			if rerr := m.rt.Remove(rctx, m.ContainerFor(name)); rerr != nil && !errors.Is(rerr, ErrNotFound) {
				m.log.Warn("remove the container of a failed restore", "sandbox", name, "err", rerr)
			}
			cancel()
			m.forgetJobs(name)
		}
		undone()
		if back {
			return info, fmt.Errorf("restore sandbox %q from snapshot %q: %w; the sandbox was put back as it was (the commands it ran had ended; its jobs run on)", name, snap, err)
		}
		return info, fmt.Errorf("restore sandbox %q from snapshot %q: %w; the sandbox has no container now; its workspace is as it was, and its next command boots it afresh", name, snap, err)
	}
	// The sandbox runs on the new workspace: the restore is finished from
	// here on, whatever happens. Recorded so first, then the sandbox's
	// record: a server killed between the two finishes it.
	in.Phase = intentStaged
	if err := m.putIntent(in); err != nil {
		// Still recorded as begun: the old workspace stays, for the next
		// server to finish from (the old container gone, the sandbox on
		// the new workspace).
		m.log.Warn("record a restore's progress; its old workspace is kept until the next server finishes it", "sandbox", name, "volume", in.OldVolume, "err", err)
		m.recordVolume(name, in.Volume)
		m.forgetJobs(name)
		finish()
		return info, nil
	}
	m.recordVolume(name, in.Volume)
	m.forgetJobs(name)
	finish()
	if err := m.dropOldWorkspace(ctx, in); err != nil {
		// Kept recorded: the next server, or the next operation on the
		// sandbox (settleVolumeRestore), removes it.
		m.log.Warn("remove the workspace a restore replaced", "sandbox", name, "volume", in.OldVolume, "err", err)
		return info, nil
	}
	m.endIntent(name)
	return info, nil
}

// dropRestoredVolume removes vol, the workspace a restore from a volume
// snapshot made and does not use, bounded in time even when ctx has
// ended.
func (m *Manager) dropRestoredVolume(ctx context.Context, vol string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := m.removeVolume(rctx, vol); err != nil && !errors.Is(err, ErrNotFound) {
		m.log.Warn("remove the workspace of a failed restore", "volume", vol, "err", err)
	}
}

// dropOldWorkspace removes the workspace volume restore in replaced, once
// the sandbox runs on the new one; bounded in time even when ctx has
// ended.
func (m *Manager) dropOldWorkspace(ctx context.Context, in state.Intent) error {
	if in.OldVolume == "" || in.OldVolume == in.Volume {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := m.removeVolume(rctx, in.OldVolume); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	m.dropSpareChannel(in.OldVolume) // channel.go: a spare's, if it began as one
	return nil
}

// restoringOnto reports whether a restore of sandbox name onto workspace
// vol, made from a volume snapshot, is under way and not yet finished.
func (m *Manager) restoringOnto(name, vol string) bool {
	if m.cfg.Intents == nil || vol == "" {
		return false
	}
	in, ok, err := m.cfg.Intents.Intent(name)
	return err == nil && ok && in.Volume == vol && in.Phase != intentStaged
}

// intentVolumes are the workspace volumes that restores under way (here
// or in a killed server) made and no container may mount yet: not a
// spare's left behind.
func (m *Manager) intentVolumes() (map[string]bool, error) {
	out := map[string]bool{}
	if m.cfg.Intents == nil {
		return out, nil
	}
	ins, err := m.cfg.Intents.Intents()
	if err != nil {
		return nil, fmt.Errorf("read the records of operations under way: %w", err)
	}
	for _, in := range ins {
		if in.Volume != "" {
			out[in.Volume] = true
		}
	}
	return out, nil
}

// resumeVolumeRestore ends restore in from a volume snapshot that a dead
// server left on name (intent.go): begun, it is undone (the old container
// put back, the new volume removed), unless the old container is gone and
// one on the new volume runs; staged, it is finished (the old container
// and workspace removed). It returns what the next call is told, and
// whether something was left for the next boot to try again.
func (m *Manager) resumeVolumeRestore(ctx context.Context, name string, in state.Intent) (said string, left bool) {
	before := describeIntent(in) + " before the sandbox ran on the snapshot's workspace"
	if in.Phase == intentBegun && in.Trash != "" {
		back, why := m.putBack(ctx, name, in.Trash)
		if back {
			m.recordVolume(name, in.OldVolume)
			m.dropRestoredVolume(ctx, in.Volume)
			return before + "; it was undone: the sandbox is as it was before it (its commands and jobs had ended)", false
		}
		if why != "" {
			before += "; its old container could not be put back (" + why + ")"
		}
	}
	finished, err := m.settleVolumeRestore(ctx, name, in)
	switch {
	case err != nil:
		m.log.Warn("end an interrupted restore", "sandbox", name, "err", err)
		return describeIntent(in) + "; what it left could not be ended yet (" + err.Error() + "); the next boot tries again", true
	case finished:
		return describeIntent(in) + " after the sandbox ran on the snapshot's workspace; it was finished (its old container and workspace were removed)", false
	default:
		return before + "; it was undone: the sandbox's workspace is as it was", false
	}
}

// settleVolumeRestore ends restore in from a volume snapshot, left on
// name by a server killed or by a removal that failed, as far as it can
// without moving containers: finished (the sandbox's record names the
// new workspace, the old container and workspace go) where it was staged
// or the container under the name mounts the new workspace; else undone
// (the new workspace goes, the record names the old one). The caller
// holds name's lifecycle lock and ends the record unless this failed.
func (m *Manager) settleVolumeRestore(ctx context.Context, name string, in state.Intent) (finished bool, err error) {
	c, ierr := m.inspectOwned(ctx, name)
	switch {
	case ierr == nil:
	case errors.Is(ierr, ErrNotFound), errors.Is(ierr, ErrForeign):
		// No container of ours: none mounts the new workspace.
	default:
		// Which workspace the sandbox runs on cannot be told now.
		return false, ierr
	}
	if in.Phase != intentStaged && (ierr != nil || m.volumeOf(name, c) != in.Volume) {
		m.recordVolume(name, in.OldVolume)
		m.dropRestoredVolume(ctx, in.Volume)
		return false, nil
	}
	m.recordVolume(name, in.Volume)
	if in.Trash != "" {
		m.removeRetired(in.Trash)
	}
	return true, m.dropOldWorkspace(ctx, in)
}
