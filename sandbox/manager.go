package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox/diskguard"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// Labels carried by every container the Manager creates, so any server
// process can find and adopt it.
const (
	LabelOwner = "io.sandbox-mcp.owner" // the Manager's prefix
	LabelName  = "io.sandbox-mcp.name"  // the sandbox name
	LabelRole  = "io.sandbox-mcp.role"  // "primary" (children come later)
)

// Config configures a Manager.
type Config struct {
	// Prefix namespaces container and volume names and the owner label;
	// default "sandbox-mcp".
	Prefix string
	// Defaults is the profile of every sandbox; Profiles override it per name.
	Defaults Profile
	Profiles map[string]Profile
	// Workdir is the workspace mount and the shells' starting directory;
	// default /workspace.
	Workdir string
	// PoolSize is how many commands one sandbox runs at once.
	PoolSize int
	// BootTimeout bounds creating or starting a container and its first
	// shell; default 2 minutes.
	BootTimeout time.Duration
	// History persists command history; nil keeps it in memory only.
	History HistoryStore
	// Jobs keeps background job records; nil keeps them in memory.
	Jobs JobStore
	// Sandboxes records each sandbox's profile in use; nil records nothing.
	Sandboxes SandboxStore
	Logger    *slog.Logger
}

// SandboxStore keeps, for later servers, what each sandbox was booted with
// (state.Store in production).
type SandboxStore interface {
	PutSandbox(sb state.Sandbox) error
	Sandboxes() ([]state.Sandbox, error)
	DeleteSandbox(name string) error
}

// Manager owns named sandboxes: it boots or adopts their containers and
// runs commands in them through pools of persistent shells.
type Manager struct {
	rt  Runtime
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	boxes   map[string]*Sandbox
	booting map[string]*bootCall
	history *History
	jobs    JobStore
	records sync.WaitGroup             // sandbox records being saved
	secrets map[string]map[string]bool // sandbox -> env keys marked secret

	closeOnce sync.Once
	stop      chan struct{} // ends the history flusher
	stopped   chan struct{}
}

type bootCall struct {
	done chan struct{}
	sb   *Sandbox
	info BootInfo
	err  error
}

// Sandbox is a running sandbox known to this Manager.
type Sandbox struct {
	Name      string
	Container string
	Profile   Profile
	pool      *shell.Pool
	lastUsed  atomic.Int64 // unix nanos
	// IdleTTL is how long the sandbox may go unused before its watchdog
	// stops it; 0 never.
	IdleTTL     time.Duration
	inflight    atomic.Int32 // commands running now
	lastTouched atomic.Int64 // unix nanos of the last activity mark

	// Limits (limits.go): what the container was booted with, the disk
	// watcher where the engine cannot bound disk itself, and the message
	// it left for the next command.
	limits Limits
	guard  *diskguard.Guard
	notice atomic.Pointer[string]
}

// LastUsed is when a command last ran in the sandbox through this server.
func (s *Sandbox) LastUsed() time.Time { return time.Unix(0, s.lastUsed.Load()) }

// BootInfo says what Get had to do to make a sandbox ready.
type BootInfo struct {
	Created   bool          // a new container was created
	Started   bool          // a stopped container was started
	Adopted   bool          // a running container was found and adopted
	Took      time.Duration // time spent booting
	Recovered string        // set when a lost container was brought back, with why
}

