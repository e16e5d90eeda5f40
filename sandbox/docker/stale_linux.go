//go:build linux

package docker

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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

// mountedAt reports whether a filesystem is mounted at path in this
// process's mount namespace (the engine's, for a rootful engine).
func mountedAt(path string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	want := filepath.Clean(path)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options ...
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == want {
			return true
		}
	}
	return false
}

// unescapeMount undoes the kernel's octal escapes (\040 for a space, and
// so on) in a mountinfo path.
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
