package guest

import (
	"strconv"
	"strings"
)

// ShellVar is in the environment a sandbox's shell starts with (the
// engine's exec sets it): the ID of the server that opened the shell. The
// shell's init unsets it, so the commands it runs do not inherit it, but
// /proc/<pid>/environ of the shell keeps it for as long as it lives. A
// later server that learns the server is gone (its lock file is free)
// finds its shells by it.
const ShellVar = "SANDBOX_MCP_SHELL"

// sweepRunVar is the variable the command frame marks every process of a
// command with (its value the command's run ID, 32 characters).
const sweepRunVar = RunVar

// SweepScript, run as `sh -c SweepScript sh SERVERID...`, ends what the
// given servers (which were killed) left running in the sandbox: their
// shells (processes whose environment carries ShellVar=SERVERID), every
// descendant of those shells, and every process marked with the run ID of
// one of those descendants (which catches a command's processes that left
// the tree with setsid or a double fork). Processes left behind by a
// command that had finished are neither: they are left alone.
//
// It finds them forking nothing (builtins and /proc only), so it works in
// a sandbox with no process slots left: it stops each with SIGSTOP, pass
// after pass until a pass finds none new, so a command that forks cannot
// outrun it. Then it describes them, forking `tr` where it can, and kills
// them all with SIGKILL. Last, it removes the files the servers held for
// batches of writes they never committed (see HoldFileScript), and prints
// "batch SERVERID" for each batch it dropped.
//
// It prints, for each shell found, a line "shell SERVERID PID AGE N" (AGE:
// seconds since the oldest of its N processes besides the shell started),
// then up to 8 lines "cmd PID ARGS" of those processes: first the oldest
// child of the shell (or of a copy of it: a subshell, or a plain `sh`)
// that is not itself a copy, where the command began, then others in the
// order found.
var SweepScript = `ids=" "
for a in "$@"; do case "$a" in *[!0-9a-f]*) ;; ?*) ids="$ids$a ";; esac; done
me=$$
own=" "
shells=
runs=" "
pass=0
while [ "$pass" -lt 200 ]; do
	pass=$((pass+1))
	new=0
	for d in /proc/[0-9]*; do
		p=${d#/proc/}
		case "$p" in "$me"|1) continue ;; esac
		case "$own" in *" $p:"*) continue ;; esac
		` + readStat("line", `"$d/stat"`, "sl") + `
		[ -n "$line" ] || continue
		set -- ${line##*) }
		sh=
		case "$own" in *" $2:"*) sh=${own#*" $2:"}; sh=${sh%% *} ;; esac
		e=
		read -r e <"$d/environ" 2>/dev/null
		if [ -z "$sh" ]; then
			case "$e" in *` + ShellVar + `=*)
				s=${e#*` + ShellVar + `=}; s=${s%"${s#????????????????}"}
				case "$ids" in *" $s "*) [ -n "$s" ] && sh=$p && shells="$shells $p:$s" ;; esac ;;
			esac
		fi
		r=
		case "$e" in *` + sweepRunVar + `=*)
			r=${e#*` + sweepRunVar + `=}; r=${r%"${r#????????????????}"}
			case "$r" in *[!0-9A-Za-z]*|"") r= ;; esac ;;
		esac
		if [ -z "$sh" ] && [ -n "$r" ]; then
			case "$runs" in *" $r:"*) sh=${runs#*" $r:"}; sh=${sh%% *} ;; esac
		fi
		[ -n "$sh" ] || continue
		kill -STOP "$p" 2>/dev/null || { [ "$sh" = "$p" ] && shells=${shells% *}; continue; }
		own="$own$p:$sh "
		new=1
		if [ -n "$r" ] && [ "$p" != "$sh" ]; then
			case "$runs" in *" $r:"*) ;; *) runs="$runs$r:$sh " ;; esac
		fi
	done
	[ "$new" = 0 ] && break
done
up=
read -r up _ </proc/uptime
up=${up%.*}
for e in $shells; do
	s=${e%%:*}
	shc=
	read -r shc <"/proc/$s/cmdline" 2>/dev/null
	n=0; first=; top=; topst=; copies=" $s "
	for f in $own; do
		p=${f%%:*}
		[ "${f#*:}" = "$s" ] && [ "$p" != "$s" ] || continue
		n=$((n+1))
		c=
		read -r c <"/proc/$p/cmdline" 2>/dev/null
		case "$c" in "$shc"|sh) copies="$copies$p " ;; esac
	done
	for f in $own; do
		p=${f%%:*}
		[ "${f#*:}" = "$s" ] && [ "$p" != "$s" ] || continue
		` + readStat("line", `"/proc/$p/stat"`, "sl") + `
		set -- ${line##*) }
		st=${20-}
		case "$st" in ""|*[!0-9]*) continue ;; esac
		{ [ -z "$first" ] || [ "$st" -lt "$first" ]; } && first=$st
		case "$copies" in *" $p "*) continue ;; esac
		case "$copies" in *" $2 "*) ;; *) continue ;; esac
		{ [ -z "$top" ] || [ "$st" -lt "$topst" ]; } && { top=$p; topst=$st; }
	done
	out=
	k=0
	for p in $top ${own}; do
		p=${p%%:*}
		case "$p" in "$top") [ "$k" = 0 ] || continue ;; esac
		case " $own" in *" $p:$s "*) ;; *) continue ;; esac
		[ "$p" != "$s" ] || continue
		k=$((k+1))
		[ "$k" -le 8 ] || break
		c=$(tr '\000\n' '  ' <"/proc/$p/cmdline" 2>/dev/null) || c=
		[ -n "$c" ] || read -r c <"/proc/$p/cmdline" 2>/dev/null
		[ "${#c}" -gt ` + strconv.Itoa(maxSweptArgs) + ` ] && c=${c%"${c#` + strings.Repeat("?", maxSweptArgs) + `}"}
		out="$out
cmd $p $c"
	done
	age=0
	[ -n "$first" ] && [ -n "$up" ] && age=$((up - first / 100))
	printf 'shell %s %s %s %s%s\n' "${e#*:}" "$s" "$age" "$n" "$out"
done
for e in $own; do kill -KILL "${e%%:*}" 2>/dev/null; done
for a in $ids; do
	for m in ` + BatchManifestDir + `/batch-"$a"-*; do
		[ -f "$m" ] || continue
		sh -c ` + quote(DropBatchScript) + ` sh "$m" 2>/dev/null
		rm -f -- "$m"
		echo "batch $a"
	done
done
exit 0
`

