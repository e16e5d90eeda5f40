package guest

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Background jobs live in a directory of their own inside the sandbox:
//
//	pid   the job's process id, which also leads its session and process group
//	log   its stdout and stderr, appended
//	rc    its exit status, written when it ends (128+N when killed by signal N)
//	boot  which boot of the container started it (see jobBoot)
//
// The scripts below run in a sandbox's persistent shell, so a job starts
// with the shell's directory and exported variables. A job holds none of
// the shell's pipes and is not the shell's descendant (it is started by a
// double fork), so neither closing a shell nor killing a command's process
// tree touches it, and Apple's exec never waits for it.
//
// Every process of a job carries JobMarker(id) in its environment from the
// start, inherited by everything it forks, including processes that leave
// its session (setsid, daemons). The job's processes are those that carry
// the marker and those in a session that one of them leads (a child that
// cleared its environment stays in its parent's session; only a session
// led by a marked process counts, so a marker set by hand on a process
// in some other session does not take that session along). The sweep
// that finds them reads /proc with shell builtins only, so it works while
// the job holds every process the sandbox may have.

// JobsDir is where job directories are kept.
const JobsDir = "/var/lib/sandbox-mcp/jobs"

// JobMarkerVar is the environment variable that marks a job's processes;
// its value is the job's id.
const JobMarkerVar = "SANDBOX_MCP_JOB"

// JobMarker is the environment entry every process of job id carries.
func JobMarker(id string) string { return JobMarkerVar + "=" + id }

// JobDir is the directory of the job with the given id.
func JobDir(id string) string { return JobsDir + "/" + id }

// jobIDRE: ids have one fixed length, so no id's marker is a prefix of
// another's (the sweep reads a process's environment as one string).
var jobIDRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

func checkJobID(id string) error {
	if !jobIDRE.MatchString(id) {
		return fmt.Errorf("job id %q: want 16 lowercase hex digits", id)
	}
	return nil
}

// JobStartScript starts command as a background job in dir (made fresh),
// in workdir when set, and prints its pid. It fails with status 127 when
// the sandbox lacks setsid, 2 when workdir does not exist.
func JobStartScript(id, workdir, command string) (string, error) {
	if err := checkJobID(id); err != nil {
		return "", err
	}
	if strings.IndexByte(command, 0) >= 0 || strings.IndexByte(workdir, 0) >= 0 {
		return "", ErrNULInCommand
	}
	if strings.TrimSpace(command) == "" {
		return "", errors.New("command is empty")
	}
	d := quote(JobDir(id))
	var b strings.Builder
	b.WriteString(`if ! command -v setsid >/dev/null 2>&1; then echo "setsid is not installed in this sandbox (util-linux or busybox provides it)" >&2; (exit 127)`)
	if workdir != "" {
		w := quote(workdir)
		b.WriteString(`; elif [ ! -d ` + w + ` ]; then echo "no such directory: "` + w + ` >&2; (exit 2)`)
	}
	b.WriteString(`; elif ! { rm -rf -- ` + d + ` && mkdir -p -- ` + d + ` && : >` + d + `/log; }; then (exit 1); else `)
	b.WriteString(jobBoot + `; echo "$__sbx_b" >` + d + `/boot; unset __sbx_b __sbx_i __sbx_l; `)
	if workdir != "" {
		b.WriteString(`__sbx_jw=$PWD; cd -- ` + quote(workdir) + `; `)
	}
	// The outer ( … & ) returns at once, so the waiter is reparented to the
	// sandbox's init; setsid makes the job leader its own session and
	// process group. The marker is in the leader's environment from its
	// exec on; the waiter does not carry it, so a kill never ends the
	// waiter before it records the exit status.
	// The waiter is a fresh sh, not a fork of the framing shell: a fork
	// keeps the shell's environment block, server ID included, and would
	// pass for that server's shell (see SweepScript).
	// The job is no part of the command that started it: a timeout of
	// that command must not end it.
	// The waiter records the status with builtins only (one short write,
	// no rename): a job that filled the process table leaves no slot for
	// an mv, and its status must not be lost for that.
	leader := `echo $$ >"$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid" && exec sh -c "$2"`
	waiter := JobMarker(id) + ` setsid sh -c ` + quote(leader) + ` sh "$1" "$2" </dev/null >>"$1/log" 2>&1 & p=$!; wait $p; echo $? >"$1/rc"`
	b.WriteString(`( ( unset ` + RunVar + `; exec sh -c ` + quote(waiter) + ` sh ` + d + ` ` + quote(command) + ` ) </dev/null >/dev/null 2>&1 & ); `)
	if workdir != "" {
		b.WriteString(`cd -- "$__sbx_jw"; unset __sbx_jw; `)
	}
	b.WriteString(`__sbx_ji=0; while [ ! -s ` + d + `/pid ] && [ $__sbx_ji -lt 500 ]; do sleep 0.01 2>/dev/null || sleep 1; __sbx_ji=$((__sbx_ji+1)); done; unset __sbx_ji; `)
	// Builtins only once the job runs: a job that forks without end (a
	// fork bomb) leaves no process slot for a `cat`.
	b.WriteString(`if [ -s ` + d + `/pid ]; then read -r __sbx_jp <` + d + `/pid; echo "$__sbx_jp"; unset __sbx_jp; else echo "the job did not start" >&2; (exit 1); fi; fi`)
	return b.String(), nil
}

