package sandbox

import (
	"context"
	"fmt"

	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
)

// HostCap bounds a host write whose bytes come from a sandbox (a
// workspace tar, a download): no more than the sandbox could hold itself.
type HostCap struct {
	Bytes int64  // 0: no bound from the sandbox
	Why   string // where Bytes comes from, for errors
}

// tarOverhead is what a tar of a tree takes beyond the tree's own disk
// use: headers (512 bytes, or a few blocks for long names) per entry. A
// file takes at least a 4 KiB block on disk and 1 KiB in tar, so a tree
// of small files needs no more; empty files and directories, bounded by
// the filesystem's inodes, are what this leaves room for.
func tarOverhead(disk int64) int64 { return disk/16 + 32<<20 }

// hostCap is the HostCap of sandbox sb: what its disk holds, with tar's
// overhead. The disk is the limit it was booted with (or its profile's),
// unless the engine can tell the workspace volume's real size: a reset
// keeps a sized volume made under another profile. With workspaceOnly
// (a workspace tar), the volume's size is the whole answer; else (a
// download, from anywhere in the sandbox) the larger of the two.
func (m *Manager) hostCap(ctx context.Context, sb *Sandbox, workspaceOnly bool) HostCap {
	disk := sb.limits.Disk
	if disk == "" {
		disk = sb.Profile.Disk
	}
	size, err := ParseSize(disk)
	if err != nil {
		size = 0
	}
	why := fmt.Sprintf("what the sandbox's %s disk limit holds, with tar's headers", disk)
	if vs, ok := m.rt.(VolumeSizer); ok {
		if n, sized, err := vs.VolumeSize(ctx, sb.volume); err == nil && sized && n > 0 && (workspaceOnly || n > size) {
			size, why = n, fmt.Sprintf("what the sandbox's workspace volume (%s) holds, with tar's headers", units.Human(n))
		}
	}
	if size <= 0 {
		return HostCap{}
	}
	return HostCap{Bytes: size + tarOverhead(size), Why: why}
}