// maxSweptArgs bounds the command line SweepScript prints per process.
const maxSweptArgs = 300

// SweptShell is one shell SweepScript ended, with what it was running.
type SweptShell struct {
	Server string // the ID of the server that opened it
	PID    int
	// Age is how long its oldest process had run, in seconds.
	Age int
	// Procs counts its processes besides the shell; Commands are the
	// command lines of the first few, oldest first.
	Procs    int
	Commands []string
}

// ParseSweep parses SweepScript's output. Lines it does not expect are
// skipped (the command lines come from the sandbox, whose processes choose
// their own arguments).
func ParseSweep(out []byte) []SweptShell {
	shells, _ := ParseSweepAll(out)
	return shells
}

// ParseSweepAll is ParseSweep that also returns, by server ID, how many
// batches of writes (see HoldFileScript) the sweep dropped.
func ParseSweepAll(out []byte) ([]SweptShell, map[string]int) {
	batches := map[string]int{}
	var shells []SweptShell
	for _, line := range strings.Split(string(out), "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "shell":
			f := strings.Fields(rest)
			if len(f) != 4 {
				continue
			}
			pid, err1 := strconv.Atoi(f[1])
			age, err2 := strconv.Atoi(f[2])
			n, err3 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			shells = append(shells, SweptShell{Server: f[0], PID: pid, Age: max(age, 0), Procs: n})
		case "cmd":
			pid, args, _ := strings.Cut(rest, " ")
			if _, err := strconv.Atoi(pid); err != nil || len(shells) == 0 {
				continue
			}
			s := &shells[len(shells)-1]
			if len(s.Commands) < 8 {
				s.Commands = append(s.Commands, strings.TrimSpace(args))
			}
		case "batch":
			if id := strings.TrimSpace(rest); len(id) == 16 && isHex(id) {
				batches[id]++
			}
		}
	}
	return shells, batches
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}