// jobSweep is the forkless sweep (see the top of this file). Before it:
// __sbx_j holds the marker, __sbx_lp the leader's pid (or -). It leaves
// in __sbx_f the pids found (" 12 34 "), in __sbx_n their number and in
// __sbx_lv 1 when the leader is among them. With stop, each process is
// stopped as it is found.
//
// A pass reads every /proc/PID/stat (state and session) and, for a
// process not in a session led by a process found, its environ; it repeats until a pass
// finds nothing new, so what the job forks meanwhile is found too. When
// stopping, nothing found can fork again, and the sweep ends once the
// job has no running process left outside the list. Zombies are skipped:
// they are already dead.
func jobSweep(stop bool) string {
	act := ""
	if stop {
		act = "\t\tkill -s STOP \"$__sbx_q\" 2>/dev/null\n"
	}
	return `__sbx_f=' '; __sbx_s=' '; __sbx_n=0; __sbx_lv=0; __sbx_a=1; __sbx_i=0
while [ $__sbx_a = 1 ] && [ $__sbx_i -lt 100 ]; do
	__sbx_a=0; __sbx_i=$((__sbx_i+1))
	for __sbx_p in /proc/[0-9]*; do
		__sbx_q=${__sbx_p#/proc/}
		case "$__sbx_f" in *" $__sbx_q "*) continue ;; esac
		[ "$__sbx_q" = "$$" ] && continue
		` + readStat("__sbx_l", `"$__sbx_p/stat"`, "__sbx_sl") + `
		__sbx_r=${__sbx_l##*) }
		case "$__sbx_r" in ''|Z*|X*|x*) continue ;; esac
		__sbx_r=${__sbx_r#* }; __sbx_r=${__sbx_r#* }; __sbx_r=${__sbx_r#* }; __sbx_d=${__sbx_r%% *}
		__sbx_h=0
		case "$__sbx_s" in *" $__sbx_d "*) __sbx_h=1 ;; esac
		if [ $__sbx_h = 0 ]; then
			__sbx_l=
			while IFS= read -r __sbx_l || [ -n "$__sbx_l" ]; do
				case "$__sbx_l" in *"$__sbx_j"*) __sbx_h=1; break ;; esac
				__sbx_l=
			done 2>/dev/null <"$__sbx_p/environ"
		fi
		[ $__sbx_h = 1 ] || continue
` + act + `		__sbx_f="$__sbx_f$__sbx_q "; __sbx_n=$((__sbx_n+1)); __sbx_a=1
		[ "$__sbx_q" = "$__sbx_lp" ] && __sbx_lv=1
		[ "$__sbx_q" = "$__sbx_d" ] && case "$__sbx_s" in *" $__sbx_d "*) ;; *) __sbx_s="$__sbx_s$__sbx_d " ;; esac
	done
done
`
}