// NewManager returns a Manager over rt.
func NewManager(rt Runtime, cfg Config) *Manager {
	if cfg.Prefix == "" {
		cfg.Prefix = "sandbox-mcp"
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/workspace"
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = 2 * time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		rt: rt, cfg: cfg, log: log,
		boxes:   map[string]*Sandbox{},
		booting: map[string]*bootCall{},
		history: NewHistory(100, cfg.History),
		jobs:    cfg.Jobs,
		secrets: map[string]map[string]bool{},
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	if m.jobs == nil {
		m.jobs = &memJobs{}
	}
	go m.flushHistory()
	go m.markActivity()
	return m
}

// IdleTTL is how long sandbox name may go unused before it is stopped:
// its profile's idle_ttl, else DefaultIdleTTL; the sandbox named default
// is reaped only when a profile of its own sets one.
func (m *Manager) IdleTTL(name string) time.Duration {
	spec := m.ProfileFor(name).IdleTTL
	if name == DefaultName {
		spec = m.cfg.Profiles[name].IdleTTL
	}
	if spec == "" {
		if name == DefaultName {
			return 0
		}
		return DefaultIdleTTL
	}
	d, err := ParseIdleTTL(spec)
	if err != nil {
		return DefaultIdleTTL // Validate reports it at start-up
	}
	return d
}

// watchdogEvery is how often the in-sandbox watchdog checks for idleness.
func watchdogEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/10, time.Second), 30*time.Second)
}

// markActivity keeps the watchdogs of the sandboxes this server uses from
// stopping them: every so often it touches the activity file of each
// sandbox that ran a command since the last mark, or is running one now.
func (m *Manager) markActivity() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		var due []*Sandbox
		now := time.Now().UnixNano()
		for _, sb := range m.boxes {
			if sb.IdleTTL <= 0 {
				continue
			}
			last := sb.lastTouched.Load()
			busy := sb.inflight.Load() > 0 || sb.lastUsed.Load() > last
			if busy && time.Duration(now-last) >= min(sb.IdleTTL/3, 20*time.Second) {
				due = append(due, sb)
			}
		}
		m.mu.Unlock()
		for _, sb := range due {
			sb.lastTouched.Store(now)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := sb.pool.Run(ctx, shell.Request{Command: shell.TouchActivity, Timeout: 5 * time.Second}); err != nil {
				m.log.Debug("mark sandbox active", "sandbox", sb.Name, "err", err)
			}
			cancel()
		}
	}
}

// historyFlushEvery is how often history reaches the store.
const historyFlushEvery = time.Second

// flushHistory writes history in batches until Close.
func (m *Manager) flushHistory() {
	defer close(m.stopped)
	t := time.NewTicker(historyFlushEvery)
	defer t.Stop()
	for stopping := false; !stopping; {
		select {
		case <-t.C:
		case <-m.stop:
			stopping = true // one last flush
		}
		if err := m.history.Flush(); err != nil {
			m.log.Warn("save history", "err", err)
		}
	}
}

// Runtime returns the engine driver.
func (m *Manager) Runtime() Runtime { return m.rt }

// Config returns the Manager's configuration.
func (m *Manager) Config() Config { return m.cfg }

// History returns the per-sandbox command history.
func (m *Manager) History() *History { return m.history }

// MarkSecret records that an env variable of a sandbox holds a secret.
func (m *Manager) MarkSecret(name, key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.secrets[name] == nil {
		m.secrets[name] = map[string]bool{}
	}
	m.secrets[name][key] = true
}

// IsSecret reports whether an env variable of a sandbox was marked secret.
func (m *Manager) IsSecret(name, key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.secrets[name][key]
}

// ProfileFor returns the profile a sandbox of that name boots with.
func (m *Manager) ProfileFor(name string) Profile {
	p := m.cfg.Defaults
	if o, ok := m.cfg.Profiles[name]; ok {
		p = p.Merge(o)
	}
	return p
}

// ContainerFor returns the container name of a sandbox.
func (m *Manager) ContainerFor(name string) string { return ContainerName(m.cfg.Prefix, name) }

func (m *Manager) volumeFor(name string) string { return ContainerName(m.cfg.Prefix+"-ws", name) }

// Get returns the named sandbox, creating, starting or adopting its
// container as needed. Concurrent calls for one name share one boot.
func (m *Manager) Get(ctx context.Context, name string) (*Sandbox, BootInfo, error) {
	return m.get(ctx, name, bootFind)
}

// bootMode says what a boot already knows.
type bootMode int

const (
	// bootFind looks for the container and adopts, starts or creates it.
	bootFind bootMode = iota
	// bootCreate creates the container without looking: it is known gone.
	bootCreate
	// bootReplace creates it without looking or checking image and
	// workspace: a reset just moved aside a container that used both.
	bootReplace
)

