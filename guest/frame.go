package guest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
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

// ShellLine is the command line that runs script with sh, args as $1…,
// each quoted: the way to hand a trusted script words of any content
// through the persistent shell.
func ShellLine(script string, args ...string) string {
	line := "sh -c " + quote(script) + " sh"
	for _, a := range args {
		line += " " + quote(a)
	}
	return line
}

// InitFrame is written once when a shell starts. It saves the protocol fds,
// defines the frame's functions, runs the caller's init text with its output
// discarded, opens /dev/null as nullFD, and answers with a normal frame
// whose stdout is the shell's PID.
//
// The functions are safe in the framing shell because only commands that
// cannot define or remove functions run there (see NeedsIsolation).
func InitFrame(marker, init string, out Outputs) string {
	var b strings.Builder
	b.WriteString("exec 3>&1 4>&2\n")
	if out.Dir == "" {
		out.Dir = OutputsDir
	}
	if out.Stamp == "" {
		out.Stamp = OutputsStamp
	}
	// The paths are written into the function itself: no variable a
	// command can change holds them.
	funcs := strings.ReplaceAll(frameFuncs, "@DIR@", quote(out.Dir))
	b.WriteString(strings.ReplaceAll(funcs, "@STAMP@", quote(out.Stamp)))
	if init != "" {
		b.WriteString("{ command eval " + quote(init) + "; } </dev/null >/dev/null 2>&1 3>&- 4>&-\n")
	}
	// unalias is a builtin of every shell a sandbox's sh is, but for a
	// busybox built without aliases: there it does nothing.
	b.WriteString("\\command -v unalias >/dev/null 2>&1 || unalias() { :; }\n\\unalias -a; \\exec " + nullFD + "</dev/null\n")
	b.WriteString("__sbx_pre " + marker + "; __sbx_rc=0; printf '%s' \"$$\" >&3; __sbx_end " + marker + " 1\n")
	return b.String()
}

// nullFD is the framing shell's fd open on /dev/null, from its start
// (InitFrame): commands take their stdin from a copy of it. Opening
// /dev/null for each command cost a device open that, in a container,
// weighed as much as a tenth of a warm command's round trip. Like fds 3
// and 4 it stays open for good: only commands that cannot redirect the
// shell's own fds run in the framing shell (see NeedsIsolation), and
// every command, isolated or not, inherits it open.
const nullFD = "7"

// restoreFDs follows the frame of every command run in the framing shell
// itself: after the frame's end, while the server reads the answer, it
// opens nullFD on /dev/null again and copies the protocol's pipes (fds 1
// and 2, which the frame's end has just been written to) to fds 3 and 4
// again. NeedsIsolation keeps the commands that could close or move them
// for good out of the framing shell, as far as its reading of the command
// goes; one that got past it (the shell's grammar is larger than that
// reading) would otherwise leave every later command failing on `<&7`
// ("Bad file descriptor") or reading another file, or every isolated one
// without its output, with nothing to replace the shell. What names an
// fd does not show in the text alone (eval, a sourced file, an
// expansion), so it runs after every such command.
const restoreFDs = "exec 3>&1 4>&2 " + nullFD + "</dev/null\n"

// afterCommand is the frame's first line after a command run in the
// framing shell: it keeps the command's status, and removes what the
// isolation check (see NeedsIsolation) cannot see in the command's text
// but may have been set by a value built at run time (bash evaluates a
// variable's value as arithmetic, so $((x)) may assign any name): aliases,
// which bash as sh expands in the frame's own later lines (unalias and
// unset behind a backslash, which no alias replaces), and IFS. Alone on
// its line, it runs before any of those lines is read.
const afterCommand = "__sbx_rc=$?; \\unalias -a; \\unset IFS " + RunVar + "\n"

