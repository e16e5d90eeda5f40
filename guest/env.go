package guest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// The env store: variables set with the env tool live inside the sandbox,
// where every server process reads them, one file per variable:
//
//	/etc/sandbox-mcp/env.d/NAME.sh      export NAME='value'
//	/etc/sandbox-mcp/env.d/NAME.secret  present when the value is a secret
//	/etc/sandbox-mcp/env.gen            changes at every set and unset
//
// Every shell (of any server) runs EnvSync before each command: when the
// generation changed since its last look, it unsets the variables it had
// loaded that are gone, loads the files again, and exports
// SANDBOX_MCP_ENV_GEN (the generation) and SANDBOX_MCP_SECRETS (the names
// marked secret), so a server sees in the command's trailer that the store
// changed and which values to keep out of its history and logs.

// EnvDir holds one file per variable set with the env tool.
const EnvDir = "/etc/sandbox-mcp/env.d"

// envGenFile changes at every change to the store.
const envGenFile = "/etc/sandbox-mcp/env.gen"

// InitScript is the init text of a sandbox shell: load the env store,
// start in workdir, and load the shell store (see StateSync).
func InitScript(workdir string) string {
	return syncFunc + "cd -- " + quote(workdir) + " 2>/dev/null || cd /\n" + SyncCall + "\n"
}

// SyncCall brings a shell in line with the env store and the shell store
// (EnvSync, StateSync); InitScript defines it. A sandbox's shells run it
// before every command.
const SyncCall = "__sbx_sync"

// The check runs before every command, so it takes no redirection it can
// do without (each costs the shell a save and restore of the fd): the
// file is tested before it is read rather than errors sent to /dev/null.
const syncFunc = SyncCall + "() {\n" +
	`__sbx_a=; [ -r ` + anyGenFile + ` ] && read -r __sbx_a <` + anyGenFile + `
if [ "$__sbx_a" != "${__sbx_anygen-none}" ]; then __sbx_load "$__sbx_a" </dev/null >/dev/null 2>&1; fi
unset __sbx_a
}
__sbx_load() {
` + EnvSync + StateSync + `__sbx_anygen=$1
}
`

// anyGenFile changes whenever the env store or the shell store does, so a
// shell with nothing to load reads one file before a command.
const anyGenFile = ShellStateDir + "/.any"

// EnvGenVar and EnvSecretsVar are exported by EnvSync in every shell.
const (
	EnvGenVar     = "SANDBOX_MCP_ENV_GEN"
	EnvSecretsVar = "SANDBOX_MCP_SECRETS"
)

// EnvSync brings a shell's variables in line with the env store when the
// store changed since the shell last looked. It forks nothing when the
// store is unchanged: one read of the generation file.
const EnvSync = `__sbx_g=; read -r __sbx_g <` + envGenFile + ` 2>/dev/null
if [ "$__sbx_g" != "${__sbx_envgen-}" ]; then
for __sbx_n in ${__sbx_envnames-}; do [ -e ` + EnvDir + `/"$__sbx_n".sh ] || unset "$__sbx_n"; done
__sbx_envnames=; __sbx_sec=
for __sbx_f in ` + EnvDir + `/*.sh; do [ -r "$__sbx_f" ] || continue; . "$__sbx_f"; __sbx_n=${__sbx_f##*/}; __sbx_n=${__sbx_n%.sh}; __sbx_envnames="$__sbx_envnames $__sbx_n"; [ -e ` + EnvDir + `/"$__sbx_n".secret ] && __sbx_sec="$__sbx_sec $__sbx_n"; done
__sbx_envgen=$__sbx_g; __sbx_synced=1
if [ -n "$__sbx_g" ]; then export ` + EnvGenVar + `="$__sbx_g"; fi
if [ -n "$__sbx_sec" ]; then export ` + EnvSecretsVar + `="${__sbx_sec# }"; else unset ` + EnvSecretsVar + `; fi
fi
unset __sbx_g __sbx_n __sbx_f __sbx_sec
`

