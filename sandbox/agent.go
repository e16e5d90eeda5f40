package sandbox

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/agent/ctlbin"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// The agent (package agent) is one `exec -i sandbox-ctl agent` per sandbox,
// started on first use and kept until the sandbox ends or the agent dies.
// Its binary (from package ctlbin: embedded in the server, an override, or
// built from the module source) is copied in through an exec the first
// time, under a path that names the protocol version, so that an agent
// left by an older server is never spoken to as a current one. A sandbox
// with a channel (channel.go) runs it from there instead, where the
// server placed it, without the copy.

// ErrPortClosed marks a Dial that the sandbox refused: nothing listens on
// the port yet.
var ErrPortClosed = agent.ErrPortClosed

// agentDir holds the agent's binary in a sandbox.
const agentDir = "/tmp/.sandbox-mcp"

func agentPath() string { return agentDir + "/sandbox-ctl-" + agent.Version }

// agentConn is a sandbox's agent, started once.
type agentConn struct {
	mu sync.Mutex
	c  *agent.Client // set through setClient
	// live is c, read without mu (runningAgent).
	live atomic.Pointer[agent.Client]
	// unusable says why the agent cannot run in this sandbox; until
	// retryAt, connections go through an exec each (execdial.go).
	unusable error
	retryAt  time.Time
	// arch is the sandbox's machine as a Go architecture, once asked;
	// source says where the binary this server installed came from.
	arch, source string
	// copyIn: the binary in the sandbox's channel did not run, so it is
	// copied in through an exec.
	copyIn bool
	// early is the agent a new sandbox's boot started from its channel
	// (earlyAgent), still starting perhaps: the first agentOf takes it.
	// stopEarly ends its exec (at the sandbox's end).
	early     <-chan *agentConn
	stopEarly context.CancelFunc
	// caAtStart: the agent the sandbox's main process started, after it
	// installed this server's egress CA (agentCommand), called and was
	// taken, and its call said the install put the CA in place. Of the
	// taken connection (calledAgent) it says the same for its own call.
	caAtStart bool
}

// setClient makes c the sandbox's agent (nil: none); mu is held.
func (a *agentConn) setClient(c *agent.Client) {
	a.c = c
	a.live.Store(c)
}

// agentRetry is how long a sandbox whose agent could not run is served
// through execs before the agent is tried again.
const agentRetry = time.Minute

// agentUnusable marks a failure of the agent itself (no build for the
// machine, a binary that does not run or answer) rather than of the
// sandbox: connections then fall back to an exec each.
type agentUnusable struct{ err error }

func (e *agentUnusable) Error() string { return e.err.Error() }
func (e *agentUnusable) Unwrap() error { return e.err }

// ErrNoAgent marks a sandbox whose agent cannot run: what only the agent
// does (Outputs) is not available there.
var ErrNoAgent = errors.New("the sandbox's agent cannot run")

// Outputs returns the PNG files in sandbox name's outputs directory
// (guest.OutputsDir) new or changed since its agent last looked (or, the
// first time, since began, a time on this host), through its agent, and
// how many more there were; it boots nothing.
func (m *Manager) Outputs(ctx context.Context, name string, began time.Time) ([]agent.OutputFile, int, error) {
	sb, ok := m.Lookup(name)
	if !ok {
		return nil, 0, fmt.Errorf("sandbox %q: %w", name, ErrNotFound)
	}
	c, err := m.agentOf(ctx, sb)
	var unusable *agentUnusable
	if errors.As(err, &unusable) && ctx.Err() == nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrNoAgent, err)
	}
	if err != nil {
		return nil, 0, err
	}
	// The window is taken now, after the agent's start: it reaches back
	// to began, and a second more for the sandbox's coarse file clock and
	// the request's way there.
	files, omitted, err := c.Outputs(ctx, guest.OutputsDir, guest.OutputsStamp, time.Since(began)+time.Second)
	if err != nil {
		return files, omitted, fmt.Errorf("sandbox %q: %w", name, err)
	}
	return files, omitted, nil
}

