package agent

import (
	"os"
	"syscall"
)

// fileIdentity is a file's inode number and change time (ns).
func fileIdentity(info os.FileInfo) (ino uint64, changed int64) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Ino, st.Ctim.Nano()
	}
	return 0, info.ModTime().UnixNano()
}
