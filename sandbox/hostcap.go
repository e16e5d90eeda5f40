package sandbox

import "fmt"

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

// hostCap is the HostCap of sandbox sb: its disk limit as booted (or as
// its profile says) with tar's overhead.
func hostCap(sb *Sandbox) HostCap {
	disk := sb.limits.Disk
	if disk == "" {
		disk = sb.Profile.Disk
	}
	size, err := ParseSize(disk)
	if err != nil || size <= 0 {
		return HostCap{}
	}
	return HostCap{Bytes: size + tarOverhead(size), Why: fmt.Sprintf("what the sandbox's %s disk limit holds, with tar's headers", disk)}
}
