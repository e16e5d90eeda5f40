package transfer

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS writes to disk what is cached of the filesystem that holds dir
// (under root): one syncfs(2) for a whole download, not an fsync a file.
// A failure is not fatal: the download is whole either way, only not yet
// on disk.
func syncFS(root *os.Root, dir string) {
	f, err := root.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.Syncfs(int(f.Fd()))
}
