package sandbox

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// Labels carried by every container the Manager creates, so any server
// process can find and adopt it.
const (
	LabelOwner = "io.sandbox-mcp.owner" // the Manager's prefix
	LabelName  = "io.sandbox-mcp.name"  // the sandbox name
	LabelRole  = "io.sandbox-mcp.role"  // "primary" or "child"
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
	// shell; default 2 minutes, or a minute more than the runtime's own
	// start bound where it has a longer one (StartBounded).
	BootTimeout time.Duration
	// History persists command history; nil keeps it in memory only.
	History HistoryStore
	// Jobs keeps background job records; nil keeps them in memory.
	Jobs JobStore
	// JobRetention is how long a job that ended (exited or lost, with
	// nothing of it running) is kept before jobs forgets it and removes
	// its log; 0 means DefaultJobRetention, a negative value keeps jobs
	// until their sandbox goes.
	JobRetention time.Duration
	// Sandboxes records each sandbox's profile in use; nil records nothing.
	Sandboxes SandboxStore
	// Snapshots keeps snapshot records, and SnapshotDir their workspace
	// tars; without both, snapshots are not offered.
	Snapshots   SnapshotStore
	SnapshotDir string
	// Intents records restores and clones under way, so that the next
	// server finishes or undoes what a killed one left (intent.go); nil
	// records nothing.
	Intents IntentStore
	// LockDir holds the lock files that serialise lifecycle changes across
	// server processes sharing one state directory; "" locks within this
	// process only.
	LockDir string
	Logger  *slog.Logger
	// Resolver resolves the names allowlist sandboxes connect to; nil is
	// the host's resolver.
	Resolver egress.Resolver
	// Events, if set, is told of what the server's metrics count: "boot"
	// (detail "created", "started" or "adopted") and "egress" (detail
	// "allowed" or "refused"). It must not block.
	Events func(event, detail string)
	// Stopped, if set, is told of each stopped sandbox container this
	// Manager starts again that its watchdog had stopped (why: StoppedBy),
	// with when it stopped: the metrics' reaps, which the container's
	// start forgets. It must not block.
	Stopped func(container string, finished time.Time, why string)
	// EgressLog keeps each sandbox's network decisions; nil keeps none
	// (they are logged at debug level only).
	EgressLog *egress.Log
	// ChannelRoot holds the channel directories of allowlist sandboxes
	// (channel.go), on engines whose containers reach this host's unix
	// sockets; "": every proxied connection goes through the exec. It
	// must be inside a directory private to the user.
	ChannelRoot string
	// CA signs what the proxy shows for intercepted HTTPS hosts, and is
	// installed in allowlist sandboxes; nil: no interception.
	CA *egress.CA
	// UpstreamRoots verify intercepted hosts; nil: the host's roots.
	UpstreamRoots *x509.CertPool
	// HostFree reports the free and total bytes of the host filesystem
	// holding dir, for the floor that host writes from a sandbox keep
	// (diskguard.Floor); nil: statfs.
	HostFree func(dir string) (free, total int64, err error)
}

// SandboxStore keeps, for later servers, what each sandbox was booted with
// (state.Store in production).
type SandboxStore interface {
	PutSandbox(sb state.Sandbox) error
	Sandbox(name string) (state.Sandbox, bool, error)
	Sandboxes() ([]state.Sandbox, error)
	DeleteSandbox(name string) error
}