// readStat is shell text that reads a /proc/PID/stat file (path, quoted
// as the shell needs) into variable v, with tmp as a scratch variable and
// builtins only: its last line, or nothing when that has no ") ". A
// process may put a newline in its own name: a single read stops there,
// and the fields after the name's ") " would be text the process chose (a
// session, a parent of its choosing). The fields the kernel writes after
// the name are on the last line, whole; and that line is read in one go
// from one rendering of the file (bash reads /proc files in blocks and
// seeks back, so its lines may come from renderings made at different
// moments, under different names).
func readStat(v, path, tmp string) string {
	return v + "=; " + tmp + "=; { while IFS= read -r " + tmp + " || [ -n \"$" + tmp + "\" ]; do " +
		v + "=$" + tmp + "; " + tmp + "=; done <" + path + "; } 2>/dev/null; case \"$" + v + "\" in *') '*) ;; *) " + v + "= ;; esac"
}

// jobBoot sets __sbx_b to what tells one boot of the container from the
// next: the kernel's boot id (a VM's own) and the start time of PID 1.
// It uses builtins only.
const jobBoot = `__sbx_b=; __sbx_l=; { IFS= read -r __sbx_b </proc/sys/kernel/random/boot_id; IFS= read -r __sbx_l </proc/1/stat; } 2>/dev/null; ` +
	`__sbx_l=${__sbx_l##*) }; __sbx_i=0; while [ $__sbx_i -lt 19 ]; do __sbx_l=${__sbx_l#* }; __sbx_i=$((__sbx_i+1)); done; __sbx_b="$__sbx_b-${__sbx_l%% *}"`

// jobAwaitRC: when the leader is gone without an exit status in the boot
// that started it, its waiter is about to write the status; give it a
// second. After a restart, nothing will: the job is lost at once.
func jobAwaitRC(d string) string {
	return `if [ "$__sbx_rc" = - ] && [ $__sbx_lv = 0 ] && [ -d ` + d + ` ]; then
	` + jobBoot + `; __sbx_l=; [ -f ` + d + `/boot ] && { IFS= read -r __sbx_l <` + d + `/boot; } 2>/dev/null
	if [ "$__sbx_l" = "$__sbx_b" ]; then __sbx_i=0; __sbx_d=
		while [ ! -s ` + d + `/rc ] && [ $__sbx_i -lt 20 ]; do
			if sleep 0.05 2>/dev/null; then __sbx_i=$((__sbx_i+1)); continue; fi
			# No process slot for a sleep: count two seconds on the clock.
			__sbx_r=; { read -r __sbx_r __sbx_h </proc/uptime; } 2>/dev/null; __sbx_r=${__sbx_r%%.*}
			case "$__sbx_r" in ''|*[!0-9]*) break ;; esac
			[ -n "$__sbx_d" ] || __sbx_d=$((__sbx_r+2))
			[ "$__sbx_r" -lt "$__sbx_d" ] || break
		done
	fi
	` + strings.TrimSuffix(readRC(d), "\n") + `
fi
`
}

// jobSweepVars are the variables jobSweep and its callers leave behind.
const jobSweepVars = "__sbx_j __sbx_lp __sbx_f __sbx_s __sbx_n __sbx_lv __sbx_a __sbx_i __sbx_p __sbx_q __sbx_l __sbx_r __sbx_d __sbx_h __sbx_rc __sbx_o __sbx_b"

