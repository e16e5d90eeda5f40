// Package mcpserver is the MCP layer of sandbox-mcp: tool definitions
// (schemas, annotations), argument parsing and result shaping. It knows
// tools, not containers: every handler calls the sandbox.Manager.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/msglimit"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/pysession"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
	"github.com/sandbox-mcp/sandbox-mcp/work"
)

// Sandboxes is what the tools need of the sandbox manager: the one API
// they call (*sandbox.Manager in production, a fake in unit tests).
type Sandboxes interface {
	Exec(ctx context.Context, name string, req shell.Request) (sandbox.ExecResult, error)
	TerminalCommand(ctx context.Context, name, command string, cols, rows int) (proc.Process, func(), error)
	RunPython(ctx context.Context, name, session string, req pysession.Request) (sandbox.PythonResult, error)
	ResetPython(name, session string) (bool, error)
	Install(ctx context.Context, name string, pkgs []string, req shell.Request) (sandbox.ExecResult, error)
	WriteFile(ctx context.Context, name string, req sandbox.WriteRequest) (sandbox.Written, error)
	WriteFiles(ctx context.Context, name string, reqs []sandbox.WriteRequest) ([]sandbox.WriteOutcome, error)
	ReadFile(ctx context.Context, name, path string, offset, length int64) ([]byte, error)
	ReadLines(ctx context.Context, name, path string, first, count int64) ([]byte, error)
	Upload(ctx context.Context, name string, req sandbox.UploadRequest) (sandbox.Landing, error)
	Download(ctx context.Context, name, src string, unpack func(r io.Reader, top string, cap sandbox.HostCap, finish func() error) error) (string, error)
	// TrackStaging lists a host staging path for the next server to remove
	// if this one is killed before it does.
	TrackStaging(path string) error
	GitClone(ctx context.Context, name string, req sandbox.CloneRequest) (sandbox.Cloned, error)
	Boot(ctx context.Context, name string) (sandbox.BootInfo, error)
	Dial(ctx context.Context, name string, port int) (net.Conn, error)
	// Outputs returns the PNG files of a running sandbox's outputs
	// directory new or changed since its agent last looked (the first
	// time, since began), and how many more there were.
	Outputs(ctx context.Context, name string, began time.Time) ([]agent.OutputFile, int, error)
	// AgentProblem says why connections into a sandbox go through an
	// exec each rather than its agent; "" when they do not.
	AgentProblem(name string) string
	// AgentStatus describes a sandbox's agent for status: running, on
	// the exec fallback and why, or not started yet.
	AgentStatus(ctx context.Context, in sandbox.Info) sandbox.AgentState
	NetworkInfo(ctx context.Context, name string) (sandbox.NetworkReport, error)
	// NetworkState is a sandbox's egress: its mode and policy, what was
	// refused lately, bytes per host; NetworkLog its proxy's decisions.
	NetworkState(ctx context.Context, name string) (sandbox.NetState, error)
	NetworkLog(ctx context.Context, name string, n int, refusedOnly bool) ([]egress.Event, error)

	Snapshot(ctx context.Context, name string, req sandbox.SnapshotRequest) (state.Snapshot, error)
	Restore(ctx context.Context, snap, name string) (sandbox.BootInfo, state.Snapshot, error)
	Snapshots() ([]state.Snapshot, error)
	// SnapshotElsewhere says where a snapshot's engine parts are when
	// this server does not reach them, "" when it does.
	SnapshotElsewhere(rec state.Snapshot) string
	DeleteSnapshot(ctx context.Context, snap string) (state.Snapshot, error)
	CloneSandbox(ctx context.Context, source, target string, prof *sandbox.Profile) (sandbox.BootInfo, error)
	NamedProfile(name string) (sandbox.Profile, []string, bool)
	// Spares lists the warm spares waiting for a new name.
	Spares(ctx context.Context) ([]sandbox.Info, error)
	BuildImage(ctx context.Context, tag, containerfile, contextDir string, log io.Writer) error
	Images(ctx context.Context) ([]sandbox.ImageEntry, error)
	Env(ctx context.Context, name string) ([]sandbox.EnvVar, error)
	SetEnv(ctx context.Context, name, key, value string, secret bool) error
	// SetEgressSecret sets key to a placeholder the host swaps for value
	// in requests to hosts; EgressSecretHosts lists those this server
	// holds, by variable.
	SetEgressSecret(ctx context.Context, name, key, value string, hosts []string) (string, error)
	EgressSecretHosts(name string) map[string][]string
	UnsetEnv(ctx context.Context, name, key string) error

	StartJob(ctx context.Context, name, jobName, command, workdir string) (sandbox.JobStatus, error)
	JobLogs(ctx context.Context, name, jobName string, opt sandbox.LogOptions) (sandbox.JobLog, error)
	KillJobWith(ctx context.Context, name, jobName string, opt sandbox.KillOptions) (sandbox.KillResult, error)
	Jobs(ctx context.Context, name string) ([]sandbox.JobStatus, error)

	Status(ctx context.Context, name string) (sandbox.Info, error)
	List(ctx context.Context) ([]sandbox.Info, error)
	Stats(ctx context.Context, name string) (sandbox.SandboxStats, error)
	Health(ctx context.Context) sandbox.Health
	CommandHistory(name string, n int) ([]sandbox.HistoryEntry, error)
	Destroy(ctx context.Context, name string) (bool, error)
	Reset(ctx context.Context, name string, wipeWorkspace bool) (sandbox.BootInfo, error)
}

