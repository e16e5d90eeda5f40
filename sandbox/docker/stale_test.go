package docker

import (
	"slices"
	"strings"
	"testing"
)

// A container's runtime create is told from its argv and its monitor's,
// and what runs in its cgroup from the cgroup file: another container's
// (one whose ID only starts like it, or its conmon's cgroup) is not it.
func TestProcTableFindsAContainersCreateAndCgroup(t *testing.T) {
	id := strings.Repeat("ab", 32)
	other := strings.Repeat("ab", 31) + "cd"
	argv := func(words ...string) []byte { return []byte(strings.Join(words, "\x00") + "\x00") }
	conmon := procEntry{pid: 10, cgroup: []byte("0::/machine.slice/libpod-conmon-" + id + ".scope\n"),
		argv: argv("/usr/bin/conmon", "--api-version", "1", "-c", id, "-u", id, "-r", "/usr/bin/runc", "-n", "box")}
	create := procEntry{pid: 11, cgroup: conmon.cgroup,
		argv: argv("/usr/bin/runc", "--root", "/run/runc", "create", "--bundle", "/x/"+id+"/userdata", "--pid-file", "/x/pidfile", id)}
	initProc := procEntry{pid: 12, cgroup: []byte("0::/machine.slice/libpod-" + id + ".scope\n"), argv: argv("runc", "init")}
	others := []procEntry{
		{pid: 20, cgroup: []byte("0::/machine.slice/libpod-" + other + ".scope\n"), argv: argv("sleep", "1")},
		{pid: 21, cgroup: []byte("0::/user.slice\n"), argv: argv("/usr/bin/runc", "create", "--bundle", "/b", other)},
		{pid: 22, cgroup: []byte("0::/user.slice\n"), argv: argv("grep", id)},
	}
	for _, c := range []struct {
		name     string
		table    procTable
		creating bool
		inCgroup []int
	}{
		{"the create runs", procTable{conmon, create}, true, nil},
		{"conmon about to create", procTable{conmon}, true, nil},
		{"created: conmon watches runc init", procTable{conmon, initProc}, false, []int{12}},
		{"runc init alone", procTable{initProc}, false, []int{12}},
		{"nothing of it", nil, false, nil},
	} {
		table := append(slices.Clone(c.table), others...)
		if got := table.creating(id); got != c.creating {
			t.Errorf("%s: creating = %v, want %v", c.name, got, c.creating)
		}
		if got := table.inCgroup(id); !slices.Equal(got, c.inCgroup) {
			t.Errorf("%s: in its cgroup %v, want %v", c.name, got, c.inCgroup)
		}
	}
}

// A container podman says does not run is stale when something runs in
// its cgroup; where the host's processes cannot be read, when "created".
func TestStaleRuntime(t *testing.T) {
	id := strings.Repeat("0f", 32)
	inIt := procTable{{pid: 5, cgroup: []byte("0::/libpod-" + id + ".scope\n"), argv: []byte("runc\x00init\x00")}}
	for _, c := range []struct {
		state string
		procs procTable
		local bool
		want  bool
	}{
		{"created", inIt, true, true},
		{"exited", inIt, true, true},
		{"configured", inIt, true, true},
		{"running", inIt, true, false},
		{"created", nil, true, false},
		{"created", nil, false, true},
		{"exited", nil, false, false},
	} {
		if got := staleRuntime(id, c.state, c.procs, c.local); got != c.want {
			t.Errorf("staleRuntime(%s, %d processes, local %v) = %v, want %v", c.state, len(c.procs), c.local, got, c.want)
		}
	}
	if staleRuntime("abc", "created", inIt, true) {
		t.Error("a short ID was taken for a container's")
	}
}
