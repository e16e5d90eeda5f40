package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/portfwd"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func (s *Server) statusTool() tool {
	return tool{group: "lifecycle", handler: s.handleStatus, def: newTool[SandboxStatus]("status", "Sandbox status",
		"One sandbox's state, image, resources, cwd and exposed ports, without creating it.",
		readOnly(), sandboxParam())}
}

func notExist(name string) *mcp.CallToolResult {
	return argError("sandbox %q does not exist: it is created on first exec, or see list_all", name)
}

func (s *Server) handleStatus(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("status: %v", err), nil
	}
	in, err := s.m.Status(ctx, name)
	if errors.Is(err, sandbox.ErrNotFound) {
		return notExist(name), nil
	}
	if err != nil {
		return failure(ctx, "status", err), nil
	}
	st := s.statusOf(in)
	// The agent goes in the text only: the structured result keeps to
	// list_all's shape (and the tool list to its budget).
	agent := s.m.AgentStatus(ctx, in)
	st.agent = &agent
	if ns, err := s.m.NetworkState(ctx, name); err == nil {
		st.network = &ns
	}
	return mcp.NewToolResultStructured(st, describe(st)), nil
}

// SandboxStatus is the structured result of status, and one sandbox in
// list_all: the sandbox and its port forwards.
type SandboxStatus struct {
	sandbox.Info
	// Forwards maps each exposed sandbox port to its host URL (list_ports
	// tells more).
	Forwards map[string]string `json:"forwards,omitempty"`
	forwards []portfwd.Info
	// agent is the sandbox's agent, for status's text: whether port
	// forwards and the control socket go through it, or why not.
	agent *sandbox.AgentState
	// network is its egress, for status's text.
	network *sandbox.NetState
}

func (s *Server) statusOf(in sandbox.Info) SandboxStatus {
	st := SandboxStatus{Info: in}
	if s.ports != nil {
		st.forwards = s.ports.List(in.Name)
	}
	for _, f := range st.forwards {
		if st.Forwards == nil {
			st.Forwards = map[string]string{}
		}
		st.Forwards[strconv.Itoa(f.Port)] = f.URL
	}
	return st
}

func describe(st SandboxStatus) string {
	in := st.Info
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s, image %s", in.Name, in.State, in.Image)
	if in.Pending != "" {
		fmt.Fprintf(&b, " (%s)", in.Pending)
	}
	if in.ChildOf != "" {
		fmt.Fprintf(&b, ", a child of %s", in.ChildOf)
	}
	if in.CPUs > 0 {
		fmt.Fprintf(&b, ", %g cpus", in.CPUs)
	}
	if in.MemoryB > 0 {
		fmt.Fprintf(&b, ", %d MiB", in.MemoryB>>20)
	}
	if !in.Started.IsZero() && in.State == sandbox.StateRunning {
		fmt.Fprintf(&b, ", up %s", time.Since(in.Started).Round(time.Second))
	}
	if in.Cwd != "" {
		fmt.Fprintf(&b, ", cwd %s", in.Cwd)
	}
	fmt.Fprintf(&b, ", %s", in.Limits)
	fmt.Fprintf(&b, " (container %s)", in.Container)
	for _, f := range st.forwards {
		fmt.Fprintf(&b, "; port %d exposed at %s (%s", f.Port, f.URL, f.Server)
		if f.Server == "this server" {
			fmt.Fprintf(&b, ", %d connections", f.Connections)
		}
		b.WriteString(")")
	}
	if st.agent != nil {
		fmt.Fprintf(&b, "; %s", st.agent)
	}
	if st.network != nil {
		fmt.Fprintf(&b, "; %s", describeEgress(*st.network))
	}
	return b.String()
}

func (s *Server) listAllTool() tool {
	return tool{group: "lifecycle", handler: s.handleListAll, def: newTool[SandboxList]("list_all", "List sandboxes",
		"List every sandbox (running or stopped) with its state and image.", readOnly())}
}

// SandboxList is the structured result of list_all.
type SandboxList struct {
	Sandboxes []SandboxStatus `json:"sandboxes"`
}