var _ Sandboxes = (*sandbox.Manager)(nil)

// Options configure the MCP server.
type Options struct {
	// Version is reported to clients.
	Version string
	// Toolsets selects the tools exposed (see Toolsets); empty means the
	// default sets, "all" every set.
	Toolsets []string
	// Dynamic adds the toolsets and enable_toolset tools, so the agent can
	// list the sets and enable more at run time.
	Dynamic bool
	// OutputDir keeps full outputs of commands that exceeded their cap; ""
	// disables retrieval of omitted output.
	OutputDir string
	// OutputsCap bounds the bytes all saved outputs in OutputDir hold (the
	// oldest go first); OutputCallCap the bytes one call saves (the copy is
	// cut past it). 0 means the default; below 0 disables saving.
	OutputsCap, OutputCallCap int64
	// HostFree reports the free and total bytes of the host filesystem
	// holding dir; saved outputs stop before its free space falls under
	// diskguard.Floor. nil: statfs.
	HostFree func(dir string) (free, total int64, err error)
	// AllowDirs are host directories transfers may use besides the
	// client's roots; StartDir is the directory the server started in,
	// a root when the client offers none (unless it is / or the home
	// directory).
	AllowDirs []string
	StartDir  string
	// RemoteClients says clients may be on other machines (HTTP off the
	// loopback): the roots they declare and the start directory are then
	// not used, only AllowDirs. CanAskRoots, if set, reports whether the
	// client of a call can be asked for its roots now (nil: always).
	RemoteClients bool
	CanAskRoots   func(context.Context) bool
	// Syncs runs live sync jobs; nil: the sync tools say it is not available.
	Syncs Syncs
	// Work keeps sandboxes' work as branches of host repositories; nil:
	// the work tools say they are not available.
	Work *work.Service
	// Ports holds the port forwards; nil: the port tools say they are not
	// available.
	Ports Ports
	// Children keeps child sandboxes; nil: the children tools say they
	// are not available.
	Children Children
	// Terminals keeps terminal sessions; nil: the terminal tools say they
	// are not available.
	Terminals Terminals
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Notices, if set, are added to the next tool result.
	Notices *Notices
	// Audit, if set, gets a record of every tool call; Redact hides a
	// sandbox's secrets in what the record shows (nil: credential-shaped
	// text only).
	Audit  Auditor
	Redact func(sandbox, text string) string
	// Telemetry, if set, records every tool call's duration and outcome
	// (and a span, when spans are exported); Transport names the
	// transport in them: "pipe" (stdio) or "tcp" (HTTP).
	Telemetry *telemetry.Telemetry
	Transport string
}

