package sandbox

import (
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
)

// cgroup v1 (podman on a hybrid host) with a CPU burner, 1.5 CPUs, 512 MiB.
const statsV1 = `procs 3
mem_usage 6176768
mem_limit 536870912
mem_inactive_file 4960256
pids_current 4
cpu_max 150000 100000
nproc 2
net     lo:     120       2    0    0    0     0          0         0      120       2    0    0    0     0       0          0
net   eth0:      90       1    0    0    0     0          0         0       70       1    0    0    0     0       0          0
df_workspace overlay          264212084 14705088  80796176      16% /workspace
df_root overlay          264212084 14705088  80796176      16% /
du_workspace 4888
du_root 272532
cpu_nsec1 380406744
uptime1 5493.94
cpu_nsec2 882276687
uptime2 5494.44
`

// cgroup v2 without limits, no network, a file system name with a space;
// the du runs timed out and nproc printed nothing.
const statsV2 = `procs 2
mem_usage 41943040
mem_limit max
mem_inactive_file 1048576
pids_current 2
cpu_max max 100000
nproc 
net     lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
df_workspace /dev/disk by label 10240000 1200 10238800 1% /workspace
df_root /dev/vda 2048000 256000 1792000 13% /
cpu_usec1 1000000
uptime1 100.00
cpu_usec2 1032000
uptime2 100.50
`

func TestStatsParseV1(t *testing.T) {
	v, err := guest.ParseStats([]byte(statsV1))
	if err != nil {
		t.Fatal(err)
	}
	s := statsFromVM(v)
	want := SandboxStats{
		CPUPercent: 100.4, CPUSeconds: 0.882276, CPUs: 1.5,
		MemoryBytes: 6176768 - 4960256, MemoryLimitBytes: 512 << 20, Pids: 3,
		DiskWorkspaceUsedBytes: 4888 << 10, DiskWorkspaceTotalBytes: 264212084 << 10, DiskWorkspaceFreeBytes: 80796176 << 10,
		DiskRootUsedBytes: 272532 << 10, DiskRootTotalBytes: 264212084 << 10, DiskRootFreeBytes: 80796176 << 10,
		NetRxBytes: 90, NetTxBytes: 70, BlockReadBytes: -1, BlockWriteBytes: -1,
	}
	if s != want {
		t.Fatalf("got  %+v\nwant %+v", s, want)
	}
}

func TestStatsParseV2Partial(t *testing.T) {
	v, err := guest.ParseStats([]byte(statsV2))
	if err != nil {
		t.Fatal(err)
	}
	s := statsFromVM(v)
	if s.CPUPercent != 6.4 || s.CPUSeconds != 1.032 || s.CPUs != -1 {
		t.Errorf("cpu: %v%% %vs %v CPUs", s.CPUPercent, s.CPUSeconds, s.CPUs)
	}
	if s.MemoryBytes != 39<<20 || s.MemoryLimitBytes != 0 {
		t.Errorf("memory: %d / %d", s.MemoryBytes, s.MemoryLimitBytes)
	}
	if s.NetRxBytes != 0 || s.NetTxBytes != 0 {
		t.Errorf("net: %d %d", s.NetRxBytes, s.NetTxBytes)
	}
	if s.DiskWorkspaceUsedBytes != -1 || s.DiskWorkspaceTotalBytes != 10240000<<10 || s.DiskWorkspaceFreeBytes != 10238800<<10 {
		t.Errorf("workspace: %+v", s)
	}
	if s.DiskRootUsedBytes != -1 || s.DiskRootTotalBytes != 2048000<<10 {
		t.Errorf("root: %+v", s)
	}
}

// TestStatsParseMissing: a sandbox with no cgroup files, no df and a
// sleep that returned at once reports the process count and unknowns.
func TestStatsParseMissing(t *testing.T) {
	v, err := guest.ParseStats([]byte("procs 1\nnproc 4\nuptime1 7.00\nuptime2 7.00\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := statsFromVM(v)
	want := SandboxStats{
		CPUPercent: -1, CPUSeconds: -1, CPUs: 4, MemoryBytes: -1, MemoryLimitBytes: -1, Pids: 1,
		DiskWorkspaceUsedBytes: -1, DiskWorkspaceTotalBytes: -1, DiskWorkspaceFreeBytes: -1,
		DiskRootUsedBytes: -1, DiskRootTotalBytes: -1, DiskRootFreeBytes: -1,
		NetRxBytes: -1, NetTxBytes: -1, BlockReadBytes: -1, BlockWriteBytes: -1,
	}
	if s != want {
		t.Fatalf("got  %+v\nwant %+v", s, want)
	}
}

// TestStatsParseOddValues: unreadable values leave their figure unknown
// without failing the read.
func TestStatsParseOddValues(t *testing.T) {
	v, err := guest.ParseStats([]byte("procs 5\nmem_usage lots\nmem_limit 9223372036854771712\ncpu_max 50000\n" +
		"df_root garbage\nnet eth0: 1 2\ncpu_usec1 -3\nuptime1 x\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := statsFromVM(v)
	if s.Pids != 5 || s.MemoryBytes != -1 || s.MemoryLimitBytes != 0 || s.CPUs != -1 ||
		s.DiskRootTotalBytes != -1 || s.NetRxBytes != -1 || s.CPUPercent != -1 {
		t.Fatalf("%+v", s)
	}
}

func TestStatsMergeEngine(t *testing.T) {
	v, _ := guest.ParseStats([]byte(statsV1))
	s := statsFromVM(v)
	s.mergeEngine(Stats{CPUTime: 3 * time.Second, MemoryUsage: 100 << 20, Processes: 9, NetRx: 5, NetTx: 6, BlockRead: 7})
	if s.CPUSeconds != 3 || s.MemoryBytes != 100<<20 || s.MemoryLimitBytes != 512<<20 || s.Pids != 9 ||
		s.NetRxBytes != 5 || s.NetTxBytes != 6 || s.BlockReadBytes != 7 || s.BlockWriteBytes != 0 {
		t.Fatalf("%+v", s)
	}
	if s.CPUPercent != 100.4 || s.DiskWorkspaceUsedBytes != 4888<<10 {
		t.Fatalf("in-VM figures lost: %+v", s)
	}
}
