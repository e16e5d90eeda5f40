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
//	pid  the job's process id, which also leads its process group
//	log  its stdout and stderr, appended
//	rc   its exit status, written when it ends (128+N when killed by signal N)
//
// The scripts below run in a sandbox's persistent shell, so a job starts
// with the shell's directory and exported variables. A job holds none of
// the shell's pipes and is not the shell's descendant (it is started by a
// double fork), so neither closing a shell nor killing a command's process
// tree touches it, and Apple's exec never waits for it.

// JobsDir is where job directories are kept.
const JobsDir = "/var/lib/sandbox-mcp/jobs"

// JobDir is the directory of the job with the given id.
func JobDir(id string) string { return JobsDir + "/" + id }

var jobIDRE = regexp.MustCompile(`^[a-z0-9]{6,32}$`)

// JobStartScript starts command as a background job in dir (made fresh),
// in workdir when set, and prints its pid. It fails with status 127 when
// the sandbox lacks setsid, 2 when workdir does not exist.
func JobStartScript(id, workdir, command string) (string, error) {
	if !jobIDRE.MatchString(id) {
		return "", fmt.Errorf("job id %q: want 6-32 lowercase letters or digits", id)
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
	if workdir != "" {
		b.WriteString(`__sbx_jw=$PWD; cd -- ` + quote(workdir) + `; `)
	}
	// The outer ( … & ) returns at once, so the waiter is reparented to the
	// sandbox's init; setsid makes the job leader its own process group.
	b.WriteString(`( ( setsid sh -c 'echo $$ >"$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid" && exec sh -c "$2"' sh ` + d + ` ` + quote(command) +
		` <` + "/dev/null" + ` >>` + d + `/log 2>&1 & __sbx_jp=$!; wait $__sbx_jp; echo $? >` + d + `/rc.tmp; mv ` + d + `/rc.tmp ` + d + `/rc ) </dev/null >/dev/null 2>&1 & ); `)
	if workdir != "" {
		b.WriteString(`cd -- "$__sbx_jw"; unset __sbx_jw; `)
	}
	b.WriteString(`__sbx_ji=0; while [ ! -s ` + d + `/pid ] && [ $__sbx_ji -lt 500 ]; do sleep 0.01 2>/dev/null || sleep 1; __sbx_ji=$((__sbx_ji+1)); done; unset __sbx_ji; `)
	b.WriteString(`if [ -s ` + d + `/pid ]; then cat ` + d + `/pid; else echo "the job did not start" >&2; (exit 1); fi; fi`)
	return b.String(), nil
}

// JobStatusHeader is the first line JobLogsScript prints:
// "job <state> <exit code or -> <log size>", state being running, exited
// or gone (the directory no longer exists: the sandbox was reset or
// recreated).
const jobHeaderFormat = "job %s %s %d"

// JobLogsScript prints a status header line and then part of the job's
// log: from byte offset (when offset >= 0) or the last tail lines, at most
// max bytes.
func JobLogsScript(id string, offset int64, tail, max int) (string, error) {
	if !jobIDRE.MatchString(id) {
		return "", fmt.Errorf("job id %q: want 6-32 lowercase letters or digits", id)
	}
	if max <= 0 || (offset < 0 && tail <= 0) {
		return "", errors.New("logs: need max > 0 and an offset >= 0 or tail > 0")
	}
	d := quote(JobDir(id))
	read := "tail -n " + strconv.Itoa(tail) + " " + d + "/log | tail -c " + strconv.Itoa(max)
	if offset >= 0 {
		read = "tail -c +" + strconv.FormatInt(offset+1, 10) + " " + d + "/log | head -c " + strconv.Itoa(max)
	}
	return `if [ ! -f ` + d + `/log ]; then echo "job gone - 0"; else ` +
		`__sbx_js=$(stat -c %s ` + d + `/log 2>/dev/null || wc -c <` + d + `/log); ` +
		`if [ -s ` + d + `/rc ]; then echo "job exited $(cat ` + d + `/rc) $__sbx_js"; else echo "job running - $__sbx_js"; fi; ` +
		read + `; unset __sbx_js; fi`, nil
}

// JobLogsHeader is the parsed first line of JobLogsScript's output.
type JobLogsHeader struct {
	State    string // running, exited or gone
	ExitCode int    // valid when State is exited
	Size     int64  // log size in bytes when the header was written
}

// ParseJobLogs splits JobLogsScript's output into its header and data.
func ParseJobLogs(out []byte) (JobLogsHeader, []byte, error) {
	line, data, ok := strings.Cut(string(out), "\n")
	if !ok {
		return JobLogsHeader{}, nil, fmt.Errorf("job logs: no header in %q", truncate(out, 80))
	}
	var h JobLogsHeader
	var rc string
	if n, err := fmt.Sscanf(line, jobHeaderFormat, &h.State, &rc, &h.Size); n != 3 || err != nil {
		return JobLogsHeader{}, nil, fmt.Errorf("job logs: bad header %q", line)
	}
	if h.State == "exited" {
		code, err := strconv.Atoi(rc)
		if err != nil {
			return JobLogsHeader{}, nil, fmt.Errorf("job logs: bad exit status %q", rc)
		}
		h.ExitCode = code
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
var jobSignals = map[string]bool{"TERM": true, "KILL": true, "INT": true, "HUP": true, "QUIT": true, "USR1": true, "USR2": true, "STOP": true, "CONT": true}

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

// JobKillScript sends sig to the job's whole process group and waits up to
// about two seconds for it to end. It prints one line: "ended <rc>" when
// the job had already ended, "gone" when nothing of it is left, or
// "signalled <rc or ->" with the exit status if it ended in time.
func JobKillScript(id, sig string) (string, error) {
	if !jobIDRE.MatchString(id) {
		return "", fmt.Errorf("job id %q: want 6-32 lowercase letters or digits", id)
	}
	if !jobSignals[sig] {
		return "", fmt.Errorf("signal %q not allowed", sig)
	}
	d := quote(JobDir(id))
	return `if [ ! -s ` + d + `/pid ]; then echo gone; elif [ -s ` + d + `/rc ]; then echo "ended $(cat ` + d + `/rc)"; else ` +
		`__sbx_kp=$(cat ` + d + `/pid); ` +
		`if kill -s ` + sig + ` -- -$__sbx_kp 2>/dev/null || kill -` + sig + ` -$__sbx_kp 2>/dev/null || kill -s ` + sig + ` $__sbx_kp 2>/dev/null; then ` +
		`__sbx_ki=0; while [ ! -s ` + d + `/rc ] && [ $__sbx_ki -lt 40 ]; do sleep 0.05 2>/dev/null || sleep 1; __sbx_ki=$((__sbx_ki+1)); done; ` +
		`if [ -s ` + d + `/rc ]; then echo "signalled $(cat ` + d + `/rc)"; else echo "signalled -"; fi; unset __sbx_ki; ` +
		`else echo gone; fi; unset __sbx_kp; fi`, nil
}