// tool is one tool definition with its handler and group.
type tool struct {
	group   string
	def     mcp.Tool
	handler server.ToolHandlerFunc
}

// Server holds the tool handlers' dependencies.
type Server struct {
	m Sandboxes
	// sandboxTools are the tools that take a sandbox (default: "default").
	sandboxTools map[string]bool
	outputs      *outputStore
	log          *slog.Logger
	ms           *server.MCPServer

	hostRoots *hostRoots
	syncs     Syncs
	work      *work.Service
	ports     Ports
	children  Children
	terminals Terminals

	// planned are the toolsets exposed at start: tool descriptions name
	// only tools of these sets (or say which set to enable).
	planned map[string]bool
	dynamic bool

	mu      sync.Mutex
	enabled map[string]bool // toolsets whose tools are registered

	attached sentImages // exec's images already sent

	// chain is the tool handler middleware, outermost first: mcp-go runs
	// it on the calls it serves, and the stdio transport's own path for
	// tools/call (direct.go) on the others.
	chain []server.ToolHandlerMiddleware
	// self is the server's name and version, as results name it.
	self mcp.Implementation
	// lastMeta is callDirect's last _meta read (direct.go).
	lastMeta atomic.Pointer[lastMeta]
}

// offers reports whether the tools of toolset are exposed now, so that a
// result recommends only tools the client can call.
func (s *Server) offers(toolset string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enabled[toolset]
}

// mention names tool (of toolset) in a description: as is when its set is
// exposed at start, with how to get it when the set can be enabled, else
// not at all (instead).
func (s *Server) mention(toolset, with, instead string) string {
	switch {
	case s.planned[toolset]:
		return with
	case s.dynamic:
		return with + " (enable_toolset " + toolset + ")"
	}
	return instead
}

// New returns an MCP server exposing the sandbox tools of the selected
// toolsets: NewServer's, for a transport of the caller's.
func New(m Sandboxes, opts Options) (*server.MCPServer, error) {
	s, err := NewServer(m, opts)
	if err != nil {
		return nil, err
	}
	return s.ms, nil
}

// MCP is the server's mcp-go server, for a transport of the caller's
// (HTTP).
func (s *Server) MCP() *server.MCPServer { return s.ms }

