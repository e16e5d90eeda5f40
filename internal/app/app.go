// Package app wires sandbox-mcp together: configuration from flags,
// environment and an optional config file (Resolve), the runtime, state
// and manager built from it (Open), and the MCP server over stdio or
// HTTP (Serve).
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/agent/ctlbin"
	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/children"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/msglimit"
	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/mcphttp"
	"github.com/sandbox-mcp/sandbox-mcp/mcpserver"
	"github.com/sandbox-mcp/sandbox-mcp/portfwd"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/state"
	"github.com/sandbox-mcp/sandbox-mcp/syncer"
	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
	"github.com/sandbox-mcp/sandbox-mcp/terminal"
	"github.com/sandbox-mcp/sandbox-mcp/work"
)

// NewLogger returns the server's stderr logger.
func NewLogger(level string) *slog.Logger { return newLogger(level, os.Stderr) }

func newLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// SelectRuntime returns the driver for kind and why it is that engine.
// "auto" keeps to the engine it chose before for this state directory
// while that one is installed and running, else takes the first installed
// engine with its daemon present (Apple's container CLI on macOS, docker,
// podman), waiting for a slow one rather than passing it over, and
// remembers an engine that answered. Each CLI is looked for at enginePath
// when set, else on PATH and then in EngineDirs. With no engine at all it
// still returns the platform's engine, so that the server starts and every
// tool answers with the install hint instead of the client seeing a dead
// server.
func SelectRuntime(ctx context.Context, kind, enginePath, stateDir string, logger *slog.Logger) (sandbox.Runtime, string) {
	return newEngineChooser(enginePath, stateDir, logger).choose(ctx, kind)
}

// Env is a configuration opened for use: the logger, the container runtime,
// the state store and the sandbox manager that serve and the CLI share.
type Env struct {
	Config  Config
	Logger  *slog.Logger
	Runtime sandbox.Runtime
	// RuntimeWhy says why Runtime is the engine (--runtime, or auto's
	// reasons).
	RuntimeWhy string
	State      *state.Store
	Manager    *sandbox.Manager
	// Syncs runs live sync jobs; set by Serve only.
	Syncs *syncer.Manager
	// Ports holds the port forwards; set by Serve only.
	Ports *portfwd.Set
	// Children keeps the child sandboxes; set by Serve only.
	Children *children.Keeper
	// Terminals keeps the terminal sessions; set by Serve only.
	Terminals *terminal.Sessions
	// Work keeps sandboxes' work as branches of host repositories.
	Work *work.Service
	// Notices are told to the agent on its next tool call (a repaired
	// state file).
	Notices *mcpserver.Notices
	// tel counts what the manager reports, once Serve set it.
	tel atomic.Pointer[telemetry.Telemetry]
	// reaps counts the sandboxes that stopped themselves.
	reaps *reapTally
}

// event counts a manager event in the server's metrics.
func (e *Env) event(event, detail string) {
	t := e.tel.Load()
	if t == nil {
		return
	}
	switch event {
	case "boot":
		t.Boots.Add(1, telemetry.Attr{Key: "how", Value: detail})
	case "egress":
		t.Egress.Add(1, telemetry.Attr{Key: "decision", Value: detail})
	}
}

