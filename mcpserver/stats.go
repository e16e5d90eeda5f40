package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func (s *Server) statsTool() tool {
	return tool{group: "lifecycle", handler: s.handleStats, def: newTool[SandboxStats]("stats", "Resource use",
		"Resource use: CPU over 0.5 s (100% = 1 core), memory, processes, disk, network; -1: unknown (see note).",
		readOnly(), sandboxParam())}
}

// SandboxStats is the structured result of stats.
type SandboxStats struct {
	Sandbox string `json:"sandbox"`
	sandbox.SandboxStats
}

func (s *Server) handleStats(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("stats: %v", err), nil
	}
	st, err := s.m.Stats(ctx, name)
	if err != nil {
		return failure(ctx, "stats", err), nil
	}
	return mcp.NewToolResultStructured(SandboxStats{Sandbox: name, SandboxStats: st}, describeStats(st, st.Workdir)), nil
}

// describeStats is the one-line summary of stats, e.g. "cpu 3.2% of 1 core
// (2 CPUs), memory 41 MiB / 512 MiB, 7 processes, /workspace 1.2 MiB used
// of 9.8 GiB (8.1 GiB free), / 250 MiB used of 9.8 GiB (8.1 GiB free)".
func describeStats(st sandbox.SandboxStats, workdir string) string {
	var parts []string
	cpu := "cpu unknown"
	if st.CPUPercent >= 0 {
		cpu = fmt.Sprintf("cpu %.1f%% of 1 core", st.CPUPercent)
	}
	if st.CPUs > 0 {
		cpu += fmt.Sprintf(" (%g CPUs)", st.CPUs)
	}
	parts = append(parts, cpu)
	switch {
	case st.MemoryBytes < 0:
		parts = append(parts, "memory unknown")
	case st.MemoryLimitBytes > 0:
		parts = append(parts, fmt.Sprintf("memory %s / %s", units.Human(st.MemoryBytes), units.Human(st.MemoryLimitBytes)))
	case st.MemoryLimitBytes == 0:
		parts = append(parts, fmt.Sprintf("memory %s (no limit)", units.Human(st.MemoryBytes)))
	default:
		parts = append(parts, "memory "+units.Human(st.MemoryBytes))
	}
	if st.Pids >= 0 {
		parts = append(parts, fmt.Sprintf("%d processes", st.Pids))
	}
	parts = append(parts, statsDisk(workdir, st.DiskWorkspaceUsedBytes, st.DiskWorkspaceTotalBytes, st.DiskWorkspaceFreeBytes),
		statsDisk("/", st.DiskRootUsedBytes, st.DiskRootTotalBytes, st.DiskRootFreeBytes))
	if st.NetRxBytes >= 0 && st.NetTxBytes >= 0 {
		parts = append(parts, fmt.Sprintf("net %s in, %s out", units.Human(st.NetRxBytes), units.Human(st.NetTxBytes)))
	}
	if st.Note != "" {
		parts = append(parts, "("+st.Note+")")
	}
	return strings.Join(parts, ", ")
}

func statsDisk(path string, used, total, free int64) string {
	s := path + " used unknown"
	if used >= 0 {
		s = path + " " + units.Human(used) + " used"
	}
	if total > 0 {
		s += " of " + units.Human(total)
		if free >= 0 {
			s += " (" + units.Human(free) + " free)"
		}
	}
	return s
}
