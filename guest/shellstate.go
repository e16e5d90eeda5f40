package guest

import (
	"slices"
	"strings"
)

// The shell store: the working directory and the exported variables that
// commands leave behind live inside the sandbox, where every shell of every
// server reads them, one file per variable:
//
//	/var/lib/sandbox-mcp/shell/NAME.sh  export NAME='value', or unset NAME
//	/var/lib/sandbox-mcp/shell/.cwd     cd -- '/the/dir'
//	/var/lib/sandbox-mcp/shell/.gen     changes at every write
//
// After a command changed its shell's directory or exports, the server
// writes what changed (StateWriteScript): per variable, the last writer
// wins, so concurrent commands that export different variables all land.
// Every shell runs StateSync before each command and at start, so the
// state survives a restart of the container and reaches other servers.

// ShellStateDir holds the shell store.
const ShellStateDir = "/var/lib/sandbox-mcp/shell"

// StateSync loads the shell store into a shell when it changed since the
// shell last looked. Unchanged, it forks nothing: one read of the
// generation file. Files are sourced with `command .`, so a damaged one
// cannot end the shell.
const StateSync = `__sbx_g=; read -r __sbx_g <` + ShellStateDir + `/.gen 2>/dev/null
if [ -n "$__sbx_g" ] && [ "$__sbx_g" != "${__sbx_stgen-}" ]; then
for __sbx_f in ` + ShellStateDir + `/*.sh; do [ -r "$__sbx_f" ] && command . "$__sbx_f"; done
[ -r ` + ShellStateDir + `/.cwd ] && command . ` + ShellStateDir + `/.cwd
__sbx_stgen=$__sbx_g; __sbx_synced=1
fi
unset __sbx_g __sbx_f
`

// storedVar reports whether a variable belongs in the shell store: not
// the directory (kept as .cwd), not the env store's own variables, not the
// frame's.
func storedVar(name string) bool {
	return validVarName(name) && name != "PWD" && name != "OLDPWD" && name != RunVar && !reservedVar(name)
}

// StateWriteScript returns the script that records in the shell store what
// a command changed (from before to after), and false when it changed
// nothing the store keeps. gen is the store's new generation (letters and
// digits). It forks nothing but the directory's creation when missing.
func StateWriteScript(before, after State, gen string) (string, bool) {
	if !validRunID(gen) {
		return "", false
	}
	var b strings.Builder
	was, now := exportMap(before.Exports), exportMap(after.Exports)
	var names []string
	for n := range now {
		names = append(names, n)
	}
	for n := range was {
		if _, ok := now[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		if !storedVar(n) || was[n] == now[n] {
			continue
		}
		line := "unset " + n
		if stmt, ok := now[n]; ok {
			line = stmt
		}
		b.WriteString("printf '%s\\n' " + quote(line) + " >" + ShellStateDir + "/" + n + ".sh\n")
	}
	if after.Cwd != before.Cwd && after.Cwd != "" {
		b.WriteString("printf '%s\\n' " + quote("cd -- "+quote(after.Cwd)) + " >" + ShellStateDir + "/.cwd\n")
	}
	if b.Len() == 0 {
		return "", false
	}
	return "[ -d " + ShellStateDir + " ] || mkdir -p " + ShellStateDir + "\n" + b.String() +
		"printf '%s\\n' " + gen + " >" + ShellStateDir + "/.gen; printf '%s\\n' " + gen + " >" + anyGenFile + "\n", true
}
