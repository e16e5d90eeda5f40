package sandbox

import (
	"context"
	"strings"
	"time"
)

// This file is the Manager's use of a VolumeSnapshotter: a clone's
// workspace copied by the runtime's storage (a snapshot of the source's
// volume and a new volume made from it) instead of a tar through the
// server, where the runtime can.

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
// when ctx has ended.
func (m *Manager) dropVolumeSnapshot(ctx context.Context, vs VolumeSnapshotter, ref string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := vs.RemoveVolumeSnapshot(rctx, ref); err != nil {
		m.log.Warn("remove a clone's volume snapshot", "snapshot", ref, "err", err)
	}
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
func (m *Manager) removeCloneSnapshot(key string) {
	vs, ok := m.rt.(VolumeSnapshotter)
	if !ok {
		return
	}
	m.dropVolumeSnapshot(context.Background(), vs, key)
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