// A frame's streams, for marker M:
//
//	stdout: [M}<cwd>\n<export -p>] M>\n <output> [\nM=<bg> <cwd>\n<export -p>] \nM <status> <bg> <outputs>\nM.\n
//	stderr: M<\n <output> \nM\n
//	        isolated: M(\n M<\n <output> \nM\n, or M(\n <shell's error> \nM\n when it did not start
//
// The beacons (M> and M<) open the frame: bytes before them were written
// by a process an earlier command left behind, except for the block that
// opens with M}: the state the command starts in, sent when the shell
// loaded changes from the sandbox's stores just before it (see SyncCall).
// The stderr beacon of an isolated command comes from its subshell once
// that runs: it means the command's process exists. The framing shell
// sends M( before it starts the subshell, so that what it writes itself
// when it cannot start one (dash, bash and busybox exit when a fork fails;
// a shell that went on would end the frame without the beacon) is told
// from what processes left behind wrote earlier. The state block comes
// only after a command that may have changed the directory or exports (see
// MayChangeState); an isolated command that ended without reporting its
// state (killed, or replaced by exec) has none either, and the shell state
// is then unchanged. <bg> is 1 when the command started background
// processes, which may still hold its output; <outputs> is 1 when the
// outputs directory changed, or holds a PNG file, since it was last looked
// at (see OutputsDir).

// frameFuncs are the framing shell's own functions: __sbx_pre M opens a
// frame (given a second argument, for an isolated command, with M( on
// stderr in place of the beacon, which the command's subshell sends),
// __sbx_end M S closes it (with the state block when S is 1).
//
// They write the protocol to fds 1 and 2, which in the framing shell are
// always the protocol pipes (fds 3 and 4 are copies): commands that could
// redirect the shell's own fds for good (exec, eval, ...) run isolated,
// and the server's trusted scripts leave them as they found them. Every
// redirection a builtin takes costs the shell a save and a restore of the
// fd, system calls that a VM's exec relay makes dear.
const frameFuncs = `__sbx_pre() { if [ -n "${__sbx_synced-}" ]; then __sbx_synced=; printf '%s}%s\n' "$1" "$PWD"; export -p; fi
printf '%s>\n' "$1"; case $# in 1) printf '%s<\n' "$1" >&2;; *) printf '%s(\n' "$1" >&2;; esac; __sbx_b=${!-}; }
__sbx_end() { case "${!-}" in "$__sbx_b") __sbx_b=0;; *) __sbx_b=1;; esac
if [ "$2" = 1 ]; then printf '\n%s=%s %s\n' "$1" "$__sbx_b" "$PWD"; export -p; fi
__sbx_png=0; if [ -d @DIR@ ]; then if ! [ @STAMP@ -nt @DIR@ ]; then __sbx_png=1; else for __sbx_f in @DIR@/*.[Pp][Nn][Gg]; do [ -e "$__sbx_f" ] || break
if ! [ @STAMP@ -nt "$__sbx_f" ]; then __sbx_png=1; break; fi; done; unset __sbx_f; fi; fi
printf '\n%s %d %s %s\n%s.\n' "$1" "$__sbx_rc" "$__sbx_b" "$__sbx_png" "$1"; printf '\n%s\n' "$1" >&2; }
`

// OutputsDir is the directory whose PNG files come back as images of the
// call that wrote them, and OutputsStamp the file whose time is that of
// the last look at it (the agent's, see agent.OpOutputs). The frame's
// trailer says whether the directory changed, or holds a PNG file, since
// that look (with test's -nt, a shell builtin: no process), so that only
// then the server asks the agent for the files. The Python driver takes
// its directory from OutputsVar, which defaults to the same.
const (
	OutputsDir   = "/tmp/outputs"
	OutputsStamp = "/tmp/.sandbox-mcp/outputs.seen"
	OutputsVar   = "SANDBOX_OUTPUTS"
)

// Outputs names the outputs directory and stamp a shell's frames look at
// (tests use others); zero fields take OutputsDir and OutputsStamp.
type Outputs struct {
	Dir, Stamp string
}