// Open validates cfg, creates the state directory (0700), picks the
// runtime and builds the manager. Close the Env when done.
func Open(ctx context.Context, cfg Config) (*Env, error) {
	logger, rt, why, err := openRuntime(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := privateDir(cfg.StateDir); err != nil {
		return nil, err
	}
	st, err := state.New(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	notices := &mcpserver.Notices{}
	st.OnCorrupt = func(r state.Repair) {
		logger.Error("state file was damaged; moved aside and what could be read of it recovered", "moved_to", r.MovedTo, "err", r.Why,
			"kept", r.Kept, "lost", r.Lost, "report", r.Report)
		notices.Add(r.Summary() + "; `sandbox-mcp doctor` lists it")
	}
	var res egress.Resolver = net.DefaultResolver
	if cfg.EgressHosts != "" {
		hosts, err := egress.ReadHostsFile(cfg.EgressHosts)
		if err != nil {
			return nil, err
		}
		res = &egress.HostsResolver{Hosts: hosts, Next: net.DefaultResolver}
	}
	ca, err := egress.LoadOrCreateCA(filepath.Join(cfg.StateDir, "egress-ca"))
	if err != nil {
		logger.Warn("no HTTPS interception for secrets: the egress CA cannot be read or made", "err", err)
		ca = nil
	}
	env := &Env{Config: cfg, Logger: logger, Runtime: rt, RuntimeWhy: why, State: st, Notices: notices, reaps: newReapTally()}
	m := sandbox.NewManager(rt, sandbox.Config{
		Events:   env.event,
		Stopped:  env.reaps.saw,
		Resolver: res, EgressLog: &egress.Log{Dir: filepath.Join(cfg.StateDir, "network")}, CA: ca,
		ChannelRoot: filepath.Join(cfg.StateDir, "chan"),
		Prefix:      cfg.Prefix, Defaults: cfg.Defaults, Profiles: cfg.Profiles, PoolSize: cfg.PoolSize,
		History: st, Jobs: st, JobRetention: cfg.JobRetention, Sandboxes: st, Intents: st, LockDir: filepath.Join(cfg.StateDir, "locks"), Logger: logger,
		Snapshots: st, SnapshotDir: filepath.Join(cfg.StateDir, "snapshots"),
	})
	env.Manager = m
	env.Work = work.New(m, st)
	m.OnLifecycle(func(name, event string) {
		if event == "destroy" {
			// Its branch stays in the user's repository.
			if err := env.Work.Forget(name); err != nil {
				logger.Warn("forget the sandbox's tie to its repository", "sandbox", name, "err", err)
			}
		}
	})
	return env, nil
}

// Close stops what the Env's manager runs in this process; sandboxes keep
// running.
func (e *Env) Close() {
	if e.Terminals != nil {
		e.Terminals.CloseAll()
	}
	if e.Children != nil {
		e.Children.Close()
	}
	if e.Ports != nil {
		e.Ports.Close()
	}
	if e.Syncs != nil {
		e.Syncs.Close()
	}
	if e.Work != nil {
		e.Work.Close()
	}
	e.Manager.Close()
}

// openRuntime validates cfg and returns its logger, its runtime and why
// it is that engine.
func openRuntime(ctx context.Context, cfg Config) (*slog.Logger, sandbox.Runtime, string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, "", err
	}
	logger := NewLogger(cfg.LogLevel)
	if cfg.Console != nil {
		logger = newLogger(cfg.LogLevel, cfg.Console.Lines(os.Stderr))
	}
	if cfg.Runtime == "kubernetes" {
		rt, why, err := openKube(cfg, logger)
		if err != nil {
			return nil, nil, "", err
		}
		logger.Debug("runtime", "runtime", rt.Kind(), "why", why)
		return logger, rt, why, nil
	}
	rt, why := SelectRuntime(ctx, cfg.Runtime, cfg.EnginePath, cfg.StateDir, logger)
	logger.Debug("runtime", "runtime", rt.Kind(), "binary", rt.Binary(), "why", why)
	return logger, rt, why, nil
}

// memoryLimit is the heap size past which the GC works harder (unless
// GOMEMLIMIT sets another): four times the largest JSON-RPC message, so the
// garbage of a large request is collected as it goes instead of piling up
// to twice the live heap. A server's heap is a few MB otherwise.
const memoryLimit = 4 * msglimit.DefaultMax

// reconcileDelay is how long a starting server waits before tidying the
// state against the engine.
const reconcileDelay = 3 * time.Second

// Serve runs the MCP server over stdio until in closes or ctx ends, or,
// when cfg.HTTP is set, over streamable HTTP until ctx ends.
func Serve(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	env, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	// The audit log and the telemetry close after the Env, so the calls
	// that end while it shuts down are recorded.
	var closeAfter []func()
	defer func() {
		env.closeWithin(shutdownBound)
		for _, c := range closeAfter {
			c()
		}
	}()
	logger, m := env.Logger, env.Manager
	env.Syncs = syncer.New(syncer.Options{Remote: m, Store: env.State, Locks: locks.Dir{Path: filepath.Join(cfg.StateDir, "locks")}, Logger: logger})
	env.Ports = portfwd.New(portfwd.Options{Dial: m.DialExisting, Log: logger, Bind: cfg.PortsBind, AllowPrivileged: cfg.AllowPrivilegedPorts,
		Store: env.State, Locks: locks.Dir{Path: filepath.Join(cfg.StateDir, "locks")}})
	env.Children = children.New(children.Options{Sandboxes: m, Store: env.State, Policies: cfg.ChildPolicies,
		Locks: locks.Dir{Path: filepath.Join(cfg.StateDir, "locks")}, Log: logger})
	m.SetControl(sandbox.Control{Wants: env.Children.Wants, Serve: env.Children.ServeConn, Child: env.Children.Child})
	env.Terminals = &terminal.Sessions{}
	closeAfter = append(closeAfter, shareSecrets(ctx, cfg.StateDir, m, logger))
	if cfg.WorkQuiet > 0 {
		env.Work.Quiet = cfg.WorkQuiet
		env.Work.Follow(logger)
	}
	m.OnLifecycle(func(name, event string) {
		if event == "destroy" {
			env.Ports.Drop(name)
		}
		// Their programs die with the container; a read answers at once.
		env.Terminals.CloseSandbox(name)
		env.Children.ParentChanged(name, event) // reset, restore, destroy
	})
	var auditLog mcpserver.Auditor
	if cfg.AuditCap > 0 {
		al, err := audit.Open(filepath.Join(cfg.StateDir, "audit"), cfg.AuditCap, func(err error) {
			logger.Warn("tool calls are not being recorded in the audit log; the next record written counts those lost", "err", err)
		})
		if err != nil {
			return err
		}
		closeAfter = append(closeAfter, func() { al.Close() })
		auditLog = al
	}
	tel, err := openTelemetry(cfg, m, logger, env.reaps)
	if err != nil {
		return err
	}
	closeAfter = append(closeAfter, func() { tel.Close(2 * time.Second) })
	env.tel.Store(tel)
	transport, start := "pipe", startDir()
	var canAsk func(context.Context) bool
	if cfg.HTTP != "" {
		transport = "tcp"
		canAsk = mcphttp.ClientListens
		// Over HTTP the directory the server started in is no client's.
		start = ""
	}
	srv, err := mcpserver.NewServer(m, mcpserver.Options{
		Telemetry: tel, Transport: transport,
		// Off the loopback a client may be another machine: its roots
		// would open this one's files to it.
		// The same behind a proxy or tunnel, which is what other host
		// names are for.
		RemoteClients: cfg.HTTP != "" && (!mcphttp.Loopback(cfg.HTTP) || len(cfg.HTTPHosts) > 0), CanAskRoots: canAsk,
		Syncs:     env.Syncs,
		Work:      env.Work,
		Ports:     env.Ports,
		Children:  env.Children,
		Terminals: env.Terminals,
		Version:   cfg.Version, Toolsets: cfg.Toolsets, Dynamic: cfg.DynamicToolsets,
		OutputDir: filepath.Join(cfg.StateDir, "outputs"), Logger: logger,
		AllowDirs: cfg.AllowDirs, StartDir: start,
		OutputsCap: offIfZero(cfg.OutputsCap), OutputCallCap: offIfZero(cfg.OutputCallCap),
		Notices: env.Notices,
		Audit:   auditLog, Redact: m.Redact,
	})
	if err != nil {
		return err
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		limit := int64(memoryLimit)
		if cfg.HTTP != "" {
			// Two large messages at once, each held twice (the body and
			// its decoded arguments), besides the small ones.
			limit *= 2
		}
		debug.SetMemoryLimit(limit)
	}
	logger.Info("serving", "runtime", env.Runtime.Kind(), "image", cfg.Defaults.Image, "state_dir", cfg.StateDir, "config", cfg.File)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go env.watchConfig(wctx, cfg) // reload.go
	// Both run in the Manager's background and end with it.
	m.ReconcileAfter(reconcileDelay)
	m.KeepSpares(cfg.Spares)
	go readyAgent(ctx, logger)
	env.Syncs.Resume()   // jobs of servers that ended
	env.Children.Start() // children whose life ended
	if cfg.BootDefault {
		m.BootInBackground(sandbox.DefaultName)
	}
	if cfg.HTTP != "" {
		return serveHTTP(ctx, cfg, m, srv.MCP(), tel, logger)
	}
	// The session ends when its input does (EOF) or ctx does (SIGTERM,
	// SIGINT). Either way the commands still running are ended first
	// (Manager.Shutdown), before the MCP server cancels their requests, so
	// each says, and its history records, that the server shut down.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { m.Shutdown(); cancel() })
	defer stop()
	err = srv.ServeStdio(sctx, &endReader{r: in, end: m.Shutdown}, out, log.New(os.Stderr, "sandbox-mcp: ", log.LstdFlags))
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil // a signal: a normal end
	}
	return err
}