// jobPrologue sets up the sweep's inputs for job id in directory d: the
// marker, the leader's pid (only digits) and its exit status if recorded.
func jobPrologue(id, d string) string {
	return `__sbx_j=` + quote(JobMarker(id)) + `; __sbx_lp=; __sbx_rc=-
[ -f ` + d + `/pid ] && { IFS= read -r __sbx_lp <` + d + `/pid; } 2>/dev/null
case "$__sbx_lp" in ''|*[!0-9]*) __sbx_lp=- ;; esac
`
}

// readRC reads the job's recorded exit status into __sbx_rc (- if none).
func readRC(d string) string {
	return `if [ -f ` + d + `/rc ] && [ -s ` + d + `/rc ]; then { IFS= read -r __sbx_rc <` + d + `/rc; } 2>/dev/null; case "$__sbx_rc" in ''|*[!0-9]*) __sbx_rc=- ;; esac; fi
`
}

// JobLogsScript prints a status header line and then part of the job's
// log: from byte offset (when offset >= 0) or the last tail lines, at most
// max bytes. The header is "job <state> <exit code or -> <log size>
// <processes>", the state being running (its leader is alive), exited
// (its exit status is recorded), lost (its leader is gone without an exit
// status: the container was stopped or restarted meanwhile) or gone (its
// directory no longer exists: the sandbox was reset or recreated), and
// processes the number of the job's processes still alive (see jobSweep).
func JobLogsScript(id string, offset int64, tail, max int) (string, error) {
	if err := checkJobID(id); err != nil {
		return "", err
	}
	if max <= 0 || (offset < 0 && tail <= 0) {
		return "", errors.New("logs: need max > 0 and an offset >= 0 or tail > 0")
	}
	d := quote(JobDir(id))
	read := "tail -n " + strconv.Itoa(tail) + " " + d + "/log | tail -c " + strconv.Itoa(max)
	if offset >= 0 {
		read = "tail -c +" + strconv.FormatInt(offset+1, 10) + " " + d + "/log | head -c " + strconv.Itoa(max)
	}
	var b strings.Builder
	b.WriteString(`if [ ! -f ` + d + `/log ]; then echo "job gone - 0 0"; else
`)
	b.WriteString(jobPrologue(id, d))
	b.WriteString(jobSweep(false))
	b.WriteString(readRC(d))
	b.WriteString(jobAwaitRC(d))
	// The size is read once the state is known: read before, a job that
	// ends meanwhile would be "exited" with the size of a log still being
	// written.
	b.WriteString(`__sbx_js=$(stat -c %s ` + d + `/log 2>/dev/null || wc -c <` + d + `/log)
if [ "$__sbx_rc" != - ]; then __sbx_o=exited; elif [ $__sbx_lv = 1 ]; then __sbx_o=running; else __sbx_o=lost; fi
echo "job $__sbx_o $__sbx_rc $__sbx_js $__sbx_n"
` + read + `; unset __sbx_js ` + jobSweepVars + `; fi`)
	return b.String(), nil
}

// JobLogsHeader is the parsed first line of JobLogsScript's output.
type JobLogsHeader struct {
	State    string // running, exited, lost or gone
	ExitCode int    // valid when State is exited
	Size     int64  // log size in bytes when the header was written
	// Processes is how many of the job's processes are alive, the leader
	// and whatever it started that outlived it.
	Processes int
}

// ParseJobLogs splits JobLogsScript's output into its header and data.
func ParseJobLogs(out []byte) (JobLogsHeader, []byte, error) {
	line, data, ok := strings.Cut(string(out), "\n")
	if !ok {
		return JobLogsHeader{}, nil, fmt.Errorf("job logs: no header in %q", truncate(out, 80))
	}
	var h JobLogsHeader
	var rc string
	if n, err := fmt.Sscanf(line, "job %s %s %d %d", &h.State, &rc, &h.Size, &h.Processes); n != 4 || err != nil {
		return JobLogsHeader{}, nil, fmt.Errorf("job logs: bad header %q", line)
	}
	switch h.State {
	case "exited":
		code, err := strconv.Atoi(rc)
		if err != nil {
			return JobLogsHeader{}, nil, fmt.Errorf("job logs: bad exit status %q", rc)
		}
		h.ExitCode = code
	case "running", "lost", "gone":
	default:
		return JobLogsHeader{}, nil, fmt.Errorf("job logs: bad state %q", h.State)
	}
	return h, []byte(data), nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// Signals a job may be sent.
// Signals are the signals a job may be sent, by name, TERM first.
var Signals = []string{"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT"}

var jobSignals = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range Signals {
		m[s] = true
	}
	return m
}()