// stateBlock reports the shell's working directory and exports from a
// subshell where the command may have replaced any function. It uses only
// special builtins, which no function can replace, and printf behind a
// backslash (no alias) after removing any function of that name.
func stateBlock(marker, fd string) string {
	return "case \"${!-}\" in \"$__sbx_b\") __sbx_b=0;; *) __sbx_b=1;; esac; \\unset -f printf; " +
		"\\printf '\\n%s=%s %s\\n' " + marker + " \"$__sbx_b\" \"$PWD\" >&" + fd + "; \\export -p >&" + fd
}

// RunVar marks every process of a command (its value is the command's run
// ID), so a timeout or cancel can find and end all of them, including those
// that left the command's process tree.
const RunVar = "SANDBOX_MCP_RUN"

// Command is one command to run in the shell.
type Command struct {
	Command string
	// Stdin is the command's standard input; nil means /dev/null.
	Stdin []byte
	// Workdir, if set, is the directory for this command only.
	Workdir string
	// RunID is exported as RunVar to the command.
	RunID string
	// Each is trusted sh text run first, as is (a call of a function the
	// shell defined at start, such as SyncCall).
	Each string
	// Trusted marks the server's own scripts, written to leave the shell
	// as they found it: they run in the framing shell (forking nothing
	// they do not fork themselves) unless they have stdin.
	Trusted bool
}

// Frame is the text that runs one command, and how it runs.
type Frame struct {
	// Script is the frame's text, all of it unless Tail is set.
	Script string
	// Stdin and Tail, when Tail is set, follow Script: see WriteTo.
	Stdin []byte
	Tail  string
	// Isolated means the command runs in a subshell of the framing shell:
	// a timeout ends that subshell and the shell lives on. Otherwise the
	// command runs in the framing shell itself, and ending it before its
	// end means ending the shell.
	Isolated bool
}