// get is Get with what the caller already knows about the container.
func (m *Manager) get(ctx context.Context, name string, mode bootMode) (*Sandbox, BootInfo, error) {
	if err := ValidateName(name); err != nil {
		return nil, BootInfo{}, err
	}
	m.mu.Lock()
	if sb := m.boxes[name]; sb != nil {
		m.mu.Unlock()
		return sb, BootInfo{}, nil
	}
	if c := m.booting[name]; c != nil {
		m.mu.Unlock()
		select {
		case <-c.done:
			return c.sb, c.info, c.err
		case <-ctx.Done():
			return nil, BootInfo{}, ctx.Err()
		}
	}
	c := &bootCall{done: make(chan struct{})}
	m.booting[name] = c
	m.mu.Unlock()

	// The boot outlives a caller that gives up, so others waiting on it
	// (and the next call) still get the sandbox.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.BootTimeout)
	start := time.Now()
	c.sb, c.info, c.err = m.boot(bctx, name, mode)
	c.info.Took = time.Since(start)
	cancel()

	m.mu.Lock()
	delete(m.booting, name)
	if c.err == nil {
		m.boxes[name] = c.sb
	}
	m.mu.Unlock()
	close(c.done)
	if c.err == nil {
		m.log.Info("sandbox ready", "name", name, "container", c.sb.Container,
			"created", c.info.Created, "started", c.info.Started, "adopted", c.info.Adopted, "took", c.info.Took)
	}
	return c.sb, c.info, c.err
}

// Lookup returns the sandbox if this Manager has it ready, without booting.
func (m *Manager) Lookup(name string) (*Sandbox, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, ok := m.boxes[name]
	return sb, ok
}

// errForeign is returned when a container with a sandbox's name exists but
// was not made by this Manager's prefix.
var errForeign = errors.New("container exists but is not managed by sandbox-mcp")

func (m *Manager) boot(ctx context.Context, name string, mode bootMode) (*Sandbox, BootInfo, error) {
	var info BootInfo
	prof := m.ProfileFor(name)
	if err := prof.Validate(); err != nil {
		return nil, info, err
	}
	ctr := m.ContainerFor(name)
	c, err := Container{}, error(ErrNotFound)
	var early *shell.Pool // a shell opened while the inspect runs
	if mode == bootFind {
		c, early, err = m.inspectWithShell(ctx, name)
	}
	var lim Limits
	if errors.Is(err, ErrNotFound) {
		lim, err = m.create(ctx, name, prof, mode == bootReplace)
		if err == nil {
			info.Created = true
		} else if errors.Is(err, ErrAlreadyExists) {
			// Another server created it first: adopt theirs.
			c, err = m.inspectCreated(ctx, name)
		}
	}
	if err != nil {
		return nil, info, err
	}
	if !info.Created {
		if err := m.adopt(ctx, name, c, &info); err != nil {
			return nil, info, err
		}
		if c.Image != "" {
			prof.Image = c.Image
		}
		lim = limitsOf(c, prof)
	}
	sb := &Sandbox{Name: name, Container: ctr, Profile: prof, IdleTTL: m.IdleTTL(name), limits: lim}
	sb.pool = early
	if sb.pool == nil {
		sb.pool = m.newPool(ctr, nil)
	}
	sb.lastUsed.Store(time.Now().UnixNano())
	if err := sb.pool.Warm(ctx); err != nil {
		sb.pool.Close()
		return nil, info, fmt.Errorf("open a shell in sandbox %q: %w", name, err)
	}
	m.startGuard(ctx, sb) // limits.go: the disk watcher, stopped by sb.close

	m.records.Add(1)
	go func() { // off the path of the first command
		defer m.records.Done()
		m.recordSandbox(sb, info)
	}()
	return sb, info, nil
}

