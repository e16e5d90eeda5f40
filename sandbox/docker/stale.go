package docker

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// notRunning reports whether podman's word for a container's state says
// no process of it should run: "created", "exited", "stopped",
// "configured". (rm ends a running, paused or initialized one itself.)
func notRunning(state string) bool {
	switch state {
	case "created", "exited", "stopped", "configured":
		return true
	}
	return false
}

// staleRuntime reports whether podman's container id, in state (podman's
// word for it), may have an OCI runtime container podman does not know
// of: one a `podman run` or `start` killed part way left behind. On a
// podman of this host that is so when a process of this host runs in the
// container's cgroup (libpod-ID; its conmon's is libpod-conmon-ID) while
// podman says it does not run. procs is the host's process table (see
// settledProcesses), ok false where the host's processes cannot be read
// (a client of a remote service): then a "created" container is taken to
// be one (an init of a created container that is not costs a runtime
// create, which its removal undoes).
func staleRuntime(id, state string, procs procTable, ok bool) bool {
	if !notRunning(state) || !fullID(id) {
		return false
	}
	if !ok {
		return state == "created"
	}
	return len(procs.inCgroup(id)) > 0
}

// settledProcesses reads the host's process table once the OCI runtime
// no longer creates podman's container id, waiting up to createSettle: a
// `podman run` or `start` killed part way leaves its conmon running
// `runc create` (or crun's), and a removal meanwhile deletes the root
// filesystem under a container that then comes up anyway, its `runc
// init` held forever by nothing podman knows. Once the create is over,
// what it made is in the container's cgroup. ok is false for a client of
// a remote service, or where /proc cannot be read.
func (d *Dialect) settledProcesses(ctx context.Context, id string) (procs procTable, ok bool) {
	if d.remoteClient() {
		return nil, false
	}
	deadline := time.Now().Add(createSettle)
	for {
		procs, ok = hostProcesses()
		if !ok || !fullID(id) || !procs.creating(id) || time.Now().After(deadline) {
			return procs, ok
		}
		select {
		case <-ctx.Done():
			return procs, ok
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// createSettle bounds settledProcesses: a runtime's create takes tens of
// milliseconds, seconds on a loaded host.
var createSettle = 15 * time.Second

// endLeftovers kills what still runs in the cgroup of podman's container
// id after podman removed it (a local podman only): a runtime container
// that came up while the removal ran is not podman's any more, and
// nothing else would end it. The cgroup is named after the container's
// own ID, so what is in it is that container's. It returns how many
// processes it ended.
func (d *Dialect) endLeftovers(id string) int {
	if !fullID(id) || d.remoteClient() {
		return 0
	}
	procs, ok := hostProcesses()
	if !ok {
		return 0
	}
	n := 0
	for _, pid := range procs.inCgroup(id) {
		if killInCgroup(pid, "libpod-"+id) {
			n++
		}
	}
	return n
}

// procTable is a snapshot of this host's processes: for each, its
// cgroup file and its argv (NUL-separated), as read from /proc.
type procTable []procEntry

type procEntry struct {
	pid    int
	cgroup []byte
	argv   []byte
}

// hostProcesses reads the host's process table; ok is false where /proc
// cannot be read.
func hostProcesses() (procTable, bool) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil || len(dirs) == 0 {
		return nil, false
	}
	t := make(procTable, 0, len(dirs))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil {
			continue // gone meanwhile
		}
		argv, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		t = append(t, procEntry{pid: pid, cgroup: cg, argv: argv})
	}
	return t, true
}

// inCgroup lists the processes in the cgroup of podman's container id
// (libpod-ID, a path component of any hierarchy; not its conmon's,
// libpod-conmon-ID).
func (t procTable) inCgroup(id string) []int {
	want := []byte("libpod-" + id)
	var pids []int
	for _, p := range t {
		if bytes.Contains(p.cgroup, want) {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// creating reports whether the OCI runtime may still be creating
// container id: its `create` runs (conmon calls `runc [global options]
// create [options] ID`, crun alike), or the container's conmon runs
// while nothing is in the container's cgroup yet (it is about to call
// the create; once the container is made, conmon stays as its monitor
// beside what the create left in the cgroup).
func (t procTable) creating(id string) bool {
	monitor := false
	for _, p := range t {
		words := bytes.Split(bytes.TrimRight(p.argv, "\x00"), []byte{0})
		if len(words) < 3 {
			continue
		}
		named := false
		for _, w := range words[1:] {
			if string(w) == id {
				named = true
				break
			}
		}
		if !named {
			continue
		}
		if filepath.Base(string(words[0])) == "conmon" {
			monitor = true
			continue
		}
		if string(words[len(words)-1]) != id {
			continue
		}
		for _, w := range words[1 : len(words)-1] {
			if string(w) == "create" {
				return true
			}
		}
	}
	return monitor && len(t.inCgroup(id)) == 0
}