// NewServer returns the sandbox tools of the selected toolsets, to serve
// with ServeStdio or, through MCP, another transport.
func NewServer(m Sandboxes, opts Options) (*Server, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sets, err := ResolveToolsets(opts.Toolsets)
	if err != nil {
		return nil, err
	}
	s := &Server{m: m, outputs: newOutputStore(opts.OutputDir, orDefault(opts.OutputCallCap, DefaultOutputCallCap),
		orDefault(opts.OutputsCap, DefaultOutputsCap), opts.HostFree), log: logger, enabled: map[string]bool{},
		planned: map[string]bool{}, dynamic: opts.Dynamic, hostRoots: newHostRoots(opts.AllowDirs, opts.StartDir, opts.RemoteClients, opts.CanAskRoots), syncs: opts.Syncs, work: opts.Work, ports: opts.Ports, children: opts.Children, terminals: opts.Terminals}
	for _, set := range sets {
		s.planned[set] = true
	}
	all, err := checkedTools(s.tools())
	if err != nil {
		return nil, err
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	instructions := "Run commands in isolated, long-lived Linux sandboxes. " +
		"A tool that acts on one sandbox takes an optional `sandbox` name (default \"default\"); a sandbox is created on first use " +
		"and keeps its files, working directory and exported variables between calls. " +
		"Tools on a terminal, snapshot, child or sync take its id or name instead, and list tools cover every sandbox."
	if opts.Dynamic {
		instructions += " More tools come in toolsets: list them with `toolsets`, enable one with `enable_toolset`."
	}
	var dynamic []tool
	if opts.Dynamic {
		dynamic = s.dynamicTools(all)
	}
	defs := make([]mcp.Tool, 0, len(all)+len(dynamic))
	for _, t := range append(slices.Clone(all), dynamic...) {
		defs = append(defs, t.def)
	}
	args, err := newArgChecker(defs)
	if err != nil {
		return nil, err
	}
	s.sandboxTools = map[string]bool{}
	for _, d := range defs {
		if _, ok := d.InputSchema.Properties["sandbox"]; ok {
			s.sandboxTools[d.Name] = true
		}
	}
	s.chain = []server.ToolHandlerMiddleware{restoreLifted} // outermost: the arguments as sent
	if opts.Audit != nil {
		s.chain = append(s.chain, s.auditCalls(opts.Audit, opts.Redact)) // bad calls too
	}
	if opts.Telemetry != nil {
		s.chain = append(s.chain, s.observe(opts.Telemetry, transportName(opts)))
	}
	s.chain = append(s.chain, recoverPanics,
		args.middleware, // nothing runs on bad arguments
		releaseAfterLarge,
		opts.Notices.middleware)
	mws := make([]server.ServerOption, 0, len(s.chain)+3)
	for _, mw := range s.chain {
		mws = append(mws, server.WithToolHandlerMiddleware(mw))
	}
	s.self = mcp.Implementation{Name: "sandbox-mcp", Version: version}
	s.ms = server.NewMCPServer(s.self.Name, s.self.Version, append(mws,
		server.WithToolCapabilities(opts.Dynamic),
		server.WithHooks(s.hooks(opts)),
		server.WithInstructions(instructions),
	)...)
	s.ms.AddNotificationHandler(mcp.MethodNotificationRootsListChanged, func(ctx context.Context, _ mcp.JSONRPCNotification) {
		s.forgetClientRoots(sessionID(ctx))
	})
	s.enable(all, sets)
	for _, t := range dynamic {
		s.ms.AddTool(wireTool(t.def), t.handler)
	}
	s.addResources()
	return s, nil
}

// transportName is the network.transport the server's metrics give.
func transportName(opts Options) string {
	if opts.Transport == "" {
		return "pipe"
	}
	return opts.Transport
}

func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// enable registers the tools of sets (if not yet enabled).
func (s *Server) enable(all []tool, sets []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var added []string
	var batch []server.ServerTool
	for _, set := range sets {
		if s.enabled[set] {
			continue
		}
		s.enabled[set] = true
		for _, t := range all {
			if t.group == set {
				batch = append(batch, server.ServerTool{Tool: wireTool(t.def), Handler: t.handler})
				added = append(added, t.def.Name)
			}
		}
	}
	if len(batch) > 0 {
		s.ms.AddTools(batch...)
	}
	return added
}

// wireTool is def as registered with mcp-go: its input schema encoded
// once, here, rather than on every call. mcp-go reads a tool's input
// schema on each tools/call over HTTP (for x-mcp-header parameters, which
// none of ours has); a structured schema it encodes each time (a third of
// the server's own work for a warm exec over HTTP, in a profile), an
// encoded one it only reads. tools/list sends the same schema either way.
func wireTool(def mcp.Tool) mcp.Tool {
	raw, err := json.Marshal(def.InputSchema)
	if err != nil {
		return def // a structured schema that cannot encode: as it was
	}
	def.RawInputSchema, def.InputSchema = raw, mcp.ToolInputSchema{}
	return def
}

// checkedTools returns the tools sorted by name, checking that every tool
// states its annotations truthfully and belongs to a known toolset.
func checkedTools(all []tool) ([]tool, error) {
	for _, t := range all {
		a := t.def.Annotations
		if a.ReadOnlyHint == nil || a.DestructiveHint == nil || a.IdempotentHint == nil || a.OpenWorldHint == nil {
			return nil, fmt.Errorf("tool %s: annotations not set", t.def.Name)
		}
		if *a.ReadOnlyHint && *a.DestructiveHint {
			return nil, fmt.Errorf("tool %s: read-only and destructive", t.def.Name)
		}
		if toolsetByName(t.group) == nil {
			return nil, fmt.Errorf("tool %s: unknown toolset %q", t.def.Name, t.group)
		}
		if t.def.Title == "" {
			return nil, fmt.Errorf("tool %s: no title", t.def.Name)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].def.Name < all[j].def.Name })
	return all, nil
}