// recordSandbox saves the profile a sandbox runs with.
func (m *Manager) recordSandbox(sb *Sandbox, info BootInfo) {
	if m.cfg.Sandboxes == nil {
		return
	}
	prof, _ := json.Marshal(sb.Profile)
	rec := state.Sandbox{Name: sb.Name, Container: sb.Container, Profile: prof,
		IdleTTL: sb.IdleTTL.String(), LastBoot: time.Now().UTC()}
	if info.Created {
		rec.Created = rec.LastBoot
	}
	if err := m.cfg.Sandboxes.PutSandbox(rec); err != nil {
		m.log.Warn("save sandbox record", "sandbox", sb.Name, "err", err)
	}
}

func (m *Manager) newPool(ctr string, gate func(context.Context) error) *shell.Pool {
	return shell.NewPool(containerHost{rt: m.rt, name: ctr}, shell.Options{Init: m.shellInit(), Gate: gate}, m.cfg.PoolSize)
}

// inspectWithShell inspects a sandbox's container and, at the same time,
// starts a shell process in it, so adopting a running sandbox (a server
// restarted, a second server) costs one engine round trip, not two. The
// shell is held at its gate, with nothing written to it, until the inspect
// shows the container is ours and running; otherwise it is dropped and
// nil returned.
func (m *Manager) inspectWithShell(ctx context.Context, name string) (Container, *shell.Pool, error) {
	checked := make(chan struct{})
	var ok atomic.Bool
	gate := func(gctx context.Context) error {
		select {
		case <-checked:
		case <-gctx.Done():
			return gctx.Err()
		}
		if !ok.Load() {
			return errors.New("the container is not a running sandbox of ours")
		}
		return nil
	}
	pool := m.newPool(m.ContainerFor(name), gate)
	warmed := make(chan error, 1)
	go func() { warmed <- pool.Warm(ctx) }()
	c, err := m.inspectOwned(ctx, name)
	ok.Store(err == nil && c.Running())
	close(checked)
	if !ok.Load() {
		// Not one to adopt as it is: go on with creating or starting it
		// while the held shell fails at its gate.
		go func() { <-warmed; pool.Close() }()
		return c, nil, err
	}
	if werr := <-warmed; werr != nil {
		pool.Close()
		return c, nil, err
	}
	return c, pool, err
}

func (m *Manager) checkOwner(c Container, name string) error {
	if c.Labels[LabelOwner] != m.cfg.Prefix || c.Labels[LabelName] != name {
		return fmt.Errorf("%w: %s (remove it or pick another sandbox name)", errForeign, c.Name)
	}
	return nil
}

// inspectOwned inspects a sandbox's container and checks that it is ours.
// A missing container gives an error wrapping ErrNotFound.
func (m *Manager) inspectOwned(ctx context.Context, name string) (Container, error) {
	c, err := m.rt.Inspect(ctx, m.ContainerFor(name))
	if err != nil {
		return c, fmt.Errorf("inspect sandbox %q: %w", name, err)
	}
	return c, m.checkOwner(c, name)
}

// inspectCreated inspects a container another process has just created.
// Some engines (Apple's among them) refuse a duplicate name before the
// winner's container is visible to inspect, so a short wait for it is
// normal, not an error.
func (m *Manager) inspectCreated(ctx context.Context, name string) (Container, error) {
	const tries, pause = 20, 150 * time.Millisecond
	for i := 1; ; i++ {
		c, err := m.inspectOwned(ctx, name)
		if !errors.Is(err, ErrNotFound) || i == tries {
			return c, err
		}
		select {
		case <-ctx.Done():
			return c, err
		case <-time.After(pause):
		}
	}
}

// adopt takes over an existing container of ours, starting it if stopped,
// and records which it did in info.
func (m *Manager) adopt(ctx context.Context, name string, c Container, info *BootInfo) error {
	if c.Running() {
		info.Adopted = true
		return nil
	}
	m.repairWorkspace(ctx, name, c) // limits.go
	if err := m.rt.Start(ctx, m.ContainerFor(name)); err != nil {
		return fmt.Errorf("start sandbox %q: %w", name, err)
	}
	info.Started = true
	return nil
}

