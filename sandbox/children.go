package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/ctl"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
)

// Child sandboxes are ordinary sandboxes booted with a profile and labels
// of their own (the package that keeps their family decides both), and
// the control socket rides each sandbox's agent channel.

// Labels of a child's container.
const (
	LabelChildOf = "io.sandbox-mcp.child-of" // the sandbox that spawned it
	// LabelEnd is the end of a child's life, in Unix seconds. The
	// container's main process stops it then, with or without a server;
	// a server destroys it.
	LabelEnd = "io.sandbox-mcp.end"
)

// childEnd is the end of life a container's labels give, or zero.
func childEnd(labels map[string]string) time.Time {
	n, err := strconv.ParseInt(labels[LabelEnd], 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}

// CreateChild boots a new sandbox name with profile prof and extra
// labels, failing with an *ArgError if name exists.
func (m *Manager) CreateChild(ctx context.Context, name, parent string, prof Profile, labels map[string]string) (BootInfo, error) {
	if err := ValidateName(name); err != nil {
		return BootInfo{}, err
	}
	if err := prof.Validate(); err != nil {
		return BootInfo{}, err
	}
	release, err := m.lockName(ctx, name, "spawn")
	if err != nil {
		return BootInfo{}, err
	}
	defer release()
	if _, ok := m.Lookup(name); ok {
		return BootInfo{}, &ArgError{Err: fmt.Errorf("sandbox %q exists", name)}
	}
	l := map[string]string{LabelRole: "child", LabelChildOf: parent}
	for k, v := range labels {
		l[k] = v
	}
	m.setOverride(name, &bootOverride{prof: prof, labels: l})
	defer m.setOverride(name, nil)
	// The engine refuses a taken name (bootNew): no inspect first.
	sb, info, err := m.bootLocked(ctx, name, bootNew)
	if err == nil {
		info.IP, info.Container = m.addressOf(ctx, sb.own), sb.Container
	}
	return info, err
}

// Control is how the Manager serves the control socket and boots
// children: Wants says which sandboxes have the socket, Serve answers one
// connection from sandbox name, and Child gives a child's profile and
// labels, which every boot of it (a reset, a restart) uses.
type Control struct {
	Wants func(name string) bool
	Serve func(ctx context.Context, name string, conn net.Conn)
	// Child is name's profile and labels when it is a child; an error
	// when that cannot be told (a child must not boot as a root).
	Child func(name string) (Profile, map[string]string, bool, error)
}

// childProfile is name's profile and labels when it is a child.
func (m *Manager) childProfile(name string) (Profile, map[string]string, bool, error) {
	m.mu.Lock()
	c := m.control
	m.mu.Unlock()
	if c == nil || c.Child == nil {
		return Profile{}, nil, false, nil
	}
	p, l, ok, err := c.Child(name)
	if err != nil {
		return Profile{}, nil, false, fmt.Errorf("sandbox %q: cannot tell whether it is a child: %w", name, err)
	}
	return p, l, ok, nil
}

// SetControl gives sandboxes the control socket from now on (those whose
// agent runs get it when it next starts).
func (m *Manager) SetControl(c Control) {
	m.mu.Lock()
	m.control = &c
	m.mu.Unlock()
}

func (m *Manager) controlFor(name string) *Control {
	m.mu.Lock()
	c := m.control
	m.mu.Unlock()
	if c == nil || c.Wants == nil || !c.Wants(name) {
		return nil
	}
	return c
}

// startControl has sb's agent serve the control socket, if sb has one,
// and the egress proxy, if sb is an allowlist sandbox; streams the agent
// opens for anything else are closed as they come (a sandbox must not
// park them on the host).
func (m *Manager) startControl(sb *Sandbox, c interface {
	ListenCtl(string) error
	ListenEgress(int, string) error
	ServeStreams(map[string]func(net.Conn))
	Done() <-chan struct{}
}) {
	handlers := map[string]func(net.Conn){}
	if cc := m.controlFor(sb.Name); cc != nil {
		if err := c.ListenCtl(ctl.DefaultSocket); err != nil {
			m.log.Warn("control socket", "sandbox", sb.Name, "err", err)
		} else {
			handlers[agent.OpCtl] = func(conn net.Conn) {
				defer conn.Close()
				cc.Serve(sb.life, sb.Name, conn)
			}
		}
	}
	if sb.egress.mode == egress.ModeAllowlist {
		// The agent waits for a port another server's agent holds: its
		// handler is set either way.
		serve := m.serveEgress(sb) // egress.go
		if err := c.ListenEgress(ProxyPort, m.channelOf(sb, serve)); err != nil {
			m.log.Info("egress proxy", "sandbox", sb.Name, "err", err)
		}
		handlers[agent.OpEgress] = serve
		sb.Go(func(ctx context.Context) { m.restartAgentWhenGone(ctx, sb, c.Done()) })
	}
	c.ServeStreams(handlers)
}

// restartAgentWhenGone starts sb's agent again once done closes (it was
// killed in the sandbox, or its exec was lost): until then the sandbox's
// proxy does not answer, and nothing gets out. Tries back off to 30 s.
func (m *Manager) restartAgentWhenGone(ctx context.Context, sb *Sandbox, done <-chan struct{}) {
	select {
	case <-done:
	case <-ctx.Done():
		return
	}
	m.log.Warn("the sandbox's agent ended: its egress is shut until it runs again", "sandbox", sb.Name)
	wait := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if _, err := m.agentOf(ctx, sb); err == nil {
			return // the new agent's startControl watches it
		} else if ctx.Err() != nil {
			return
		} else if c, ierr := m.rt.Inspect(ctx, sb.Container); errors.Is(ierr, ErrNotFound) || ierr == nil && !c.Running() {
			// The container stopped or went: the boot that brings it back
			// starts an agent; trying meanwhile only costs the engine.
			m.log.Info("the sandbox's container does not run: its agent is started at its next boot", "sandbox", sb.Name)
			return
		} else {
			m.log.Warn("restart the agent", "sandbox", sb.Name, "err", err)
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// controlSoon starts sb's agent when sb has the control socket or an
// egress proxy, and installs the egress CA, as work of the sandbox: the
// boot returns (and its lifecycle lock goes: other servers adopting it and
// job tools reading logs wait for nothing) while it runs. Commands wait
// for it (awaitControl), so that sandbox-ctl is there and the socket and
// the proxy served when the first one runs; booted says how the boot
// found the sandbox, and two cases wait for less:
//   - a running sandbox adopted without an egress proxy: the agent of the
//     server that booted it linked sandbox-ctl there (unless that server
//     died before its agent started), and a sandbox-ctl that finds the
//     socket not served yet waits for it (ctl's socketWait), so the first
//     command after a server's restart does not wait for an agent it does
//     not use;
//   - a container this server did not create, whose LabelCA is this
//     server's CA: the CA is in its trust stores since its first boot, and
//     the install, which checks that, runs a few seconds later, not
//     waited for. The label is set at the create, so a creator killed
//     before its install ran leaves it on a container without the CA: the
//     next server's commands then fail TLS to intercepted hosts until its
//     install, caRecheckAfter later;
//   - a claimed spare this server installed the CA in while it waited
//     (installSpareCA): the same;
//   - a container this boot created, whose start installed the CA before
//     it started the agent that called this server (callingAgent,
//     agentStartScript), once that agent is taken, if its call says the
//     install is done: nothing runs later (a call that says it failed
//     has the install run through a shell at once, and waited for).
//
// A failure is logged: the sandbox works without it (an allowlist sandbox
// without a way out).
func (m *Manager) controlSoon(sb *Sandbox, booted BootInfo) {
	if m.controlFor(sb.Name) == nil && sb.egress.mode != egress.ModeAllowlist {
		close(sb.controlled)
		return
	}
	gate := true
	if booted.Adopted && sb.egress.mode != egress.ModeAllowlist {
		close(sb.controlled)
		gate = false
	}
	caThere := (!booted.Created || booted.Spare) && sb.caLabel != "" && sb.caLabel == m.caPrint()
	// A container this boot created had the CA installed at its start,
	// before the agent was (callingAgent): the agent's call, once taken,
	// says whether the install put it in place.
	caAtStart := sb.caAtStart && !caThere
	waited := gate // read by the work alone once it runs
	if !sb.Go(func(ctx context.Context) {
		var ca sync.WaitGroup
		recheck := func() {
			// Put back if it went, once the first commands are served:
			// meanwhile its chore shell would only slow their start.
			ca.Go(func() {
				select {
				case <-time.After(caRecheckAfter):
					m.installCA(ctx, sb) // egress.go
				case <-ctx.Done():
				}
			})
		}
		switch {
		case caThere:
			recheck()
		case !caAtStart:
			// The CA goes in through a chore shell while the agent starts
			// through an exec of its own: neither waits for the other.
			ca.Go(func() { m.installCA(ctx, sb) })
		}
		if _, err := m.agentOf(ctx, sb); err != nil {
			m.log.Warn("start the agent for the control socket and the egress proxy", "sandbox", sb.Name, "err", err)
		}
		if caAtStart {
			if m.agentInstalledCA(sb) {
				caThere = true // and nothing to check: the call said the install held
			} else {
				// The agent came otherwise, or not at all, or its call
				// said the install failed.
				ca.Go(func() { m.installCA(ctx, sb) })
			}
		}
		if waited && caThere {
			close(sb.controlled)
			waited = false
		}
		ca.Wait()
		if waited {
			close(sb.controlled)
		}
	}) && gate {
		close(sb.controlled)
	}
}

// caRecheckAfter is how long after a boot that found the CA in place
// (LabelCA) the install runs all the same.
const caRecheckAfter = 3 * time.Second

// controlWait bounds how long a command waits for its sandbox's agent to
// start: past it, the command runs, and its connections out fail until
// the agent is there (the agent's own start has the boot's timeouts).
const controlWait = 30 * time.Second

// awaitControl waits until sb's agent start, begun at its boot, is done,
// ctx ends, or controlWait passed.
func awaitControl(ctx context.Context, sb *Sandbox) {
	select {
	case <-sb.controlled:
		return
	default:
	}
	t := time.NewTimer(controlWait)
	defer t.Stop()
	select {
	case <-sb.controlled:
	case <-ctx.Done():
	case <-t.C:
	}
}
