//go:build linux

// Package hostkill stops a container's writers from the host, without
// starting a process in the container: where the engine's processes run on
// this kernel (docker and podman on Linux), an engine exec costs 100 ms
// to seconds under load, and a writer at 2 GB/s fills that much disk
// meanwhile.
//
// It kills what guest.KillWritersScript kills, seen from the host: every
// process of the container's PID namespace (and its descendants, so that
// nested namespaces count) except the container's init, init's first
// child (the idle watchdog and its checker) and the exec sessions, whose
// parents are outside the container. Processes are signalled through
// pidfds, checked to still be the process that was read, so that a reused
// PID is never hit. Processes the server may not signal (another uid in a
// rootless engine) are left for the in-container pass.
package hostkill

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Container is one container's process tree, known by its init's host PID.
type Container struct {
	init  int
	start uint64 // init's start time: tells a restarted container apart
	ns    string // init's PID namespace, as /proc/PID/ns/pid reads
}

// Open finds the container whose init has host PID pid. A process in the
// server's own PID namespace is refused: that PID came from an engine on
// another kernel (a remote or virtualised one) and names some unrelated
// process here.
func Open(pid int) (*Container, error) {
	if pid <= 1 {
		return nil, fmt.Errorf("no host PID for the container (got %d)", pid)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return nil, fmt.Errorf("container init %d: %w", pid, err)
	}
	if self, err := os.Readlink("/proc/self/ns/pid"); err != nil || self == ns {
		return nil, fmt.Errorf("process %d is not in a container's PID namespace", pid)
	}
	return open(pid, ns)
}

func open(pid int, ns string) (*Container, error) {
	p, err := readProc(pid)
	if err != nil {
		return nil, fmt.Errorf("container init %d: %w", pid, err)
	}
	return &Container{init: pid, start: p.start, ns: ns}, nil
}

// proc is one host process as /proc shows it.
type proc struct {
	pid, ppid int
	start     uint64 // start time in clock ticks: tells a reused PID apart
	inNS      bool
}

// Now is the time since boot in the unit of a process's start time in
// /proc/PID/stat (clock ticks, USER_HZ = 100 on every architecture Go
// and the engines run on): what KillWriters and guest.KillWritersScript
// compare start times with.
func Now() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("boot time clock: %w", err)
	}
	return uint64(ts.Nano()) / uint64(time.Second/userHZ), nil
}

// userHZ is the unit of /proc's clock-tick fields, fixed by the kernel's ABI.
const userHZ = 100

// KillWriters sends SIGKILL to the container's writers that started by
// startedBy (a Now reading) and returns how many were signalled. Later
// processes are spared: they are commands that began after the caller
// chose to stop the writers, such as the user's `rm`. An error says the
// container's init is gone or /proc could not be read; processes that
// could not be signalled are not an error (the caller's in-container pass
// reaches them).
func (c *Container) KillWriters(startedBy uint64) (int, error) {
	if p, err := readProc(c.init); err != nil || p.start != c.start {
		return 0, fmt.Errorf("container init %d is gone", c.init)
	}
	procs, err := readProcs(c.ns)
	if err != nil {
		return 0, err
	}
	victims := writers(c.init, procs, startedBy)
	n := 0
	for _, p := range victims {
		if signal(p) == nil {
			n++
		}
	}
	return n, nil
}

// KillAll ends the whole container: SIGKILL to its init, which takes
// every process of its PID namespace with it, and waits (up to timeout)
// until they are all gone, so that nothing in the container writes after
// KillAll returns nil.
func (c *Container) KillAll(timeout time.Duration) error {
	fd, err := unix.PidfdOpen(c.init, 0)
	if err != nil {
		return fmt.Errorf("container init %d: %w", c.init, err)
	}
	defer unix.Close(fd)
	if p, err := readProc(c.init); err != nil || p.start != c.start {
		return fmt.Errorf("container init %d is gone", c.init)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return fmt.Errorf("kill container init %d: %w", c.init, err)
	}
	// A pidfd turns readable once its process has exited, which for a
	// namespace's init is after every other process in it.
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for end := time.Now().Add(timeout); ; {
		left := time.Until(end)
		if left <= 0 {
			return fmt.Errorf("container init %d: still there %v after SIGKILL", c.init, timeout)
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for container init %d: %w", c.init, err)
		}
		if n > 0 {
			return nil
		}
	}
}

// writers picks the processes to kill out of the host's processes: those
// of init's container that started by startedBy.
func writers(init int, procs map[int]*proc, startedBy uint64) []*proc {
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	// Members: the namespace's processes and everything below them.
	member := map[int]bool{}
	var walk func(int)
	walk = func(pid int) {
		if member[pid] {
			return
		}
		member[pid] = true
		for _, c := range children[pid] {
			walk(c)
		}
	}
	walk(init)
	for _, p := range procs {
		if p.inNS {
			walk(p.pid)
		}
	}
	// init's first child, by start time then PID.
	dog := 0
	for _, c := range children[init] {
		if dog == 0 || procs[c].start < procs[dog].start || (procs[c].start == procs[dog].start && c < dog) {
			dog = c
		}
	}
	var out []*proc
	for pid := range member {
		p := procs[pid]
		switch {
		case p == nil, pid == init, pid == dog, p.ppid == dog && dog != 0:
		case !member[p.ppid]: // an exec session: its parent is the engine's
		case p.start > startedBy:
		default:
			out = append(out, p)
		}
	}
	return out
}

// readProcs reads every host process's parent, start time and whether it
// is in namespace ns.
func readProcs(ns string) (map[int]*proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make(map[int]*proc, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := readProc(pid)
		if err != nil {
			continue // gone, or not ours to read
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && l == ns {
			p.inNS = true
		}
		out[pid] = p
	}
	return out, nil
}

// readProc parses /proc/PID/stat: the command name is in parentheses and
// may hold spaces and parentheses itself, so fields are counted from the
// last ')'.
func readProc(pid int) (*proc, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	return parseStat(pid, string(b))
}

func parseStat(pid int, s string) (*proc, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("malformed stat")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, starttime field 22.
	if len(f) < 20 {
		return nil, errors.New("short stat")
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return nil, err
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return nil, err
	}
	return &proc{pid: pid, ppid: ppid, start: start}, nil
}

// signal kills p through a pidfd once the PID is seen to still name the
// process that was read.
func signal(p *proc) error {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	now, err := readProc(p.pid)
	if err != nil || now.start != p.start {
		return errors.New("process replaced")
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
}