// ErrImageMissing is returned when a sandbox's image is not present locally.
var ErrImageMissing = errors.New("image not present")

// ImageHint tells the user how to get a missing sandbox image on rt.
func ImageHint(rt Runtime) string {
	if rt.Kind() == "container" {
		return "build the default image with `container build -t mcp-dev -f Containerfile.mcp-dev .` in the sandbox-mcp checkout, or run `make setup` there; other images: `container image pull`"
	}
	return "on Linux run `make setup` to build the default image; other images: pull or build them with " + rt.Binary()
}

// create boots a new container. known skips checking the image and
// creating the workspace volume, for a container replacing one that used both.
func (m *Manager) create(ctx context.Context, name string, prof Profile, known bool) (Limits, error) {
	labels := m.labels(name)
	vol := m.volumeFor(name)
	if !known {
		ok, err := m.rt.ImageExists(ctx, prof.Image)
		if err != nil {
			return Limits{}, fmt.Errorf("look up image %q: %w", prof.Image, err)
		}
		if !ok {
			return Limits{}, fmt.Errorf("%w: %q (%s)", ErrImageMissing, prof.Image, ImageHint(m.rt))
		}
	}
	spec := RunSpec{
		Name:           m.ContainerFor(name),
		Image:          prof.Image,
		Labels:         labels,
		CPUs:           prof.CPUs,
		Memory:         prof.Memory,
		Network:        prof.Network,
		Virtualization: prof.Virtualization,
		Mounts:         []Mount{{Volume: vol, Target: m.cfg.Workdir}},
		Workdir:        m.cfg.Workdir,
		Init:           true,
		Command:        []string{"sleep", "infinity"},
	}
	if ttl := m.IdleTTL(name); ttl > 0 {
		spec.Command = shell.WatchdogCommand(ttl, watchdogEvery(ttl))
	}
	// limits.go: workspace volume (sized where possible), pids, rootfs size.
	if err := m.prepareLimits(ctx, name, prof, vol, known, &spec); err != nil {
		return Limits{}, err
	}
	if err := m.rt.Run(ctx, spec); err != nil {
		return Limits{}, fmt.Errorf("boot sandbox %q: %w", name, err)
	}
	lim, _ := parseLimitsLabel(spec.Labels[LabelLimits])
	return lim, nil
}

func (m *Manager) labels(name string) map[string]string {
	return map[string]string{LabelOwner: m.cfg.Prefix, LabelName: name, LabelRole: "primary"}
}

func (m *Manager) shellInit() string {
	return shell.InitScript(m.cfg.Workdir)
}

// ExecResult is the outcome of Exec.
type ExecResult struct {
	shell.Result
	Boot BootInfo
	// Notice is a message about the sandbox the caller should see, such as
	// the disk watcher having stopped a command.
	Notice string
}

// Exec runs a command in the named sandbox, booting it on first use. If the
// sandbox's container was stopped or removed behind the server's back, it is
// brought back once and the command retried.
func (m *Manager) Exec(ctx context.Context, name string, req shell.Request) (ExecResult, error) {
	return m.ExecAs(ctx, name, req.Command, req)
}

// ExecAs is Exec that records label in the history instead of the command
// text (tools that build their own commands record what the user asked);
// an empty label records nothing.
func (m *Manager) ExecAs(ctx context.Context, name, label string, req shell.Request) (ExecResult, error) {
	res, err := m.execAs(ctx, name, label, req)
	if sb, ok := m.Lookup(name); ok {
		res.Notice = sb.takeNotice() // limits.go: the disk watcher's message
	}
	return res, err
}