func (s *Server) tools() []tool {
	return []tool{
		s.execTool(), s.pythonTool(), s.installTool(), s.envTool(),
		s.writeFileTool(), s.readFileTool(), s.batchWriteTool(), s.outputTool(),
		s.bgTool(), s.logsTool(), s.killTool(), s.jobsTool(),
		s.statusTool(), s.statsTool(), s.healthTool(), s.listAllTool(), s.destroyTool(), s.resetTool(), s.historyTool(),
		s.uploadTool(), s.downloadTool(), s.gitCloneTool(), s.syncStartTool(), s.syncStopTool(), s.syncListTool(),
		s.snapshotTool(), s.restoreTool(), s.listSnapshotsTool(), s.deleteSnapshotTool(), s.cloneTool(), s.imagesTool(), s.buildImageTool(),
		s.exposeTool(), s.unexposeTool(), s.listPortsTool(), s.networkInfoTool(), s.networkLogTool(),
		s.spawnTool(), s.childrenTool(), s.destroyChildTool(),
		s.terminalOpenTool(), s.terminalSendTool(), s.terminalReadTool(), s.terminalResizeTool(), s.terminalCloseTool(), s.terminalListTool(),
		s.workspaceFromRepoTool(), s.checkpointTool(), s.workLogTool(), s.workDiffTool(), s.workApplyTool(),
	}
}

// ServeStdio serves MCP on in/out until in closes or ctx ends. Requests
// are served at once, each by a worker of its own, so long commands do not
// queue short ones (see stdio.go).
// Messages over msglimit.DefaultMax are refused with an error that says
// how to send large files instead.
func ServeStdio(ctx context.Context, ms *server.MCPServer, in io.Reader, out io.Writer, errLog *log.Logger) error {
	return serveLimited(ctx, ms, nil, in, out, errLog)
}

// ServeStdio is the package's ServeStdio for s, with tools/call served
// on a shorter path of its own (see direct.go).
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer, errLog *log.Logger) error {
	return serveLimited(ctx, s.ms, s.callDirect, in, out, errLog)
}

func serveLimited(ctx context.Context, ms *server.MCPServer, direct directCaller, in io.Reader, out io.Writer, errLog *log.Logger) error {
	lim := msglimit.New(in, out, msglimit.Options{
		Hint:    LargeDataHint(ms),
		Dropped: func() { go debug.FreeOSMemory() },
		Blobs:   lifted,
	})
	return serveStdio(ctx, ms, direct, lim.Reader(), releasingWriter{rootsParamsWriter{lim.Writer()}}, errLog)
}

// recoverPanics answers a tool call whose handler panicked with an error
// (as mcp-go's WithRecovery does), and ends nothing else.
func recoverPanics(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			if r := recover(); r != nil {
				res, err = nil, fmt.Errorf("panic recovered in %s tool handler: %v", req.Params.Name, r)
			}
		}()
		return next(ctx, req)
	}
}

// rootsRequestBare is how mcp-go writes the roots request of an
// input_required result (roots/list takes no parameters, so it leaves them
// out); rootsRequestFull is the same with empty parameters, which the spec
// allows and some clients (the official Go SDK among them) need to decode
// it. The request's key is ours (rootsKey), so the bytes are known.
var (
	rootsRequestBare = []byte(`"inputRequests":{"` + rootsKey + `":{"method":"roots/list"}}`)
	rootsRequestFull = []byte(`"inputRequests":{"` + rootsKey + `":{"method":"roots/list","params":{}}}`)
)