// serveHTTP serves ms over streamable HTTP at cfg.HTTP until ctx ends,
// then ends the commands under way (so each says the server shut down)
// and gives their answers up to httpGrace to go out.
func serveHTTP(ctx context.Context, cfg Config, m *sandbox.Manager, ms *server.MCPServer, tel *telemetry.Telemetry, logger *slog.Logger) error {
	tokenFile := cfg.TokenFile()
	token, created, err := mcphttp.LoadOrCreateToken(tokenFile)
	if err != nil {
		return err
	}
	hs, err := mcphttp.Listen(cfg.HTTP, ms, mcphttp.Options{Token: token, CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey,
		Hosts: cfg.HTTPHosts, Hint: mcpserver.LargeDataHint(ms), Fix: mcpserver.FixRootsRequest, Logger: logger,
		Metrics: tel.Metrics.WritePrometheus})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "sandbox-mcp: serving MCP at %s; clients send the token in %s as Authorization: Bearer TOKEN\n", hs.URL(), tokenFile)
	if created {
		if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintf(os.Stderr, "sandbox-mcp: new token (shown this once): %s\n", token)
		} else {
			fmt.Fprintf(os.Stderr, "sandbox-mcp: a new token was written to %s (not shown: stderr is not a terminal)\n", tokenFile)
		}
	}
	fmt.Fprintf(os.Stderr, "sandbox-mcp: to use it, give your MCP client this server:\n\n%s\n", HTTPClientSetup(hs.URL(), tokenFile))
	logger.Info("serving over HTTP", "url", hs.URL(), "token_file", tokenFile)
	stop := context.AfterFunc(ctx, m.Shutdown)
	defer stop()
	return hs.Serve(ctx, httpGrace)
}