func (m *Manager) execAs(ctx context.Context, name, label string, req shell.Request) (ExecResult, error) {
	sb, boot, err := m.Get(ctx, name)
	if err != nil {
		return ExecResult{Boot: boot}, err
	}
	sb.lastUsed.Store(time.Now().UnixNano())
	sb.inflight.Add(1)
	defer sb.inflight.Add(-1)
	res, err := sb.pool.Run(ctx, req)
	if err == nil && res.NotStarted {
		err = errShellGone // the container may have gone: check below
	}
	if err == nil || errors.Is(err, shell.ErrNULInCommand) || ctx.Err() != nil {
		m.history.Add(name, label, res, err)
		return ExecResult{Result: res, Boot: boot}, err
	}
	// The shell could not be opened: is the container gone or stopped?
	why, lost := m.lostContainer(ctx, sb)
	if !lost {
		if errors.Is(err, errShellGone) {
			res, err = sb.pool.Run(ctx, req)
			m.history.Add(name, label, res, err)
		}
		return ExecResult{Result: res, Boot: boot}, err
	}
	m.forget(name, sb)
	sb, boot, err = m.Get(ctx, name)
	if err != nil {
		return ExecResult{Boot: boot}, fmt.Errorf("sandbox %q %s and could not be brought back: %w", name, why, err)
	}
	boot.Recovered = why
	res, err = sb.pool.Run(ctx, req)
	m.history.Add(name, label, res, err)
	return ExecResult{Result: res, Boot: boot}, err
}

// forgetJobs drops the job records of a sandbox being destroyed or reset.
func (m *Manager) forgetJobs(name string) {
	if err := m.jobs.DeleteJobs(name); err != nil {
		m.log.Warn("forget jobs", "sandbox", name, "err", err)
	}
}

// errShellGone marks a shell that died before its command started.
var errShellGone = errors.New("the sandbox's shell ended before the command started")

// lostContainer reports whether sb's container is no longer running.
func (m *Manager) lostContainer(ctx context.Context, sb *Sandbox) (string, bool) {
	c, err := m.rt.Inspect(ctx, sb.Container)
	switch {
	case errors.Is(err, ErrNotFound):
		return "was removed", true
	case err != nil:
		return "", false
	case !c.Running():
		return "was stopped", true
	}
	return "", false
}

// forget drops a sandbox from the Manager (not from the engine).
func (m *Manager) forget(name string, sb *Sandbox) {
	m.mu.Lock()
	if m.boxes[name] == sb {
		delete(m.boxes, name)
	}
	m.mu.Unlock()
	sb.stopGuard()
	go sb.close()
}

// Destroy removes a sandbox's container and workspace. It reports whether
// there was anything to remove; destroying a missing sandbox is not an error.
func (m *Manager) Destroy(ctx context.Context, name string) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	existed, err := m.remove(ctx, name, true)
	if err == nil {
		if err := m.history.Forget(name); err != nil {
			m.log.Warn("forget history", "sandbox", name, "err", err)
		}
		m.forgetJobs(name)
		if m.cfg.Sandboxes != nil {
			if err := m.cfg.Sandboxes.DeleteSandbox(name); err != nil {
				m.log.Warn("forget sandbox record", "sandbox", name, "err", err)
			}
		}
	}
	return existed, err
}

// detach drops a sandbox from this Manager and closes its shells in the
// background; it returns the sandbox, or nil if it was not booted here.
func (m *Manager) detach(name string) *Sandbox {
	m.mu.Lock()
	sb := m.boxes[name]
	delete(m.boxes, name)
	m.mu.Unlock()
	if sb != nil {
		sb.stopGuard()
		go sb.close()
	}
	return sb
}

func (m *Manager) remove(ctx context.Context, name string, wipe bool) (bool, error) {
	m.detach(name)
	existed := true
	_, err := m.inspectOwned(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		existed = false
	case err != nil:
		return false, err
	default:
		if err := m.rt.Remove(ctx, m.ContainerFor(name)); err != nil && !errors.Is(err, ErrNotFound) {
			return false, fmt.Errorf("remove sandbox %q: %w", name, err)
		}
	}
	if wipe {
		// A container replaced by a reset may still hold the workspace.
		olds, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix, LabelName: name})
		if err != nil {
			return existed, fmt.Errorf("list containers of %q: %w", name, err)
		}
		for _, c := range olds {
			// It may already be going (the reset's own removal): the volume
			// removal below retries until it is gone.
			_ = m.rt.Remove(ctx, c.Name)
		}
		if err := m.removeVolume(ctx, m.volumeFor(name)); err != nil {
			return existed, fmt.Errorf("remove workspace of %q: %w", name, err)
		}
	}
	return existed, nil
}

