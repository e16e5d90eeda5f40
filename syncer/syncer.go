// Package syncer keeps a sandbox directory a mirror of a host directory,
// one way, host to sandbox: a first copy as one tar stream, then
// fsnotify-driven batches of changes (polling where inotify cannot watch).
//
// Jobs are recorded in the state so that whichever server runs next
// resumes them; a lock per job (locks.Dir.Lease) makes sure exactly one
// server process runs each.
package syncer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// DefaultIgnore are the names a job leaves out unless told otherwise.
var DefaultIgnore = []string{".git", "node_modules", "__pycache__", ".venv", ".DS_Store"}

// Remote is what a job needs of the sandboxes (*sandbox.Manager).
type Remote interface {
	Presence(ctx context.Context, name string) (exists, running bool, err error)
	SyncList(ctx context.Context, name, dir string, ignore []string) ([]string, error)
	SyncApply(ctx context.Context, name, dir string, remove []string, size int64, pack func(io.Writer) error) error
}

// Store keeps the job records (*state.Store).
type Store interface {
	PutSync(j state.Sync) error
	UpdateSync(id string, fn func(*state.Sync)) error
	Syncs() ([]state.Sync, error)
	DeleteSync(id string) (bool, error)
}

// Job states.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	// StateWaiting: the sandbox is stopped; changes are sent when it runs again.
	StateWaiting = "waiting"
	// StateStopped: the job ended on its own (host directory gone, sandbox
	// destroyed); its record stays until sync_stop, to say why.
	StateStopped = "stopped"
)

// Options configure a Manager.
type Options struct {
	Remote Remote
	Store  Store
	Locks  locks.Dir
	Logger *slog.Logger
	// MaxWatches bounds the directories one job watches with inotify;
	// past it (or past the kernel's limit) directories are polled. 0: the
	// kernel's limit only.
	MaxWatches int
	// Quiet is how long a burst of changes must pause before it is sent
	// (default 25 ms); a burst is sent after at most 8 times that anyway.
	Quiet time.Duration
	// Poll is how often polled directories are scanned (default 1 s).
	Poll time.Duration
	// Resume is how often records are checked for jobs to take over
	// (default 3 s); 0 with NoResume off uses the default.
	Resume time.Duration
}

// Manager runs this process's sync jobs and takes over those of servers
// that ended.
type Manager struct {
	opt Options
	log *slog.Logger

	life   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running map[string]*job      // jobs this process runs
	leasing map[string]bool      // records this process waits to take over
	stops   map[string]chan bool // closed when a job's runner returns
}

// New returns a Manager; Resume starts taking over recorded jobs.
func New(opt Options) *Manager {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Quiet <= 0 {
		opt.Quiet = 25 * time.Millisecond
	}
	if opt.Poll <= 0 {
		opt.Poll = time.Second
	}
	if opt.Resume <= 0 {
		opt.Resume = 3 * time.Second
	}
	m := &Manager{opt: opt, log: opt.Logger, running: map[string]*job{}, leasing: map[string]bool{}, stops: map[string]chan bool{}}
	m.life, m.cancel = context.WithCancel(context.Background())
	return m
}

// Status is a job as the tools show it.
type Status struct {
	state.Sync
	// Here is set when this server process runs the job.
	Here bool `json:"here"`
	// Mirror describes the first copy of this run.
	Mirror *MirrorResult `json:"mirror,omitempty"`
}

// MirrorResult is what a full copy did.
type MirrorResult struct {
	Files   int64         `json:"files"`
	Bytes   int64         `json:"bytes"`
	Removed int           `json:"removed"`
	Took    time.Duration `json:"-"`
	Seconds float64       `json:"seconds"`
}

func newID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "sync-" + hex.EncodeToString(b[:])
}

