package sandbox

import (
	"context"
	"slices"

	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// Observer hears of what changes a sandbox's files, so that what keeps
// track of them (the work package's branches) can follow. Each func may be
// nil, and each runs outside the sandbox's locks.
type Observer struct {
	// Ran tells that a command ended in sandbox name, recorded in its
	// history as label. It runs on the command's path: it must return at
	// once.
	Ran func(name, label string)
	// Saving tells that sandbox name is about to be saved as a snapshot;
	// the snapshot waits for it.
	Saving func(ctx context.Context, name string)
	// Restored tells that sandbox name's workspace was replaced by a
	// snapshot's; the restore returns once it has.
	Restored func(ctx context.Context, name string)
}

// Observe registers o.
func (m *Manager) Observe(o Observer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	next := slices.Clone(m.observersLocked())
	next = append(next, o)
	m.observers.Store(&next)
}

func (m *Manager) observersLocked() []Observer {
	if p := m.observers.Load(); p != nil {
		return *p
	}
	return nil
}

// eachObserver calls fn with every observer registered.
func (m *Manager) eachObserver(fn func(Observer)) {
	p := m.observers.Load()
	if p == nil {
		return
	}
	for _, o := range *p {
		fn(o)
	}
}

// ran tells the observers that a command labelled label ended in name.
func (m *Manager) ran(name, label string) {
	if label == "" {
		return
	}
	m.eachObserver(func(o Observer) {
		if o.Ran != nil {
			o.Ran(name, label)
		}
	})
}

// ExecHeld runs req in sandbox name only where this server holds it
// booted: it boots, starts and recovers nothing, and held is false when
// there was nothing to run on. It is for work done on the side of a
// sandbox in use, which must not bring back one that was stopped.
func (m *Manager) ExecHeld(ctx context.Context, name, label string, req shell.Request) (res ExecResult, held bool, err error) {
	sb, ok := m.Lookup(name)
	if !ok || sb.Ended() != "" {
		return res, false, nil
	}
	res.Result, err = m.runOn(ctx, sb, req)
	if cut := m.cutShort(sb, res.Result, err); cut != nil {
		err = cut
	}
	if label != "" {
		m.history.Add(name, label, res.Result, err)
	}
	return res, true, err
}
