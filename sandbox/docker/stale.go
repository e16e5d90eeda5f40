package docker

import (
	"os"
	"path/filepath"
	"strings"
)

// staleRuntime reports whether podman's container id, in state (podman's
// word for it), may have an OCI runtime container podman does not know
// of: one a `podman run` or `start` killed part way left behind. On a
// podman of this host that is so when a process of this host runs in the
// container's cgroup (libpod-ID; its conmon's is libpod-conmon-ID) while
// podman says it does not run ("created",
// "exited", "stopped", "configured"); where the host's processes cannot
// be read (a client of a remote service), a "created" container is taken
// to be one (an init of a created container that is not costs a runtime
// create, which its removal undoes).
func (d *Dialect) staleRuntime(id, state string) bool {
	switch state {
	case "created", "exited", "stopped", "configured":
	default:
		return false // running, paused, initialized: rm ends them
	}
	if !fullID(id) {
		return false
	}
	if d.remoteClient() {
		return state == "created"
	}
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil || len(procs) == 0 {
		return state == "created"
	}
	cgroup := "libpod-" + id
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), cgroup) {
			return true
		}
	}
	return false
}