func (s *Server) handleListAll(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	list, err := s.m.List(ctx)
	if err != nil {
		return failure(ctx, "list_all", err), nil
	}
	spares := ""
	if sp, err := s.m.Spares(ctx); err == nil && len(sp) > 0 {
		running := 0
		var named []string
		for _, in := range sp {
			if in.State != sandbox.StateRunning {
				continue
			}
			if in.SpareFor != "" {
				named = append(named, in.SpareFor)
				continue
			}
			running++
		}
		var parts []string
		if running > 0 {
			parts = append(parts, fmt.Sprintf("%d running (the next new name takes one instead of booting)", running))
		}
		if len(named) > 0 {
			slices.Sort(named)
			parts = append(parts, fmt.Sprintf("one for the first call of each of %s (its profile's)", strings.Join(slices.Compact(named), ", ")))
		}
		if len(parts) == 0 {
			parts = append(parts, "none running")
		}
		spares = "\nwarm spares: " + strings.Join(parts, "; ")
	}
	if len(list) == 0 {
		return mcp.NewToolResultStructured(SandboxList{Sandboxes: []SandboxStatus{}}, "no sandboxes yet: exec creates one"+spares), nil
	}
	out := SandboxList{Sandboxes: make([]SandboxStatus, len(list))}
	lines := make([]string, len(list))
	for i, in := range list {
		out.Sandboxes[i] = s.statusOf(in)
		lines[i] = describe(out.Sandboxes[i])
	}
	return mcp.NewToolResultStructured(out, strings.Join(lines, "\n")+spares), nil
}

func (s *Server) destroyTool() tool {
	return tool{group: "lifecycle", handler: s.handleDestroy, def: newTool[Destroyed]("destroy", "Destroy a sandbox",
		"Delete a sandbox and its workspace for good.",
		destructive(true), sandboxParam())}
}

// Destroyed is the structured result of destroy.
type Destroyed struct {
	Sandbox string `json:"sandbox"`
	Existed bool   `json:"existed"`
}

func (s *Server) handleDestroy(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("destroy: %v", err), nil
	}
	if refused := s.childGuard(name, "destroy"); refused != nil {
		return refused, nil
	}
	existed, err := s.m.Destroy(ctx, name)
	if err != nil {
		return failure(ctx, "destroy", err), nil
	}
	text := fmt.Sprintf("destroyed sandbox %q and its workspace", name)
	if !existed {
		text = fmt.Sprintf("sandbox %q did not exist; nothing to destroy", name)
	}
	return mcp.NewToolResultStructured(Destroyed{Sandbox: name, Existed: existed}, text), nil
}

func (s *Server) resetTool() tool {
	return tool{group: "lifecycle", handler: s.handleReset, def: newTool[ResetDone]("reset", "Reset a sandbox",
		"Replace a sandbox with a fresh container from its image: packages and files outside /workspace are lost; "+
			"/workspace stays unless wipe_workspace is set.",
		destructive(false), sandboxParam(),
		mcp.WithBoolean("wipe_workspace", mcp.Description("Also empty /workspace."), mcp.DefaultBool(false)))}
}

// ResetDone is the structured result of reset.
type ResetDone struct {
	Sandbox        string `json:"sandbox"`
	WorkspaceWiped bool   `json:"workspace_wiped"`
	TookMS         int64  `json:"took_ms"`
}

func (s *Server) handleReset(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("reset: %v", err), nil
	}
	if refused := s.childGuard(name, "reset"); refused != nil {
		return refused, nil
	}
	wipe := req.GetBool("wipe_workspace", false)
	start := time.Now()
	if _, err := s.m.Reset(ctx, name, wipe); err != nil {
		return failure(ctx, "reset", err), nil
	}
	out := ResetDone{Sandbox: name, WorkspaceWiped: wipe, TookMS: time.Since(start).Milliseconds()}
	kept := "kept"
	if wipe {
		kept = "wiped"
	}
	return mcp.NewToolResultStructured(out, fmt.Sprintf("sandbox %q reset in %s; workspace %s", name, fmtDuration(time.Since(start)), kept)), nil
}

func (s *Server) historyTool() tool {
	return tool{group: "lifecycle", handler: s.handleHistory, def: newTool[HistoryList]("history", "Command history",
		"Recent commands in a sandbox, exit codes and durations (secrets redacted).",
		readOnly(), sandboxParam(),
		mcp.WithInteger("limit", mcp.Description("Entries to return."), mcp.Min(1), mcp.Max(100), mcp.DefaultNumber(20)))}
}