// CommandFrame builds the text that runs one command in the shell.
// prelude (may be empty) restores shared state before the command; it runs
// with its output discarded.
//
// A command that may change the shell in ways other than its working
// directory and exports (options, limits, traps, aliases, functions, exit,
// exec: see NeedsIsolation), or that has stdin, runs in a subshell that
// reports its state when it exits, so nothing else it does outlives it.
// Other commands run in the framing shell itself, which costs no fork.
func CommandFrame(marker string, req Command, prelude string) (Frame, error) {
	if strings.IndexByte(req.Command, 0) >= 0 || strings.IndexByte(req.Workdir, 0) >= 0 {
		return Frame{}, ErrNULInCommand
	}
	if !validRunID(req.RunID) {
		return Frame{}, fmt.Errorf("run id %q: want 8-64 letters or digits", req.RunID)
	}
	var b strings.Builder
	if prelude != "" {
		b.WriteString("{ command eval " + quote(prelude) + "; } </dev/null >/dev/null 2>&1 3>&- 4>&-\n")
	}
	if req.Each != "" {
		b.WriteString(req.Each + "\n")
	}
	// The beacons tell output of this command from output of processes
	// an earlier one left behind; the stderr one also tells a shell that
	// died before the command from one that died during it.
	isolated, changesState := req.Stdin != nil, false
	if !isolated && !req.Trusted {
		isolated, changesState = readings.read(req.Command)
	}
	if isolated {
		// The subshell sends the stderr beacon itself, once it runs:
		// a beacon means the command's process exists, so a kill
		// after it finds it (see shell's exchange).
		b.WriteString("__sbx_pre " + marker + " -\n")
	} else {
		b.WriteString("__sbx_pre " + marker + "\n")
	}
	run := "command eval " + quote(req.Command)
	cd := ""
	if req.Workdir != "" {
		cd = "cd -- " + quote(req.Workdir) + " <&" + nullFD + " 3>&- 4>&- && "
	}
	if !isolated {
		b.WriteString("export " + RunVar + "=" + req.RunID + "\n")
		if cd != "" {
			b.WriteString("__sbx_o=$PWD; ")
		}
		// In the framing shell the command's fds 1 and 2 are the
		// protocol pipes already, and it cannot redirect them for good
		// (see NeedsIsolation): only stdin is pointed away from the
		// frames.
		b.WriteString(cd + run + " <&" + nullFD + "\n" + afterCommand)
		if cd != "" {
			b.WriteString("cd -- \"$__sbx_o\" 2>/dev/null; unset __sbx_o\n")
		}
		state := "0"
		if changesState || MayChangeState(req.Command) {
			state = "1"
		}
		b.WriteString("__sbx_end " + marker + " " + state + "\n")
		b.WriteString(restoreFDs)
		return Frame{Script: b.String()}, nil
	}
	// The subshell reports its state when the command ends, whether by
	// finishing, `exit` or `set -e`: first in line after the command, and
	// from an EXIT trap in case it did not get there. Tracing (`set -x`) is
	// switched off first so none of this shows in the command's stderr.
	// With a workdir for this command only, the directory it started in is
	// reported.
	report := "{ __sbx_rc=$?; \\set +xv; } 2>/dev/null; "
	if cd != "" {
		report += "\\unset -f cd; \\cd -- \"$__sbx_o\" 2>/dev/null; "
	}
	report += "\\unset " + RunVar + "; " + stateBlock(marker, "9") + "; __sbx_done=1; \\exit $__sbx_rc"
	trap := "case \"${__sbx_done-}\" in \"\") " + report + ";; esac"
	// One line (newlines only inside quotes), so a here-document for stdin
	// starts after it.
	// The server's own scripts go on past a write to output nobody reads
	// any more: a server killed while one runs (its stdin then cut short)
	// leaves nothing only if the script gets to its clean-up, and a shell
	// on the server's own pipes has no engine reading its output after
	// the server's death. (A user's command keeps the default: a broken
	// pipe ends it.)
	ignorePipe := ""
	if req.Trusted {
		ignorePipe = "\\trap '' PIPE; "
	}
	sub := "( \\printf '%s<\\n' " + marker + " >&2; \\trap " + quote(trap) + " EXIT; " + ignorePipe + "__sbx_done=; __sbx_b=${!-}; __sbx_o=$PWD; export " + RunVar + "=" + req.RunID + "; " +
		cd + run + " >&3 2>&4 3>&- 4>&-; " + report + "; ) 9>&3"
	if req.Stdin != nil {
		// A pipe, not a file: the command's own disk pressure cannot
		// truncate its input, and nothing is left behind.
		// The here-document's body (stdin in base64) is written between
		// Script and Tail, as it is encoded: never whole in memory.
		b.WriteString("base64 -d <<'" + marker + "' 2>/dev/null 3>&- 4>&- | " + sub + "\n")
		tail := marker + "\n__sbx_rc=$?; __sbx_end " + marker + " 0\n"
		return Frame{Script: b.String(), Stdin: req.Stdin, Tail: tail, Isolated: true}, nil
	}
	b.WriteString(sub + " <&" + nullFD + "\n")
	b.WriteString("__sbx_rc=$?; __sbx_end " + marker + " 0\n")
	return Frame{Script: b.String(), Isolated: true}, nil
}