// NormalizeSignal accepts TERM, SIGTERM, sigterm or 15 and returns the
// name ("TERM").
func NormalizeSignal(s string) (string, error) {
	if s == "" {
		return "TERM", nil
	}
	up := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	if n, err := strconv.Atoi(up); err == nil {
		for name, num := range map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15, "CONT": 18, "STOP": 19} {
			if num == n {
				return name, nil
			}
		}
	}
	if jobSignals[up] {
		return up, nil
	}
	return "", fmt.Errorf("signal %q: want one of TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT", s)
}

// JobSignalScript finds every process of the job (see jobSweep) and sends
// it sig; sig "" only counts them (and, when the leader has just ended,
// waits a moment for its exit status, see jobAwaitRC). Every signal but CONT is sent to a
// stopped job: each process is stopped as it is found, so nothing forks
// while the sweep runs, then all get sig, then (unless sig is KILL or
// STOP) CONT, so that a handler runs. It prints one line, "<processes>
// <exit code or -> <leader alive: 1 or 0> <dir>", dir being "gone" when
// the job's directory no longer exists, else "dir". It uses shell
// builtins only (no fork), so it works when the job has used up the
// sandbox's processes.
func JobSignalScript(id, sig string) (string, error) {
	if err := checkJobID(id); err != nil {
		return "", err
	}
	if sig != "" && !jobSignals[sig] {
		return "", fmt.Errorf("signal %q not allowed", sig)
	}
	d := quote(JobDir(id))
	var b strings.Builder
	b.WriteString(jobPrologue(id, d))
	b.WriteString(jobSweep(sig != "" && sig != "CONT"))
	each := func(cmd string) {
		b.WriteString(`__sbx_r=${__sbx_f# }; while [ -n "$__sbx_r" ]; do __sbx_q=${__sbx_r%% *}; __sbx_r=${__sbx_r#* }; ` + cmd + ` "$__sbx_q" 2>/dev/null; done
`)
	}
	if sig != "" && sig != "STOP" {
		each("kill -s " + sig)
		if sig != "KILL" && sig != "CONT" {
			each("kill -s CONT")
		}
	}
	b.WriteString(readRC(d))
	if sig == "" {
		b.WriteString(jobAwaitRC(d))
	}
	b.WriteString(`__sbx_o=dir; [ -d ` + d + ` ] || __sbx_o=gone
echo "$__sbx_n $__sbx_rc $__sbx_lv $__sbx_o"; unset ` + jobSweepVars)
	return b.String(), nil
}

// JobSweep is the parsed output of JobSignalScript.
type JobSweep struct {
	// Processes is how many of the job's processes were found alive (and
	// sent the signal).
	Processes int
	// Exited says the job's exit status is recorded, ExitCode is it.
	Exited   bool
	ExitCode int
	// Leader means the job's first process is alive (before the signal).
	Leader bool
	// Gone means the job's directory no longer exists.
	Gone bool
}

// ParseJobSweep parses JobSignalScript's output.
func ParseJobSweep(out []byte) (JobSweep, error) {
	f := strings.Fields(string(out))
	if len(f) != 4 || (f[2] != "0" && f[2] != "1") || (f[3] != "dir" && f[3] != "gone") {
		return JobSweep{}, fmt.Errorf("job sweep: unexpected answer %q", truncate(out, 80))
	}
	var s JobSweep
	var err error
	if s.Processes, err = strconv.Atoi(f[0]); err != nil || s.Processes < 0 {
		return JobSweep{}, fmt.Errorf("job sweep: bad count %q", f[0])
	}
	if f[1] != "-" {
		if s.ExitCode, err = strconv.Atoi(f[1]); err != nil {
			return JobSweep{}, fmt.Errorf("job sweep: bad exit status %q", f[1])
		}
		s.Exited = true
	}
	s.Leader, s.Gone = f[2] == "1", f[3] == "gone"
	return s, nil
}