// removeVolume removes a volume, retrying briefly while a container that is
// being deleted still holds it.
func (m *Manager) removeVolume(ctx context.Context, vol string) error {
	var err error
	for range 15 {
		if err = m.rt.VolumeRemove(ctx, vol); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	return err
}

// Reset replaces a sandbox's container with a fresh one from its image. The
// workspace survives unless wipeWorkspace is set. Where the engine can
// rename, the old container is moved aside and deleted in the background
// while the new one boots.
func (m *Manager) Reset(ctx context.Context, name string, wipeWorkspace bool) (BootInfo, error) {
	if err := ValidateName(name); err != nil {
		return BootInfo{}, err
	}
	// Jobs die with the old container, and their files with its rootfs.
	m.forgetJobs(name)
	r, canRename := m.rt.(Renamer)
	if wipeWorkspace || !canRename {
		if _, err := m.remove(ctx, name, wipeWorkspace); err != nil {
			return BootInfo{}, err
		}
		_, info, err := m.Get(ctx, name)
		return info, err
	}
	sb := m.detach(name)
	ctr := m.ContainerFor(name)
	if sb == nil {
		// Not booted by this server: make sure the container is ours.
		_, err := m.inspectOwned(ctx, name)
		if errors.Is(err, ErrNotFound) {
			_, info, err := m.get(ctx, name, bootCreate)
			return info, err
		}
		if err != nil {
			return BootInfo{}, err
		}
	}
	trash := m.trashName()
	err := r.Rename(ctx, ctr, trash)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return BootInfo{}, fmt.Errorf("reset sandbox %q: %w", name, err)
	}
	// The image and workspace are known good only if the container moved
	// aside was booted here from the image the profile names now.
	mode := bootCreate
	if err == nil && sb != nil && sb.Profile.Image == m.ProfileFor(name).Image {
		mode = bootReplace
	}
	_, info, bootErr := m.get(ctx, name, mode)
	if err == nil {
		// Deleted after the boot, so it does not compete with it for the engine.
		go func() {
			rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := m.rt.Remove(rctx, trash); err != nil && !errors.Is(err, ErrNotFound) {
				m.log.Warn("remove replaced container", "container", trash, "err", err)
			}
		}()
	}
	return info, bootErr
}

// trashName is a fresh name for a container being deleted.
func (m *Manager) trashName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return m.cfg.Prefix + "-old-" + hex.EncodeToString(b[:])
}

// RemoveOrphans deletes containers of this prefix whose name is not their
// sandbox's (left by a reset whose server exited before deleting the old
// container). It returns how many it removed.
func (m *Manager) RemoveOrphans(ctx context.Context) (int, error) {
	cs, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cs {
		if c.Name != m.ContainerFor(c.Labels[LabelName]) {
			if err := m.rt.Remove(ctx, c.Name); err == nil {
				n++
			}
		}
	}
	return n, nil
}

