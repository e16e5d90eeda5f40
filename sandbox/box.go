package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/pysession"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// Sandbox is one booted sandbox in this process. It owns everything that
// lives with it here: its pool of shells and any work started for it
// (Go), which ends and is joined when the sandbox ends: on destroy, reset,
// a container found gone, or the Manager's Close.
//
// Life of a Sandbox:
//
//	boot (lifecycle lock held) ──▶ ready: commands run side by side
//	                                 │
//	  destroy / reset / lost / Close ▼
//	                               ended(why): running commands are cut
//	                               short and told why; owned work joined
type Sandbox struct {
	Name      string
	Container string
	Profile   Profile
	// IdleTTL is how long the sandbox may go unused before its watchdog
	// stops it; 0 never.
	IdleTTL time.Duration

	pool *shell.Pool
	// chores are the shells the server's own scripts use when none of
	// pool's is idle (housekeep), opened on first use by newChores; they
	// keep a sandbox whose user's commands fill its pool answering the job
	// tools, and a burst of job calls from filling it.
	choresMu  sync.Mutex
	chores    *shell.Pool
	newChores func() *shell.Pool
	// own checks every shell open against the container it booted in (owner.go).
	own *owner
	// gen is the lifecycle generation (see lifecycle.go) it was booted
	// under; another server's destroy or reset moves it on.
	gen generation

	// life ends when the sandbox ends; work it owns runs under it.
	life   context.Context
	cancel context.CancelFunc
	work   sync.WaitGroup
	why    atomic.Pointer[string]
	once   sync.Once

	// Limits (limits.go): what the container was booted with, and the
	// message the disk watcher (run as the sandbox's work where the engine
	// cannot bound disk itself) left for the next command.
	// volume is the workspace volume (volumeOf).
	volume string
	limits Limits
	// inspected is the container as the boot's inspect found it when the
	// boot adopted it running (zero otherwise): its disk watcher and host
	// view start from it rather than from inspects of their own.
	inspected Container
	// caLabel is the container's LabelCA as the boot found it, when the
	// boot did not create it, or took a spare this server installed the
	// CA in while it waited.
	caLabel string
	// caAtStart: the boot created the container with a main process that
	// installs this server's CA before it starts the agent that calls this
	// server (agentCall.ca).
	caAtStart bool
	notice    atomic.Pointer[string]

	// agent is the channel into the sandbox (agent.go), started on use.
	agent agentConn
	// controlled is closed once the boot's agent start (the control
	// socket, the egress proxy and its CA) is done or was not needed:
	// commands wait for it, the lifecycle lock does not (children.go).
	controlled chan struct{}
	// egress is its proxy on the host side (egress.go).
	egress egressState
	// execConns bounds the connections served through execs where the
	// agent cannot run (execdial.go).
	execConns execSlots

	// envGens are the env store generations whose secrets are known here
	// (the latest few: a pool's shells may report more than one).
	envMu   sync.Mutex
	envGens []string

	// py is its Python sessions (python.go), made on first use.
	pyOnce sync.Once
	py     *pysession.Set

	lastUsed    atomic.Int64 // unix nanos
	inflight    atomic.Int32 // commands running now
	lastTouched atomic.Int64 // unix nanos of the last activity mark
	marking     atomic.Bool  // a mark is under way
	markWait    atomic.Int64 // after a failed mark, the wait before the next (ns)
	markRetry   atomic.Int64 // unix nanos before which no mark is tried again
}

// Why a Sandbox ended, as told to a command it cut short.
const (
	endedByDestroy  = "was destroyed"
	endedByReset    = "was reset"
	endedByShutdown = "is being released by a server that is shutting down"
)

func newSandbox(name, ctr string, prof Profile, ttl time.Duration, pool *shell.Pool) *Sandbox {
	sb := &Sandbox{Name: name, Container: ctr, Profile: prof, IdleTTL: ttl, pool: pool, controlled: make(chan struct{})}
	sb.life, sb.cancel = context.WithCancel(context.Background())
	sb.lastUsed.Store(time.Now().UnixNano())
	return sb
}

// LastUsed is when a command last ran in the sandbox through this server.
func (s *Sandbox) LastUsed() time.Time { return time.Unix(0, s.lastUsed.Load()) }

// Go runs fn as work owned by the sandbox: fn's context ends when the
// sandbox does, and the sandbox's end waits for fn to return. It reports
// false, without running fn, if the sandbox has already ended.
func (s *Sandbox) Go(fn func(ctx context.Context)) bool {
	s.work.Add(1)
	if s.life.Err() != nil {
		s.work.Done()
		return false
	}
	go func() {
		defer s.work.Done()
		fn(s.life)
	}()
	return true
}

// housekeepQueueWait bounds how long one of the server's own scripts waits
// for a free chore shell while they are all busy, apart from its own
// timeout: a loaded sandbox answers late rather than not at all.
const housekeepQueueWait = 2 * time.Minute

// choreShells is how many shells a sandbox opens for the server's own
// scripts when none of its pool's is idle.
const choreShells = 2

// errHousekeepSlow is the error of a housekeeping script that timed out,
// waiting for a shell or running: the sandbox is busy, not gone, and
// running the script again another way would only add to its load.
var errHousekeepSlow = errors.New("the sandbox did not answer in time")

// housekeep runs one of the server's own scripts in the sandbox: on an
// idle shell of its pool when there is one (a warm round trip), else on
// its chore shells, never on a new shell of the pool's (which the user's
// commands may need). It is not recorded in history, not retried across a
// lifecycle change, bounded by timeout once it runs and by
// housekeepQueueWait while it waits for a chore shell. It returns the
// script's stdout (at most 4 MiB); a non-zero exit, a timeout
// (errHousekeepSlow) or a lost shell is an error.
func (s *Sandbox) housekeep(ctx context.Context, script string, timeout time.Duration) ([]byte, error) {
	return s.housekeepWithin(ctx, script, timeout, housekeepQueueWait)
}