// openTelemetry returns the server's instruments, exported over OTLP
// when the OTEL_EXPORTER_OTLP_* variables name an endpoint, with a gauge
// of the prefix's sandboxes by state and a count of those that stopped
// themselves (reaps, which the same reading of the engine tells).
func openTelemetry(cfg Config, m *sandbox.Manager, logger *slog.Logger, reaps *reapTally) (*telemetry.Telemetry, error) {
	metrics := telemetry.NewMetrics()
	exp, err := telemetry.ExporterFromEnv(os.Getenv, metrics, "sandbox-mcp", cfg.Version, logger)
	if err != nil {
		return nil, err
	}
	if exp != nil {
		logger.Info("telemetry: OTLP export on", "traces", exp.Tracing())
	}
	var mu sync.Mutex
	var last []telemetry.Point
	var at time.Time
	metrics.Gauge("sandbox_mcp.sandboxes", "Sandboxes of this prefix the engine knows, by state (read at most every 10 s)", "", func() []telemetry.Point {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < 10*time.Second {
			return last
		}
		at = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		infos, err := m.List(ctx)
		if err != nil {
			// No figure rather than an old one: a dead engine must not
			// look like the last healthy count.
			last = nil
			return nil
		}
		counts := map[string]int{}
		for _, in := range infos {
			counts[string(in.State)]++
			reaps.saw(in.Container, in.Finished, in.StoppedBy)
		}
		last = last[:0:0]
		for _, st := range slices.Sorted(maps.Keys(counts)) {
			last = append(last, telemetry.Point{Attrs: []telemetry.Attr{{Key: "state", Value: st}}, Value: float64(counts[st])})
		}
		return last
	})
	metrics.CounterFunc("sandbox_mcp.reaps", "Sandboxes that stopped themselves since this server started, by why: idle (their idle TTL) or lifetime (a child's end of life), as the server saw them (the engine's listing, read with the sandboxes gauge, or their next start); none where the engine keeps no exit codes", "", reaps.points)
	return telemetry.New(metrics, exp), nil
}