// Reconcile brings the state in line with the engine, the truth for what
// exists, when a server starts: it removes containers a reset left behind,
// forgets the job records of sandboxes whose container is gone, and
// reports (never removes) the sandboxes earlier servers left running or
// stopped, which any server adopts on first use.
func (m *Manager) Reconcile(ctx context.Context) error {
	if n, err := m.RemoveOrphans(ctx); err != nil {
		return fmt.Errorf("remove containers left by resets: %w", err)
	} else if n > 0 {
		m.log.Info("removed containers left by earlier resets", "count", n)
	}
	cs, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix})
	if err != nil {
		return err
	}
	exists := map[string]bool{}
	var found []string
	for _, c := range cs {
		name := c.Labels[LabelName]
		if c.Name != m.ContainerFor(name) {
			continue
		}
		exists[name] = true
		found = append(found, name+" ("+string(c.State)+")")
	}
	if len(found) > 0 {
		m.log.Info("sandboxes found in the engine", "sandboxes", strings.Join(found, ", "))
	}
	if m.cfg.Sandboxes != nil {
		recs, err := m.cfg.Sandboxes.Sandboxes()
		if err != nil {
			return err
		}
		for _, r := range recs {
			if !exists[r.Name] && r.Container == m.ContainerFor(r.Name) {
				m.log.Info("forgetting a sandbox the engine no longer has", "sandbox", r.Name)
				if err := m.cfg.Sandboxes.DeleteSandbox(r.Name); err != nil {
					return err
				}
			}
		}
	}
	names, err := m.jobs.JobSandboxes()
	if err != nil {
		return fmt.Errorf("read job records: %w", err)
	}
	for _, name := range names {
		if !exists[name] {
			m.log.Info("forgetting the jobs of a sandbox the engine no longer has", "sandbox", name)
			m.forgetJobs(name)
		}
	}
	return nil
}

// Info describes a sandbox for status and listing.
type Info struct {
	Name      string    `json:"name"`
	Container string    `json:"container"`
	State     State     `json:"state"`
	Image     string    `json:"image"`
	Created   time.Time `json:"created,omitzero"`
	Started   time.Time `json:"started,omitzero"`
	IP        string    `json:"ip,omitempty"`
	CPUs      float64   `json:"cpus,omitempty"`
	MemoryB   int64     `json:"memory_bytes,omitempty"`
	Connected bool      `json:"connected"` // this server holds shells in it
	Cwd       string    `json:"cwd,omitempty"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	// Limits are the disk and pids limits the container was booted with
	// and how each is enforced (limits.go).
	Limits Limits `json:"limits"`
}

// List returns every sandbox of this Manager's prefix the engine knows.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	cs, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix})
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(cs))
	for _, c := range cs {
		if c.Name != m.ContainerFor(c.Labels[LabelName]) {
			continue // a replaced container being deleted
		}
		out = append(out, m.info(c.Labels[LabelName], c))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Status describes one sandbox without booting it; a sandbox that does not
// exist returns an error wrapping ErrNotFound.
func (m *Manager) Status(ctx context.Context, name string) (Info, error) {
	if err := ValidateName(name); err != nil {
		return Info{}, err
	}
	c, err := m.inspectOwned(ctx, name)
	if err != nil {
		return Info{}, err
	}
	return m.info(name, c), nil
}

func (m *Manager) info(name string, c Container) Info {
	in := Info{
		Name: name, Container: c.Name, State: c.State, Image: c.Image,
		Created: c.Created, Started: c.Started, IP: c.IP, CPUs: c.CPUs, MemoryB: c.Memory,
		Limits: limitsOf(c, m.ProfileFor(name)),
	}
	if sb, ok := m.Lookup(name); ok {
		in.Connected = true
		in.LastUsed = sb.LastUsed()
		if st, ok := sb.pool.State(); ok {
			in.Cwd = st.Cwd
		}
	}
	return in
}

// Close saves history and releases this server's shells. Containers keep
// running.
func (m *Manager) Close() {
	m.closeOnce.Do(func() {
		close(m.stop)
		<-m.stopped
	})
	m.records.Wait()
	m.mu.Lock()
	boxes := m.boxes
	m.boxes = map[string]*Sandbox{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, sb := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb.close()
		}()
	}
	wg.Wait()
}

// containerHost adapts a Runtime and container to shell.Host.
type containerHost struct {
	rt   Runtime
	name string
}

func (h containerHost) Command(ctx context.Context) *exec.Cmd {
	return h.rt.ExecCommand(ctx, h.name, ExecSpec{Argv: []string{"sh"}, Interactive: true})
}

func (h containerHost) KillTree(ctx context.Context, pid int, self bool) error {
	s := "0"
	if self {
		s = "1"
	}
	_, err := h.rt.Exec(ctx, h.name, ExecSpec{Argv: []string{"sh", "-c", shell.KillTreeScript, "sh", strconv.Itoa(pid), s}})
	return err
}