// SandboxDir cleans dir, a directory in the sandbox to sync into, and
// checks that it is absolute and below /: the first copy mirrors (what the
// host lacks goes from it), so never "/" in any spelling.
func SandboxDir(dir string) (string, error) {
	c := path.Clean(dir)
	if !strings.HasPrefix(c, "/") || c == "/" {
		return "", fmt.Errorf("sandbox_dir must be an absolute path below /, not %q", dir)
	}
	return c, nil
}

// Booter boots a sandbox (sandbox.Manager).
type Booter interface {
	Boot(ctx context.Context, name string) (sandbox.BootInfo, error)
}

// StartBooted boots sandbox (a sync never starts one later: a sandbox
// that stops takes its jobs with it), then starts a job as Start does.
func (m *Manager) StartBooted(ctx context.Context, b Booter, sandbox, localDir, sandboxDir string, ignore []string) (Status, error) {
	if _, err := b.Boot(ctx, sandbox); err != nil {
		return Status{}, err
	}
	return m.Start(ctx, sandbox, localDir, sandboxDir, ignore)
}

// Start records a new job, mirrors the host directory into the sandbox
// (the call waits for this first copy) and keeps it in step from then on.
func (m *Manager) Start(ctx context.Context, sandbox, localDir, sandboxDir string, ignore []string) (Status, error) {
	if c, err := SandboxDir(sandboxDir); err != nil {
		return Status{}, err
	} else if c != sandboxDir {
		return Status{}, fmt.Errorf("sandbox directory %q: want it clean, as %q", sandboxDir, c)
	}
	if ignore == nil {
		ignore = DefaultIgnore
	}
	for _, n := range ignore {
		if n == "" || n == "." || n == ".." || containsAny(n, "/\x00") {
			return Status{}, fmt.Errorf("ignore entries are names, not paths: %q", n)
		}
	}
	for _, j := range m.list() {
		if j.Sandbox == sandbox && j.SandboxDir == sandboxDir && j.State != StateStopped {
			return Status{}, fmt.Errorf("%s already syncs %s into sandbox %q:%s; stop it first (sync_stop %s)", j.ID, j.LocalDir, sandbox, sandboxDir, j.ID)
		}
	}
	rec := state.Sync{ID: newID(), Sandbox: sandbox, LocalDir: localDir, SandboxDir: sandboxDir, Ignore: ignore,
		Created: time.Now().UTC(), State: StateStarting, RunnerPID: os.Getpid()}
	held, err := m.opt.Locks.TryLock("sync-"+rec.ID, "sync "+rec.ID)
	if err != nil {
		return Status{}, fmt.Errorf("lock the new sync job: %w", err)
	}
	j, err := m.newJob(rec)
	if err != nil {
		held.Release()
		return Status{}, err
	}
	if j.ws, err = j.startWatch(); err != nil {
		j.close()
		held.Release()
		return Status{}, err
	}
	mr, err := j.mirror(ctx)
	if err != nil {
		j.close()
		held.Release()
		return Status{}, fmt.Errorf("first copy: %w", err)
	}
	j.rec.State, j.fresh = StateRunning, true
	if err := m.opt.Store.PutSync(j.rec); err != nil {
		j.close()
		held.Release()
		return Status{}, fmt.Errorf("record the sync job: %w", err)
	}
	m.launch(j, func() { held.Release() })
	st := j.status()
	st.Mirror = &mr
	return st, nil
}

// launch runs j in the background until it ends or the Manager closes.
func (m *Manager) launch(j *job, release func()) {
	done := make(chan bool)
	m.mu.Lock()
	m.running[j.rec.ID] = j
	m.stops[j.rec.ID] = done
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(done)
		defer release()
		j.run(m.life)
		m.mu.Lock()
		delete(m.running, j.rec.ID)
		delete(m.stops, j.rec.ID)
		m.mu.Unlock()
	}()
}