// HistoryList is the structured result of history.
type HistoryList struct {
	Sandbox string                 `json:"sandbox"`
	Entries []sandbox.HistoryEntry `json:"entries"`
}

func (s *Server) handleHistory(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("history: %v", err), nil
	}
	limit := req.GetInt("limit", 20)
	if limit < 1 || limit > 100 {
		return argError("history: limit must be between 1 and 100"), nil
	}
	entries, err := s.m.CommandHistory(name, limit)
	if err != nil {
		return argError("history: %v", err), nil
	}
	if entries == nil {
		entries = []sandbox.HistoryEntry{}
	}
	var b strings.Builder
	if len(entries) == 0 {
		fmt.Fprintf(&b, "no commands recorded for sandbox %q", name)
	}
	for _, e := range entries {
		fmt.Fprintf(&b, "%s  exit %d  %dms  %s\n", e.Time.Format(time.TimeOnly), e.ExitCode, e.DurationMS, e.Command)
		late := ""
		if e.StopTookMS > 0 {
			late = fmt.Sprintf("; the sandbox was slow to answer: stopping it took %dms, and it ran on meanwhile", e.StopTookMS)
		}
		switch {
		case e.Error != "":
			fmt.Fprintf(&b, "    (%s)\n", e.Error)
		case e.TimedOut:
			fmt.Fprintf(&b, "    (timed out%s)\n", late)
		case e.Canceled:
			fmt.Fprintf(&b, "    (canceled%s)\n", late)
		}
	}
	return mcp.NewToolResultStructured(HistoryList{Sandbox: name, Entries: entries}, strings.TrimRight(b.String(), "\n")), nil
}

func (s *Server) healthTool() tool {
	return tool{group: "lifecycle", handler: s.handleHealth, def: newTool[Health]("health", "Health check",
		"Check the engine, the default image and this server's sandboxes.",
		readOnly())}
}

// Health is the structured result of health.
type Health struct {
	OK bool `json:"ok"`
	sandbox.Health
	Server ServerStats `json:"server"`
}

// ServerStats describes the server process itself, so a client (or a test)
// can see descriptors or goroutines piling up across calls.
type ServerStats struct {
	PID        int `json:"pid"`
	Goroutines int `json:"goroutines"`
	// OpenFDs counts the entries of /proc/self/fd (including the one used
	// to read it), or is -1 where there is no such directory.
	OpenFDs int `json:"open_fds"`
}

// serverStats reads the server's own figures. It is taken before health
// does any work, so its own transient goroutines and descriptors are not
// counted.
func serverStats() ServerStats {
	st := ServerStats{PID: os.Getpid(), Goroutines: runtime.NumGoroutine(), OpenFDs: -1}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		st.OpenFDs = len(ents)
	}
	return st
}

func (s *Server) handleHealth(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	h := Health{Server: serverStats()}
	h.Health = s.m.Health(ctx)
	h.OK = h.Health.OK()
	var lines []string
	switch {
	case h.EngineError != "" && h.EngineVersion == "":
		lines = append(lines, "engine: "+h.EngineError)
	default:
		lines = append(lines, fmt.Sprintf("engine: %s %s ok", h.Runtime, h.EngineVersion))
		switch {
		case h.ImageError != "":
			lines = append(lines, "default image: "+h.ImageError)
		case h.ImagePresent:
			lines = append(lines, fmt.Sprintf("default image %s: present", h.DefaultImage))
		default:
			lines = append(lines, fmt.Sprintf("default image %s: MISSING (%s)", h.DefaultImage, h.ImageHint))
		}
		if h.EngineError != "" {
			lines = append(lines, h.EngineError)
		}
		names := make([]string, 0, len(h.Sandboxes))
		for n := range h.Sandboxes {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			lines = append(lines, fmt.Sprintf("sandbox %s: %s", n, h.Sandboxes[n]))
		}
	}
	lines = append(lines, fmt.Sprintf("server: pid %d, %d goroutines, %d open fds", h.Server.PID, h.Server.Goroutines, h.Server.OpenFDs))
	res := mcp.NewToolResultStructured(h, strings.Join(lines, "\n"))
	res.IsError = !h.OK
	return res, nil
}