// Dial connects to 127.0.0.1:port inside sandbox name (booting it if
// needed) as one stream of its agent, or, where the agent cannot run,
// through an exec of its own (Via tells which).
func (m *Manager) Dial(ctx context.Context, name string, port int) (net.Conn, error) {
	sb, _, err := m.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	var conn net.Conn
	c, err := m.agentOf(ctx, sb)
	var unusable *agentUnusable
	switch {
	case err == nil:
		conn, err = c.Dial(ctx, port)
		select {
		case <-c.Done():
			// The agent died under this dial (killed in the sandbox, its
			// exec gone): once more, with a new one.
			if err != nil && ctx.Err() == nil {
				if c, err = m.agentOf(ctx, sb); err == nil {
					conn, err = c.Dial(ctx, port)
				}
			}
		default:
		}
	case errors.As(err, &unusable):
		conn, err = m.dialExec(ctx, sb, port)
	default:
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", name, err)
	}
	// An open connection is activity: the idle watchdog leaves the
	// sandbox alone while it lasts.
	return &busyConn{Conn: conn, done: sb.busy()}, nil
}

// AgentProblem says why connections into sandbox name go through an exec
// each rather than its agent; "" when the agent runs (or was not tried).
func (m *Manager) AgentProblem(name string) string {
	sb, ok := m.Lookup(name)
	if !ok {
		return ""
	}
	sb.agent.mu.Lock()
	defer sb.agent.mu.Unlock()
	if sb.agent.unusable == nil {
		return ""
	}
	return sb.agent.unusable.Error()
}

// AgentState is what status tells of a sandbox's agent.
type AgentState struct {
	// State is AgentRunning, AgentFallback, AgentNotStarted,
	// AgentStarting or AgentUnknown.
	State string `json:"state"`
	// Platform is the sandbox's, as linux/<arch>, once known.
	Platform string `json:"platform,omitempty"`
	// Source is where this server's sandbox-ctl for that platform comes
	// from (or how the first use builds it).
	Source string `json:"source,omitempty"`
	// Reason says why the agent cannot run (AgentFallback) or why its
	// state is not known.
	Reason string `json:"reason,omitempty"`
}

// States of AgentState.
const (
	// AgentRunning: this server talks to the sandbox's agent.
	AgentRunning = "running"
	// AgentFallback: the agent cannot run there (or, before the first
	// try, will not): port forwards go through an engine exec each and
	// children have no control socket.
	AgentFallback = "fallback"
	// AgentNotStarted: it starts with the first port forward (at boot,
	// for a sandbox with a control socket).
	AgentNotStarted = "not started"
	// AgentStarting: it is being installed or started now.
	AgentStarting = "starting"
	// AgentUnknown: the sandbox is not running, or could not be asked.
	AgentUnknown = "unknown"
)

func (a AgentState) String() string {
	var what []string
	if a.Platform != "" {
		what = append(what, a.Platform)
	}
	if a.Source != "" {
		what = append(what, a.Source)
	}
	detail := ""
	if len(what) > 0 {
		detail = " (" + strings.Join(what, ", ") + ")"
	}
	switch a.State {
	case AgentRunning:
		return "agent: running" + detail
	case AgentFallback:
		return "agent: none (" + a.Reason + "); port forwards use one engine exec per connection; children have no control socket"
	case AgentNotStarted:
		return "agent: not started yet" + detail + "; it starts with the first port forward"
	case AgentStarting:
		return "agent: starting" + detail
	}
	return "agent: unknown (" + a.Reason + ")"
}