// httpGrace is how long a stopping HTTP server waits for the answers
// of the calls under way (their commands were ended first).
const httpGrace = 10 * time.Second

// shutdownBound bounds how long a server whose session ended takes to
// exit: ending the sandboxes' commands and shells, saving history.
const shutdownBound = 30 * time.Second

// closeWithin closes the Env, giving up after d (work still under way
// then ends with the process). A plain boot under way is not waited for
// once the commands are ended and the history saved: the engine finishes
// the boot on its own and the next server adopts the sandbox, so a person
// who pressed Ctrl-C during a slow first boot is not kept waiting in
// silence. A reset's or restore's boot is waited for: the server's own
// work follows it.
func (e *Env) closeWithin(d time.Duration) {
	done := make(chan struct{})
	go func() {
		e.Close()
		close(done)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(d)
	said := false
	for {
		select {
		case <-done:
			return
		case <-deadline:
			e.Logger.Warn("shutdown did not finish in time; exiting anyway", "waited", d)
			return
		case <-tick.C:
		}
		// Once nothing but plain boots is left, the engine finishes them
		// on its own.
		if e.Manager.Settled() {
			if names := e.Manager.Booting(); len(names) > 0 {
				e.Logger.Warn("exiting while sandboxes boot: the engine finishes each boot on its own, and the next server adopts the sandbox",
					"sandboxes", strings.Join(names, ","))
				return
			}
		}
		if !said {
			said = true
			e.Logger.Info("shutting down: ending the commands under way", "at_most", d)
		}
	}
}

// endReader calls end, once, when its reader first reports an error (EOF
// among them), before passing it on.
type endReader struct {
	r    io.Reader
	end  func()
	once sync.Once
}

func (e *endReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(e.end)
	}
	return n, err
}

// offIfZero maps a configured cap of 0 (off) to mcpserver's "disabled".
func offIfZero(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}