// JobsListScript reports, in one pass, what every job of the sandbox needs
// for a listing: the boot it runs in, each process alive (so the caller
// can tell which belong to which job, as jobSweep does), and each job
// directory's leader pid, exit status, boot and log size. It forks twice
// (one find for the pid, status and boot files too big to be the server's,
// which it does not read, and one stat for every log), so a sandbox with a
// thousand jobs answers as fast as one with a few, and a planted
// many-megabyte file costs no more than a small one. ParseJobsList reads
// its output.
func JobsListScript() string { return jobsListScript(JobsDir) }

func jobsListScript(dir string) string {
	d := quote(dir)
	// Processes: "p <pid> <session> <job id or ->", zombies left out. The
	// environment is read with builtins; the id is the 16 characters after
	// the marker's name (ids have one fixed length).
	return jobBoot + `; echo "b $__sbx_b"
for __sbx_p in /proc/[0-9]*; do
	__sbx_q=${__sbx_p#/proc/}
	[ "$__sbx_q" = "$$" ] && continue
	` + readStat("__sbx_l", `"$__sbx_p/stat"`, "__sbx_sl") + `
	__sbx_r=${__sbx_l##*) }
	case "$__sbx_r" in ''|Z*|X*|x*) continue ;; esac
	__sbx_r=${__sbx_r#* }; __sbx_r=${__sbx_r#* }; __sbx_r=${__sbx_r#* }; __sbx_d=${__sbx_r%% *}
	__sbx_m=-; __sbx_l=
	while IFS= read -r __sbx_l || [ -n "$__sbx_l" ]; do
		case "$__sbx_l" in *` + JobMarkerVar + `=*) __sbx_m=${__sbx_l#*` + JobMarkerVar + `=}; __sbx_m=${__sbx_m%"${__sbx_m#????????????????}"}; break ;; esac
		__sbx_l=
	done 2>/dev/null <"$__sbx_p/environ"
	echo "p $__sbx_q $__sbx_d $__sbx_m"
done
__sbx_big="
$(find ` + d + ` -mindepth 2 -maxdepth 2 \( -name pid -o -name rc -o -name boot \) -size +1k 2>/dev/null)
"
__sbx_rd() { __sbx_v=-; [ -f "$1" ] || return 0; case "$__sbx_big" in *"
$1
"*) return 0 ;; esac; { IFS= read -r __sbx_v <"$1"; } 2>/dev/null; return 0; }
for __sbx_p in ` + d + `/*/; do
	[ -f "$__sbx_p"log ] || continue
	__sbx_q=${__sbx_p%/}; __sbx_q=${__sbx_q##*/}
	__sbx_rd "$__sbx_p"pid; __sbx_l=$__sbx_v
	__sbx_rd "$__sbx_p"rc; __sbx_r=$__sbx_v
	__sbx_rd "$__sbx_p"boot; __sbx_d=$__sbx_v
	case "$__sbx_l" in *[!0-9]*|'') __sbx_l=- ;; esac
	case "$__sbx_r" in *[!0-9]*|'') __sbx_r=- ;; esac
	[ ${#__sbx_l} -le 12 ] || __sbx_l=-; [ ${#__sbx_r} -le 6 ] || __sbx_r=-
	case "$__sbx_d" in *[!0-9a-f-]*|'') __sbx_d=- ;; esac
	[ ${#__sbx_d} -le 80 ] || __sbx_d=-
	echo "j $__sbx_q $__sbx_l $__sbx_r $__sbx_d"
done
cd ` + d + ` 2>/dev/null && { stat -c 's %s %n' -- */log 2>/dev/null || wc -c -- */log 2>/dev/null | sed 's/^ */s /'; }; cd / 2>/dev/null
unset __sbx_b __sbx_i __sbx_l __sbx_p __sbx_q __sbx_r __sbx_d __sbx_m __sbx_big __sbx_v; unset -f __sbx_rd
`
}