// housekeepWithin is housekeep with queueWait bounding the wait for a
// chore shell while they are all busy.
func (s *Sandbox) housekeepWithin(ctx context.Context, script string, timeout, queueWait time.Duration) ([]byte, error) {
	var out bytes.Buffer
	req := shell.Request{Command: script, Trusted: true, Timeout: timeout, QueueWait: queueWait,
		Stdout: &limitWriter{w: &out, n: 4 << 20}}
	res, ran, err := s.pool.TryRun(ctx, req)
	if !ran {
		chores := s.chorePool()
		if chores == nil {
			return nil, shell.ErrPoolClosed
		}
		res, err = chores.Run(ctx, req)
	}
	switch {
	case err != nil:
		return nil, err
	case res.TimedOut && res.NotStarted && !res.ShellLost:
		return nil, fmt.Errorf("sandbox %q: %w: every shell stayed busy for %s", s.Name, errHousekeepSlow, res.Queued.Round(time.Second))
	case res.TimedOut && res.NotStarted:
		return nil, fmt.Errorf("sandbox %q: %w: a housekeeping script did not start within %s", s.Name, errHousekeepSlow, timeout)
	case res.TimedOut:
		return nil, fmt.Errorf("sandbox %q: %w: a housekeeping script ran past %s", s.Name, errHousekeepSlow, timeout)
	case res.ShellLost, res.ExitCode != 0:
		return nil, fmt.Errorf("sandbox %q: housekeeping script ended with exit %d (shell lost %v)", s.Name, res.ExitCode, res.ShellLost)
	}
	return out.Bytes(), nil
}

// chorePool returns the sandbox's chore shells, made on first use; nil
// once the sandbox has ended. Without newChores (a sandbox made in a
// test) the chores share the pool.
func (s *Sandbox) chorePool() *shell.Pool {
	s.choresMu.Lock()
	defer s.choresMu.Unlock()
	switch {
	case s.life.Err() != nil:
		return nil
	case s.chores != nil:
		return s.chores
	case s.newChores == nil:
		return s.pool
	}
	s.chores = s.newChores()
	return s.chores
}

// openChores opens the first of the sandbox's chore shells when it has
// none open, within choreOpenWait. Starting a job calls it: a job may fill
// the sandbox's process table while the agent's commands hold every shell
// of the pool, and the server's own scripts (activity marks, the job's
// logs) then need a shell that is open already, since none can start. A
// failure is left to the chores' first use.
func (s *Sandbox) openChores(ctx context.Context) {
	chores := s.chorePool()
	if chores == nil || chores == s.pool || chores.Shells() > 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, choreOpenWait)
	defer cancel()
	_ = chores.Warm(ctx)
}

// choreOpenWait bounds what openChores adds to a job's start.
const choreOpenWait = 10 * time.Second

// Ended reports why the sandbox ended, or "" while it is in use.
func (s *Sandbox) Ended() string {
	if p := s.why.Load(); p != nil {
		return *p
	}
	return ""
}

// end ends the sandbox in this process, once: it records why, closes its
// shells (a running command sees its shell die and is told why) and
// cancels and joins the work it owns (the disk watcher among it). The
// container is not touched.
func (s *Sandbox) end(why string) {
	s.once.Do(func() {
		s.why.Store(&why)
		s.cancel()
		s.closeAgent()
		s.pool.Close()
		s.choresMu.Lock()
		if s.chores != nil {
			s.chores.Close()
		}
		s.choresMu.Unlock()
		s.work.Wait()
	})
}

// slot is one sandbox name in this process: its lifecycle lock and the
// sandbox booted under it, if any.
type slot struct {
	// lc is the in-process half of the lifecycle lock: a token held during
	// boot, destroy and reset (the lock file is the cross-process half).
	lc chan struct{}
	sb *Sandbox // guarded by Manager.mu
}

// slotFor returns the slot of name, creating it.
func (m *Manager) slotFor(name string) *slot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.slotLocked(name)
}

// Lookup returns the sandbox if this Manager has it ready, without booting.
func (m *Manager) Lookup(name string) (*Sandbox, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.slots[name]; s != nil && s.sb != nil {
		return s.sb, true
	}
	return nil, false
}

// ready lists the sandboxes booted in this process.
func (m *Manager) ready() []*Sandbox { return m.booted(false) }

// booted lists the sandboxes booted in this process, removing them from
// their slots when detach is set.
func (m *Manager) booted(detach bool) []*Sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Sandbox
	for _, s := range m.slots {
		if s.sb != nil {
			out = append(out, s.sb)
			if detach {
				s.sb = nil
			}
		}
	}
	return out
}

// install makes sb the ready sandbox of its name. It fails if the
// Manager has closed meanwhile.
func (m *Manager) install(sb *Sandbox) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed.Load() {
		return ErrClosed
	}
	m.slotLocked(sb.Name).sb = sb
	return nil
}

// slotLocked is slotFor for a caller holding m.mu.
func (m *Manager) slotLocked(name string) *slot {
	s := m.slots[name]
	if s == nil {
		s = &slot{lc: make(chan struct{}, 1)}
		m.slots[name] = s
	}
	return s
}

// detach removes name's sandbox from this process, if it has one, and
// returns it (not yet ended).
func (m *Manager) detach(name string) *Sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.slots[name]
	if s == nil {
		return nil
	}
	sb := s.sb
	s.sb = nil
	return sb
}
