package shell

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// DefaultPoolSize is how many shells a sandbox may run commands in at once.
const DefaultPoolSize = 8

// maxRetired bounds the shells kept open only so that background processes
// left behind by a command can still write to them (see Result.LeftBehind).
// Past it the oldest is closed, and what its processes write then fails.
const maxRetired = 4

// ErrPoolClosed is returned by Run after Close.
var ErrPoolClosed = errors.New("shell pool closed")

// Pool runs commands for one machine on a few persistent shells. Commands
// go to an idle shell (the most recently used first), and a new shell is
// opened only when all are busy, so a long command never blocks a short
// one. The pool keeps one shared State: after a command changes its shell's
// working directory or exports, the next command on any other shell starts
// by restoring that state, and so does a shell opened to replace a lost one.
type Pool struct {
	host Host
	opts Options
	sem  chan struct{}

	mu      sync.Mutex
	idle    []*Shell
	live    map[*Shell]struct{}
	retired []*Shell
	state   State
	version uint64 // 0: no state known yet
	// lastStart is the state the latest command started in, as its shell
	// reported it: with what other servers stored loaded, which p.state
	// does not take in when the command itself changed nothing.
	lastStart State
	ranOne    bool
	closed    bool
	closing   sync.WaitGroup // shells being closed or opened in the background
	// spare is set while a spare shell is being opened (see keepSpare);
	// life ends with Close and bounds that.
	spare bool
	// unclean is set once a shell was dropped after a command was sent
	// to it (a stream cut, a shell that died or would not end): its
	// process on the machine, and the command, may run on (see Quiet).
	// The command may not have begun; a sweep then finds nothing.
	unclean bool
	life    context.Context
	end     context.CancelFunc
}

// NewPool returns a pool of at most size shells (DefaultPoolSize if size <= 0).
func NewPool(host Host, opts Options, size int) *Pool {
	if size <= 0 {
		size = DefaultPoolSize
	}
	life, end := context.WithCancel(context.Background())
	return &Pool{host: host, opts: opts, sem: make(chan struct{}, size), live: map[*Shell]struct{}{}, life: life, end: end}
}

// keepSpare opens a shell in the background when every open shell is busy
// and the pool has room, so a timeout or cancel can end a command through
// an idle shell (see killInIdle) instead of waiting for a process to start
// in the sandbox, which under load takes seconds while the command runs on.
// The spare also serves the next command.
func (p *Pool) keepSpare() {
	p.mu.Lock()
	if p.closed || p.spare || len(p.idle) > 0 || len(p.live) >= cap(p.sem) {
		p.mu.Unlock()
		return
	}
	p.spare = true
	p.closing.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.closing.Done()
		sh, err := Open(p.life, poolHost{p}, p.opts)
		p.mu.Lock()
		p.spare = false
		if err != nil {
			p.mu.Unlock()
			return
		}
		if p.closed || len(p.live) >= cap(p.sem) {
			p.mu.Unlock()
			sh.Close()
			return
		}
		p.live[sh] = struct{}{}
		p.idle = append([]*Shell{sh}, p.idle...) // taken last: the warm ones go first
		p.mu.Unlock()
	}()
}

// Warm opens a shell if none is idle, so the first command does not pay for it.
func (p *Pool) Warm(ctx context.Context) error {
	sh, _, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	p.release(sh, false)
	return nil
}

// Quiet reports whether none of the pool's shells runs a command (or is
// being taken to run one), none was retired with processes a command
// left behind, and none was dropped after a command was sent to it:
// closing the pool's shells then ends everything they started, since an
// idle shell exits when its input closes.
func (p *Pool) Quiet() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sem) == 0 && len(p.retired) == 0 && !p.unclean
}

// Shells reports how many shells the pool has open, idle or busy.
func (p *Pool) Shells() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.live)
}

// Run runs one command on an idle or new shell. req.Timeout counts from
// the call, unless req.QueueWait bounds the wait for a free shell on its
// own; the wait is reported in Result.Queued.
func (p *Pool) Run(ctx context.Context, req Request) (Result, error) {
	start := time.Now()
	actx := ctx
	wait := req.Timeout
	if req.QueueWait > 0 {
		wait = req.QueueWait
	}
	if wait > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithDeadline(ctx, start.Add(wait))
		defer cancel()
	}
	sh, queued, err := p.acquire(actx)
	if err != nil {
		if ctx.Err() == nil && actx.Err() != nil {
			// The wait passed while every shell was busy.
			return Result{ExitCode: 124, TimedOut: true, NotStarted: true, Queued: queued, Duration: queued}, nil
		}
		return Result{Queued: queued}, err
	}
	if req.Timeout > 0 && req.QueueWait == 0 {
		req.Timeout = max(req.Timeout-queued, time.Millisecond)
	}
	res, err := p.runOn(ctx, sh, req, queued)
	if err == nil && res.ShellLost && res.NotStarted && !res.TimedOut && ctx.Err() == nil {
		// The shell died before the command began (an idle shell that
		// exited just as it was taken): nothing ran, so the command gets
		// one more shell, a new one if none is idle. (Not after its
		// timeout, which the kill of a shell that had not started it
		// also leaves so: the command's time is up; nor when the shell
		// could not be ended, and may yet run it.)
		if sh, again, aerr := p.acquire(actx); aerr == nil {
			if req.Timeout > 0 && req.QueueWait == 0 {
				req.Timeout = max(req.Timeout-again, time.Millisecond)
			}
			return p.runOn(ctx, sh, req, queued+again)
		}
	}
	return res, err
}

