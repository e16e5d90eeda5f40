package main

// In-container helper scripts for `container exec`. They are constants:
// user argv only ever reach them as positional parameters ("$@"), never
// as script text. Shell variables carry a __sa_ prefix so that they cannot
// clash with the user's environment.

// execWrapper runs the user's command the way Apple's exec does and
// reports on fd 3 (a side channel the command never sees):
//
//	p <pid>   the wrapper started (its pid, to forward signals)
//	n         the executable was not found (Apple fails before starting it)
//	x <rc>    the command exited with rc
//	d         stdout/stderr drained: no other process holds them
//	h         still held after the wrapper's own bound (~5 s)
//
// The shell exports PWD (busybox also SHLVL), which the command would not
// otherwise have: the wrapper removes them unless $0 is "sh+" (the user
// set one of them with -e).
// The command is run through env(1) so that it is always the executable
// found on PATH (not a shell builtin) and keeps its own argv[0]; fd 3 is
// closed for it. After it exits, the wrapper polls every 100 ms whether
// any other process in the container still holds the exec's stdout or
// stderr (Apple waits for them to reach EOF); the stand-in enforces the
// 3 s limit by the clock.
const execWrapper = `printf 'p %s\n' "$$" >&3
if [ "$0" = sh ]; then unset PWD SHLVL; fi
__sa_c=$1
__sa_f=
case $__sa_c in
*/*) [ -f "$__sa_c" ] && [ -x "$__sa_c" ] && __sa_f=1 ;;
?*) __sa_p=${PATH-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
  while :; do
    __sa_d=${__sa_p%%:*}
    if [ -f "${__sa_d:-.}/$__sa_c" ] && [ -x "${__sa_d:-.}/$__sa_c" ]; then __sa_f=1; break; fi
    [ "$__sa_p" = "$__sa_d" ] && break
    __sa_p=${__sa_p#*:}
  done ;;
esac
if [ -z "$__sa_f" ]; then printf 'n\n' >&3; exit 127; fi
if [ -x /usr/bin/env ]; then /usr/bin/env -- "$@" 3>&-
elif [ -x /bin/env ]; then /bin/env -- "$@" 3>&-
else "$@" 3>&-
fi
__sa_r=$?
printf 'x %s\n' "$__sa_r" >&3
__sa_n=0
while :; do
  __sa_h=$(exec </dev/null 2>/dev/null; ls -l /proc/[0-9]*/fd | awk -v me="$$" '` + holdersAwk + `')
  if [ "$__sa_h" != 1 ]; then printf 'd\n' >&3; exit "$__sa_r"; fi
  __sa_n=$((__sa_n+1))
  if [ "$__sa_n" -gt 45 ]; then printf 'h\n' >&3; exit "$__sa_r"; fi
  sleep 0.1 </dev/null >/dev/null 2>&1 || sleep 1 </dev/null >/dev/null 2>&1
done
`

// holdersAwk reads `ls -l /proc/*/fd` and prints 1 when a process other
// than the wrapper (pid me) holds the pipe or terminal that is the
// wrapper's stdout or stderr, else 0.
const holdersAwk = `/^\/proc\/[0-9]+\/fd:$/ { split($0, parts, "/"); pid = parts[3]; next }
NF >= 3 && $(NF-1) == "->" {
  if (pid == me) { if ($(NF-2) == "1") o = $NF; else if ($(NF-2) == "2") e = $NF }
  else held[$NF] = 1
}
END {
  h = 0
  if (o ~ /^(pipe:|\/dev\/pts\/)/ && (o in held)) h = 1
  if (e ~ /^(pipe:|\/dev\/pts\/)/ && (e in held)) h = 1
  print h
}`

// signalForwarder delivers signal $1 to the children of process $2 (the
// user's command under the wrapper); run as root in the container.
const signalForwarder = `__sa_k=$(awk -v p="$2" '$1 == "PPid:" && $2 == p { split(FILENAME, parts, "/"); print parts[3] }' /proc/[0-9]*/status 2>/dev/null)
[ -n "$__sa_k" ] && kill -s "$1" $__sa_k 2>/dev/null
exit 0
`
