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

// unmount unmounts the filesystem mounted at path (a volume's data
// directory that the engine does not count as mounted: Dialect.unmountStale).
func unmount(path string) error { return unix.Unmount(path, 0) }

// mountInfo is one mount of /proc/self/mountinfo.
type mountInfo struct {
	id           int
	major, minor uint32
}

// of reports whether the mount is of the block device at path dev.
func (m mountInfo) of(dev string) bool {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return false
	}
	return unix.Major(st.Rdev) == m.major && unix.Minor(st.Rdev) == m.minor
}

// mountAt returns the topmost mount at path in this process's mount
// namespace (the engine's, for a rootful engine the server shares it
// with), if there is one.
func mountAt(path string) (mountInfo, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mountInfo{}, false
	}
	defer f.Close()
	want := filepath.Clean(path)
	var top mountInfo
	found := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options ...: a later
		// line at the same point is mounted over an earlier one.
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMount(fields[4]) != want {
			continue
		}
		id, err1 := strconv.Atoi(fields[0])
		maj, min, ok := strings.Cut(fields[2], ":")
		ma, err2 := strconv.ParseUint(maj, 10, 32)
		mi, err3 := strconv.ParseUint(min, 10, 32)
		if err1 != nil || err2 != nil || err3 != nil || !ok {
			continue
		}
		top, found = mountInfo{id: id, major: uint32(ma), minor: uint32(mi)}, true
	}
	return top, found
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