// TryRun runs one command on a shell of the pool that is open and idle
// now: it neither waits for one nor opens one. ok is false, and nothing
// ran, when none is idle.
func (p *Pool) TryRun(ctx context.Context, req Request) (res Result, ok bool, err error) {
	select {
	case p.sem <- struct{}{}:
	default:
		return Result{}, false, nil
	}
	p.mu.Lock()
	var sh *Shell
	if !p.closed {
		sh = p.popIdle()
	}
	p.mu.Unlock()
	if sh == nil {
		<-p.sem
		return Result{}, false, nil
	}
	res, err = p.runOn(ctx, sh, req, 0)
	return res, true, err
}

// runOn runs req on sh, a shell the caller took with its slot, and gives
// both back.
func (p *Pool) runOn(ctx context.Context, sh *Shell, req Request, queued time.Duration) (Result, error) {
	p.keepSpare()
	p.mu.Lock()
	var target *State
	if !p.opts.Store && p.version != 0 && sh.version != p.version {
		// Without the sandbox's store, the pool carries the shared state
		// from shell to shell itself.
		st := p.state
		target = &st
	}
	p.mu.Unlock()

	res, err := sh.run(ctx, req, target, p.opts.EachCommand)
	res.Queued = queued
	changed := false
	before := sh.started
	if err == nil && !res.ShellLost {
		p.mu.Lock()
		after := sh.state
		p.lastStart, p.ranOne = before, true
		switch {
		case p.version == 0:
			// The pool's first command: its changes are recorded like
			// any other's (a shell whose start state is unknown has none
			// to tell).
			p.version++
			p.state = after
			changed = after != before && before.Cwd != ""
		case after != before:
			// This command changed the state: merge its changes into
			// the shared state, which others may have changed meanwhile.
			p.version++
			p.state = guest.MergeState(p.state, before, after)
			changed = true
		}
		sh.version = 0 // restored before its next command …
		if sh.state == p.state {
			sh.version = p.version // … unless it holds the shared state
		}
		p.mu.Unlock()
	}
	if changed && p.opts.Store && !sh.Dead() {
		p.store(ctx, sh, before, sh.state)
	}
	switch {
	case err != nil || res.ShellLost || sh.Dead():
		p.mu.Lock()
		p.unclean = true
		p.mu.Unlock()
		p.release(sh, true)
	case res.LeftBehind || res.Stray > 0:
		p.retire(sh)
	default:
		p.release(sh, false)
	}
	return res, err
}

// storeWait bounds recording a command's state changes in the sandbox.
const storeWait = 10 * time.Second

// store records in the sandbox's shell store what a command changed, on
// the shell that ran it. The command has ended, so a cancel of the call no
// longer stops this.
func (p *Pool) store(ctx context.Context, sh *Shell, before, after State) {
	script, ok := guest.StateWriteScript(before, after, newMarker()[3:])
	if !ok {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWait)
	defer cancel()
	_, _ = sh.run(sctx, Request{Command: script, Trusted: true}, nil, "")
}

// State returns the pool's shared state and whether any is known.
func (p *Pool) State() (State, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state, p.version != 0
}

// LastStart returns the state the latest finished command started in,
// and whether one finished.
func (p *Pool) LastStart() (State, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastStart, p.ranOne
}

// acquire takes a slot and returns an idle shell or opens one.
func (p *Pool) acquire(ctx context.Context) (*Shell, time.Duration, error) {
	start := time.Now()
	select {
	case p.sem <- struct{}{}:
	default:
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return nil, time.Since(start), ctx.Err()
		}
	}
	waited := time.Since(start)
	sh, err := p.acquireSlot(ctx)
	return sh, waited, err
}

