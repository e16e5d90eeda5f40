package guest

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// StatsScript reads resource use from inside a sandbox, printing one
// `key value` line per figure it finds and nothing for a missing file. It
// runs in a subshell (so it leaves the persistent shell's variables and
// options alone) with the workspace as working directory. The process count
// uses only builtins and leaves out the subshell itself; du runs before the
// CPU sample so its own CPU time is not counted.
const StatsScript = `( set +eu
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

// Stats is what StatsScript printed, raw; -1 marks a figure it did not print.
type Stats struct {
	Procs, PidsCurrent              int64 // processes seen in /proc, and the cgroup's count
	MemUsage, MemLimit, MemInactive int64 // bytes; MemLimit 0: unlimited
	CPUQuota, CPUPeriod             int64 // quota 0: unlimited
	NProc                           int64
	CPUUsec                         [2]int64   // CPU time before and after the sample
	Uptime                          [2]float64 // /proc/uptime before and after the sample
	DUWorkspace, DURoot             int64      // bytes
	DFWorkspace, DFRoot             DF
	NetRx, NetTx                    int64 // all interfaces but loopback
}

// DF is one filesystem of `df -Pk`, in bytes.
type DF struct{ Total, Free int64 }

// ParseStats reads StatsScript's output. Every line must be a known key
// and a value; a figure whose value does not parse is left unknown, so one
// odd file never fails the whole read. The process count is always printed
// and its absence means the script did not run.
func ParseStats(b []byte) (Stats, error) {
	v := Stats{
		Procs: -1, PidsCurrent: -1, MemUsage: -1, MemLimit: -1, MemInactive: -1,
		CPUQuota: -1, CPUPeriod: -1, NProc: -1, CPUUsec: [2]int64{-1, -1}, Uptime: [2]float64{-1, -1},
		DUWorkspace: -1, DURoot: -1, DFWorkspace: DF{-1, -1}, DFRoot: DF{-1, -1},
		NetRx: -1, NetTx: -1,
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
			v.Procs = statNum(val)
		case "pids_current":
			v.PidsCurrent = statNum(val)
		case "mem_usage":
			v.MemUsage = statNum(val)
		case "mem_limit":
			v.MemLimit = statMemLimit(val)
		case "mem_inactive_file":
			v.MemInactive = statNum(val)
		case "cpu_max":
			v.CPUQuota, v.CPUPeriod = statCPUMax(val)
		case "nproc":
			v.NProc = statNum(val)
		case "net":
			v.addNet(val)
		case "df_workspace":
			v.DFWorkspace = statParseDF(val)
		case "df_root":
			v.DFRoot = statParseDF(val)
		case "du_workspace":
			v.DUWorkspace = statKiB(statNum(val))
		case "du_root":
			v.DURoot = statKiB(statNum(val))
		case "cpu_usec1", "cpu_usec2", "cpu_nsec1", "cpu_nsec2":
			n := statNum(val)
			if n >= 0 && strings.HasPrefix(key, "cpu_nsec") {
				n /= 1000
			}
			v.CPUUsec[key[len(key)-1]-'1'] = n
		case "uptime1", "uptime2":
			f, err := strconv.ParseFloat(val, 64)
			if err != nil || f < 0 {
				f = -1
			}
			v.Uptime[key[len(key)-1]-'1'] = f
		default:
			return v, fmt.Errorf("unexpected stats line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return v, err
	}
	if v.Procs < 0 {
		return v, fmt.Errorf("no process count in the stats output %q", statHead(b, 200))
	}
	return v, nil
}

// statNum parses a non-negative integer, or returns -1.
func statNum(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// statKiB converts KiB to bytes, keeping -1.
func statKiB(n int64) int64 {
	if n < 0 {
		return -1
	}
	return n << 10
}

// statMemLimit reads memory.max ("max") or memory.limit_in_bytes (a huge
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

// statCPUMax reads "QUOTA PERIOD" (cgroup v2 cpu.max, or v1's cfs_quota_us and
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
func (v *Stats) addNet(s string) {
	iface, rest, ok := strings.Cut(s, ":")
	f := strings.Fields(rest)
	if !ok || len(f) < 9 {
		return
	}
	rx, tx := statNum(f[0]), statNum(f[8])
	if rx < 0 || tx < 0 {
		return
	}
	if v.NetRx < 0 {
		v.NetRx, v.NetTx = 0, 0
	}
	if strings.TrimSpace(iface) != "lo" {
		v.NetRx += rx
		v.NetTx += tx
	}
}

// statParseDF reads a `df -Pk` data line: "FS 1024-blocks Used Available
// Capacity% Mounted-on". The file system and mount point may hold spaces,
// so the numbers are found by the capacity column.
func statParseDF(s string) DF {
	f := strings.Fields(s)
	for i := len(f) - 1; i >= 4; i-- {
		if strings.HasSuffix(f[i], "%") || f[i] == "-" {
			total, used, free := statNum(f[i-3]), statNum(f[i-2]), statNum(f[i-1])
			if total < 0 || used < 0 || free < 0 {
				break
			}
			return DF{Total: total << 10, Free: free << 10}
		}
	}
	return DF{-1, -1}
}

func statHead(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