// Manager owns named sandboxes: it boots or adopts their containers and
// runs commands in them through pools of persistent shells. It is the one
// API the MCP layer (and any other front end) uses.
//
// Each name has a lifecycle lock (see lifecycle.go): boot, destroy and
// reset of one name run one at a time, in this process and, through lock
// files in Config.LockDir, across every server process sharing it.
// Commands run side by side and never across a lifecycle change.
//
// Every goroutine the Manager starts is joined by Close.
type Manager struct {
	rt    Runtime
	cfg   Config
	log   *slog.Logger
	locks locks.Dir

	// callsFail is set once a new sandbox's agent did not call within
	// callWait (a host whose policy keeps containers off a socket of its
	// own, say): new sandboxes' agents start through an exec from then on
	// (callingAgent).
	callsFail atomic.Bool

	// recordMu orders this process's read-modify-writes of sandbox
	// records (recordSandbox, after a boot and off its path, and
	// recordVolume), so that neither writes back what it read before the
	// other's write (a restore's new workspace lost to the record of the
	// boot that mounted it).
	recordMu sync.Mutex

	// life ends background work (activity marks, history flushing,
	// deleting replaced containers) when the Manager closes.
	life   context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	// batches counts batches of writes under way, and those whose held
	// files could not be removed: while it is not zero, Shutdown sweeps
	// every sandbox, which removes them (see WriteFiles).
	batches atomic.Int64

	mu sync.Mutex
	// profMu guards cfg.Defaults and cfg.Profiles, which SetProfiles
	// replaces when the configuration is reloaded.
	profMu sync.RWMutex
	// secrets are the values swapped in at egress, by sandbox and
	// variable: in memory only, this process's and that of the servers
	// it shares them with (SetSecretPeers), never on disk (egress.go).
	secretsMu sync.Mutex
	secrets   map[string]map[string]egress.Secret
	// secretPeers are told of each set and drop (SetSecretPeers).
	secretPeers SecretPeers
	// peers lists the sandboxes proxied connections may name (egress.go).
	peers peerList
	// jobAdopts are the looks at sandboxes job scripts share (jobs.go).
	jobAdopts map[string]*jobAdoption
	slots     map[string]*slot
	// overrides are boots under way with another image (restore, clone);
	// hooks run on restore, reset and destroy (snapshot.go).
	overrides map[string]*bootOverride
	// booting counts the plain boots under way per name; historySaved
	// is closed after the last history flush; others counts the
	// goroutines spawn started that have not ended (spawnBoot's are not).
	booting      map[string]int
	historySaved chan struct{}
	others       atomic.Int64
	hooks        []func(name, event string)
	// observers hear of commands, snapshots and restores (observe.go).
	observers atomic.Pointer[[]Observer]
	history   *History
	jobs      JobStore

	// serverID names this server in the sandboxes' shells, and server
	// holds its lock file while it runs (sweep.go).
	serverID string
	server   *locks.Held

	closeOnce sync.Once
	ending    sync.WaitGroup // sandboxes ended by Shutdown

	net netState // the sandboxes' shared network (network.go)

	control *Control // the control socket (children.go); under mu

	// notes are what the next call on a sandbox must be told (an
	// interrupted restore finished or undone), by name; under mu.
	// pendingNotes counts them, so that a call checks without the lock.
	notes        map[string]string
	pendingNotes atomic.Int64

	spares spareState // spare.go
}

// BootInfo says what Get had to do to make a sandbox ready.
type BootInfo struct {
	Created   bool          // a new container was created
	Started   bool          // a stopped container was started
	Adopted   bool          // a running container was found and adopted
	Took      time.Duration // time spent booting
	Recovered string        // set when a lost container was brought back, with why
	IP        string        // the container's address, when the boot learnt it
	Container string        // the container's name
	Spare     bool          // a warm spare was claimed for it (spare.go)
	// FreshBase is set by a clone or a restore on a runtime that keeps no
	// root filesystem (snapshot.go's rootNotKept): the base image it
	// booted afresh, with the workspace loaded.
	FreshBase string
	// WorkspaceCopy says, for a clone whose workspace the runtime's
	// storage copied (volsnap.go), how; "" for a tar through the server.
	WorkspaceCopy string
}

// historyLimit is how many entries of history are kept per sandbox.
const historyLimit = 100

// ErrClosed is returned by a Manager that has been closed.
var ErrClosed = errors.New("the sandbox manager is shutting down")

// defaultBootTimeout is Config.BootTimeout's default for a runtime with no
// start bound of its own.
const defaultBootTimeout = 2 * time.Minute