// Doctor checks the engine, the default image, the state and the agents
// and writes a report to w.
func Doctor(ctx context.Context, cfg Config, serveArgs []string, w io.Writer) error {
	_, rt, why, err := openRuntime(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.File != "" {
		fmt.Fprintf(w, "config:   %s\n", cfg.File)
	}
	fmt.Fprintf(w, "runtime:  %s (%s): %s\n", rt.Kind(), rt.Binary(), why)
	reportAgents(ctx, w, runtime.GOARCH) // the engine's state does not matter to it
	if err := rt.Ping(ctx); err != nil {
		fmt.Fprintf(w, "engine:   FAIL %v\n", err)
		return errors.New("container engine not usable")
	}
	v, err := rt.Version(ctx)
	if err != nil {
		fmt.Fprintf(w, "engine:   FAIL %v\n", err)
		return errors.New("container engine not usable")
	}
	fmt.Fprintf(w, "engine:   ok, version %s\n", v)
	lim, ds := sandbox.HostLimits(ctx, rt, cfg.Defaults)
	fmt.Fprintf(w, "limits:   %s\n", lim)
	for _, n := range ds.Notes {
		fmt.Fprintf(w, "          %s\n", n)
	}
	if lim.Workspace == sandbox.MechWatcher || lim.Rootfs == sandbox.MechWatcher {
		fmt.Fprintf(w, "          watcher: polls usage every second and stops writers past the limit (overshoot about 1 s of writing) or when host free space falls below max(5%%, 2 GB)\n")
	}
	ok, err := rt.ImageExists(ctx, cfg.Defaults.Image)
	switch {
	case err != nil:
		fmt.Fprintf(w, "image:    FAIL %v\n", err)
		return err
	case !ok:
		fmt.Fprintf(w, "image:    FAIL %s is missing: %s\n", cfg.Defaults.Image, sandbox.ImageHint(rt))
		return errors.New("default image missing")
	}
	fmt.Fprintf(w, "image:    ok, %s\n", cfg.Defaults.Image)
	var spareProfiles []string
	for name, p := range cfg.Profiles {
		if p.Spares > 0 {
			spareProfiles = append(spareProfiles, name)
		}
	}
	slices.Sort(spareProfiles)
	fmt.Fprintf(w, "spares:   %s\n", sandbox.DescribeSpares(rt, cfg.Spares, spareProfiles))
	fmt.Fprintf(w, "clones:   %s\n", sandbox.DescribeClones(ctx, rt))
	if err := checkState(cfg.StateDir); err != nil {
		fmt.Fprintf(w, "state:    FAIL %s: %v\n", cfg.StateDir, err)
		return errors.New("state not usable")
	}
	fmt.Fprintf(w, "state:    ok, %s\n", cfg.StateDir)
	for _, rep := range state.Repairs(cfg.StateDir) {
		if data, err := os.ReadFile(rep); err == nil {
			fmt.Fprintf(w, "          repaired: %s (remove %s and the file it names once read)\n", strings.TrimSpace(string(data)), filepath.Base(rep))
		}
	}
	sets, _ := mcpserver.ResolveToolsets(cfg.Toolsets)
	fmt.Fprintf(w, "toolsets: %s enabled; all sets:\n%s", strings.Join(sets, ","), mcpserver.DescribeToolsets())
	if cfg.HTTP != "" {
		tokenFile := cfg.TokenFile()
		scheme := "http"
		if cfg.TLSCert != "" {
			scheme = "https"
		}
		fmt.Fprintf(w, "\nTo use it, serve it over HTTP (with the flags of this doctor run):\n  %s\n\nand give your MCP clients this server:\n\n%s",
			shellJoin(append([]string{selfPath(), "serve"}, serveArgs...)), HTTPClientSetup(scheme+"://"+cfg.HTTP+mcphttp.Path, tokenFile))
		return nil
	}
	fmt.Fprintf(w, "\nTo use it, give your MCP client this server (with the flags of this doctor run):\n\n%s", ClientSetup(selfPath(), serveArgs, setupEnv(os.Environ()), hostOS))
	return nil
}

// reportAgents writes where the server's agent for each sandbox
// architecture comes from, or why it has none and what that costs. The
// host's architecture (that of its sandboxes) is built now when it comes
// from the module source, so that the first sandbox does not wait for it;
// the other is built on first use.
func reportAgents(ctx context.Context, w io.Writer, hostArch string) {
	for _, arch := range ctlbin.Arches {
		r := ctlbin.Resolve(ctx, arch, false)
		if r.Later != "" && arch == hostArch {
			fmt.Fprintf(w, "agent:    linux/%s: building it from the module source (once per version)…\n", arch)
			r = ctlbin.Resolve(ctx, arch, true)
		}
		for _, f := range r.Refused {
			fmt.Fprintf(w, "agent:    linux/%s: refused %s: %s\n", arch, f.Path, f.Why)
		}
		switch {
		case r.Binary != nil:
			fmt.Fprintf(w, "agent:    linux/%s: ok, %s\n", arch, r.Binary)
		case r.Later != "":
			fmt.Fprintf(w, "agent:    linux/%s: ok, %s\n", arch, r.Later)
		default:
			fmt.Fprintf(w, "agent:    linux/%s: NONE, so linux/%s sandboxes are on the exec fallback (port forwards use one engine exec per connection; children have no control socket): %v\n",
				arch, arch, r.Err())
		}
	}
}

// readyAgent readies the agent for the host's architecture, that of its
// sandboxes, in the background of a starting server: one built from the
// module source is then built before the first sandbox needs it; when
// there is none, the log says why.
func readyAgent(ctx context.Context, logger *slog.Logger) {
	r := ctlbin.Resolve(ctx, runtime.GOARCH, true)
	for _, f := range r.Refused {
		logger.Warn("a sandbox-ctl was refused", "path", f.Path, "why", f.Why)
	}
	if r.Binary == nil {
		logger.Warn("no agent: sandboxes are on the exec fallback (port forwards use one engine exec per connection; children have no control socket)", "err", r.Err())
		return
	}
	logger.Debug("agent", "platform", "linux/"+runtime.GOARCH, "source", r.Binary.String())
}

// privateDir makes dir, the state directory, if it is not there, and
// makes it private to this user (mode 0700). A directory of another user
// (a volume's root, which the storage owns) is refused, saying so: the
// server keeps its state in a directory it owns.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		if fi, serr := os.Stat(dir); serr == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
				return fmt.Errorf("state dir %s belongs to user %d, not to this one (%d), so it cannot be made private to it: name a directory inside it (the server makes it), or one of this user's", dir, st.Uid, os.Geteuid())
			}
		}
		return fmt.Errorf("state dir: %w", err)
	}
	return nil
}

