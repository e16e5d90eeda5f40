package work

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// DefaultQuiet is how long a tied sandbox's commands must have ended
// before its work is recorded on its own.
const DefaultQuiet = time.Second

// follower is what Follow keeps: a timer per sandbox that commands
// push back, and the context its records run under.
type follower struct {
	mu     sync.Mutex
	on     bool
	timers map[string]*time.Timer
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	log    *slog.Logger
}

// errNotHeld is a record skipped: the sandbox is not booted here.
var errNotHeld = errors.New("the sandbox is not running in this server")

// heldKey marks a context whose commands run only on a sandbox this
// server holds booted (sandbox.Manager.ExecHeld).
type heldKey struct{}

// Follow makes the work of tied sandboxes land on their branches as it
// happens: once a sandbox's commands (exec, python, file writes) have
// been quiet for s.Quiet, its clone is recorded and taken, with those
// commands in the commit's message. A snapshot with the workspace
// records first, so the branch holds what it saved; a restore takes the
// branch back to what the restored clone had recorded before it returns. Nothing is booted
// for it: a sandbox stopped meanwhile is recorded at its next command.
// Close stops it.
func (s *Service) Follow(log *slog.Logger) {
	f := &s.follow
	f.mu.Lock()
	if f.on {
		f.mu.Unlock()
		return
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f.on, f.timers, f.log = true, map[string]*time.Timer{}, log
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.mu.Unlock()
	s.m.Observe(sandbox.Observer{
		Ran: func(name, label string) {
			if !strings.HasPrefix(label, labelPrefix) && !strings.HasPrefix(label, "read_file ") {
				s.soon(name)
			}
		},
		Saving:   s.saving,
		Restored: s.restored,
	})
}

// Close stops Follow's records and waits for the one under way.
func (s *Service) Close() {
	f := &s.follow
	f.mu.Lock()
	if !f.on {
		f.mu.Unlock()
		return
	}
	f.on = false
	for _, t := range f.timers {
		t.Stop()
	}
	f.cancel()
	f.mu.Unlock()
	f.wg.Wait()
}

// soon records sandbox name's work once it has been quiet for s.Quiet.
func (s *Service) soon(name string) {
	f := &s.follow
	quiet := s.Quiet
	if quiet <= 0 {
		quiet = DefaultQuiet
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on {
		return
	}
	if t := f.timers[name]; t != nil {
		t.Reset(quiet)
		return
	}
	f.timers[name] = time.AfterFunc(quiet, func() { s.followed(name) })
}

// followed records sandbox name's work, when it is tied and held here.
func (s *Service) followed(name string) {
	f := &s.follow
	f.mu.Lock()
	if !f.on {
		f.mu.Unlock()
		return
	}
	f.wg.Add(1)
	ctx := f.ctx
	f.mu.Unlock()
	defer f.wg.Done()
	if _, ok, err := s.store.Work(name); err != nil || !ok {
		if err == nil {
			s.unfollow(name) // a sandbox tied to nothing keeps no timer
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, heldKey{}, true), takeTimeout)
	defer cancel()
	unlock, err := s.lock(ctx, name)
	if err != nil {
		return
	}
	defer unlock()
	w, r, err := s.tie(ctx, name)
	if err != nil {
		return // untied meanwhile, or its repository is gone: said at the next call
	}
	if _, err = s.checkpoint(ctx, name, &w, r, ""); err == nil || errors.Is(err, errNotHeld) || ctx.Err() != nil {
		return
	}
	f.log.Warn("record a sandbox's work on its branch", "sandbox", name, "err", err)
	w.FollowError = err.Error()
	_, _ = s.store.UpdateWork(w) // not where the sandbox was untied meanwhile
}

// unfollow drops sandbox name's timer (untied).
func (s *Service) unfollow(name string) {
	f := &s.follow
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.timers[name]; t != nil {
		t.Stop()
		delete(f.timers, name)
	}
}

// auto reports whether ctx is a record's made on its own.
func auto(ctx context.Context) bool {
	held, _ := ctx.Value(heldKey{}).(bool)
	return held
}

// saving records sandbox name's work before a snapshot saves it.
func (s *Service) saving(ctx context.Context, name string) {
	s.checkpointTied(ctx, name, "Before a snapshot of sandbox "+name, "record a sandbox's work before its snapshot")
}

// restored takes sandbox name's branch back to what its restored clone
// had recorded, before the restore returns: a server killed right after
// it must not leave the branch holding the work the restore undid.
func (s *Service) restored(ctx context.Context, name string) {
	s.checkpointTied(ctx, name, "After a restore of sandbox "+name, "take a sandbox's branch back after its restore")
}

// checkpointTied checkpoints sandbox name with message when it is tied
// to a repository, logging a failure as what.
func (s *Service) checkpointTied(ctx context.Context, name, message, what string) {
	if _, ok, err := s.store.Work(name); err != nil || !ok {
		return
	}
	if _, err := s.Checkpoint(ctx, name, message); err != nil {
		s.follow.log.Warn(what, "sandbox", name, "err", err)
	}
}

// exec runs req in sandbox name: through ExecHeld when ctx says so.
func (s *Service) exec(ctx context.Context, name, label string, req shell.Request) (sandbox.ExecResult, error) {
	if auto(ctx) {
		res, ok, err := s.m.ExecHeld(ctx, name, label, req)
		if !ok {
			return res, errNotHeld
		}
		return res, err
	}
	return s.m.ExecAs(ctx, name, label, req)
}