// envBump gives the store a new generation.
const envBump = `od -An -N8 -tx1 /dev/urandom | tr -d ' \n' >` + envGenFile + `.tmp && mv -f ` + envGenFile + `.tmp ` + envGenFile +
	` && { mkdir -p ` + ShellStateDir + ` && cat ` + envGenFile + ` >` + anyGenFile + `; }`

// ErrBadVarName is returned for environment variable names sh cannot take.
var ErrBadVarName = errors.New("variable names must match [A-Za-z_][A-Za-z0-9_]*")

// reservedVar reports names the store manages itself.
func reservedVar(name string) bool {
	return name == EnvGenVar || name == EnvSecretsVar || strings.HasPrefix(name, "__sbx")
}

func checkVarName(name string) error {
	if !validVarName(name) {
		return ErrBadVarName
	}
	if reservedVar(name) {
		return fmt.Errorf("%s is managed by sandbox-mcp", name)
	}
	return nil
}

// EnvSetScript saves a variable in the store (marked secret or not); every
// shell exports it from its next command on.
func EnvSetScript(name, value string, secret bool) (string, error) {
	if err := checkVarName(name); err != nil {
		return "", err
	}
	if strings.IndexByte(value, 0) >= 0 {
		return "", ErrNULInCommand
	}
	f := EnvDir + "/" + name
	mark := "rm -f " + f + ".secret"
	if secret {
		mark = ": >" + f + ".secret"
	}
	line := "export " + name + "=" + quote(value)
	return "mkdir -p " + EnvDir + " && (umask 077 && printf '%s\\n' " + quote(line) + " >" + f + ".sh.tmp) && " +
		mark + " && mv -f " + f + ".sh.tmp " + f + ".sh && " + envBump, nil
}

// EnvUnsetScript removes a variable from the store; every shell unsets it
// from its next command on.
func EnvUnsetScript(name string) (string, error) {
	if err := checkVarName(name); err != nil {
		return "", err
	}
	f := EnvDir + "/" + name
	return "rm -f " + f + ".sh " + f + ".secret && " + envBump, nil
}

// EnvListScript prints one line per stored variable: name, 1 or 0 for
// secret, and the value in base64, separated by tabs. Each file is read in
// a subshell, so nothing it does reaches the shell.
const EnvListScript = `for __sbx_f in ` + EnvDir + `/*.sh; do [ -r "$__sbx_f" ] || continue; __sbx_n=${__sbx_f##*/}; __sbx_n=${__sbx_n%.sh}
__sbx_s=0; [ -e ` + EnvDir + `/"$__sbx_n".secret ] && __sbx_s=1
printf '%s\t%s\t' "$__sbx_n" "$__sbx_s"; ( . "$__sbx_f" >/dev/null 2>&1; eval "printf '%s' \"\${$__sbx_n-}\"" ) | base64 | tr -d '\n'; echo
done; unset __sbx_f __sbx_n __sbx_s`

// EnvVar is one variable of the env store.
type EnvVar struct {
	Name   string
	Value  string
	Secret bool
}

// ParseEnvList reads EnvListScript's output. It comes from the sandbox, so
// every line is checked: bad names and bad encodings are skipped.
func ParseEnvList(out []byte) []EnvVar {
	var vars []EnvVar
	for _, line := range strings.Split(string(out), "\n") {
		name, rest, ok := strings.Cut(line, "\t")
		if !ok || checkVarName(name) != nil {
			continue
		}
		flag, b64, ok := strings.Cut(rest, "\t")
		if !ok || (flag != "0" && flag != "1") {
			continue
		}
		v, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			continue
		}
		vars = append(vars, EnvVar{Name: name, Value: string(v), Secret: flag == "1"})
	}
	return vars
}

// ExportedValue returns the value of name in `export -p` output, for
// values the store writes itself (no quotes or newlines inside), and
// whether it was there.
func ExportedValue(exports, name string) (string, bool) {
	for _, prefix := range []string{"export " + name + "=", "declare -x " + name + "="} {
		i := strings.Index(exports, prefix)
		if i < 0 || (i > 0 && exports[i-1] != '\n') {
			continue
		}
		v := exports[i+len(prefix):]
		if j := strings.IndexByte(v, '\n'); j >= 0 {
			v = v[:j]
		}
		return strings.Trim(v, `'"`), true
	}
	return "", false
}
