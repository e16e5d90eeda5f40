package shell

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// This file is the only place that writes text for the persistent shell to
// run. Everything the user supplies reaches the shell single-quoted and
// through `command eval`, so no input can end the wrapper early, and a
// syntax error in it fails that command without killing the shell.
//
// The protocol on the shell's pipes, per command with marker M:
//
//	stdout: <command output> "\n" M " " <exit status> "\n" <$PWD> "\n" <export -p> M ".\n"
//	stderr: M "<\n" <command output> "\n" M "\n"
//
// The wrapper writes its trailers to fds 3 and 4, duplicated from the
// shell's stdout and stderr when it starts, and closed for the command, so
// a command that redirects its shell's stdout (`exec >/dev/null`) cannot
// swallow the end of its own frame.

// ErrNULInCommand is returned for commands that contain a NUL byte, which
// no shell can carry.
var ErrNULInCommand = errors.New("command contains a NUL byte")

// newMarker returns a fresh unguessable marker.
func newMarker() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("shell: crypto/rand failed: " + err.Error())
	}
	return "sbx" + hex.EncodeToString(b[:])
}

// quote single-quotes s for sh.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// initScript is written once when a shell starts. It saves the protocol fds,
// runs the caller's init text with its output discarded, and answers with a
// normal frame whose stdout is the shell's PID.
func initScript(marker, init string) string {
	var b strings.Builder
	b.WriteString("exec 3>&1 4>&2\n")
	if init != "" {
		b.WriteString("{ command eval " + quote(init) + "; } </dev/null >/dev/null 2>&1 3>&- 4>&-\n")
	}
	b.WriteString("__sbx_rc=0; printf '%s' \"$$\" >&3\n")
	b.WriteString(trailer(marker))
	return b.String()
}

// trailer ends every frame: status, working directory and exports on
// stdout, and the marker alone on stderr.
func trailer(marker string) string {
	return "printf '\\n%s %d\\n%s\\n' " + marker + " \"$__sbx_rc\" \"$PWD\" >&3; export -p >&3; " +
		"printf '%s.\\n' " + marker + " >&3; printf '\\n%s\\n' " + marker + " >&4\n"
}

// commandScript builds the text that runs one command in the shell.
// prelude (may be empty) restores shared state before the command; it runs
// with its output discarded.
func commandScript(marker string, req Request, prelude string) (string, error) {
	if strings.IndexByte(req.Command, 0) >= 0 || strings.IndexByte(req.Workdir, 0) >= 0 {
		return "", ErrNULInCommand
	}
	var b strings.Builder
	if prelude != "" {
		b.WriteString("{ command eval " + quote(prelude) + "; } </dev/null >/dev/null 2>&1 3>&- 4>&-\n")
	}
	in := "/dev/null"
	if req.Stdin != nil {
		in = "/tmp/.sandbox-mcp-stdin-" + marker
		b.WriteString("base64 -d >" + in + " <<'" + marker + "'\n")
		enc := base64.StdEncoding.EncodeToString(req.Stdin)
		for len(enc) > 76 {
			b.WriteString(enc[:76])
			b.WriteByte('\n')
			enc = enc[76:]
		}
		b.WriteString(enc + "\n" + marker + "\n")
	}
	// fds 1 and 2 are re-pointed at the protocol fds for the command, so a
	// permanent redirection inside it (`exec >/dev/null`) ends with it.
	// The start beacon tells a shell that died before the command from one
	// that died during it.
	b.WriteString("printf '%s<\\n' " + marker + " >&4\n")
	run := "command eval " + quote(req.Command) + " <" + in + " >&3 2>&4 3>&- 4>&-"
	if req.Workdir != "" {
		b.WriteString("__sbx_o=$PWD; cd -- " + quote(req.Workdir) + " </dev/null 3>&- 4>&- && " + run +
			"\n__sbx_rc=$?; cd -- \"$__sbx_o\" 2>/dev/null\n")
	} else {
		b.WriteString(run + "\n__sbx_rc=$?\n")
	}
	if req.Stdin != nil {
		b.WriteString("rm -f " + in + "\n")
	}
	b.WriteString(trailer(marker))
	return b.String(), nil
}

// restoreScript is the prelude that brings a shell to state s: the
// exported variables it should have, none it should not, and the working
// directory. have lists the variables the shell exports now.
func restoreScript(s State, have []string) string {
	var b strings.Builder
	want := map[string]bool{}
	for _, n := range ExportNames(s.Exports) {
		want[n] = true
	}
	for _, n := range have {
		if !want[n] && validVarName(n) {
			b.WriteString("unset " + n + "\n")
		}
	}
	b.WriteString(s.Exports)
	if !strings.HasSuffix(s.Exports, "\n") && s.Exports != "" {
		b.WriteByte('\n')
	}
	if s.Cwd != "" {
		b.WriteString("cd -- " + quote(s.Cwd) + "\n")
	}
	return b.String()
}