// Stop ends a job, wherever it runs, and forgets it. A job another
// server runs stops within a few seconds (its runner checks the record).
func (m *Manager) Stop(id string) (Status, error) {
	var st Status
	found := false
	for _, j := range m.list() {
		if j.ID == id {
			st, found = j, true
		}
	}
	if !found {
		return Status{}, fmt.Errorf("%w: %q (sync_list shows the jobs)", state.ErrNoSync, id)
	}
	if _, err := m.opt.Store.DeleteSync(id); err != nil {
		return Status{}, err
	}
	m.mu.Lock()
	j, done := m.running[id], m.stops[id]
	m.mu.Unlock()
	if j != nil {
		j.stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		st = j.status()
	}
	st.State = "stopped by sync_stop"
	return st, nil
}

// List returns every recorded job with its newest status.
func (m *Manager) List() []Status { return m.list() }

func (m *Manager) list() []Status {
	recs, err := m.opt.Store.Syncs()
	if err != nil {
		m.log.Warn("read sync jobs", "err", err)
	}
	out := make([]Status, 0, len(recs))
	for _, r := range recs {
		m.mu.Lock()
		j := m.running[r.ID]
		m.mu.Unlock()
		if j != nil {
			out = append(out, j.status())
			continue
		}
		out = append(out, Status{Sync: r})
	}
	return out
}

// Resume takes over, in the background, recorded jobs that no running
// server runs (their server ended), and keeps doing so until Close.
func (m *Manager) Resume() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-m.life.Done():
				return
			case <-t.C:
			}
			m.adoptRecords()
			t.Reset(m.opt.Resume)
		}
	}()
}

func (m *Manager) adoptRecords() {
	recs, err := m.opt.Store.Syncs()
	if err != nil {
		return
	}
	for _, r := range recs {
		id := r.ID
		m.mu.Lock()
		busy := m.running[id] != nil || m.leasing[id] || r.State == StateStopped
		if !busy {
			m.leasing[id] = true
		}
		m.mu.Unlock()
		if busy {
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.opt.Locks.Lease(m.life, "sync-"+id, "sync "+id, 2*time.Second, func(ctx context.Context) {
				m.takeOver(ctx, id)
			})
			m.mu.Lock()
			delete(m.leasing, id)
			m.mu.Unlock()
		}()
	}
}

// takeOver runs a recorded job in this process; the caller holds its lock.
func (m *Manager) takeOver(ctx context.Context, id string) {
	var rec *state.Sync
	if recs, err := m.opt.Store.Syncs(); err == nil {
		for _, r := range recs {
			if r.ID == id && r.State != StateStopped {
				rec = &r
			}
		}
	}
	if rec == nil {
		return // stopped meanwhile
	}
	rec.RunnerPID = os.Getpid()
	j, err := m.newJob(*rec)
	if err != nil {
		m.log.Warn("resume sync job", "id", id, "err", err)
		_ = m.opt.Store.UpdateSync(id, func(s *state.Sync) { s.State, s.LastError = StateStopped, err.Error() })
		return
	}
	m.log.Info("sync job resumed", "id", id, "sandbox", rec.Sandbox, "local_dir", rec.LocalDir)
	done := make(chan struct{})
	m.mu.Lock()
	m.running[id] = j
	m.stops[id] = make(chan bool)
	stopCh := m.stops[id]
	m.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
			j.stop()
		case <-done:
		}
	}()
	j.run(ctx)
	close(done)
	m.mu.Lock()
	delete(m.running, id)
	delete(m.stops, id)
	m.mu.Unlock()
	close(stopCh)
}

// Close stops this process's jobs (their records stay, for the next
// server) and waits for them.
func (m *Manager) Close() {
	m.cancel()
	m.mu.Lock()
	for _, j := range m.running {
		j.stop()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

func containsAny(s, chars string) bool {
	for _, c := range chars {
		if slices.Contains([]rune(s), c) {
			return true
		}
	}
	return false
}

var errStopped = errors.New("sync stopped")
