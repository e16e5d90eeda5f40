package guest

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// ErrNULInCommand is returned for commands that contain a NUL byte, which
// no shell can carry.
var ErrNULInCommand = errors.New("command contains a NUL byte")

// quote single-quotes s for sh.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// InitFrame is written once when a shell starts. It saves the protocol fds,
// runs the caller's init text with its output discarded, and answers with a
// normal frame whose stdout is the shell's PID.
func InitFrame(marker, init string) string {
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

// Command is one command to run in the shell.
type Command struct {
	Command string
	// Stdin is the command's standard input; nil means /dev/null.
	Stdin []byte
	// Workdir, if set, is the directory for this command only.
	Workdir string
}

// CommandFrame builds the text that runs one command in the shell.
// prelude (may be empty) restores shared state before the command; it runs
// with its output discarded.
func CommandFrame(marker string, req Command, prelude string) (string, error) {
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

// State is the shell state kept across commands and shells.
type State struct {
	Cwd     string
	Exports string // `export -p` output, re-input to restore
}

// Restore is the prelude that brings a shell to state s: the exported
// variables it should have, none it should not, and the working directory.
// have lists the variables the shell exports now.
func Restore(s State, have []string) string {
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

// ParseTrailer parses the part of the stdout trailer after the marker and
// space: "<status>\n<cwd>\n<export -p>" (the closing marker line removed).
func ParseTrailer(t string) (code int, st State, ok bool) {
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
