package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// SandboxStats is a snapshot of one sandbox's resource use. Every number
// is -1 when it could not be read.
type SandboxStats struct {
	// CPUPercent is CPU use over a 0.5 s sample; 100 is one core busy.
	CPUPercent float64 `json:"cpu_percent"`
	// CPUSeconds is the CPU time used since the container started.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUs is how many CPUs the sandbox may use (its quota, or the CPUs it sees).
	CPUs             float64 `json:"cpus"`
	MemoryBytes      int64   `json:"memory_bytes"`       // without reclaimable file cache
	MemoryLimitBytes int64   `json:"memory_limit_bytes"` // 0: unlimited
	Pids             int64   `json:"pids"`               // processes
	// Disk use: Used is what the sandbox holds there (du, so a filesystem
	// shared with the host counts only the sandbox's files); Total and Free
	// are the filesystem's (df).
	DiskWorkspaceUsedBytes  int64 `json:"disk_workspace_used_bytes"`
	DiskWorkspaceTotalBytes int64 `json:"disk_workspace_total_bytes"`
	DiskWorkspaceFreeBytes  int64 `json:"disk_workspace_free_bytes"`
	DiskRootUsedBytes       int64 `json:"disk_root_used_bytes"`
	DiskRootTotalBytes      int64 `json:"disk_root_total_bytes"`
	DiskRootFreeBytes       int64 `json:"disk_root_free_bytes"`
	// Network counters (all interfaces but loopback) and block I/O (engine
	// only), cumulative.
	NetRxBytes      int64 `json:"net_rx_bytes"`
	NetTxBytes      int64 `json:"net_tx_bytes"`
	BlockReadBytes  int64 `json:"block_read_bytes"`
	BlockWriteBytes int64 `json:"block_write_bytes"`
	// Source is "engine+vm" when the engine reported too, else "vm".
	Source    string    `json:"source"`
	SampledAt time.Time `json:"sampled_at"`
}

// statsTimeout bounds the in-sandbox read (two du runs of at most 2 s each
// and the 0.5 s CPU sample).
const statsTimeout = 10 * time.Second

// statsScript reads resource use from inside a sandbox, printing one
// `key value` line per figure it finds and nothing for a missing file. It
// runs in a subshell (so it leaves the persistent shell's variables and
// options alone) with the workspace as working directory. The process count
// uses only builtins and leaves out the subshell itself; du runs before the
// CPU sample so its own CPU time is not counted.
const statsScript = `( set +eu
read -r me _ </proc/self/stat 2>/dev/null || me=
n=0
for p in /proc/[0-9]*; do
  if [ -d "$p" ] && [ "$p" != "/proc/$me" ]; then n=$((n + 1)); fi
done
echo "procs $n"
c=/sys/fs/cgroup
if [ -r $c/memory.current ]; then
  read -r v _ <$c/memory.current && echo "mem_usage $v"
  read -r v _ <$c/memory.max 2>/dev/null && echo "mem_limit $v"
  while read -r k v; do case $k in inactive_file) echo "mem_inactive_file $v" ;; esac; done <$c/memory.stat 2>/dev/null
elif [ -r $c/memory/memory.usage_in_bytes ]; then
  read -r v _ <$c/memory/memory.usage_in_bytes && echo "mem_usage $v"
  read -r v _ <$c/memory/memory.limit_in_bytes 2>/dev/null && echo "mem_limit $v"
  while read -r k v; do case $k in total_inactive_file) echo "mem_inactive_file $v" ;; esac; done <$c/memory/memory.stat 2>/dev/null
fi
for f in $c/pids.current $c/pids/pids.current; do
  if [ -r $f ]; then read -r v _ <$f && echo "pids_current $v"; break; fi
done
if [ -r $c/cpu.max ]; then
  read -r q p <$c/cpu.max && echo "cpu_max $q $p"
elif [ -r $c/cpu/cpu.cfs_quota_us ]; then
  read -r q <$c/cpu/cpu.cfs_quota_us && read -r p <$c/cpu/cpu.cfs_period_us 2>/dev/null && echo "cpu_max $q $p"
fi
echo "nproc $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null)"
while IFS= read -r l; do case $l in *:*) echo "net $l" ;; esac; done </proc/net/dev 2>/dev/null
df -Pk . 2>/dev/null | { read -r _ && read -r l && echo "df_workspace $l"; }
df -Pk / 2>/dev/null | { read -r _ && read -r l && echo "df_root $l"; }
to=
if command -v timeout >/dev/null 2>&1; then to="timeout 2"; fi
$to du -skx . 2>/dev/null | { read -r k _ && echo "du_workspace $k"; }
$to du -skx / 2>/dev/null | { read -r k _ && echo "du_root $k"; }
cpu() {
  if [ -r $c/cpu.stat ]; then
    while read -r k v; do case $k in usage_usec) echo "cpu_usec$1 $v" ;; esac; done <$c/cpu.stat
  else
    for f in $c/cpuacct/cpuacct.usage $c/cpu,cpuacct/cpuacct.usage $c/cpuacct,cpu/cpuacct.usage; do
      if [ -r $f ]; then read -r v _ <$f && echo "cpu_nsec$1 $v"; break; fi
    done
  fi
  read -r u _ </proc/uptime && echo "uptime$1 $u"
}
cpu 1
sleep 0.5 2>/dev/null || sleep 1
cpu 2
)`