// acquireSlot returns an idle shell or opens one; the caller holds a slot.
func (p *Pool) acquireSlot(ctx context.Context) (*Shell, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.sem
		return nil, ErrPoolClosed
	}
	if sh := p.popIdle(); sh != nil {
		p.mu.Unlock()
		return sh, nil
	}
	p.mu.Unlock()
	sh, err := Open(ctx, poolHost{p}, p.opts)
	if err != nil {
		<-p.sem
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		sh.Close()
		<-p.sem
		return nil, ErrPoolClosed
	}
	p.live[sh] = struct{}{}
	p.mu.Unlock()
	return sh, nil
}

// popIdle takes the most recently used idle shell that is still alive,
// closing the dead ones it passes; nil when none is. p.mu is held.
func (p *Pool) popIdle() *Shell {
	for n := len(p.idle); n > 0; n = len(p.idle) {
		sh := p.idle[n-1]
		p.idle = p.idle[:n-1]
		if !sh.Dead() {
			return sh
		}
		delete(p.live, sh)
		p.closeLater(sh)
	}
	return nil
}

// release returns a shell to the idle list, or closes it when drop is set.
func (p *Pool) release(sh *Shell, drop bool) {
	p.mu.Lock()
	if p.closed {
		// Close took the shell from the live set and closes it.
		p.mu.Unlock()
	} else if drop {
		delete(p.live, sh)
		p.closeLater(sh)
		p.mu.Unlock()
	} else {
		p.idle = append(p.idle, sh)
		p.mu.Unlock()
	}
	<-p.sem
}

// retire takes a shell out of use because processes a command left behind
// may still write to it: it stays open, its output discarded, until it is
// one of more than maxRetired or the pool closes.
func (p *Pool) retire(sh *Shell) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.sem
		return
	}
	delete(p.live, sh)
	p.retired = append(p.retired, sh)
	for _, r := range []*frameReader{sh.out, sh.errs} {
		p.closing.Add(1)
		go func() {
			defer p.closing.Done()
			r.drain()
		}()
	}
	if len(p.retired) > maxRetired {
		p.closeLater(p.retired[0])
		p.retired = append(p.retired[:0], p.retired[1:]...)
	}
	p.mu.Unlock()
	<-p.sem
}

// Close ends every shell; running commands see their shells die.
func (p *Pool) Close() {
	p.end()
	p.mu.Lock()
	p.closed = true
	shells := make([]*Shell, 0, len(p.live)+len(p.retired))
	for sh := range p.live {
		shells = append(shells, sh)
	}
	shells = append(shells, p.retired...)
	p.live = map[*Shell]struct{}{}
	p.idle = nil
	p.retired = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, sh := range shells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sh.Close()
		}()
	}
	wg.Wait()
	p.closing.Wait()
}

// closeLater closes a dropped shell off the caller's path; Close waits for
// it. The caller holds p.mu and has seen the pool open, so every Add comes
// before Close's Wait.
func (p *Pool) closeLater(sh *Shell) {
	p.closing.Add(1)
	go func() {
		defer p.closing.Done()
		sh.Close()
	}()
}

// poolHost is the Host a pool's shells get: it ends a command through
// another idle shell of the pool when there is one (no process to start:
// fast, and possible when the machine has no free process slot), and
// through the pool's Host otherwise.
type poolHost struct{ p *Pool }

func (h poolHost) Command(ctx context.Context) proc.Process { return h.p.host.Command(ctx) }

func (h poolHost) KillRun(ctx context.Context, pid int, runID string, self bool) error {
	if h.p.killInIdle(ctx, pid, runID, self) {
		return nil
	}
	return h.p.host.KillRun(ctx, pid, runID, self)
}

// killInIdle runs guest.KillRunInShell on an idle shell, outside the
// pool's slots (a kill must not queue), and reports whether it ran.
func (p *Pool) killInIdle(ctx context.Context, pid int, runID string, self bool) bool {
	p.mu.Lock()
	var sh *Shell
	for n := len(p.idle); n > 0 && sh == nil && !p.closed; n = len(p.idle) {
		cand := p.idle[n-1]
		p.idle = p.idle[:n-1]
		if cand.Dead() {
			delete(p.live, cand)
			p.closeLater(cand)
			continue
		}
		sh = cand // idle, so not the shell running the command
	}
	p.mu.Unlock()
	if sh == nil {
		return false
	}
	res, err := sh.run(ctx, Request{Command: guest.KillRunInShell(pid, runID, self), Trusted: true}, nil, "")
	ok := err == nil && !res.ShellLost && res.ExitCode == 0 && !res.TimedOut && !res.Canceled
	p.mu.Lock()
	switch {
	case p.closed:
		// Close took it from the live set and closes it.
	case sh.Dead() || err != nil || res.ShellLost:
		delete(p.live, sh)
		p.closeLater(sh)
	default:
		p.idle = append(p.idle, sh)
	}
	p.mu.Unlock()
	return ok
}