// NewManager returns a Manager over rt.
func NewManager(rt Runtime, cfg Config) *Manager {
	if cfg.Prefix == "" {
		cfg.Prefix = "sandbox-mcp"
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/workspace"
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = defaultBootTimeout
		if sb, ok := rt.(StartBounded); ok {
			cfg.BootTimeout = max(cfg.BootTimeout, sb.StartTimeout()+time.Minute)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	life, stop := context.WithCancel(context.Background())
	m := &Manager{
		rt: rt, cfg: cfg, log: log, locks: locks.Dir{Path: cfg.LockDir},
		life: life, stop: stop,
		slots:        map[string]*slot{},
		history:      NewHistory(historyLimit, cfg.History),
		historySaved: make(chan struct{}),
		jobs:         cfg.Jobs,
	}
	if m.jobs == nil {
		m.jobs = &memJobs{}
	}
	m.spares.profiles.Store(int32(len(profilesWithSpares(cfg.Profiles))))
	m.claimServerID()
	m.spawn(m.flushHistory)
	m.spawn(m.markActivity)
	return m
}

// spawn runs fn in a goroutine that Close joins.
func (m *Manager) spawn(fn func()) {
	m.wg.Add(1)
	m.others.Add(1)
	go func() {
		defer m.wg.Done()
		defer m.others.Add(-1)
		fn()
	}()
}

// spawnBoot is spawn for a plain boot, which Settled does not wait for.
func (m *Manager) spawnBoot(fn func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
}

// IdleTTL is how long sandbox name may go unused before it is stopped:
// its profile's idle_ttl, else DefaultIdleTTL; the sandbox named default
// is reaped only when a profile of its own sets one.
func (m *Manager) IdleTTL(name string) time.Duration {
	spec := m.ProfileFor(name).IdleTTL
	if name == DefaultName {
		m.profMu.RLock()
		spec = m.cfg.Profiles[name].IdleTTL
		m.profMu.RUnlock()
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

// watchdogEvery is how often the in-sandbox watchdog checks for idleness
// (ttl, when above 0) and the end of life (until, when set).
func watchdogEvery(ttl time.Duration, until time.Time) time.Duration {
	every := 30 * time.Second
	if ttl > 0 {
		every = min(max(ttl/10, time.Second), every)
	}
	if !until.IsZero() {
		every = min(every, 5*time.Second)
	}
	return every
}

// markActivity keeps the watchdogs of the sandboxes this server uses from
// stopping them: every so often it touches the activity file of each
// sandbox that ran a command since the last mark, or is running one now.
// Each sandbox's mark runs on its own, one at a time, and waits for
// nothing: a sandbox whose shells are all busy, or cannot start (a full
// process table), neither holds up the marks of the others nor waits for
// its next period; its mark is tried again a second later, then after
// twice as long each time it fails, up to its period, while the sandbox
// is in use.
func (m *Manager) markActivity() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.life.Done():
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		for _, sb := range m.ready() {
			if sb.IdleTTL <= 0 {
				continue
			}
			last := sb.lastTouched.Load()
			busy := sb.inflight.Load() > 0 || sb.lastUsed.Load() > last
			period := min(sb.IdleTTL/3, 20*time.Second)
			if !busy || time.Duration(now-last) < period || now < sb.markRetry.Load() || !sb.marking.CompareAndSwap(false, true) {
				continue
			}
			if !sb.Go(func(ctx context.Context) { m.mark(ctx, sb, now, period) }) {
				sb.marking.Store(false)
			}
		}
	}
}

// mark touches sb's activity file once, for markActivity, which set
// sb.marking; now is the tick that found it due, period its marks' period.
// The sandbox's agent, when it runs, touches it: that takes none of the
// shells the agent's commands may want, and starts no process, so a
// sandbox whose process table is full (where no shell can start) is still
// marked. Without the agent, or when it fails, a shell runs the touch.
func (m *Manager) mark(ctx context.Context, sb *Sandbox, now int64, period time.Duration) {
	defer sb.marking.Store(false)
	var err error
	via := "agent"
	c := m.runningAgent(sb)
	if c != nil {
		actx, cancel := context.WithTimeout(ctx, markTimeout)
		err = c.Touch(actx, guest.ActivityFile)
		cancel()
	}
	var agentErr error // the agent's failure, when one was asked
	if c == nil || err != nil {
		agentErr, via = err, "shell"
		_, err = sb.housekeepWithin(ctx, guest.TouchActivity, markTimeout, markTimeout)
	}
	m.log.Debug("mark sandbox active", "sandbox", sb.Name, "via", via, "err", err, "agent_err", agentErr)
	switch {
	case err == nil:
		sb.markWait.Store(0)
		sb.lastTouched.Store(now)
		return
	case sb.inflight.Load() == 0 && time.Since(sb.LastUsed()) > period:
		// Not in use now: no mark again until the next use, which is then
		// due at once (the last use counts as marked, not this try). A
		// sandbox whose container is gone costs no engine exec a second.
		sb.markWait.Store(0)
		sb.lastTouched.Store(sb.lastUsed.Load())
	default:
		// Again soon, then less often.
		wait := min(max(2*time.Duration(sb.markWait.Load()), time.Second), period)
		sb.markWait.Store(int64(wait))
		sb.markRetry.Store(time.Now().Add(wait).UnixNano())
	}
}

// markTimeout bounds an activity mark's run, and apart from that its wait
// for a shell (or a new chore shell's start): a mark that cannot run
// within it is tried again at the next tick.
const markTimeout = 5 * time.Second

// historyFlushEvery is how often history reaches the store.
const historyFlushEvery = time.Second

// Workdir is the sandboxes' workspace, where relative paths land.
func (m *Manager) Workdir() string { return m.cfg.Workdir }

// HistorySaved is closed once Close has ended the commands under way and
// saved the last of the history.
func (m *Manager) HistorySaved() <-chan struct{} { return m.historySaved }

// Settled reports whether a closing Manager waits for nothing but plain
// boots: the commands are ended, the history is saved, and every other
// piece of background work (a terminal session's cleanup, a retired
// container's removal) has ended. What is left then is work the engine
// finishes on its own.
func (m *Manager) Settled() bool {
	select {
	case <-m.historySaved:
		return m.others.Load() == 0
	default:
		return false
	}
}

// flushHistory writes history in batches until Close.
func (m *Manager) flushHistory() {
	defer close(m.historySaved)
	t := time.NewTicker(historyFlushEvery)
	defer t.Stop()
	for stopping := false; !stopping; {
		select {
		case <-t.C:
		case <-m.life.Done():
			stopping = true // one last flush
		}
		if err := m.history.Flush(); err != nil {
			m.log.Warn("save history", "err", err)
		}
	}
}

// NamedProfile returns the configured profile called name (merged over
// the defaults), or false and the configured names.
func (m *Manager) NamedProfile(name string) (Profile, []string, bool) {
	m.profMu.RLock()
	_, ok := m.cfg.Profiles[name]
	names := slices.Sorted(maps.Keys(m.cfg.Profiles))
	m.profMu.RUnlock()
	if ok {
		return m.ProfileFor(name), nil, true
	}
	return Profile{}, names, false
}

// ProfileFor returns the profile a sandbox of that name boots with.
func (m *Manager) ProfileFor(name string) Profile {
	m.profMu.RLock()
	defer m.profMu.RUnlock()
	p := m.cfg.Defaults
	if o, ok := m.cfg.Profiles[name]; ok {
		p = p.Merge(o)
	}
	return p
}

// SetProfiles replaces the defaults and the per-name profiles (a reloaded
// configuration): network policies apply from each sandbox's next
// connection, the rest from its next boot.
func (m *Manager) SetProfiles(defaults Profile, profiles map[string]Profile) {
	m.profMu.Lock()
	m.cfg.Defaults, m.cfg.Profiles = defaults, maps.Clone(profiles)
	m.spares.profiles.Store(int32(len(profilesWithSpares(profiles))))
	m.profMu.Unlock()
}

// ContainerFor returns the container name of a sandbox.
func (m *Manager) ContainerFor(name string) string { return ContainerName(m.cfg.Prefix, name) }

func (m *Manager) volumeFor(name string) string { return ContainerName(m.cfg.Prefix+"-ws", name) }

// Shutdown begins the server's shutdown: no sandbox boots any more, and
// every command running in a sandbox booted here is ended inside the
// sandbox (its processes killed, those that left its shell's tree
// included) and fails with a *CutShortError saying the server is shutting
// down, which is what its history entry records. It returns once the
// commands are ended, within shutdownKill; the sandboxes' shells are
// closed in the background, and Close waits for that. Containers keep
// running. Calling it again does nothing.
func (m *Manager) Shutdown() {
	why := endedByShutdown
	m.mu.Lock()
	m.closed.Store(true)
	var sbs []*Sandbox
	for _, s := range m.slots {
		if sb := s.sb; sb != nil {
			s.sb = nil
			// Before anything ends: a command that ends from now on says why.
			sb.why.CompareAndSwap(nil, &why)
			m.ending.Add(1)
			sbs = append(sbs, sb)
		}
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownKill)
	defer cancel()
	// Every sweep is counted before any sandbox waits for them: a quiet
	// sandbox's is done at once, and an Add after a Wait began races.
	var wg sync.WaitGroup
	wg.Add(len(sbs))
	for _, sb := range sbs {
		go func() {
			defer wg.Done()
			if !m.quiet(sb) {
				m.endOwnShells(ctx, sb)
			}
		}()
		go func() {
			defer m.ending.Done()
			wg.Wait()
			sb.end(why)
		}()
	}
	wg.Wait()
}

// shutdownKill bounds how long Shutdown spends ending running commands.
const shutdownKill = 10 * time.Second

// quiet reports whether closing sb's shells ends all this server runs in
// it, with no sweep: none of its shells runs a command or holds processes
// a command left behind, and no batch of writes has files held anywhere.
// A command-line call that ended then costs no exec at its exit.
func (m *Manager) quiet(sb *Sandbox) bool {
	if m.batches.Load() != 0 || !sb.pool.Quiet() {
		return false
	}
	sb.choresMu.Lock()
	defer sb.choresMu.Unlock()
	return sb.chores == nil || sb.chores.Quiet()
}

// endOwnShells kills this server's shells in sb's container and every
// command they run, at once: closing a busy shell would wait for its
// command, and a command whose context ends (the MCP session's requests
// end with it) has only its current process killed, not what follows it.
func (m *Manager) endOwnShells(ctx context.Context, sb *Sandbox) {
	if sb.own == nil {
		return
	}
	out, err := m.rt.Exec(ctx, sb.own.target(), ExecSpec{Argv: []string{"sh", "-c", guest.SweepScript, "sh", m.serverID}})
	if err == nil && out.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", out.ExitCode, out.Stderr)
	}
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotRunning) {
		m.log.Warn("end the commands running at shutdown", "sandbox", sb.Name, "err", err)
	}
}

// Booting returns the names of the sandboxes whose plain boot (Get: no
// reset, restore or clone) is under way, sorted. A process that exits
// meanwhile, once HistorySaved is closed, loses nothing: the engine
// finishes creating or starting the container on its own, and the next
// server adopts it.
func (m *Manager) Booting() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.booting))
	for name := range m.booting {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// markBooting counts a boot of name under way until the returned func.
func (m *Manager) markBooting(name string) (done func()) {
	m.mu.Lock()
	if m.booting == nil {
		m.booting = map[string]int{}
	}
	m.booting[name]++
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.booting[name]--; m.booting[name] <= 0 {
			delete(m.booting, name)
		}
		m.mu.Unlock()
	}
}

// Close shuts down (see Shutdown), waits for every sandbox's work in this
// process to end (shells, and everything else a sandbox owns), stops the
// Manager's background work, saves history and joins every goroutine it
// started. Containers keep running.
func (m *Manager) Close() {
	m.closeOnce.Do(func() {
		m.Shutdown()
		m.ending.Wait()
		m.stop()
		m.wg.Wait()
		m.closeSpares() // spare.go
		m.releaseServerID()
	})
}