// Stats reports the resource use of the named sandbox, booting it if
// needed. Memory, CPU time, network, block I/O and process count come from
// the engine where it reports them (StatsReader); everything else, and
// whatever the engine lacks, from inside the sandbox. Both reads run at once.
func (m *Manager) Stats(ctx context.Context, name string) (SandboxStats, error) {
	sb, _, err := m.Get(ctx, name)
	if err != nil {
		return SandboxStats{}, err
	}
	type engineResult struct {
		st  Stats
		err error
	}
	var engine chan engineResult
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if sr, ok := m.rt.(StatsReader); ok {
		engine = make(chan engineResult, 1)
		go func() {
			st, err := sr.Stats(ctx, sb.Container)
			engine <- engineResult{st, err}
		}()
	}

	var out bytes.Buffer
	errb := &shell.Capture{Limit: 1024}
	res, err := m.ExecAs(ctx, name, "", shell.Request{
		Command: statsScript, Workdir: m.cfg.Workdir, Timeout: statsTimeout, Stdout: &out, Stderr: errb,
	})
	if err != nil {
		return SandboxStats{}, fmt.Errorf("read stats in sandbox %q: %w", name, err)
	}
	if res.Canceled {
		return SandboxStats{}, fmt.Errorf("read stats in sandbox %q: %w", name, context.Cause(ctx))
	}
	if res.TimedOut {
		return SandboxStats{}, fmt.Errorf("read stats in sandbox %q: timed out after %s", name, statsTimeout)
	}
	vm, err := parseVMStats(out.Bytes())
	if err != nil {
		head, _, _ := errb.Parts()
		return SandboxStats{}, fmt.Errorf("read stats in sandbox %q (exit %d: %s): %w",
			name, res.ExitCode, strings.TrimSpace(string(head)), err)
	}
	st := vm.stats()
	st.Source = "vm"
	st.SampledAt = time.Now().UTC()
	if engine != nil {
		r := <-engine
		if r.err != nil {
			m.log.Warn("engine stats", "sandbox", name, "err", r.err)
		} else {
			st.mergeEngine(r.st)
			st.Source = "engine+vm"
		}
	}
	return st, nil
}

// mergeEngine prefers the engine's figures; zero means the engine left it
// out (Apple's fields are optional).
func (s *SandboxStats) mergeEngine(e Stats) {
	if e.MemoryUsage > 0 {
		s.MemoryBytes = e.MemoryUsage
	}
	if e.MemoryLimit > 0 {
		s.MemoryLimitBytes = e.MemoryLimit
	}
	if e.CPUTime > 0 {
		s.CPUSeconds = e.CPUTime.Seconds()
	}
	if e.Processes > 0 {
		s.Pids = int64(e.Processes)
	}
	if e.NetRx > 0 || e.NetTx > 0 {
		s.NetRxBytes, s.NetTxBytes = e.NetRx, e.NetTx
	}
	if e.BlockRead > 0 || e.BlockWrite > 0 {
		s.BlockReadBytes, s.BlockWriteBytes = e.BlockRead, e.BlockWrite
	}
}