// rootsParamsWriter adds the empty parameters to the roots request of a
// message (one Write is one message).
type rootsParamsWriter struct{ w io.Writer }

func (r rootsParamsWriter) Write(p []byte) (int, error) {
	if q := FixRootsRequest(p); len(q) != len(p) {
		if _, err := r.w.Write(q); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return r.w.Write(p)
}

// FixRootsRequest returns message p (one JSON-RPC message as the
// transport writes it) with empty parameters added to the roots request
// of an input_required result, or p itself when it has none.
func FixRootsRequest(p []byte) []byte {
	if len(p) < 4096 && bytes.Contains(p, rootsRequestBare) {
		return bytes.Replace(p, rootsRequestBare, rootsRequestFull, 1)
	}
	return p
}

// LargeDataHint is the end of the error for an over-long message: how to
// send a large file instead, naming only tools this server has.
func LargeDataHint(ms *server.MCPServer) func() string {
	return func() string {
		hint := "send a large file in parts of a few MiB with write_file and append=true"
		if ms.GetTool("write_file") == nil {
			hint += " (write_file is in the core toolset)"
		}
		return hint
	}
}

// largeArgs is the size of a tool call's string arguments past which the
// memory the call used is returned to the OS once it is answered.
const largeArgs = 1 << 20

// lifted holds the long strings that the stdio reader lifts out of long
// messages, so that the transport copies a small message rather than
// tens of MiB several times (see msglimit); restoreLifted puts them back.
var lifted = msglimit.NewBlobs()

// restoreLifted gives the handlers the arguments as the client sent them.
func restoreLifted(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, ok := lifted.Resolve(req.Params.Arguments)
		if !ok {
			return mcp.NewToolResultError(req.Params.Name + ": a long argument of this call was lost before the call ran (it waited too long, or too many long calls waited); send the call again"), nil
		}
		req.Params.Arguments = args
		return next(ctx, req)
	}
}

// releaseAfterLarge marks a large tool call as answered, so the next reply
// written returns the freed memory (the transport holds the request until
// its reply is written).
func releaseAfterLarge(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		large := stringBytes(req.GetArguments(), largeArgs) >= largeArgs
		res, err := next(ctx, req)
		if large {
			releasePending.Store(true)
		}
		return res, err
	}
}

// hooks drops large raw arguments (dropRawArguments) and what the server
// keeps of a session once it ends.
func (s *Server) hooks(opts Options) *server.Hooks {
	h := dropRawArguments()
	if opts.Telemetry != nil {
		observeRequests(h, opts.Telemetry, transportName(opts))
	}
	h.AddOnUnregisterSession(func(_ context.Context, sess server.ClientSession) {
		s.forgetClientRoots(sess.SessionID())
	})
	return h
}

// dropRawArguments drops the copy of a large call's arguments as JSON
// that mcp-go keeps beside the decoded ones (no handler reads it), so the
// call holds one copy fewer while it runs.
func dropRawArguments() *server.Hooks {
	h := &server.Hooks{}
	h.AddBeforeCallTool(func(_ context.Context, _ any, req *mcp.CallToolRequest) {
		if len(req.Params.RawArguments) >= largeArgs {
			req.Params.RawArguments = nil
		}
	})
	return h
}

// releasePending is process-wide, as the heap it concerns.
var releasePending atomic.Bool

// releasingWriter returns freed memory to the OS after a reply that
// follows a large call.
type releasingWriter struct{ w io.Writer }

func (r releasingWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if releasePending.Swap(false) {
		go debug.FreeOSMemory()
	}
	return n, err
}

// stringBytes sums the lengths of the strings in v, stopping past limit.
func stringBytes(v any, limit int) int {
	n := 0
	switch v := v.(type) {
	case string:
		return len(v)
	case map[string]any:
		for _, x := range v {
			if n += stringBytes(x, limit-n); n >= limit {
				break
			}
		}
	case []any:
		for _, x := range v {
			if n += stringBytes(x, limit-n); n >= limit {
				break
			}
		}
	}
	return n
}