// AgentStatus describes the agent of the sandbox in (as Status or List
// returned it): what this server knows of it, else, for a running
// sandbox, whether this server has a sandbox-ctl for its machine (one
// exec asks which). It neither boots the sandbox nor starts the agent.
func (m *Manager) AgentStatus(ctx context.Context, in Info) AgentState {
	target := in.Container
	if sb, ok := m.Lookup(in.Name); ok {
		target = sb.own.target()
		if !sb.agent.mu.TryLock() {
			return AgentState{State: AgentStarting} // installing or starting it holds the lock
		}
		st := AgentState{Platform: platform(sb.agent.arch), Source: sb.agent.source}
		running := false
		if c := sb.agent.c; c != nil {
			select {
			case <-c.Done():
			default:
				running = true
			}
		}
		unusable := sb.agent.unusable
		sb.agent.mu.Unlock()
		switch {
		case running:
			st.State = AgentRunning
			return st
		case unusable != nil:
			st.State, st.Reason, st.Source = AgentFallback, unusable.Error(), ""
			return st
		}
	}
	if in.State != StateRunning {
		return AgentState{State: AgentUnknown, Reason: "the sandbox is not running"}
	}
	ctx, cancel := context.WithTimeout(ctx, agentProbeTimeout)
	defer cancel()
	out, err := m.rt.Exec(ctx, target, ExecSpec{Argv: []string{"uname", "-m"}})
	fields := strings.Fields(string(out.Stdout))
	if err == nil && (out.ExitCode != 0 || len(fields) == 0) {
		err = fmt.Errorf("exit %d: %s", out.ExitCode, textcut.Shorten(strings.TrimSpace(string(out.Stderr)), 200))
	}
	if err != nil {
		return AgentState{State: AgentUnknown, Reason: "could not ask the sandbox its machine: " + err.Error()}
	}
	arch := agent.GoArch(fields[0])
	if arch == "" {
		return AgentState{State: AgentFallback, Reason: fmt.Sprintf("no agent for a %q machine", fields[0])}
	}
	st := AgentState{State: AgentNotStarted, Platform: platform(arch)}
	r := ctlbin.Resolve(ctx, arch, false)
	switch {
	case r.Err() != nil:
		st.State, st.Reason = AgentFallback, r.Err().Error()
	case r.Binary != nil:
		st.Source = r.Binary.String()
	default:
		st.Source = r.Later
	}
	return st
}

// agentProbeTimeout bounds AgentStatus's exec.
const agentProbeTimeout = 20 * time.Second

func platform(arch string) string {
	if arch == "" {
		return ""
	}
	return "linux/" + arch
}

// busyConn keeps its sandbox marked in use until it is closed.
type busyConn struct {
	net.Conn
	once sync.Once
	done func()
}

// Via reports the path of the connection: ViaAgent or ViaExec.
func (c *busyConn) Via() string {
	if v := Via(c.Conn); v != "" {
		return v
	}
	return ViaAgent
}

