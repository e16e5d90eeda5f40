//go:build linux

package docker

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// killInCgroup sends SIGKILL to process pid if it is in a cgroup whose
// path holds cgroup. The process is held by a pidfd while its cgroup is
// read, so that a PID reused meanwhile is never hit.
func killInCgroup(pid int, cgroup string) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false // gone, or a kernel without pidfds: left alone
	}
	defer unix.Close(fd)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil || !bytes.Contains(b, []byte(cgroup)) {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}

// unmountStale unmounts the filesystem mounted at path (a volume's data
// directory that the engine does not count as mounted).
func unmountStale(path string) error { return unix.Unmount(path, 0) }
