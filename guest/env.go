package guest

import (
	"errors"
	"strings"
)

// EnvDir holds one file per variable set with the env tool, each an
// `export NAME='value'` line that every new shell sources.
const EnvDir = "/etc/sandbox-mcp/env.d"

// InitScript is the init text of a sandbox shell: load the env tool's
// variables and start in workdir.
func InitScript(workdir string) string {
	return "for __sbx_f in " + EnvDir + "/*.sh; do [ -r \"$__sbx_f\" ] && . \"$__sbx_f\"; done; unset __sbx_f\n" +
		"cd -- " + quote(workdir) + " 2>/dev/null || cd /\n"
}

// ErrBadVarName is returned for environment variable names sh cannot take.
var ErrBadVarName = errors.New("variable names must match [A-Za-z_][A-Za-z0-9_]*")

// EnvSetScript sets and exports a variable in the running shell and saves it
// for shells opened later.
func EnvSetScript(name, value string) (string, error) {
	if !validVarName(name) {
		return "", ErrBadVarName
	}
	if strings.IndexByte(value, 0) >= 0 {
		return "", ErrNULInCommand
	}
	line := "export " + name + "=" + quote(value)
	return "mkdir -p " + EnvDir + " && (umask 077 && printf '%s\\n' " + quote(line) + " >" + EnvDir + "/" + name + ".sh) && " + line, nil
}

// EnvUnsetScript removes a variable from the shell and from later shells.
func EnvUnsetScript(name string) (string, error) {
	if !validVarName(name) {
		return "", ErrBadVarName
	}
	return "rm -f " + EnvDir + "/" + name + ".sh; unset " + name, nil
}

// EnvListScript prints NAME=value for each saved variable, one per line.
const EnvListScript = `for __sbx_f in ` + EnvDir + `/*.sh; do [ -r "$__sbx_f" ] || continue; __sbx_n=${__sbx_f##*/}; __sbx_n=${__sbx_n%.sh}; eval "printf '%s=%s\n' \"\$__sbx_n\" \"\${$__sbx_n}\""; done; unset __sbx_f __sbx_n`