func (c *busyConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// CloseWrite passes a half-close on.
func (c *busyConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// DialExisting is Dial for a connection to a forwarded port: it starts a
// stopped sandbox but never creates one, so that a connection cannot bring
// back a sandbox that was destroyed (here or by another server).
func (m *Manager) DialExisting(ctx context.Context, name string, port int) (net.Conn, error) {
	if sb, ok := m.Lookup(name); !ok || !m.current(sb) {
		if _, err := m.inspectOwned(ctx, name); err != nil {
			return nil, fmt.Errorf("sandbox %q: %w", name, err)
		}
	}
	return m.Dial(ctx, name, port)
}

// errAgentBroken marks an installed agent that did not answer.
var errAgentBroken = errors.New("the agent installed in the sandbox does not answer")

// agentOf returns sb's agent, starting (and, when missing or stale,
// installing) it.
func (m *Manager) agentOf(ctx context.Context, sb *Sandbox) (*agent.Client, error) {
	sb.agent.mu.Lock()
	defer sb.agent.mu.Unlock()
	if c := sb.agent.c; c != nil {
		select {
		case <-c.Done():
			sb.agent.setClient(nil)
		default:
			return c, nil
		}
	}
	if ch := sb.agent.early; ch != nil {
		// The agent the boot started from the channel: waited for here,
		// off the boot and its lifecycle lock.
		sb.agent.early = nil
		select {
		case a := <-ch:
			if c := m.adoptEarlyLocked(sb, a); c != nil {
				return c, nil
			}
		case <-ctx.Done():
			sb.agent.stopEarly()
			go func() {
				if a := <-ch; a != nil {
					a.c.Close()
				}
			}()
			return nil, ctx.Err()
		}
	}
	if sb.agent.unusable != nil && time.Now().Before(sb.agent.retryAt) {
		return nil, sb.agent.unusable
	}
	c, err := m.startAgent(ctx, sb, false)
	if errors.Is(err, agent.ErrStale) || errors.Is(err, errAgentBroken) {
		c, err = m.startAgent(ctx, sb, true)
	}
	if err != nil {
		err = fmt.Errorf("sandbox %q: start its agent: %w", sb.Name, err)
		var unusable *agentUnusable
		if errors.As(err, &unusable) && ctx.Err() == nil {
			m.log.Warn("the agent cannot run: connections go through an exec each", "sandbox", sb.Name, "err", err)
			sb.agent.unusable, sb.agent.retryAt = &agentUnusable{err: err}, time.Now().Add(agentRetry)
			return nil, sb.agent.unusable
		}
		return nil, err
	}
	sb.agent.setClient(c)
	sb.agent.unusable = nil
	m.startControl(sb, c) // children.go
	return c, nil
}

// adoptEarlyLocked makes a, the agent sb's boot started, sb's agent, and
// returns it; nil when it did not start or has ended since (the agent is
// then copied in at the next agentOf). sb.agent.mu is held.
func (m *Manager) adoptEarlyLocked(sb *Sandbox, a *agentConn) *agent.Client {
	if a == nil {
		// It did not answer (a channel on a mount without exec, say).
		sb.agent.copyIn = true
		return nil
	}
	select {
	case <-a.c.Done():
		return nil
	default:
	}
	sb.agent.setClient(a.c)
	sb.agent.arch, sb.agent.source, sb.agent.unusable = a.arch, a.source, nil
	sb.agent.caAtStart = sb.agent.caAtStart || a.caAtStart
	m.startControl(sb, a.c) // children.go
	return a.c
}

// agentInstalledCA reports whether sb's agent came from its main process
// after that put this server's egress CA in place (agentConn.caAtStart).
func (m *Manager) agentInstalledCA(sb *Sandbox) bool {
	sb.agent.mu.Lock()
	defer sb.agent.mu.Unlock()
	return sb.agent.caAtStart
}

// runningAgent returns sb's agent when one runs already, or nil: it
// neither starts one, nor waits for one starting, nor takes the one the
// boot started (the first agentOf does, with its control socket), and
// takes no lock, so that what needs no agent goes another way at once.
func (m *Manager) runningAgent(sb *Sandbox) *agent.Client {
	c := sb.agent.live.Load()
	if c == nil {
		return nil
	}
	select {
	case <-c.Done():
		return nil
	default:
		return c
	}
}

// startAgent installs the agent when it is missing (or always, with
// reinstall) and starts it under the sandbox's life.
func (m *Manager) startAgent(ctx context.Context, sb *Sandbox, reinstall bool) (*agent.Client, error) {
	// The copy in place is used only when it is the one this server would
	// install, byte for byte (size and sha256): a piece a killed install
	// left, or one the sandbox replaced, is installed again.
	out, err := sb.housekeep(ctx, `uname -m; if [ -x "`+agentPath()+`" ]; then wc -c <"`+agentPath()+`"; sha256sum <"`+agentPath()+`" 2>/dev/null || echo -; fi`, scriptTimeout)
	if err != nil {
		return nil, err
	}
	lines := strings.Fields(string(out))
	machine := ""
	if len(lines) > 0 {
		machine = lines[0]
	}
	sb.agent.arch = agent.GoArch(machine)
	installed := false
	if len(lines) > 2 && sb.agent.arch != "" {
		if bin, err := ctlbin.Find(ctx, sb.agent.arch); err == nil {
			sum := sha256.Sum256(bin.Data)
			installed = lines[1] == strconv.Itoa(len(bin.Data)) && lines[2] == hex.EncodeToString(sum[:])
		}
	}
	// A copy to install is sent on the agent's own exec, which installs
	// it, says so, and becomes the agent: one engine exec, not two.
	argv := []string{agentPath(), "agent"}
	var bin *ctlbin.Binary
	viaChannel := false
	if !installed || reinstall {
		if sb.agent.arch == "" {
			return nil, &agentUnusable{err: fmt.Errorf("no agent for a %q machine", machine)}
		}
		b, err := ctlbin.Find(ctx, sb.agent.arch)
		if err != nil {
			return nil, &agentUnusable{err: err}
		}
		bin = b
		argv = installArgv(bin)
		if path := m.agentInChannel(sb, bin.Data); path != "" && !sb.agent.copyIn {
			// In the channel the sandbox sees it already: run it there.
			argv, viaChannel = channelArgv(path), true
			sb.agent.source = bin.String()
			bin = nil
		}
	}
	stdin, stdout, errb, stop, err := m.execAgent(sb.life, sb.own.target(), argv)
	if err != nil {
		return nil, err
	}
	var agentOut io.Reader = stdout
	if bin != nil {
		br := bufio.NewReader(stdout)
		if err := awaitInstalled(ctx, br, stdin, bin.Data, stop); err != nil {
			if head, _, _ := errb.Parts(); len(head) > 0 {
				err = fmt.Errorf("%w (it said: %s)", err, textcut.Shorten(strings.TrimSpace(string(head)), 300))
			}
			return nil, &agentUnusable{err: fmt.Errorf("install the agent: %w", err)}
		}
		sb.agent.source = bin.String()
		agentOut = br
	}
	c, err := agent.NewClient(agentOut, stdin, stop)
	if err != nil {
		_ = stop()
		if head, _, _ := errb.Parts(); len(head) > 0 {
			err = fmt.Errorf("%w (it said: %s)", err, textcut.Shorten(strings.TrimSpace(string(head)), 300))
		}
		if viaChannel {
			// The channel's copy does not run there (a mount without
			// exec, say): copied in from now on.
			m.log.Debug("the agent in the sandbox's channel did not answer: copied in instead", "sandbox", sb.Name, "err", err)
			sb.agent.copyIn = true
			return nil, fmt.Errorf("%w: %w", errAgentBroken, err)
		}
		if errors.Is(err, agent.ErrStale) && !reinstall {
			return nil, err
		}
		if installed && !reinstall {
			// A copy found in place that does not answer (one the sandbox
			// replaced or damaged) is installed again, once.
			return nil, fmt.Errorf("%w: %w", errAgentBroken, err)
		}
		return nil, &agentUnusable{err: err}
	}
	return c, nil
}

// installArgv runs installAndRunScript to install bin and become the
// agent.
func installArgv(bin *ctlbin.Binary) []string {
	return []string{"sh", "-c", installAndRunScript, "sh", agentDir, agentPath(), strconv.Itoa(len(bin.Data)), ctlLink}
}

// execAgent starts argv in container target under ctx, on an exec whose
// stdin and stdout carry the agent's streams and whose stderr is kept
// (its head) for errors; stop closes stdin, kills the exec and waits for
// it.
//
// Where the engine can (DirectExecer), the agent's stdin and stdout are
// the server's own pipes, handed to it, so that no engine process relays
// the session's bytes.
func (m *Manager) execAgent(ctx context.Context, target string, argv []string) (stdin io.WriteCloser, stdout io.Reader, errb *shell.Capture, stop func() error, err error) {
	cmd := handedExec(ctx, m.rt, target, ExecSpec{Argv: argv, Interactive: true})
	errb = &shell.Capture{Limit: 4096}
	in, out, err := proc.Piped(cmd, errb)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() error {
		in.Close()
		_ = cmd.Kill()
		<-exited
		out.Close()
		return nil
	}
	return in, out, errb, stop, nil
}

// installedLine is what installAndRunScript prints once the agent is in
// place, before it becomes the agent.
const installedLine = "sandbox-ctl-installed"

// awaitInstalled sends data on w and waits, within scriptTimeout (or
// until ctx ends), for installedLine on r; stop ends the exec otherwise.
func awaitInstalled(ctx context.Context, r *bufio.Reader, w io.Writer, data []byte, stop func() error) error {
	done := make(chan error, 1)
	go func() {
		if _, err := w.Write(data); err != nil {
			done <- fmt.Errorf("send sandbox-ctl: %w", err)
			return
		}
		line, err := r.ReadString('\n')
		if err != nil {
			done <- fmt.Errorf("sandbox-ctl was not installed: %w", err)
			return
		}
		if strings.TrimSpace(line) != installedLine {
			done <- fmt.Errorf("sandbox-ctl was not installed: it printed %q", textcut.Shorten(line, 100))
			return
		}
		done <- nil
	}()
	t := time.NewTimer(scriptTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			_ = stop()
		}
		return err
	case <-t.C:
	case <-ctx.Done():
	}
	_ = stop()
	<-done
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("sandbox-ctl was not installed within %s", scriptTimeout)
}

// installAndRunScript writes the agent from stdin, exactly $3 bytes
// (nothing follows until the server reads installedLine, so head cannot
// read past it), to a temporary name in $1 and renames it to $2 only when
// all of it arrived (a copy cut short ends the input early, not with an
// error), links $4 to it, says so, and runs it as the agent.
const installAndRunScript = `mkdir -p "$1" || exit 1
chmod 1777 "$1" 2>/dev/null
t="$2.$$"
if ! head -c "$3" >"$t"; then rm -f "$t"; exit 1; fi
n=$(wc -c <"$t")
if [ "$((n))" != "$3" ]; then rm -f "$t"; echo "sandbox-ctl arrived cut short: $((n)) of $3 bytes" >&2; exit 1; fi
chmod 755 "$t" && mv -f "$t" "$2" || { rm -f "$t"; exit 1; }
ln -sf "$2" "$4" 2>/dev/null
echo ` + installedLine + `
exec "$2" agent`

// channelArgv runs the agent binary at path (in the sandbox's channel),
// with ctlLink pointing at it.
func channelArgv(path string) []string {
	return []string{"sh", "-c", `ln -sf "$1" "$2" 2>/dev/null; exec "$1" agent`, "sh", path, ctlLink}
}

// ctlLink puts sandbox-ctl on the sandbox's PATH.
const ctlLink = "/usr/local/bin/sandbox-ctl"

// closeAgent ends sb's agent, if it runs.
func (sb *Sandbox) closeAgent() {
	sb.agent.mu.Lock()
	c := sb.agent.c
	sb.agent.setClient(nil)
	early, stop := sb.agent.early, sb.agent.stopEarly
	sb.agent.early = nil
	sb.agent.mu.Unlock()
	if stop != nil {
		stop() // the early agent's exec, handed or still starting
	}
	if early != nil {
		go func() {
			if a := <-early; a != nil {
				a.c.Close()
			}
		}()
	}
	if c != nil {
		c.Close()
	}
}

// spareAgent starts the agent in container id (a spare waiting for a
// name), copying it in first, under ctx (the Manager's life): the
// sandbox that takes the spare gets it running (handAgent). A failure is
// only logged; that sandbox's boot starts one then.
func (m *Manager) spareAgent(ctx context.Context, id string) (*agentConn, bool) {
	out, err := m.rt.Exec(ctx, id, ExecSpec{Argv: []string{"uname", "-m"}})
	if err != nil || out.ExitCode != 0 {
		m.log.Debug("a spare's agent: uname", "container", id, "err", err)
		return nil, false
	}
	arch := agent.GoArch(strings.TrimSpace(string(out.Stdout)))
	bin, err := ctlbin.Find(ctx, arch)
	if arch == "" || err != nil {
		m.log.Debug("a spare's agent: no binary", "container", id, "arch", arch, "err", err)
		return nil, false
	}
	stdin, stdout, _, stop, err := m.execAgent(ctx, id, installArgv(bin))
	if err != nil {
		return nil, false
	}
	br := bufio.NewReader(stdout)
	if err := awaitInstalled(ctx, br, stdin, bin.Data, stop); err != nil {
		m.log.Debug("a spare's agent: install", "container", id, "err", err)
		return nil, false
	}
	c, err := agent.NewClient(br, stdin, stop)
	if err != nil {
		_ = stop()
		m.log.Debug("a spare's agent: start", "container", id, "err", err)
		return nil, false
	}
	return &agentConn{c: c, arch: arch, source: bin.String()}, true
}

// earlyAgent starts the agent in container id, just created with the
// channel directory dir, from its channel, under ctx (the Manager's
// life), while the boot opens the sandbox's first shell: the boot then
// hands it over (handAgent) and the first command finds the proxy up.
// The binary is the host's architecture's, as a container of the host's
// engine mostly is; one of another machine does not run, and the usual
// start (which asks the sandbox) follows.
func (m *Manager) earlyAgent(ctx context.Context, id, dir string) *agentConn {
	arch := agent.GoArch(runtime.GOARCH)
	bin, err := ctlbin.Find(ctx, arch)
	if arch == "" || err != nil {
		return nil
	}
	path, err := placeAgent(dir, bin.Data)
	if err != nil {
		return nil
	}
	stdin, stdout, _, stop, err := m.execAgent(ctx, id, channelArgv(path))
	if err != nil {
		return nil
	}
	c, err := agent.NewClient(stdout, stdin, stop)
	if err != nil {
		_ = stop()
		m.log.Debug("the agent started early did not answer", "container", id, "err", err)
		return nil
	}
	return &agentConn{c: c, arch: arch, source: bin.String()}
}

// agentCall is a socket in a new sandbox's channel on which the agent its
// main process starts (agentCommand) calls this server, and what the
// server takes that agent as once it called (calledAgent).
type agentCall struct {
	ln    *net.UnixListener
	dirfd int
	name  string
	token string // what the agent says first, a line
	at    string // the socket's path as the sandbox sees it
	once  sync.Once
	// ca: the main process installs this server's egress CA before it
	// starts the agent, whose call then says whether the install put it
	// in place (agent.CallCA).
	ca bool

	arch, source string // the agent binary's
}

// callingAgent readies a new sandbox with a channel (spec's) to start its
// agent from its own main process, so that no engine exec is needed for
// it: the agent's binary is placed in the channel, a socket is listened
// on there, and spec's command is wrapped to start the agent first
// (agentCommand). It returns the call to take the agent from
// (calledAgent), or nil when the spec has no channel or a step fails:
// the agent then starts through an exec, as in a sandbox found running.
// The binary is the host's architecture's, as earlyAgent's. An allowlist
// sandbox's main process installs this server's egress CA first: the
// install then runs while the boot opens the first shell, and the first
// command, which waits for the agent, need not wait for an install through
// that shell (controlSoon).
func (m *Manager) callingAgent(ctx context.Context, spec *RunSpec) *agentCall {
	dir := spec.Labels[LabelChannel]
	if !validChannelDir(dir) || len(spec.Command) == 0 || m.callsFail.Load() {
		return nil
	}
	// A binary there is already: none is built on the boot's way (a
	// server without embedded agents builds one at the first agentOf).
	arch := agent.GoArch(runtime.GOARCH)
	bin := ctlbin.Resolve(ctx, arch, false).Binary
	if arch == "" || bin == nil {
		return nil
	}
	path, err := placeAgent(dir, bin.Data)
	if err != nil {
		m.log.Debug("the agent starts through an exec: its channel takes no file", "container", spec.Name, "err", err)
		return nil
	}
	call, err := listenAgentCall(dir)
	if err != nil {
		m.log.Debug("the agent starts through an exec: no socket for its call", "container", spec.Name, "err", err)
		return nil
	}
	call.arch, call.source = arch, bin.String()
	pem, mark := "", ""
	if p := m.caPrint(); p != "" && spec.Labels[LabelEgress] == egress.ModeAllowlist && spec.Labels[LabelCA] == p {
		pem, mark = m.caArgs()
		call.ca = true
	}
	spec.Command = agentCommand(path, call.at, call.token, pem, mark, spec.Command)
	return call
}

// agentCommand is a sandbox's main command cmd, preceded by the start of
// the agent at path (in the channel) calling the server's socket sock
// with token, with sandbox-ctl linked onto PATH as channelArgv does, and
// before that, when pem is set, the install of that egress CA (caScript,
// with mark) in the sandbox's trust stores. The agent is started from a
// subshell that ends at once, so that the container's init (every sandbox
// runs with one) becomes its parent and reaps it; then the shell becomes
// cmd. Started again with the container, the agent finds the socket gone
// and ends (and the CA's install does not run).
func agentCommand(path, sock, token, pem, mark string, cmd []string) []string {
	return append([]string{"sh", "-c", agentStartScript, "sandbox-mcp-start", path, sock, token, pem, mark}, cmd...)
}

// agentStartScript is agentCommand's script. The CA's install runs in
// the agent's own background subshell, just before the agent: a slow or
// stuck install (a fifo where the file goes) holds back the agent only,
// never the main command, and the agent's call says whether it is done
// with (its "ca" argument: agent.CallCA): the CA in place, or stores the
// sandbox's user may not write (caScript's 2). It runs only while the
// call's socket is there, at the container's first start: a later start
// must not put back, over a CA another server installed since, the one
// this container was made with.
const agentStartScript = `ln -sf "$1" "` + ctlLink + `" 2>/dev/null
( (c=; if [ -n "$4" ] && [ -S "$2" ]; then (set -- "$4" "$5"
` + caScript + `
); case $? in 0|2) c=ca; esac; fi; exec "$1" agent "$2" "$3" $c) </dev/null >/dev/null 2>&1 & ); shift 5; exec "$@"`

// callWait bounds the wait for a new sandbox's agent to call: it starts
// with the container, before the boot's first shell opens, on a loaded
// host too (a variable for tests). A socket nothing connected to in that
// time makes the Manager start the next sandboxes' agents through an exec
// (Manager.callsFail): where a policy keeps containers off the socket,
// one first command waits this long, not every one. A sandbox that
// connects and says no token (its own doing) leaves calls on.
var callWait = 10 * time.Second

// calledAgent takes the agent a new sandbox's main process started: its
// call on call's socket, then the session's hello; nil when it did not
// call within callWait (or ctx ended first) or did not answer (its
// sandbox's first agentOf then starts one through an exec).
func (m *Manager) calledAgent(ctx context.Context, call *agentCall) *agentConn {
	conn, caDone, err := call.accept(ctx, callWait)
	if errors.Is(err, errNoCall) && ctx.Err() == nil && !m.callsFail.Swap(true) {
		m.log.Warn("a new sandbox's agent did not call the server on its channel: new sandboxes start their agents through an exec from now on", "err", err)
	}
	if err != nil {
		m.log.Debug("the agent started with the sandbox did not call", "err", err)
		return nil
	}
	c, err := agent.NewClient(conn, conn, conn.Close)
	if err != nil {
		conn.Close()
		m.log.Debug("the agent started with the sandbox did not answer", "err", err)
		return nil
	}
	if call.ca && !caDone {
		m.log.Info("the egress CA's install at the sandbox's start failed: it is tried again through a shell")
	}
	return &agentConn{c: c, arch: call.arch, source: call.source, caAtStart: call.ca && caDone}
}

// handAgent makes a spare's running agent sb's, and has it serve sb's
// control socket and egress proxy: the boot's agent start then finds it.
func (m *Manager) handAgent(sb *Sandbox, a *agentConn) {
	select {
	case <-a.c.Done():
		return // gone meanwhile: the boot starts one
	default:
	}
	sb.agent.mu.Lock()
	sb.agent.setClient(a.c)
	sb.agent.arch, sb.agent.source = a.arch, a.source
	sb.agent.mu.Unlock()
	m.startControl(sb, a.c) // children.go
}