func validVarName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// KillTreeScript, run as `sh -c KillTreeScript sh PID SELF`, kills with
// SIGKILL every descendant of PID and the process groups they lead, and PID
// itself when SELF is 1. It needs only a POSIX sh and /proc, and runs its
// scan twice to catch processes forked during the first pass.
const KillTreeScript = `root=$1; self=$2
rootpg=
scan() {
	list=
	for d in /proc/[0-9]*; do
		line=
		read -r line <"$d/stat" 2>/dev/null || continue
		rest=${line##*) }
		set -- $rest
		list="$list ${d#/proc/}:$2:$3"
		[ "${d#/proc/}" = "$root" ] && rootpg=$3
	done
	desc=" $root "
	changed=1
	while [ "$changed" = 1 ]; do
		changed=0
		for e in $list; do
			p=${e%%:*}; r=${e#*:}; pp=${r%%:*}
			case "$desc" in *" $pp "*)
				case "$desc" in *" $p "*) ;; *) desc="$desc$p "; changed=1 ;; esac ;;
			esac
		done
	done
	for e in $list; do
		p=${e%%:*}; r=${e#*:}; pg=${r#*:}
		case "$desc" in *" $p "*)
			[ "$p" = "$root" ] && continue
			kill -9 "$p" 2>/dev/null
			[ "$pg" != "$rootpg" ] && [ "$pg" != 0 ] && kill -9 -- "-$pg" 2>/dev/null
			;;
		esac
	done
}
scan; scan
[ "$self" = 1 ] && kill -9 "$root" 2>/dev/null
exit 0
`

// parseTrailer parses the part of the stdout trailer after the marker and
// space: "<status>\n<cwd>\n<export -p>" (the closing marker line removed).
func parseTrailer(t string) (code int, st State, ok bool) {
	line, rest, found := strings.Cut(t, "\n")
	if !found {
		return 0, st, false
	}
	code, err := strconv.Atoi(line)
	if err != nil {
		return 0, st, false
	}
	st.Cwd, st.Exports, _ = strings.Cut(rest, "\n")
	return code, st, true
}

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

// InstallScript installs packages with whichever package manager the image
// has (apk, apt-get or dnf). Package names are checked, never quoted into
// something else.
func InstallScript(pkgs []string) (string, error) {
	if len(pkgs) == 0 {
		return "", errors.New("no packages given")
	}
	for _, p := range pkgs {
		if !validPackage(p) {
			return "", fmt.Errorf("invalid package name %q", p)
		}
	}
	list := strings.Join(pkgs, " ")
	return `if command -v apk >/dev/null 2>&1; then apk add --no-progress ` + list + `
elif command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1 || apt-get update -qq || exit $?
  apt-get install -y -qq --no-install-recommends ` + list + `
elif command -v dnf >/dev/null 2>&1; then dnf install -y -q ` + list + `
else echo "no supported package manager (apk, apt-get, dnf) in this image" >&2; exit 127; fi`, nil
}

func validPackage(p string) bool {
	if p == "" || len(p) > 200 || p[0] == '-' {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._+:=~-", c) >= 0) {
			return false
		}
	}
	return true
}

// PythonCommand runs Python source given on stdin.
const PythonCommand = `if command -v python3 >/dev/null 2>&1; then python3 -; elif command -v python >/dev/null 2>&1; then python -; else echo "python3 is not installed in this sandbox (use install)" >&2; exit 127; fi`

// WriteFileScript writes stdin to path, creating parent directories;
// with appendTo it appends instead.
func WriteFileScript(path string, appendTo bool) (string, error) {
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return "", errors.New("path must be a non-empty string without NUL")
	}
	op := ">"
	if appendTo {
		op = ">>"
	}
	p := quote(path)
	return `if [ -d ` + p + ` ]; then echo "is a directory" >&2; (exit 21); else __sbx_d=$(dirname -- ` + p + `) && mkdir -p -- "$__sbx_d" && cat ` + op + p + `; fi`, nil
}

// ReadFileScript prints length bytes of path from offset (length 0: to the
// end), and fails with status 2 (missing) or 21 (directory) and a message.
func ReadFileScript(path string, offset, length int64) (string, error) {
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return "", errors.New("path must be a non-empty string without NUL")
	}
	if offset < 0 || length < 0 {
		return "", errors.New("offset and length must not be negative")
	}
	p := quote(path)
	read := "cat -- " + p
	if offset > 0 {
		read = "tail -c +" + strconv.FormatInt(offset+1, 10) + " -- " + p
	}
	if length > 0 {
		read += " | head -c " + strconv.FormatInt(length, 10)
	}
	return `if [ -d ` + p + ` ]; then echo "is a directory" >&2; (exit 21); elif [ ! -e ` + p + ` ]; then echo "no such file" >&2; (exit 2); elif [ ! -r ` + p + ` ]; then echo "permission denied" >&2; (exit 13); else ` + read + `; fi`, nil
}