// JobsList is what JobsListScript found.
type JobsList struct {
	// Boot identifies the container's current boot (see jobBoot).
	Boot string
	// Jobs holds, by job id, each job directory that has a log.
	Jobs  map[string]JobFiles
	procs []listedProc
}

// JobFiles is what a job's directory says.
type JobFiles struct {
	// Leader is the pid the job recorded, 0 if none.
	Leader int
	// ExitCode is the recorded exit status, -1 if none.
	ExitCode int
	// Boot is the boot that started the job ("" if not recorded).
	Boot string
	// Size is the log's size in bytes.
	Size int64
}

type listedProc struct {
	pid, sid int
	job      string
}

// Processes returns how many processes of job id are alive (those carrying
// its marker and those in a session one of them leads) and whether its
// recorded leader is among them.
func (l JobsList) Processes(id string) (n int, leaderAlive bool) {
	leader := l.Jobs[id].Leader
	sessions := map[int]bool{}
	for _, p := range l.procs {
		if p.job == id && p.pid == p.sid {
			sessions[p.sid] = true
		}
	}
	for _, p := range l.procs {
		if p.job == id || sessions[p.sid] {
			n++
			if leader > 0 && p.pid == leader {
				leaderAlive = true
			}
		}
	}
	return n, leaderAlive
}

// ParseJobsList reads JobsListScript's output. Lines it cannot read are
// skipped, not fatal: what runs in the sandbox may print anything, and one
// odd directory must not hide the other jobs.
func ParseJobsList(out []byte) (JobsList, error) {
	l := JobsList{Jobs: map[string]JobFiles{}}
	sizes := map[string]int64{}
	seenBoot := false
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "b" && len(f) == 2:
			l.Boot, seenBoot = f[1], true
		case f[0] == "p" && len(f) == 4:
			pid, err1 := strconv.Atoi(f[1])
			sid, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				continue
			}
			job := ""
			if checkJobID(f[3]) == nil {
				job = f[3]
			}
			l.procs = append(l.procs, listedProc{pid: pid, sid: sid, job: job})
		case f[0] == "j" && len(f) == 5 && checkJobID(f[1]) == nil:
			jf := JobFiles{ExitCode: -1}
			if v, err := strconv.Atoi(f[2]); err == nil && v > 0 {
				jf.Leader = v
			}
			if v, err := strconv.Atoi(f[3]); err == nil && v >= 0 {
				jf.ExitCode = v
			}
			if f[4] != "-" {
				jf.Boot = f[4]
			}
			l.Jobs[f[1]] = jf
		case f[0] == "s" && len(f) == 3:
			id, ok := strings.CutSuffix(f[2], "/log")
			size, err := strconv.ParseInt(f[1], 10, 64)
			if ok && err == nil && checkJobID(id) == nil {
				sizes[id] = size
			}
		}
	}
	if !seenBoot {
		return JobsList{}, fmt.Errorf("jobs list: no boot line in %q", truncate(out, 80))
	}
	for id, size := range sizes {
		if jf, ok := l.Jobs[id]; ok {
			jf.Size = size
			l.Jobs[id] = jf
		}
	}
	return l, nil
}

// JobsRemoveScript removes the directories of the given jobs (ended ones
// being forgotten).
func JobsRemoveScript(ids []string) (string, error) {
	var b strings.Builder
	b.WriteString("rm -rf --")
	for _, id := range ids {
		if err := checkJobID(id); err != nil {
			return "", err
		}
		b.WriteString(" " + quote(JobDir(id)))
	}
	return b.String(), nil
}