// WriteTo writes the whole frame to w: Script, then Stdin as the body of
// a here-document (base64, 76 columns, encoded in pieces), then Tail.
func (f Frame) WriteTo(w io.Writer) (int64, error) {
	var n int64
	m, err := io.WriteString(w, f.Script)
	n += int64(m)
	if err != nil || f.Tail == "" {
		return n, err
	}
	const lineBytes = 57 // 76 base64 columns
	const linesPerChunk = 1024
	buf := make([]byte, 0, linesPerChunk*77)
	in := f.Stdin
	for len(in) > 0 {
		buf = buf[:0]
		for i := 0; i < linesPerChunk && len(in) > 0; i++ {
			k := min(lineBytes, len(in))
			buf = base64.StdEncoding.AppendEncode(buf, in[:k])
			buf = append(buf, '\n')
			in = in[k:]
		}
		m, err = w.Write(buf)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	m, err = io.WriteString(w, f.Tail)
	return n + int64(m), err
}

// Text is the whole frame as one string (for tests and small frames).
func (f Frame) Text() string {
	var b strings.Builder
	_, _ = f.WriteTo(&b)
	return b.String()
}

func validRunID(id string) bool {
	if len(id) < 8 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
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
		if !want[n] && validVarName(n) && restorable(Export{Name: n}) {
			b.WriteString("unset " + n + "\n")
		}
	}
	for _, e := range ParseExports(s.Exports) {
		if restorable(e) {
			b.WriteString(e.Stmt + "\n")
		}
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

// KillRunScript, run as `sh -c KillRunScript sh SHELLPID RUNID SELF`, ends
// one command: every descendant of the shell SHELLPID (the shell itself
// only when SELF is 1) and every process whose environment carries
// RunVar=RUNID (one that left the command's tree), with their
// descendants. An empty RUNID ends the shell's descendants only.
//
// It stops them before it kills them, pass after pass over /proc, so a
// command that forks (a fork bomb) cannot outrun it: the shell itself
// first when SELF is 1, then its descendants as the kernel lists each
// process's children (at once, however many other processes the machine
// runs), then its tree again, pass after pass reading each process's stat
// only, until two passes in a row find nothing new; the second pass is
// there because a process stopped while it forked shows its child only to
// a later pass. The tree is killed then, so the command ends at once, and
// the processes that left it are looked for next: each other process's
// environment is read once (the costly part on a machine with many
// processes), and those found are stopped with their own trees, then
// killed. A process is killed once: a PID freed by the kill may be another
// process's by the end. Membership is kept in variables (t_PID), so a pass
// costs the same per process however many there are. It forks nothing
// (builtins and /proc only), so it works in a sandbox that has no free
// process slots left.
const KillRunScript = `__sbx_ks=$1; __sbx_ki=$2; __sbx_kself=$3
` + killBody + `exit 0
`

// KillRunInShell is KillRunScript as text for another idle shell of the
// same machine to run: no process to start, so it is fast and works when
// the machine has no free process slot. It leaves nothing behind in that
// shell: its variables are unset at the end. runID must be letters and
// digits (or empty); pid is the shell running the command.
func KillRunInShell(pid int, runID string, self bool) string {
	if runID != "" && !validRunID(runID) {
		runID = "invalid"
	}
	s := "0"
	if self {
		s = "1"
	}
	return "__sbx_ks=" + strconv.Itoa(pid) + "; __sbx_ki=" + runID + "; __sbx_kself=" + s + "\n" + killBody +
		"for __sbx_p in $__sbx_kl; do unset __sbx_t_$__sbx_p __sbx_s_$__sbx_p; done\n" +
		"for __sbx_p in $__sbx_cl; do unset __sbx_c_$__sbx_p; done\n" +
		"unset __sbx_ks __sbx_ki __sbx_kself __sbx_kl __sbx_kn __sbx_cl __sbx_q __sbx_w __sbx_c __sbx_tf __sbx_k __sbx_v __sbx_pass __sbx_new __sbx_quiet __sbx_env __sbx_d __sbx_p __sbx_line __sbx_rest __sbx_st __sbx_pp __sbx_hit __sbx_e\n"
}

// killBody finds, stops and kills every process of one command (see
// KillRunScript), with variables of its own prefix and parameter
// expansion only (no set, no exit), so it can run in a shell that lives
// on. __sbx_env is 0 while the passes follow the tree and 1 once they
// read environments too.
const killBody = `# __sbx_t_PID is set for every process found to belong to the command,
# __sbx_s_PID once it was sent a STOP, __sbx_c_PID for every other process
# whose environment was read.
eval "__sbx_t_$__sbx_ks=1"; __sbx_kl=" $__sbx_ks"; __sbx_kn=$__sbx_kl; __sbx_cl=
if [ "$__sbx_kself" = 1 ]; then eval "__sbx_s_$__sbx_ks=1"; kill -STOP "$__sbx_ks" 2>/dev/null; fi
# The shell's descendants are stopped first through the kernel's lists of
# each process's children (per thread), where it keeps them: at once, not
# when a pass over every process (long, on a loaded machine) gets to them.
# The passes find what this misses (a kernel without the lists, processes
# that left the tree).
__sbx_q=" $__sbx_ks"; __sbx_w=0
while [ -n "$__sbx_q" ] && [ "$__sbx_w" -lt 2000 ]; do
	__sbx_p=${__sbx_q##* }; __sbx_q=${__sbx_q% *}; __sbx_w=$((__sbx_w+1))
	__sbx_line=
	for __sbx_tf in /proc/$__sbx_p/task/*/children; do
		__sbx_e=
		read -r __sbx_e 2>/dev/null <"$__sbx_tf"
		__sbx_line="$__sbx_line $__sbx_e"
	done
	for __sbx_c in $__sbx_line; do
		case $__sbx_c in *[!0-9]*|"$$") continue ;; esac
		eval "[ -z \"\${__sbx_t_$__sbx_c-}\" ]" || continue
		eval "__sbx_t_$__sbx_c=1; __sbx_s_$__sbx_c=1"; __sbx_kl="$__sbx_kl $__sbx_c"; __sbx_kn="$__sbx_kn $__sbx_c"
		kill -STOP "$__sbx_c" 2>/dev/null
		__sbx_q="$__sbx_q $__sbx_c"
	done
done
# A shell that goes is killed now, where the kernel lists children: its
# own are stopped and known already, and nothing (another SIGCONT) can let
# it run on while the passes go. Without the lists it is killed with the
# rest, its children found by their parent first.
if [ "$__sbx_kself" = 1 ] && [ -r "/proc/$__sbx_ks/task/$__sbx_ks/children" ]; then
	kill -9 "$__sbx_ks" 2>/dev/null; __sbx_kn=${__sbx_kn# "$__sbx_ks"}
fi
__sbx_pass=0; __sbx_quiet=0; __sbx_env=0
while :; do
	__sbx_pass=$((__sbx_pass+1))
	__sbx_new=0
	for __sbx_d in /proc/[0-9]*; do
		__sbx_p=${__sbx_d#/proc/}
		case $__sbx_p in *[!0-9]*) continue ;; esac
		[ "$__sbx_p" = "$$" ] && continue
		[ "$__sbx_p" = "$__sbx_ks" ] && [ "$__sbx_kself" != 1 ] && continue
		__sbx_line=
		read -r __sbx_line 2>/dev/null <"$__sbx_d/stat" || continue
		__sbx_rest=${__sbx_line##*) }
		__sbx_st=${__sbx_rest%% *}
		__sbx_rest=${__sbx_rest#* }
		__sbx_pp=${__sbx_rest%% *}
		# A process may put a newline in its own name, which cuts its stat
		# line short: what follows is then text it chose, and must reach
		# no eval. A whole line has some fifty fields, and a name of
		# fifteen bytes cannot forge ten; a line with fewer is read from
		# status instead, which escapes the name.
		case $__sbx_pp in
		''|*[!0-9]*) __sbx_pp= ;;
		*) case $__sbx_rest in *' '*' '*' '*' '*' '*' '*' '*' '*' '*' '*) ;; *) __sbx_pp= ;; esac ;;
		esac
		if [ -z "$__sbx_pp" ]; then
			__sbx_st=
			while read -r __sbx_k __sbx_v __sbx_rest; do
				case $__sbx_k in State:) __sbx_st=$__sbx_v ;; PPid:) __sbx_pp=$__sbx_v; break ;; esac
			done 2>/dev/null <"$__sbx_d/status"
			case $__sbx_pp in ''|*[!0-9]*) continue ;; esac
		fi
		__sbx_hit=
		eval "[ -n \"\${__sbx_t_$__sbx_p-}\${__sbx_t_$__sbx_pp-}\" ]" && __sbx_hit=1
		if [ -z "$__sbx_hit" ] && [ "$__sbx_env" = 1 ] && eval "[ -z \"\${__sbx_c_$__sbx_p-}\" ]"; then
			eval "__sbx_c_$__sbx_p=1"; __sbx_cl="$__sbx_cl $__sbx_p"
			__sbx_e=
			read -r __sbx_e 2>/dev/null <"$__sbx_d/environ"
			case "$__sbx_e" in *"` + RunVar + `=$__sbx_ki"*) __sbx_hit=1 ;; esac
		fi
		[ -n "$__sbx_hit" ] || continue
		if eval "[ -z \"\${__sbx_t_$__sbx_p-}\" ]"; then
			eval "__sbx_t_$__sbx_p=1"; __sbx_kl="$__sbx_kl $__sbx_p"; __sbx_kn="$__sbx_kn $__sbx_p"; __sbx_new=1
		fi
		case "$__sbx_st" in T|t|Z|X) continue ;; esac
		# A STOP sent again counts as progress only to a running
		# process, which may be inside a fork: one traced or in
		# uninterruptible sleep may not stop for a long time, and would
		# hold the passes to their cap.
		if eval "[ -z \"\${__sbx_s_$__sbx_p-}\" ]"; then
			eval "__sbx_s_$__sbx_p=1"
			kill -STOP "$__sbx_p" 2>/dev/null && __sbx_new=1
		elif [ "$__sbx_st" = R ]; then
			kill -STOP "$__sbx_p" 2>/dev/null && __sbx_new=1
		fi
	done
	# At the cap the passes go on as if quiet: the tree is killed and
	# the environments are read once all the same.
	if [ "$__sbx_new" = 1 ] && [ "$__sbx_pass" -lt 200 ]; then __sbx_quiet=0; continue; fi
	__sbx_quiet=$((__sbx_quiet+1))
	[ "$__sbx_quiet" -lt 2 ] && [ "$__sbx_pass" -lt 200 ] && continue
	if [ "$__sbx_env" = 1 ] || [ -z "$__sbx_ki" ]; then break; fi
	` + killMembers + `
	__sbx_env=1; __sbx_quiet=0
done
` + killMembers + `
`

// killMembers kills the processes found since it last ran (not the shell
// when it is to live on).
const killMembers = `for __sbx_p in $__sbx_kn; do
	[ "$__sbx_p" = "$__sbx_ks" ] && [ "$__sbx_kself" != 1 ] && continue
	kill -9 "$__sbx_p" 2>/dev/null
done; __sbx_kn=`

// ParseState parses a frame's state block (after the marker and "="):
// "<bg> <cwd>\n<export -p>". bg reports that the command started background
// processes.
func ParseState(t string) (st State, bg bool, ok bool) {
	line, exports, found := strings.Cut(t, "\n")
	if !found {
		return st, false, false
	}
	flag, cwd, found := strings.Cut(line, " ")
	if !found || (flag != "0" && flag != "1") {
		return st, false, false
	}
	return State{Cwd: cwd, Exports: exports}, flag == "1", true
}

// Status is a frame's trailer.
type Status struct {
	Code int
	// BG: the command started background processes.
	BG bool
	// Outputs: the outputs directory changed, or holds a PNG file, since
	// the agent last looked (OutputsStamp).
	Outputs bool
}

// ParseStatus parses a frame's trailer (after the marker and space):
// "<status> <bg> <outputs>".
func ParseStatus(t string) (Status, bool) {
	f := strings.Fields(t)
	if len(f) != 3 || (f[1] != "0" && f[1] != "1") || (f[2] != "0" && f[2] != "1") || len(t) > 64 {
		return Status{}, false
	}
	code, err := strconv.Atoi(f[0])
	return Status{Code: code, BG: f[1] == "1", Outputs: f[2] == "1"}, err == nil
}
