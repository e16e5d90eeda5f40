package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// Only our containers.
//
// A sandbox's container is found by name, and a name can be taken over
// behind the server's back: the container removed and another started
// under the same name. So every shell a sandbox opens, the first and every
// later one, is held at its gate (shell.Options.Gate: the shell process has
// started, nothing has been written to it) while the container under the
// name is inspected; it goes on only if that container carries our owner
// label for this sandbox and is the container the sandbox booted in: the
// same ID and creation time (Apple's engine names a container by its name,
// so there the creation time is what tells a recreated one apart).
// The inspect runs at the same time as the shell starts, once per shell
// open; a warm command opens no shell and pays nothing.
//
// A stranger is never used: the held shell is dropped with nothing written
// to it and the command fails with a *ForeignError that names the
// container. Recovery does not adopt it either: a boot that finds a
// stranger under the name fails the same way, a reset never renames or
// removes it (it works on the recorded ID), a destroy leaves it alone and
// removes only what is ours, and the server's own scripts fall back to an
// engine exec only into a container inspected as ours, by its ID.

// ErrForeign marks a container under a sandbox's name that is not the
// sandbox's.
var ErrForeign = errors.New("container is not the sandbox's")

// ForeignError describes a container under a sandbox's name that is not
// the sandbox's: not labelled as ours, or not the one it booted in.
type ForeignError struct {
	Sandbox   string
	Container string // its name
	ID        string
	// What is why it is not ours: "no sandbox-mcp label", …
	What string
	// Booted means the sandbox was running in this server when the
	// stranger took its name (a shell open found it), not at a boot.
	Booted bool
}

func (e *ForeignError) Error() string {
	hint := "nothing was run in it; remove it or pick another sandbox name"
	if e.Booted {
		hint = "nothing was run in it; remove it or destroy the sandbox"
	}
	return fmt.Sprintf("container %s is not sandbox %q's (id %s, %s): %s", e.Container, e.Sandbox, shortID(e.ID), e.What, hint)
}

// Is makes errors.Is(err, ErrForeign) true.
func (e *ForeignError) Is(target error) bool { return target == ErrForeign }

func shortID(id string) string {
	if id == "" {
		return "unknown"
	}
	return id[:min(len(id), 12)]
}

// foreign returns a *ForeignError if c does not carry the labels of
// sandbox name, else nil.
func (m *Manager) foreign(c Container, name string) *ForeignError {
	e := &ForeignError{Sandbox: name, Container: c.Name, ID: c.ID}
	switch owner := c.Labels[LabelOwner]; {
	case owner == "":
		e.What = "no sandbox-mcp label"
	case owner != m.cfg.Prefix:
		e.What = fmt.Sprintf("made by sandbox-mcp with prefix %q, not %q", owner, m.cfg.Prefix)
	case c.Labels[LabelRole] == RoleSpare:
		// A claimed spare is the sandbox its container's name says.
		if n, ok := m.sandboxOf(c); !ok || n != name {
			e.What = "a warm spare not claimed for it"
			break
		}
		return nil
	case c.Labels[LabelName] != name:
		e.What = fmt.Sprintf("labelled for sandbox %q", c.Labels[LabelName])
	default:
		return nil
	}
	return e
}

// owner checks, at every shell open of one sandbox, that the container
// under its name is still the one it booted in.
type owner struct {
	m    *Manager
	name string
	ctr  string
	// id is the container the sandbox runs in, recorded from the inspect
	// of the boot (or, for a container the boot created, of its first
	// shell open).
	id atomic.Pointer[instance]
	// addr is the container's address when learned after the boot (a
	// container the boot started and did not inspect).
	addr atomic.Pointer[string]

	mu sync.Mutex
	// first, while set, is the verdict of an inspect the boot runs while
	// the first shell starts: the first gate takes it instead of
	// inspecting again.
	first chan error
}

func (m *Manager) newOwner(name string) *owner {
	return &owner{m: m, name: name, ctr: m.ContainerFor(name)}
}

// instance identifies one container: its ID, and when it was created.
type instance struct {
	id      string
	created time.Time
	ip      string // its address as inspected then
}

func instanceOf(c Container) instance { return instance{id: c.ID, created: c.Created, ip: c.IP} }

// same reports whether c is the container i identifies.
func (i instance) same(c Container) bool {
	return c.ID == i.id && (i.created.IsZero() || c.Created.IsZero() || c.Created.Equal(i.created))
}

// ID is the recorded container ID, "" while unknown.
func (o *owner) ID() string {
	if p := o.id.Load(); p != nil {
		return p.id
	}
	return ""
}

