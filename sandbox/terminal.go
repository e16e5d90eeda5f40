package sandbox

import (
	"context"
	"os/exec"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
)

// loginShell is what a terminal session runs when given no command.
const loginShell = `if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l`

// terminalPrelude gives a terminal session the variables set with the env
// tool, as every command has them.
const terminalPrelude = `for __sbx_f in ` + guest.EnvDir + `/*.sh; do [ -r "$__sbx_f" ] && . "$__sbx_f"; done; unset __sbx_f; `

// TerminalCommand prepares an engine exec with a terminal into sandbox
// name (booted if need be) that runs command through sh, or the login
// shell when command is empty, in the directory the sandbox's shells are
// in, with TERM set and the env tool's variables. The caller runs it
// behind a pseudo-terminal, and calls done when the session ends: until
// then the sandbox counts as in use, so idle reaping leaves it alone.
func (m *Manager) TerminalCommand(ctx context.Context, name, command string) (cmd *exec.Cmd, done func(), err error) {
	sb, _, err := m.Get(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if command == "" {
		command = loginShell
	}
	wd := m.cfg.Workdir
	if st, ok := sb.pool.State(); ok && st.Cwd != "" {
		wd = st.Cwd
	}
	spec := ExecSpec{Argv: []string{"sh", "-c", terminalPrelude + command}, Interactive: true, TTY: true, Workdir: wd,
		Env: map[string]string{"TERM": "xterm-256color"}}
	// The session outlives the call that opens it: its own context.
	return m.rt.ExecCommand(context.Background(), sb.own.target(), spec), sb.busy(), nil
}
