package guest

import (
	"strconv"
	"time"
)

// ActivityFile is touched whenever the sandbox is used; the watchdog
// stops the sandbox when it has not been touched for the idle TTL.
const ActivityFile = "/var/lib/sandbox-mcp/active"

// TouchActivity marks the sandbox as in use. The usual path forks
// nothing: a sandbox whose process table is full (a fork bomb) is still
// marked, so its watchdog never takes it for idle. The writes go through
// `command`, so that one that fails (the directory removed) is a failed
// command, not the end of the shell (a redirection of a special builtin
// that fails ends a POSIX shell), and the directory is made again.
const TouchActivity = `command : 2>/dev/null >` + ActivityFile + ` || { mkdir -p /var/lib/sandbox-mcp && command : >` + ActivityFile + `; }`

// WatchdogCommand is the sandbox's main process when it has an idle TTL
// or an end of life (until, non-zero: a child sandbox's TTL). Every
// interval it checks whether ActivityFile has gone untouched for ttl (0:
// never idle) or the clock has passed until, and then exits with ExitIdle
// or ExitLifetime (a stop's signal ends it with 0), which stops the
// container and frees its memory, whether or not a server is running. A
// later first use starts the container again (a server destroys an
// expired child instead).
//
// A fork bomb that fills the sandbox's process table must not take the
// watchdog with it, so where the image's shell allows, the main process
// forks nothing after its start: bash (or a shell with $EPOCHSECONDS and
// `read -t`, as busybox's ash) reads the clock from a variable, waits on
// a fifo's read with a timeout, and tells a touch of ActivityFile by
// comparing its time with a file it writes itself (`-nt`), all builtins
// (watchdogLoop). Elsewhere (dash alone, bash before 4.2) a child process does the checks
// with date, sleep and stat; if a full table kills it, the main process
// stays up, blocked on the fifo, and the sandbox only loses its idle stop
// and end of life. Either way a check decides only on clock readings it
// really got: a lost reading skips the check, never stops a sandbox in
// use.
func WatchdogCommand(ttl, interval time.Duration, until time.Time) []string {
	secs := func(d time.Duration) string { return strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second))) }
	t, end := "0", "0"
	if ttl > 0 {
		t = secs(ttl)
	}
	if !until.IsZero() {
		end = strconv.FormatInt(max(1, until.Unix()), 10)
	}
	return []string{"sh", "-c", watchdogScript, "sandbox-mcp-watchdog", t, secs(interval), end}
}

// PooledWatchdogCommand is WatchdogCommand for a sandbox booted ahead
// into a pool that a cluster keeps (agent-sandbox's warm pools): its idle
// time counts from the first mark of use (TouchActivity), not from its
// start, so that one waiting unclaimed is not stopped, and replaced by
// the pool at once, every ttl.
func PooledWatchdogCommand(ttl, interval time.Duration) []string {
	return append(WatchdogCommand(ttl, interval, time.Time{}), "armed-by-use")
}

// The exit codes of a sandbox's main process when its watchdog stopped
// it: the engine keeps them with the stopped container, so that a stop by
// the watchdog tells itself from a stop by a person or a server (which
// ends the main process with 0). The script spells them out (its tests
// hold the two to each other).
const (
	ExitIdle     = 3 // unused for its idle TTL
	ExitLifetime = 4 // past its end of life
)

// ActivitySeenFile is where the fork-free watchdog keeps the time of the
// last touch of ActivityFile it saw: it writes the file when it sees one
// (ActivityFile newer than it), and counts the idle time from then.
const ActivitySeenFile = ActivityFile + ".seen"

// watchdogLoop is the watchdog's fork-free form, run as the main process
// itself (eval'd by a shell that has $EPOCHSECONDS, or exec'd as `bash
// -c`) with the watchdog's arguments. Every command in it is a builtin:
// the clock is $EPOCHSECONDS (bash 5, busybox ash) or bash's printf -v
// with %(%s)T (bash 4.2 on); the wait between checks is a `read -t` of
// the fifo, open for reading and writing on fd 3 so that it never sees an
// end; a touch of ActivityFile shows as a time newer than
// ActivitySeenFile's, which the loop writes with `: >` on seeing one
// (busybox's -nt compares whole seconds, so a touch within the second of
// that write goes unseen; the server marks a sandbox in use every third of
// its TTL, and the next mark is seen; and busybox's -nt is false when the
// second file is missing, so a missing ActivitySeenFile counts as a touch,
// as a missing ActivityFile does; and the idle time must pass the TTL by
// more than a second, which busybox's whole seconds can lose). Its writes
// go through `command`, so that one that fails (the directory removed by a
// user) does not end the shell, which a POSIX shell does for a failed
// redirection of a special builtin. It holds no single quote: the
// launcher keeps it in a single-quoted variable.
const watchdogLoop = `set +euC; ttl=$1; every=$2; until=${3:-0}; f=` + ActivityFile + `; seen=` + ActivitySeenFile + `; fifo=${f%/*}/watchdog.fifo
trap "exit 0" TERM INT
exec 3<>"$fifo"
clock() { now=${EPOCHSECONDS:-}; [ -n "$now" ] || printf -v now "%(%s)T" -1 2>/dev/null || now=; }
command : 2>/dev/null >"$seen"; last=
while :; do
  clock
  case $now in ""|*[!0-9]*) ;; *)
    if [ "$until" -gt 0 ] && [ "$now" -ge "$until" ]; then exit 4; fi
    if [ -z "$last" ] || [ "$f" -nt "$seen" ] || [ ! -e "$f" ] || [ ! -e "$seen" ]; then last=$now; command : 2>/dev/null >"$seen"; fi
    if [ "$ttl" -gt 0 ] && [ $((now - last)) -gt "$ttl" ]; then exit 3; fi;;
  esac
  read -r -t "$every" _ <&3
done`

