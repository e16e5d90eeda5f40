package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// loginShell is what a terminal session runs when given no command.
const loginShell = `if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l`

// terminalPrelude gives a terminal session the variables set with the env
// tool, as every command has them.
const terminalPrelude = `for __sbx_f in ` + guest.EnvDir + `/*.sh; do [ -r "$__sbx_f" ] && . "$__sbx_f"; done; unset __sbx_f; `

// noShell is a process id no Linux process has (pid_max is at most
// 2^22): KillRunScript given it ends the marked processes only.
const noShell = 1<<22 + 1

// TerminalCommand prepares an engine exec with a terminal into sandbox
// name (booted if need be) that runs command through sh, or the login
// shell when command is empty, in the directory the sandbox's shells are
// in, with TERM set and the env tool's variables. With cols and rows
// (both > 0) the sandbox's side of the terminal has that size before the
// command starts: docker sizes an exec's terminal only after it started,
// and a curses program would meet a resize (KEY_RESIZE) for its first key. The caller runs it
// behind a pseudo-terminal, and calls done when the session ends: until
// then the sandbox counts as in use, so idle reaping leaves it alone.
// Every process of the session carries a run marker (as a command's do),
// and done ends those still running in the sandbox: an engine does not
// end an exec's processes when its client goes.
func (m *Manager) TerminalCommand(ctx context.Context, name, command string, cols, rows int) (p proc.Process, done func(), err error) {
	sb, _, err := m.Get(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if command == "" {
		command = loginShell
	}
	wd, runID := m.sessionStart(sb)
	target := sb.own.target()
	prelude := terminalPrelude
	if cols > 0 && rows > 0 {
		// The engine's own resize to the same size then changes nothing
		// and signals no one.
		prelude = fmt.Sprintf("stty rows %d cols %d 2>/dev/null; ", rows, cols) + prelude
	}
	spec := ExecSpec{Argv: []string{"sh", "-c", prelude + command}, Interactive: true, TTY: true, Workdir: wd,
		Env: map[string]string{"TERM": "xterm-256color", guest.RunVar: runID}}
	// Listed for the next server, which ends the session's processes if
	// this one is killed first (sweep.go).
	m.trackRun(name, runID, "terminal: "+command)
	release := sb.busy()
	var once sync.Once
	done = func() {
		once.Do(func() {
			release()
			m.endSession(name, target, "a terminal session", noShell, runID)
		})
	}
	// The session outlives the call that opens it: its own context.
	p = m.rt.ExecCommand(context.Background(), target, spec)
	if c, ok := p.(*proc.Cmd); ok && c.Cmd().SysProcAttr != nil {
		// The engine's CLI belongs to the terminal it runs on: in a
		// process group of its own it cannot lead a pseudo-terminal's
		// session (setpgid after setsid fails), and on a person's
		// terminal it would be stopped (SIGTTIN) at its first read.
		c.Cmd().SysProcAttr.Setpgid = false
	}
	return p, done, nil
}

// sessionStart is where a session of sb (a terminal, a Python
// interpreter) starts, the directory its shells are in, and a new run ID
// to mark its processes with.
func (m *Manager) sessionStart(sb *Sandbox) (wd, runID string) {
	wd = m.cfg.Workdir
	if st, ok := sb.pool.State(); ok && st.Cwd != "" {
		wd = st.Cwd
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return wd, hex.EncodeToString(b)
}

// endSession ends, in the background, the processes of a session of
// sandbox name (a terminal's, a Python interpreter's) in its container
// target: those marked with runID, and the process pid with its
// descendants when pid is not noShell. The returned channel closes when
// that is done. A container that no longer runs has nothing of it left.
func (m *Manager) endSession(name, target, what string, pid int, runID string) <-chan struct{} {
	finished := make(chan struct{})
	m.spawn(func() {
		defer close(finished)
		kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // after the Manager closes, too
		defer cancel()
		if c, err := m.rt.Inspect(kctx, target); err != nil || !c.Running() {
			return
		}
		if err := (containerHost{rt: m.rt, name: target}).KillRun(kctx, pid, runID, pid != noShell); err != nil {
			m.log.Debug("end "+what+"'s processes", "sandbox", name, "err", err)
		}
	})
	return finished
}
