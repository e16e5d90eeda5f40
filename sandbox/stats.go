package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// SandboxStats is a snapshot of one sandbox's resource use. Every number
// is -1 when it could not be read.
type SandboxStats struct {
	// Workdir is the workspace mount the DiskWorkspace figures are of.
	Workdir string `json:"workdir"`
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
	// Note says why figures are unknown, when the engine makes them so.
	Note string `json:"note,omitempty"`
}

// statsTimeout bounds the in-sandbox read (two du runs of at most 2 s each
// and the 0.5 s CPU sample).
const statsTimeout = 10 * time.Second

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
		Command: guest.StatsScript, Trusted: true, Workdir: m.cfg.Workdir, Timeout: statsTimeout, Stdout: &out, Stderr: errb,
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
	vm, err := guest.ParseStats(out.Bytes())
	if err != nil {
		head, _, _ := errb.Parts()
		return SandboxStats{}, fmt.Errorf("read stats in sandbox %q (exit %d: %s): %w",
			name, res.ExitCode, strings.TrimSpace(string(head)), err)
	}
	st := statsFromVM(vm)
	st.Source = "vm"
	st.Workdir = m.cfg.Workdir
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
	if why := diskSupport(ctx, m.rt).SharedCgroup; why != "" {
		// What the sandbox reads as its cgroup is the host's (or the
		// user's session): no figure of it is the sandbox's.
		st.CPUPercent, st.CPUSeconds, st.MemoryBytes = -1, -1, -1
		st.Note = "cpu and memory use unknown: " + why
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

// statsFromVM turns the figures read in the sandbox into SandboxStats.
func statsFromVM(v guest.Stats) SandboxStats {
	s := SandboxStats{
		CPUPercent: -1, CPUSeconds: -1, CPUs: -1,
		MemoryBytes: v.MemUsage, MemoryLimitBytes: v.MemLimit, Pids: v.Procs,
		DiskWorkspaceUsedBytes: v.DUWorkspace, DiskWorkspaceTotalBytes: v.DFWorkspace.Total, DiskWorkspaceFreeBytes: v.DFWorkspace.Free,
		DiskRootUsedBytes: v.DURoot, DiskRootTotalBytes: v.DFRoot.Total, DiskRootFreeBytes: v.DFRoot.Free,
		NetRxBytes: v.NetRx, NetTxBytes: v.NetTx, BlockReadBytes: -1, BlockWriteBytes: -1,
	}
	if s.Pids < 0 {
		s.Pids = v.PidsCurrent
	}
	if v.MemUsage >= 0 && v.MemInactive >= 0 && v.MemInactive <= v.MemUsage {
		s.MemoryBytes = v.MemUsage - v.MemInactive // as docker stats counts it
	}
	if v.CPUUsec[1] >= 0 {
		s.CPUSeconds = float64(v.CPUUsec[1]) / 1e6
	}
	// /proc/uptime has 10 ms resolution: a sample shorter than 0.1 s (a
	// sleep that did not wait) says nothing.
	if elapsed := v.Uptime[1] - v.Uptime[0]; v.CPUUsec[0] >= 0 && v.CPUUsec[1] >= v.CPUUsec[0] && v.Uptime[0] >= 0 && elapsed >= 0.1 {
		s.CPUPercent = math.Round(float64(v.CPUUsec[1]-v.CPUUsec[0])/(elapsed*1e6)*1000) / 10
	}
	if v.NProc > 0 {
		s.CPUs = float64(v.NProc)
	}
	if v.CPUQuota > 0 && v.CPUPeriod > 0 {
		if q := float64(v.CPUQuota) / float64(v.CPUPeriod); s.CPUs < 0 || q < s.CPUs {
			s.CPUs = math.Round(q*100) / 100
		}
	}
	return s
}