// vmStats is what statsScript printed; -1 marks a figure it did not print.
type vmStats struct {
	procs, pidsCurrent              int64
	memUsage, memLimit, memInactive int64 // memLimit 0: unlimited
	cpuQuota, cpuPeriod             int64 // quota 0: unlimited
	nproc                           int64
	cpuUsec                         [2]int64
	uptime                          [2]float64
	duWorkspace, duRoot             int64 // bytes
	dfWorkspace, dfRoot             statsDF
	netRx, netTx                    int64
}

// statsDF is one filesystem of `df -Pk`, in bytes.
type statsDF struct{ total, free int64 }

// parseVMStats reads statsScript's output. Every line must be a known key
// and a value; a figure whose value does not parse is left unknown, so one
// odd file never fails the whole read. The process count is always printed
// and its absence means the script did not run.
func parseVMStats(b []byte) (vmStats, error) {
	v := vmStats{
		procs: -1, pidsCurrent: -1, memUsage: -1, memLimit: -1, memInactive: -1,
		cpuQuota: -1, cpuPeriod: -1, nproc: -1, cpuUsec: [2]int64{-1, -1}, uptime: [2]float64{-1, -1},
		duWorkspace: -1, duRoot: -1, dfWorkspace: statsDF{-1, -1}, dfRoot: statsDF{-1, -1},
		netRx: -1, netTx: -1,
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		key, val, ok := strings.Cut(line, " ")
		if !ok {
			return v, fmt.Errorf("unexpected stats line %q", line)
		}
		val = strings.TrimSpace(val)
		switch key {
		case "procs":
			v.procs = statNum(val)
		case "pids_current":
			v.pidsCurrent = statNum(val)
		case "mem_usage":
			v.memUsage = statNum(val)
		case "mem_limit":
			v.memLimit = statMemLimit(val)
		case "mem_inactive_file":
			v.memInactive = statNum(val)
		case "cpu_max":
			v.cpuQuota, v.cpuPeriod = statCPUMax(val)
		case "nproc":
			v.nproc = statNum(val)
		case "net":
			v.addNet(val)
		case "df_workspace":
			v.dfWorkspace = statParseDF(val)
		case "df_root":
			v.dfRoot = statParseDF(val)
		case "du_workspace":
			v.duWorkspace = statKiB(statNum(val))
		case "du_root":
			v.duRoot = statKiB(statNum(val))
		case "cpu_usec1", "cpu_usec2", "cpu_nsec1", "cpu_nsec2":
			n := statNum(val)
			if n >= 0 && strings.HasPrefix(key, "cpu_nsec") {
				n /= 1000
			}
			v.cpuUsec[key[len(key)-1]-'1'] = n
		case "uptime1", "uptime2":
			f, err := strconv.ParseFloat(val, 64)
			if err != nil || f < 0 {
				f = -1
			}
			v.uptime[key[len(key)-1]-'1'] = f
		default:
			return v, fmt.Errorf("unexpected stats line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return v, err
	}
	if v.procs < 0 {
		return v, fmt.Errorf("no process count in the stats output %q", statHead(b, 200))
	}
	return v, nil
}

// num parses a non-negative integer, or returns -1.
func statNum(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// kib converts KiB to bytes, keeping -1.
func statKiB(n int64) int64 {
	if n < 0 {
		return -1
	}
	return n << 10
}

// memLimit reads memory.max ("max") or memory.limit_in_bytes (a huge
// number, rounded down to the page size, when unlimited); 0 is unlimited.
func statMemLimit(s string) int64 {
	if s == "max" {
		return 0
	}
	n := statNum(s)
	if n >= 1<<62 {
		return 0
	}
	return n
}

// cpuMax reads "QUOTA PERIOD" (cgroup v2 cpu.max, or v1's cfs_quota_us and
// cfs_period_us); an unlimited quota ("max" or -1) is 0.
func statCPUMax(s string) (quota, period int64) {
	q, p, ok := strings.Cut(s, " ")
	if !ok {
		return -1, -1
	}
	period = statNum(strings.TrimSpace(p))
	switch q {
	case "max", "-1":
		return 0, period
	}
	return statNum(q), period
}

// addNet adds one /proc/net/dev interface line ("eth0: rxbytes … txbytes …",
// the ninth number being txbytes); loopback is left out.
func (v *vmStats) addNet(s string) {
	iface, rest, ok := strings.Cut(s, ":")
	f := strings.Fields(rest)
	if !ok || len(f) < 9 {
		return
	}
	rx, tx := statNum(f[0]), statNum(f[8])
	if rx < 0 || tx < 0 {
		return
	}
	if v.netRx < 0 {
		v.netRx, v.netTx = 0, 0
	}
	if strings.TrimSpace(iface) != "lo" {
		v.netRx += rx
		v.netTx += tx
	}
}

// parseDF reads a `df -Pk` data line: "FS 1024-blocks Used Available
// Capacity% Mounted-on". The file system and mount point may hold spaces,
// so the numbers are found by the capacity column.
func statParseDF(s string) statsDF {
	f := strings.Fields(s)
	for i := len(f) - 1; i >= 4; i-- {
		if strings.HasSuffix(f[i], "%") || f[i] == "-" {
			total, used, free := statNum(f[i-3]), statNum(f[i-2]), statNum(f[i-1])
			if total < 0 || used < 0 || free < 0 {
				break
			}
			return statsDF{total << 10, free << 10}
		}
	}
	return statsDF{-1, -1}
}

// stats turns the raw figures into SandboxStats.
func (v vmStats) stats() SandboxStats {
	s := SandboxStats{
		CPUPercent: -1, CPUSeconds: -1, CPUs: -1,
		MemoryBytes: v.memUsage, MemoryLimitBytes: v.memLimit, Pids: v.procs,
		DiskWorkspaceUsedBytes: v.duWorkspace, DiskWorkspaceTotalBytes: v.dfWorkspace.total, DiskWorkspaceFreeBytes: v.dfWorkspace.free,
		DiskRootUsedBytes: v.duRoot, DiskRootTotalBytes: v.dfRoot.total, DiskRootFreeBytes: v.dfRoot.free,
		NetRxBytes: v.netRx, NetTxBytes: v.netTx, BlockReadBytes: -1, BlockWriteBytes: -1,
	}
	if s.Pids < 0 {
		s.Pids = v.pidsCurrent
	}
	if v.memUsage >= 0 && v.memInactive >= 0 && v.memInactive <= v.memUsage {
		s.MemoryBytes = v.memUsage - v.memInactive // as docker stats counts it
	}
	if v.cpuUsec[1] >= 0 {
		s.CPUSeconds = float64(v.cpuUsec[1]) / 1e6
	}
	// /proc/uptime has 10 ms resolution: a sample shorter than 0.1 s (a
	// sleep that did not wait) says nothing.
	if elapsed := v.uptime[1] - v.uptime[0]; v.cpuUsec[0] >= 0 && v.cpuUsec[1] >= v.cpuUsec[0] && v.uptime[0] >= 0 && elapsed >= 0.1 {
		s.CPUPercent = math.Round(float64(v.cpuUsec[1]-v.cpuUsec[0])/(elapsed*1e6)*1000) / 10
	}
	if v.nproc > 0 {
		s.CPUs = float64(v.nproc)
	}
	if v.cpuQuota > 0 && v.cpuPeriod > 0 {
		if q := float64(v.cpuQuota) / float64(v.cpuPeriod); s.CPUs < 0 || q < s.CPUs {
			s.CPUs = math.Round(q*100) / 100
		}
	}
	return s
}

func statHead(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