// watchdogScript starts the watchdog: it marks the sandbox in use, makes
// the fifo, and runs watchdogLoop where the shell can: in place when it
// has $EPOCHSECONDS and `read -t` (busybox's ash; dash with the variable
// in its environment has no `read -t`), else through bash when the image
// has one that reads the clock without a fork (4.2 on), exec'd in place
// through env, which keeps the environment's BASH_ENV, shell options,
// POSIXLY_CORRECT and a stale EPOCHSECONDS (bash before 5 takes one from
// the environment) from it (a `set -e` there would end the loop at its
// first timed read).
// Otherwise it forks the checker loop and waits for it.
const watchdogScript = `ttl=$1; every=$2; until=${3:-0}; f=` + ActivityFile + `; fifo=${f%/*}/watchdog.fifo
set +euC
mkdir -p "${f%/*}" && { [ "${4:-}" = armed-by-use ] || command : 2>/dev/null >"$f"; }
rm -f "$fifo"; mkfifo "$fifo" 2>/dev/null
trap 'exit 0' TERM INT
w='` + watchdogLoop + `'
if [ -p "$fifo" ]; then
  if [ -n "${EPOCHSECONDS:-}" ] && { read -t 1 _ </dev/null; [ $? -eq 1 ]; } 2>/dev/null; then eval "$w"; fi
  if command -v bash >/dev/null 2>&1 && command -v env >/dev/null 2>&1 &&
    env -u BASH_ENV -u ENV -u SHELLOPTS -u BASHOPTS -u POSIXLY_CORRECT -u EPOCHSECONDS bash -c '[ -n "${EPOCHSECONDS:-}" ] || printf -v n "%(%s)T" -1' >/dev/null 2>&1; then
    exec env -u BASH_ENV -u ENV -u SHELLOPTS -u BASHOPTS -u POSIXLY_CORRECT -u EPOCHSECONDS bash -c "$w" sandbox-mcp-watchdog "$@"
  fi
fi
(
  while :; do
    now=$(date +%s) || continue
    case $now in ''|*[!0-9]*) continue;; esac
    if [ "$until" -gt 0 ] && [ "$now" -ge "$until" ]; then exit 4; fi
    sleep "$every"
    [ "$ttl" -gt 0 ] || continue
    now=$(date +%s) && last=$(stat -c %Y "$f" 2>/dev/null || echo "$now") || continue
    case $now:$last in :*|*:|*[!0-9:]*) continue;; esac
    if [ $((now - last)) -ge "$ttl" ]; then exit 3; fi
  done
) </dev/null >/dev/null 2>&1 &
wait $!
rc=$?
case $rc in 3|4) exit $rc;; esac
while :; do read -r _ <"$fifo"; done`

// KillWritersScript, run as `sh -c KillWritersScript sh [STARTED_BY]`,
// stops every process in a container except PID 1, the main process
// (PID 1's first child), the idle watchdog's checker (the main process's
// child) and the exec sessions (the shells, whose parent is outside the
// container): what the user's commands and jobs started. The disk watcher
// runs it. With STARTED_BY (a start time in clock ticks since boot, as
// field 22 of /proc/PID/stat reads), processes that started later are
// spared: the script runs a while after the watcher chose to stop the
// writers, and the user's next command (an `rm`) may have begun meanwhile.
// STARTED_BY is read on the server's kernel: unless the script's own start
// comes after it by less than the watcher's 30 s bound on a kill (the
// engine runs on another kernel, a VM's or a remote one, whose clock
// tells nothing of the server's), it is ignored and every writer stops.
// A writer's children forked between STARTED_BY and its death are spared;
// the watcher's next pass stops them if they keep writing.
const KillWritersScript = `self=$$ by=${1:-}
case $by in *[!0-9]*) by=;; esac
stat_of() { s=$(cat /proc/$1/stat 2>/dev/null) || return 1; s=${s##*) }; set -- $s; pp=$2 st=${20}; }
if [ -n "$by" ]; then
  stat_of "$self" && [ "$by" -le "$st" ] && [ $((st - by)) -le 3000 ] || by=
fi
dog=
for d in /proc/[0-9]*; do p=${d#/proc/}
  stat_of "$p" || continue
  [ "$pp" = 1 ] && { [ -z "$dog" ] || [ "$p" -lt "$dog" ]; } && dog=$p
done
for d in /proc/[0-9]*; do p=${d#/proc/}
  case $p in 1|"$self"|"$dog") continue;; esac
  stat_of "$p" || continue
  case $pp in 0|"$self"|"$dog") continue;; esac
  [ -n "$by" ] && [ "$st" -gt "$by" ] && continue
  kill -9 "$p" 2>/dev/null
done
exit 0`