// IP is the recorded container's address, "" while unknown.
func (o *owner) IP() string {
	if p := o.id.Load(); p != nil && p.ip != "" {
		return p.ip
	}
	if a := o.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// addressOf is o's container's address: the one recorded, or for a
// container its boot started without inspecting it, one inspect (by its
// ID) learns it.
func (m *Manager) addressOf(ctx context.Context, o *owner) string {
	if ip := o.IP(); ip != "" {
		return ip
	}
	id := o.ID()
	if id == "" {
		return ""
	}
	if c, err := m.rt.Inspect(ctx, id); err == nil && c.ID == id && c.IP != "" {
		o.addr.Store(&c.IP)
		return c.IP
	}
	return ""
}

// record sets the container the sandbox runs in, once.
func (o *owner) record(c Container) {
	i := instanceOf(c)
	o.id.CompareAndSwap(nil, &i)
}

// expect makes the next gate wait for the verdict sent on ch instead of
// inspecting; disarm drops that if no gate took it.
func (o *owner) expect(ch chan error) {
	o.mu.Lock()
	o.first = ch
	o.mu.Unlock()
}

func (o *owner) disarm() { o.expect(nil) }

// gate is the shell.Options.Gate of the sandbox's shells.
func (o *owner) gate(ctx context.Context) error {
	o.mu.Lock()
	ch := o.first
	o.first = nil
	o.mu.Unlock()
	if ch != nil {
		select {
		case err := <-ch:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c, err := o.m.rt.Inspect(ctx, o.ctr)
	if err != nil {
		return fmt.Errorf("check sandbox %q's container before using it: %w", o.name, err)
	}
	return o.verify(c)
}

// verify accepts c if it is ours and the container the sandbox booted in
// (recording its ID if none is recorded yet).
func (o *owner) verify(c Container) error {
	if e := o.m.foreign(c, o.name); e != nil {
		e.Booted = true
		return e
	}
	o.record(c)
	if want := o.id.Load(); !want.same(c) {
		what := "labelled for it, but not the container it booted in (" + shortID(want.id) + ")"
		if c.ID == want.id {
			what = "labelled for it, but created " + c.Created.UTC().Format(time.RFC3339) +
				", not " + want.created.UTC().Format(time.RFC3339) + " as the container it booted in"
		}
		return &ForeignError{Sandbox: o.name, Container: c.Name, ID: c.ID, Booted: true, What: what}
	}
	return nil
}

// target is what to address the sandbox's container by in an engine
// command: its recorded ID, so the command cannot reach a container that
// took its name, else its name.
func (o *owner) target() string {
	if id := o.ID(); id != "" {
		return id
	}
	return o.ctr
}

// newPool returns the pool of shells of a sandbox: each shell carries this
// server's mark (see ServerVar) and is opened only into the container own
// accepts.
func (m *Manager) newPool(own *owner) *shell.Pool {
	return m.poolOn(own.ctr, own.gate)
}

// poolOn is newPool with its shells opened in target, a container name or
// ID (a spare's pool opens them by ID, which a claim's rename keeps),
// through gate.
func (m *Manager) poolOn(target string, gate func(context.Context) error) *shell.Pool {
	return shell.NewPool(m.shellHost(target), shell.Options{Init: m.shellInit(), EachCommand: guest.SyncCall, Store: true, Gate: gate}, m.cfg.PoolSize)
}

// shellHost opens shells in target (a container name or ID), marked as
// this server's.
func (m *Manager) shellHost(target string) markedHost {
	return markedHost{containerHost: containerHost{rt: m.rt, name: target}, env: map[string]string{guest.ShellVar: m.serverID}}
}

// newChorePool returns the shells of a sandbox for the server's own
// scripts (Sandbox.housekeep): marked and gated as its pool's are, with
// no state of the user's carried between them.
func (m *Manager) newChorePool(own *owner) *shell.Pool {
	return shell.NewPool(m.shellHost(own.ctr), shell.Options{Init: m.shellInit(), Gate: own.gate}, choreShells)
}

// markedHost starts a sandbox's shells with env in their environment, so
// a later server can tell this server's shells in the sandbox (see
// sweep.go); the shell's init removes it again, so commands do not see
// it.
type markedHost struct {
	containerHost
	env map[string]string
}

func (h markedHost) Command(ctx context.Context) proc.Process {
	// The shell reads and writes the server's own pipes, where the
	// engine can hand them over.
	return handedExec(ctx, h.rt, h.name, ExecSpec{Argv: []string{"sh"}, Interactive: true, Env: h.env})
}