// checkState opens the state file for writing, as a server does: a file
// another process holds past the lock timeout, or a directory that cannot
// be written, fails.
func checkState(dir string) error {
	st, err := state.New(dir)
	if err != nil {
		return err
	}
	_, err = st.Sandboxes()
	return err
}

func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return "sandbox-mcp"
	}
	return p
}

// SplitList splits a comma-separated flag value.
func SplitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// Prune removes what servers of this configuration left on the host:
// containers no sandbox uses, workspace volumes whose sandbox is gone,
// images of clones that are gone, and
// the saved full outputs in the state directory. Sandboxes and their
// workspaces stay. With dryRun it only says what it would remove.
func Prune(ctx context.Context, cfg Config, dryRun bool, w io.Writer) error {
	env, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	p, err := env.Manager.Prune(ctx, dryRun)
	for _, c := range p.Containers {
		fmt.Fprintf(w, "%s container %s (left by a reset)\n", verb, c)
	}
	for _, v := range p.Volumes {
		fmt.Fprintf(w, "%s volume %s (its sandbox's container is gone)\n", verb, v)
	}
	for _, i := range p.Images {
		fmt.Fprintf(w, "%s image %s (left by a clone that is gone)\n", verb, i)
	}
	if p.Network != "" {
		fmt.Fprintf(w, "%s network %s (no sandbox is left on it)\n", verb, p.Network)
	}
	if p.VolumesUnknown != "" {
		fmt.Fprintf(w, "volumes not checked: %s\n", p.VolumesUnknown)
	}
	if err != nil {
		return err
	}
	files, bytes, err := pruneDir(filepath.Join(cfg.StateDir, "outputs"), dryRun)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s %d saved outputs (%d bytes) in %s\n", verb, files, bytes, filepath.Join(cfg.StateDir, "outputs"))
	return nil
}

// pruneDir removes the regular files directly in dir (none of its
// subdirectories or links), returning how many and their size.
func pruneDir(dir string, dryRun bool) (int, int64, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	n, size := 0, int64(0)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if !dryRun {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return n, size, err
			}
		}
		n++
		size += info.Size()
	}
	return n, size, nil
}

// startDir is the directory the server was started in, "" if unknown.
func startDir() string {
	d, err := os.Getwd()
	if err != nil {
		return ""
	}
	return d
}
