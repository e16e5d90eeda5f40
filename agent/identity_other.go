//go:build !linux

package agent

import "os"

// fileIdentity is a file's inode number and change time (ns); where the
// agent does not run (the server's side of other systems) the change time
// is the modification time.
func fileIdentity(info os.FileInfo) (ino uint64, changed int64) {
	return 0, info.ModTime().UnixNano()
}
