// Package mcpserver is the MCP layer of sandbox-mcp: tool definitions
// (schemas, annotations), argument parsing and result shaping. It knows
// tools, not containers: every handler calls the sandbox.Manager.
package mcpserver

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sort"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Options configure the MCP server.
type Options struct {
	// Version is reported to clients.
	Version string
	// Toolsets limits the tools exposed (see Toolsets); empty means all.
	Toolsets []string
	// OutputDir keeps full outputs of commands that exceeded their cap; ""
	// disables retrieval of omitted output.
	OutputDir string
	Logger    *slog.Logger
}

// Toolsets are the groups of tools a user may expose with --toolsets.
var Toolsets = []string{"core", "files", "lifecycle"}

// tool is one tool definition with its handler and group.
type tool struct {
	group   string
	def     mcp.Tool
	handler server.ToolHandlerFunc
}

// Server holds the tool handlers' dependencies.
type Server struct {
	m       *sandbox.Manager
	outputs *outputStore
	log     *slog.Logger
}

// New returns an MCP server exposing the sandbox tools of the selected toolsets.
func New(m *sandbox.Manager, opts Options) (*server.MCPServer, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{m: m, outputs: newOutputStore(opts.OutputDir), log: logger}
	tools, err := s.selectTools(opts.Toolsets)
	if err != nil {
		return nil, err
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	ms := server.NewMCPServer("sandbox-mcp", version,
		server.WithToolCapabilities(false),
		server.WithRecovery(),
		server.WithInstructions("Run commands in isolated, long-lived Linux sandboxes. "+
			"Every tool takes an optional `sandbox` name (default \"default\"); a sandbox is created on first use "+
			"and keeps its files, working directory and exported variables between calls."),
	)
	for _, t := range tools {
		ms.AddTool(t.def, t.handler)
	}
	return ms, nil
}

// selectTools returns the tools of the named toolsets, checking that every
// tool states its annotations.
func (s *Server) selectTools(sets []string) ([]tool, error) {
	all := s.tools()
	want := map[string]bool{}
	for _, name := range sets {
		name = strings.TrimSpace(name)
		if name == "" || name == "all" {
			continue
		}
		if !contains(Toolsets, name) {
			return nil, fmt.Errorf("unknown toolset %q (have %s, or all)", name, strings.Join(Toolsets, ", "))
		}
		want[name] = true
	}
	var out []tool
	for _, t := range all {
		a := t.def.Annotations
		if a.ReadOnlyHint == nil || a.DestructiveHint == nil || a.IdempotentHint == nil || a.OpenWorldHint == nil {
			return nil, fmt.Errorf("tool %s: annotations not set", t.def.Name)
		}
		if *a.ReadOnlyHint && *a.DestructiveHint {
			return nil, fmt.Errorf("tool %s: read-only and destructive", t.def.Name)
		}
		if len(want) == 0 || want[t.group] {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].def.Name < out[j].def.Name })
	return out, nil
}

func (s *Server) tools() []tool {
	return []tool{
		s.execTool(), s.pythonTool(), s.installTool(), s.envTool(),
		s.writeFileTool(), s.readFileTool(), s.batchWriteTool(),
		s.bgTool(), s.logsTool(), s.killTool(), s.jobsTool(),
		s.statusTool(), s.statsTool(), s.healthTool(), s.listAllTool(), s.destroyTool(), s.resetTool(), s.historyTool(), s.outputTool(),
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ServeStdio serves MCP on in/out until in closes or ctx ends. Tool calls
// run on a pool large enough that long commands do not queue short ones.
func ServeStdio(ctx context.Context, ms *server.MCPServer, in io.Reader, out io.Writer, errLog *log.Logger) error {
	ss := server.NewStdioServer(ms)
	if errLog != nil {
		ss.SetErrorLogger(errLog)
	}
	server.WithWorkerPoolSize(64)(ss)
	server.WithQueueSize(1024)(ss)
	return ss.Listen(ctx, in, out)
}
