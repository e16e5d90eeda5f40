package shell

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// localHost runs shells as local `sh` processes, so the framing is tested
// without a container engine. Its kills run in killDir when it is set.
type localHost struct{ killDir string }

func (localHost) Command(ctx context.Context) proc.Process {
	cmd := exec.CommandContext(ctx, "sh")
	cmd.WaitDelay = time.Second
	return proc.FromCmd(cmd)
}

func (h localHost) KillRun(ctx context.Context, pid int, runID string, self bool) error {
	s := "0"
	if self {
		s = "1"
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", guest.KillRunScript, "sh", strconv.Itoa(pid), runID, s)
	cmd.Dir = h.killDir
	return cmd.Run()
}

// shellHost runs shells as local processes of the program path, named sh
// (bash run so is in its POSIX mode), with args first (busybox's applet).
type shellHost struct {
	localHost
	path string
	args []string
}

func (h shellHost) Command(ctx context.Context) proc.Process {
	cmd := exec.CommandContext(ctx, h.path, h.args...)
	cmd.Args[0] = "sh"
	cmd.WaitDelay = time.Second
	return proc.FromCmd(cmd)
}

// eachShell runs f on a shell of each program a sandbox's sh may be that
// this machine has: sh itself, bash and busybox.
func eachShell(t *testing.T, f func(t *testing.T, open func() *Shell)) {
	for _, h := range []struct {
		name, prog string
		args       []string
	}{{"sh", "sh", nil}, {"bash", "bash", nil}, {"busybox", "busybox", nil}} {
		path, err := exec.LookPath(h.prog)
		if err != nil {
			t.Logf("%s: not on this machine (%v)", h.name, err)
			continue
		}
		t.Run(h.name, func(t *testing.T) {
			f(t, func() *Shell {
				sh, err := Open(context.Background(), shellHost{path: path, args: h.args}, Options{Init: "cd /tmp"})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				t.Cleanup(sh.Close)
				return sh
			})
		})
	}
}

func openShell(t *testing.T) *Shell {
	t.Helper()
	sh, err := Open(context.Background(), localHost{}, Options{Init: "cd /tmp"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(sh.Close)
	return sh
}

type run struct {
	res            Result
	stdout, stderr string
}

func runOn(t *testing.T, sh interface {
	Run(context.Context, Request, string) (Result, error)
}, req Request) run {
	t.Helper()
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	res, err := sh.Run(context.Background(), req, "")
	if err != nil {
		t.Fatalf("Run(%q): %v", req.Command, err)
	}
	return run{res, out.String(), errb.String()}
}

func runPool(t *testing.T, p *Pool, req Request) run {
	t.Helper()
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	res, err := p.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run(%q): %v", req.Command, err)
	}
	return run{res, out.String(), errb.String()}
}

func TestOutputIsExact(t *testing.T) {
	sh := openShell(t)
	cases := []struct {
		name, cmd, stdout, stderr string
		code                      int
	}{
		{"plain", "echo hi", "hi\n", "", 0},
		{"no final newline", "printf abc", "abc", "", 0},
		{"empty", "true", "", "", 0},
		{"blank lines", `printf '\n\n'`, "\n\n", "", 0},
		{"stderr", "echo oops >&2; exit_code=4; (exit 4)", "", "oops\n", 4},
		{"stderr without newline", "printf err >&2", "", "err", 0},
		{"both", "echo out; echo err >&2", "out\n", "err\n", 0},
		{"marker-like text", `printf '\nsbx00000000000000000000000000000000 0\n/\nsbx.\n'`, "\nsbx00000000000000000000000000000000 0\n/\nsbx.\n", "", 0},
		{"status", "false", "", "", 1},
		{"syntax error keeps shell", "echo 'unterminated", "", "", 2},
		{"quotes", `echo "it's" '$HOME' \$x`, "it's $HOME $x\n", "", 0},
		{"heredoc", "cat <<EOF\nline1\nline2\nEOF", "line1\nline2\n", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runOn(t, sh, Request{Command: c.cmd})
			if r.stdout != c.stdout {
				t.Errorf("stdout = %q, want %q", r.stdout, c.stdout)
			}
			if c.name != "syntax error keeps shell" && r.stderr != c.stderr {
				t.Errorf("stderr = %q, want %q", r.stderr, c.stderr)
			}
			if r.res.ExitCode != c.code {
				t.Errorf("exit = %d, want %d", r.res.ExitCode, c.code)
			}
			if r.res.ShellLost {
				t.Errorf("shell lost")
			}
		})
	}
}

func TestBinaryOutputAndStdinRoundTrip(t *testing.T) {
	sh := openShell(t)
	data := make([]byte, 300<<10)
	rand.Read(data)
	data = append(data, 0, '\n', 0) // NULs and a trailing non-newline
	r := runOn(t, sh, Request{Command: "cat", Stdin: data})
	if r.stdout != string(data) {
		t.Fatalf("stdin->stdout round trip differs: got %d bytes, want %d", len(r.stdout), len(data))
	}
	path := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r = runOn(t, sh, Request{Command: "cat " + path})
	if r.stdout != string(data) {
		t.Fatalf("binary output differs: got %d bytes, want %d", len(r.stdout), len(data))
	}
}

func TestCommandDoesNotReadControlStream(t *testing.T) {
	sh := openShell(t)
	// Without stdin a reader sees EOF at once instead of eating the protocol.
	r := runOn(t, sh, Request{Command: "cat; read x; echo got=$x"})
	if r.stdout != "got=\n" || r.res.ExitCode != 0 {
		t.Fatalf("got %q exit %d", r.stdout, r.res.ExitCode)
	}
	r = runOn(t, sh, Request{Command: "echo still here"})
	if r.stdout != "still here\n" {
		t.Fatalf("shell broken after a stdin reader: %q", r.stdout)
	}
}

func TestStatePersists(t *testing.T) {
	sh := openShell(t)
	runOn(t, sh, Request{Command: "cd /; export FOO='a b'\"'\"; BAR=1"})
	r := runOn(t, sh, Request{Command: `pwd; echo "$FOO|$BAR"`})
	if r.stdout != "/\na b'|1\n" {
		t.Fatalf("state not kept: %q", r.stdout)
	}
	if sh.State().Cwd != "/" {
		t.Fatalf("State().Cwd = %q", sh.State().Cwd)
	}
	// A per-call workdir does not move the shell.
	r = runOn(t, sh, Request{Command: "pwd", Workdir: "/usr"})
	if r.stdout != "/usr\n" {
		t.Fatalf("workdir: %q", r.stdout)
	}
	r = runOn(t, sh, Request{Command: "pwd"})
	if r.stdout != "/\n" {
		t.Fatalf("workdir leaked into shell: %q", r.stdout)
	}
	r = runOn(t, sh, Request{Command: "pwd", Workdir: "/does/not/exist"})
	if r.res.ExitCode == 0 || !strings.Contains(r.stderr, "/does/not/exist") {
		t.Fatalf("bad workdir: exit %d stderr %q", r.res.ExitCode, r.stderr)
	}
}

func TestRedirectingShellOutputIsUndone(t *testing.T) {
	sh := openShell(t)
	r := runOn(t, sh, Request{Command: "exec >/dev/null 2>&1; echo hidden"})
	if r.stdout != "" || r.res.ShellLost {
		t.Fatalf("got %q lost=%v", r.stdout, r.res.ShellLost)
	}
	r = runOn(t, sh, Request{Command: "echo visible; echo e >&2"})
	if r.stdout != "visible\n" || r.stderr != "e\n" {
		t.Fatalf("output still redirected: %q %q", r.stdout, r.stderr)
	}
}

// Commands give their stdin from a /dev/null the framing shell keeps open
// on one fd for good; a command that closes or moves that fd, however it
// is written, must not take it from the commands after it.
func TestClosingTheStdinFDIsUndone(t *testing.T) {
	sh := openShell(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "exec"), nil, 0o644); err != nil {
		t.Fatal(err) // a name a pattern in command position can match
	}
	check := func(sh *Shell, req Request) {
		t.Helper()
		req.Timeout = 10 * time.Second
		r := runOn(t, sh, req)
		if r.res.ShellLost {
			if req.Trusted {
				// bash 5.2 as sh crashes on `exec 7<&0` run here: a shell
				// lost is one the pool replaces, which is all a
				// command past the check may cost.
				t.Logf("%q lost the shell", req.Command)
				return
			}
			t.Fatalf("%q lost the shell", req.Command)
		}
		r = runOn(t, sh, Request{Command: "cat; echo ok", Timeout: 10 * time.Second})
		if r.stdout != "ok\n" || r.stderr != "" || r.res.ExitCode != 0 {
			t.Fatalf("after %q: stdout %q stderr %q exit %d", req.Command, r.stdout, r.stderr, r.res.ExitCode)
		}
	}
	for _, c := range []string{"exec 7<&-", "7<&- exec true", "exec 7>&-", "1>/dev/null exec 7<&-",
		"{ exec 7<&-; }", "if true; then exec 7>&-; fi", "exec 7</etc/hostname",
		"ex\\\nec 7<&-", "7\\\n<&- exec", "7<&- \\\nexec", // continued lines
		"cd '" + dir + "' && exe? 7<&-", "cd '" + dir + "' && e[x]ec 7<&-", // patterns
		"echo $'\\'' ; exec 7<&- ; echo '",
		// Text the isolation check could read otherwise than the shell:
		// a quote in a command substitution or a here-document.
		"echo $(echo '(') ; eval \"exec $((3+4))<&-\" # )", "echo $(echo '(') ; exec 7>/dev/null # )",
		"cat <<EOF\na '\nEOF\neval \"exec $((3+4))<&-\"\n# '", "cat <<EOF\na '\nEOF\ncommand() { echo hijacked; }\n# '",
		"echo $(echo '(') ; cat() { echo hijacked; } # )",
		"true # \\\ncat() { echo hijacked; }", "echo ${x:- #}; cat() { echo hijacked; }"} {
		check(sh, Request{Command: c})
	}
	// Past the isolation check (the server's own scripts skip it), the
	// frame puts the fd back.
	for _, c := range []string{"exec 7<&-", "exec 7</etc/hostname", "exec 7<&0", "exec 7>/dev/null", `eval "exec $((3+4))<&-"`} {
		check(openShell(t), Request{Command: c, Trusted: true})
	}
	// The saved protocol fds, which isolated commands write to, likewise.
	for _, c := range []string{"exec 3>&-", "exec 4>/dev/null", "exec 3>/dev/null 4>&-"} {
		sh := openShell(t)
		runOn(t, sh, Request{Command: c, Trusted: true, Timeout: 10 * time.Second})
		r := runOn(t, sh, Request{Command: "set -e; echo out; echo err >&2", Timeout: 10 * time.Second})
		if r.res.ShellLost || r.stdout != "out\n" || r.stderr != "err\n" || r.res.ExitCode != 0 {
			t.Fatalf("an isolated command after %q: %+v stdout %q stderr %q", c, r.res, r.stdout, r.stderr)
		}
	}
}

// TestStateBuiltAtRunTimeIsUndone runs commands that reach the framing
// shell's aliases and IFS through a name their text does not hold (bash
// evaluates a variable's value as arithmetic) and commands bash as sh
// treats as fatal errors, on each shell this machine has: the next command
// runs in a shell with no alias and the default IFS, and the fatal ones
// end only their own command, keeping the state they set.
func TestStateBuiltAtRunTimeIsUndone(t *testing.T) {
	eachShell(t, func(t *testing.T, open func() *Shell) {
		sh := open()
		run := func(c string) run {
			t.Helper()
			r := runOn(t, sh, Request{Command: c, Timeout: 10 * time.Second})
			if r.res.ShellLost {
				t.Fatalf("%q lost the shell: %+v stdout %q stderr %q", c, r.res, r.stdout, r.stderr)
			}
			return r
		}
		run(`v=BASH; w=_ALIASES; z="${v}${w}[command]=0"; y="${v}${w}[__sbx_end]=0"`)
		run(`: $((z)) $((y))`)
		run(`a=IF b=S; z="${a}${b}=1"`)
		run(`: $((z))`)
		if r := run(`alias; set -- $(echo "a 1 b"); echo "$#"`); r.stdout != "3\n" || r.res.ExitCode != 0 {
			t.Fatalf("after aliases and IFS set by arithmetic: stdout %q stderr %q exit %d", r.stdout, r.stderr, r.res.ExitCode)
		}
		for _, c := range []string{"echo $((10/0))", ": > /nonexistent/x", "export UID=1", "z=1/0; echo $((z))",
			"a=UI; z=${a}D=1; : $((z))", "for UID in 1; do :; done", "times -x", "GROUPS= :", "echo ${#=}",
			"history -s 'set -u; trap \"echo T\" EXIT'; fc -s >/dev/null 2>&1", "jobs -x set -u",
			"cd /usr && export KEPT=1 && echo ${UNSET_X:?}"} {
			run(c)
		}
		if r := run(`pwd; echo "$KEPT" "$UNSET_Y"`); r.stdout != "/usr\n1 \n" {
			t.Fatalf("after fatal errors: stdout %q stderr %q", r.stdout, r.stderr)
		}
		// A PATH entry dash and busybox read as "source the file found
		// here", built where the text does not show it, or exported by
		// an isolated command and restored to the framing shell.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("printf() { echo HIJACKED; }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		run(`p=%; PATH=` + dir + `${p}func:$PATH; f`)
		run(`export PATH="` + dir + `%func:$PATH"`)
		run(`f`)
		if r := run(`echo ok`); r.stdout != "ok\n" || r.stderr != "" {
			t.Fatalf("after a PATH with %%func: stdout %q stderr %q", r.stdout, r.stderr)
		}
	})
}

func TestExitEndsOnlyTheCommand(t *testing.T) {
	sh := openShell(t)
	r := runOn(t, sh, Request{Command: "cd /usr; export LEFT=yes; echo bye; exit 7; echo never"})
	if r.res.ShellLost || r.res.ExitCode != 7 || r.stdout != "bye\n" {
		t.Fatalf("got %+v stdout %q", r.res, r.stdout)
	}
	r = runOn(t, sh, Request{Command: `pwd; echo "$LEFT"`})
	if r.stdout != "/usr\nyes\n" || r.res.ExitCode != 0 {
		t.Fatalf("state of the exited command not kept: %+v %q", r.res, r.stdout)
	}
}

func TestTimeoutKeepsShell(t *testing.T) {
	sh := openShell(t)
	runOn(t, sh, Request{Command: "cd /usr; export KEEP=yes"})
	start := time.Now()
	// set -e makes it run isolated: the timeout ends the subshell only.
	r := runOn(t, sh, Request{Command: "set -e; echo started; sleep 987651 & sleep 987652", Timeout: time.Second})
	took := time.Since(start)
	if !r.res.TimedOut || r.res.ShellLost || r.res.ExitCode != 124 {
		t.Fatalf("got %+v", r.res)
	}
	if took > hangGuard {
		t.Fatalf("timeout answered after %v", took)
	}
	if r.stdout != "started\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 98765[12]").Output(); len(out) > 0 {
		t.Fatalf("processes survived the timeout: %s", out)
	}
	r = runOn(t, sh, Request{Command: `pwd; echo $KEEP`})
	if r.stdout != "/usr\nyes\n" {
		t.Fatalf("state lost after timeout: %q", r.stdout)
	}
}

func TestBusyShellIsReplacedWithState(t *testing.T) {
	p := NewPool(localHost{}, Options{Init: "cd /tmp", KillGrace: 300 * time.Millisecond}, 2)
	t.Cleanup(p.Close)
	runPool(t, p, Request{Command: "cd /usr; export KEEP=yes"})
	start := time.Now()
	r := runPool(t, p, Request{Command: "while :; do :; done", Timeout: 500 * time.Millisecond})
	if !r.res.TimedOut || !r.res.ShellLost || r.res.ExitCode != 124 {
		t.Fatalf("got %+v", r.res)
	}
	if took := time.Since(start); took > hangGuard {
		t.Fatalf("answered after %v", took)
	}
	r = runPool(t, p, Request{Command: `pwd; echo $KEEP`})
	if r.stdout != "/usr\nyes\n" {
		t.Fatalf("state not restored in new shell: %q", r.stdout)
	}
	r = runPool(t, p, Request{Command: "exit 3"})
	if r.res.ExitCode != 3 || r.res.ShellLost {
		t.Fatalf("exit: %+v", r.res)
	}
	r = runPool(t, p, Request{Command: `kill -9 $$`})
	if !r.res.ShellLost {
		t.Fatalf("self-kill: %+v", r.res)
	}
	r = runPool(t, p, Request{Command: `pwd; echo $KEEP`})
	if r.stdout != "/usr\nyes\n" {
		t.Fatalf("state not restored after self-kill: %q", r.stdout)
	}
}

// hangGuard bounds a wait whose only failure is a hang; it is no speed check.
const hangGuard = 30 * time.Second

func TestPoolLongCommandDoesNotBlockShort(t *testing.T) {
	p := NewPool(localHost{}, Options{}, 3)
	t.Cleanup(p.Close)
	runPool(t, p, Request{Command: "cd /usr; export A=1"})
	// The long command runs until the short one has answered: if the short
	// one queued behind it, the test hangs (and the guard fails it).
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	longDone := make(chan Result, 1)
	go func() {
		res, _ := p.Run(ctx, Request{Command: "sleep 1000"})
		longDone <- res
	}()
	r := runPool(t, p, Request{Command: "pwd; echo $A; cd /; export B=2; unset A"})
	select {
	case res := <-longDone:
		t.Fatalf("the long command ended (%+v) before the short one was answered", res)
	default:
	}
	cancel()
	<-longDone
	if r.stdout != "/usr\n1\n" {
		t.Fatalf("second shell not in shared state: %q", r.stdout)
	}
	// Whichever shell runs next sees the newest state, including the unset.
	for range 3 {
		r = runPool(t, p, Request{Command: `pwd; echo "${A-unset} $B"`})
		if r.stdout != "/\nunset 2\n" {
			t.Fatalf("state not shared: %q", r.stdout)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	p := NewPool(localHost{}, Options{}, 2)
	t.Cleanup(p.Close)
	runPool(t, p, Request{Command: "cd /usr; export KEEP=yes"})
	// One command runs in the framing shell, one isolated in a subshell
	// (umask): either way the cancel ends all of it and nothing after
	// the sleep runs.
	dir := t.TempDir()
	var got []Result
	for i, cmd := range []string{"sleep 1.5; touch %s/a", "umask 022; sleep 1.5; touch %s/b"} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		res, err := p.Run(ctx, Request{Command: fmt.Sprintf(cmd, dir)})
		cancel()
		if err != nil || !res.Canceled || res.ExitCode == 0 {
			t.Fatalf("%d: got %+v, %v", i, res, err)
		}
		got = append(got, res)
	}
	r := runPool(t, p, Request{Command: `echo ok; pwd; echo $KEEP`})
	if r.stdout != "ok\n/usr\nyes\n" {
		t.Fatalf("%q", r.stdout)
	}
	time.Sleep(2 * time.Second)
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the rest of a cancelled command ran: %v (results %+v)", ents, got)
	}
}

// TestTimeoutEndsEscapedProcessesBesideATracedOne: a process of the
// command that a STOP does not stop (here one traced by a stopped strace)
// must not keep the kill from looking for the processes that left the
// command's tree (found by their environment only).
func TestTimeoutEndsEscapedProcessesBesideATracedOne(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Skipf("strace is not on this machine (%v): it makes the traced process", err)
	}
	sh := openShell(t)
	r := runOn(t, sh, Request{Command: "strace -f -o /dev/null sleep 987655 & (sleep 987656 &); sleep 987657", Timeout: 2 * time.Second})
	if !r.res.TimedOut {
		t.Fatalf("got %+v, want a timeout", r.res)
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 98765[567]").Output(); len(out) > 0 {
		t.Fatalf("processes survived the timeout: %s", out)
	}
}

// TestCancelBeforeTheShellReadsTheCommand: a cancel that comes while the
// shell has not yet read the command (stopped here, as a loaded machine
// may hold it) finds nothing of the command to kill; the command must not
// then run whole when the shell goes on, also when the kill returns late
// (as an engine's exec may, on a loaded machine). The shell goes, in the
// framing shell and isolated alike: before the start beacon, nothing tells
// that the command will not start after the kill.
func TestCancelBeforeTheShellReadsTheCommand(t *testing.T) {
	for _, h := range []struct {
		name string
		host Host
	}{{"kill", localHost{}}, {"kill that returns late", lateKillHost{after: 3 * time.Second}}} {
		for _, cmd := range []string{"umask 022; sleep 0.5; touch %s/isolated", "sleep 0.5; touch %s/inshell"} {
			sh, err := Open(context.Background(), h.host, Options{Init: "cd /tmp"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sh.Close)
			dir := t.TempDir()
			if err := syscall.Kill(sh.pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// The shell goes on two seconds later: its kill, which
			// stops it first, has had the time to end it, however
			// loaded the machine.
			go func() {
				time.Sleep(2 * time.Second)
				_ = syscall.Kill(sh.pid, syscall.SIGCONT)
			}()
			sent := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			res, err := sh.Run(ctx, Request{Command: fmt.Sprintf(cmd, dir)}, "")
			cancel()
			if err != nil || !res.Canceled {
				t.Fatalf("%s, %q: got %+v, %v; want it canceled", h.name, cmd, res, err)
			}
			time.Sleep(time.Until(sent.Add(3500 * time.Millisecond)))
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("%s, %q: the command ran whole after its cancel: %v (result %+v)", h.name, cmd, ents, res)
			}
		}
	}
}

// TestTimeoutBeforeTheCommandStartedIsNotRetried: a command whose timeout
// came before its shell started it (the shell is killed then, having
// shown no sign of it) is reported so, and not run again on another
// shell: its time is up.
func TestTimeoutBeforeTheCommandStartedIsNotRetried(t *testing.T) {
	for _, cmd := range []string{"touch %s/inshell", "umask 022; touch %s/isolated"} {
		p := NewPool(localHost{}, Options{}, 1)
		t.Cleanup(p.Close)
		pid, err := strconv.Atoi(strings.TrimSpace(runPool(t, p, Request{Command: "echo $$"}).stdout))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		res, err := p.Run(context.Background(), Request{Command: fmt.Sprintf(cmd, dir), Timeout: 100 * time.Millisecond, QueueWait: time.Minute})
		if err != nil || !res.TimedOut || !res.NotStarted || !res.ShellLost {
			t.Fatalf("%q: got %+v, %v; want a timeout before the command started, its shell lost", cmd, res, err)
		}
		time.Sleep(300 * time.Millisecond)
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("%q: the command ran after its timeout: %v", cmd, ents)
		}
		if r := runPool(t, p, Request{Command: "echo ok"}); r.stdout != "ok\n" {
			t.Fatalf("%q: the pool after: %+v", cmd, r)
		}
	}
}

// TestKillThatEndedTheShellIsNotRepeated: a cancel that ends the shell
// (a command run in the framing shell) kills once, however long the
// shell's process takes to end after it (as an engine's exec may take to
// report a shell that died in the container): a kill repeated meanwhile
// finds nothing, and only made the stop look slow.
func TestKillThatEndedTheShellIsNotRepeated(t *testing.T) {
	h := &countingHost{wrap: "sh; sleep 0.6"}
	sh, err := Open(context.Background(), h, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := sh.Run(ctx, Request{Command: "sleep 30"}, "")
	if err != nil || !res.Canceled || !res.ShellLost {
		t.Fatalf("got %+v, %v; want it canceled, the shell lost", res, err)
	}
	if n := h.kills.Load(); n != 1 {
		t.Fatalf("%d kills, want 1 (result %+v)", n, res)
	}
}

// countingHost is localHost whose shell runs inside sh -c wrap (the
// framing shell is wrap's inner sh), counting the kills.
type countingHost struct {
	localHost
	wrap  string
	kills atomic.Int64
}

func (h *countingHost) Command(ctx context.Context) proc.Process {
	cmd := exec.CommandContext(ctx, "sh", "-c", h.wrap)
	cmd.WaitDelay = time.Second
	return proc.FromCmd(cmd)
}

func (h *countingHost) KillRun(ctx context.Context, pid int, runID string, self bool) error {
	h.kills.Add(1)
	return h.localHost.KillRun(ctx, pid, runID, self)
}

// TestFailedKillIsNotReportedAsNotStarted: when the kill of a shell that
// had not shown the command's start fails (a paused container refuses
// it), the result does not claim the command did not start: the shell may
// yet run it in its machine.
func TestFailedKillIsNotReportedAsNotStarted(t *testing.T) {
	sh, err := Open(context.Background(), failKillHost{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	if err := syscall.Kill(sh.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	res, err := sh.Run(context.Background(), Request{Command: "true", Timeout: 100 * time.Millisecond}, "")
	if err != nil || !res.TimedOut || !res.ShellLost || res.NotStarted {
		t.Fatalf("got %+v, %v; want a timeout, the shell lost, and no claim that the command did not start", res, err)
	}
}

// failKillHost is localHost whose kills fail.
type failKillHost struct{ localHost }

func (failKillHost) KillRun(context.Context, int, string, bool) error {
	return errors.New("the container is paused")
}

// TestKillReadsNoCodeFromProcessNames: a process may put a newline and
// shell text in its own name, which /proc/PID/stat prints raw. The kill
// must neither run that text nor stop short on it: the command's
// processes all end, and nothing the names say runs.
func TestKillReadsNoCodeFromProcessNames(t *testing.T) {
	h := localHost{killDir: t.TempDir()}
	sh, err := Open(context.Background(), h, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	// Names of 15 bytes at most: one that would run ":>i" (make a file
	// in the kill's directory) in an eval of its stat line's text, one
	// that breaks such an eval, one that forges a parent.
	named := func(name string) string {
		return `sh -c 'printf "` + name + `\n" >/proc/$$/comm; sleep 98764' & `
	}
	cmd := named(`) S }\";:>i;#`) + named(`a\nb`) + named(`x) S 1\n`) + "sleep 98764"
	res, err := sh.Run(context.Background(), Request{Command: cmd, Timeout: 500 * time.Millisecond}, "")
	if err != nil || !res.TimedOut {
		t.Fatalf("got %+v, %v; want a timeout", res, err)
	}
	if _, err := os.Stat(filepath.Join(h.killDir, "i")); err == nil {
		t.Fatal("the kill ran text a process put in its name")
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 98764").Output(); len(out) > 0 {
		t.Fatalf("processes survived the timeout: %s", out)
	}
}

// lateKillHost is localHost whose kills return after more time: the
// command's processes are killed at once, and the caller hears of it late.
type lateKillHost struct {
	localHost
	after time.Duration
}

func (h lateKillHost) KillRun(ctx context.Context, pid int, runID string, self bool) error {
	err := h.localHost.KillRun(ctx, pid, runID, self)
	time.Sleep(h.after)
	return err
}

// TestCancelAtAnyMoment cancels commands at moments spread over their
// start, in the framing shell and isolated: whenever the cancel lands,
// nothing after the command's sleep runs. (A kill that took long to scan
// the machine's processes once let the framing shell finish the command
// before the kill reached it, and one pass that missed a process forked
// as it began let an isolated command run on.) The sleep is long enough
// for a kill that a loaded machine is slow to start: what is tested is
// that the kill, once it runs, leaves nothing of the command to go on.
func TestCancelAtAnyMoment(t *testing.T) {
	p := NewPool(localHost{}, Options{}, 2)
	t.Cleanup(p.Close)
	runPool(t, p, Request{Command: "cd /usr; export KEEP=yes"})
	dir := t.TempDir()
	cmds := []string{"sleep 2; touch %s/a%d", "umask 022; sleep 2; touch %s/b%d", "umask 022; /bin/true; sleep 2; touch %s/c%d"}
	for i := range 12 {
		after := time.Duration(i*10) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), after)
		sent := time.Now()
		res, err := p.Run(ctx, Request{Command: fmt.Sprintf(cmds[i%len(cmds)], dir, i)})
		cancel()
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		time.Sleep(time.Until(sent.Add(2500 * time.Millisecond)))
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("cancelled after %v: the rest of the command ran: %v (result %+v)", after, ents, res)
		}
	}
	if r := runPool(t, p, Request{Command: `pwd; echo $KEEP`}); r.stdout != "/usr\nyes\n" {
		t.Fatalf("state after the cancels: %q", r.stdout)
	}
}

func TestNULRejected(t *testing.T) {
	sh := openShell(t)
	if _, err := sh.Run(context.Background(), Request{Command: "echo \x00"}, ""); err != ErrNULInCommand {
		t.Fatalf("err = %v", err)
	}
}

// TestQueueWaitApartFromTimeout: with QueueWait, a command that waited for
// a busy pool's only shell still gets its whole Timeout to run; without
// it, the wait is part of the Timeout, and a wait past QueueWait ends the
// call before the command starts.
func TestQueueWaitApartFromTimeout(t *testing.T) {
	p := NewPool(localHost{}, Options{}, 1)
	t.Cleanup(p.Close)
	runPool(t, p, Request{Command: "true"})
	hold := func() chan struct{} {
		done := make(chan struct{})
		started := make(chan struct{})
		go func() {
			defer close(done)
			close(started)
			_, _ = p.Run(context.Background(), Request{Command: "sleep 1"})
		}()
		<-started
		time.Sleep(200 * time.Millisecond) // let it take the shell
		return done
	}
	done := hold()
	res, err := p.Run(context.Background(), Request{Command: "sleep 0.3; echo ran", Timeout: 600 * time.Millisecond, QueueWait: time.Minute})
	<-done
	if err != nil || res.TimedOut || res.ExitCode != 0 || res.Queued < 300*time.Millisecond {
		t.Fatalf("with QueueWait: %+v, %v; want it to wait for the shell, then run to its end", res, err)
	}
	done = hold()
	res, err = p.Run(context.Background(), Request{Command: "echo ran", Timeout: 300 * time.Millisecond})
	<-done
	if err != nil || !res.TimedOut || !res.NotStarted {
		t.Fatalf("without QueueWait: %+v, %v; want a timeout before the command started", res, err)
	}
	done = hold()
	res, err = p.Run(context.Background(), Request{Command: "echo ran", Timeout: time.Minute, QueueWait: 100 * time.Millisecond})
	<-done
	if err != nil || !res.TimedOut || !res.NotStarted {
		t.Fatalf("past QueueWait: %+v, %v; want a timeout before the command started", res, err)
	}
}

// TestTryRunOnlyOnAnIdleShell: TryRun runs on a shell that is open and
// idle, and otherwise runs nothing at once: not while the only shell is
// busy, not in a pool with no shell open yet. (A pool of one: a larger
// one opens a spare shell while its only one is busy.)
func TestTryRunOnlyOnAnIdleShell(t *testing.T) {
	p := NewPool(localHost{}, Options{}, 1)
	t.Cleanup(p.Close)
	dir := t.TempDir()
	if _, ok, err := p.TryRun(context.Background(), Request{Command: "touch " + dir + "/early"}); ok || err != nil {
		t.Fatalf("TryRun in a pool with no shell open: ran %v, %v", ok, err)
	}
	runPool(t, p, Request{Command: "true"}) // opens one shell
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.Run(context.Background(), Request{Command: "sleep 1"})
	}()
	time.Sleep(300 * time.Millisecond)
	if _, ok, err := p.TryRun(context.Background(), Request{Command: "touch " + dir + "/busy"}); ok || err != nil {
		t.Fatalf("TryRun while the only open shell is busy: ran %v, %v", ok, err)
	}
	<-done
	var out bytes.Buffer
	res, ok, err := p.TryRun(context.Background(), Request{Command: "echo idle", Stdout: &out})
	if !ok || err != nil || res.ExitCode != 0 || out.String() != "idle\n" {
		t.Fatalf("TryRun on an idle shell: ran %v, %+v, %v, %q", ok, res, err, out.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a TryRun that said it did not run ran: %v", ents)
	}
}

// TestOutputsFlag: the result says whether the outputs directory
// changed, or holds a PNG file, since the stamp was last set (as the agent
// does after each look), in the framing shell and in an isolated one
// alike, and costs nothing when the directory is not there.
func TestOutputsFlag(t *testing.T) {
	tmp := t.TempDir()
	dir, stamp := filepath.Join(tmp, "out puts"), filepath.Join(tmp, "seen")
	sh, err := Open(context.Background(), localHost{}, Options{Init: "cd /tmp", Outputs: guest.Outputs{Dir: dir, Stamp: stamp}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	// look is what the agent does: the stamp takes the time of the look.
	look := func() {
		t.Helper()
		time.Sleep(20 * time.Millisecond) // past the files' clock tick
		if err := os.WriteFile(stamp, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		cmd  string
		look bool // the agent looks after the command
		want bool
	}{
		{"true", false, false},                                  // no directory
		{"mkdir '" + dir + "' && cd '" + dir + "'", true, true}, // a directory not yet looked at
		{"true", false, false},
		{"echo x > notes.txt", true, true}, // the directory changed
		{"printf x > plot.png", true, true},
		{"true", false, false},                 // nothing since the look
		{"printf y >> plot.png", false, true},  // rewritten in place
		{"exec 2>/dev/null; true", true, true}, // isolated: it is still new
		{"true", false, false},
		{"printf z > PLOT.PNG", true, true},
		{"touch '*.[Pp][Nn][Gg]'", true, true},
		{"true", false, false}, // a name that is the pattern itself
	} {
		r := runOn(t, sh, Request{Command: c.cmd})
		if r.res.Outputs != c.want || r.res.ExitCode != 0 {
			t.Fatalf("%q: outputs %v exit %d (%q), want outputs %v", c.cmd, r.res.Outputs, r.res.ExitCode, r.stderr, c.want)
		}
		if c.look {
			look()
		}
	}
	if r := runOn(t, sh, Request{Command: "echo ${__sbx_f-unset}"}); r.stdout != "unset\n" {
		t.Fatalf("the frame's loop variable is left in the shell: %q", r.stdout)
	}
}

// silentHost starts a process that never greets: a stream that was opened
// but carries nothing, or a machine too loaded to start the shell.
type silentHost struct{ localHost }

func (silentHost) Command(ctx context.Context) proc.Process {
	cmd := exec.CommandContext(ctx, "sleep", "60")
	cmd.WaitDelay = time.Second
	return proc.FromCmd(cmd)
}

// TestOpenSaysWhichBoundEndedTheWait: a shell that never greets fails its
// open with the open's own bound named, and with the caller's when the
// caller's context ended first; neither is the bare word of an
// interrupted command.
func TestOpenSaysWhichBoundEndedTheWait(t *testing.T) {
	_, err := Open(context.Background(), silentHost{}, Options{OpenTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrOpenTimeout) || !strings.Contains(err.Error(), "did not answer within 200ms") {
		t.Fatalf("a shell that never greets: want its open's bound named, got %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = Open(ctx, silentHost{}, Options{OpenTimeout: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrOpenTimeout) || !strings.Contains(err.Error(), "before the call ended") {
		t.Fatalf("a call that ends first: want its context's error, got %v", err)
	}
}

// TestQuietOnlyWithNothingRunning: a pool is quiet when no command runs
// in its shells and none left processes behind; a command under way or
// one that left a process running makes it not quiet.
func TestQuietOnlyWithNothingRunning(t *testing.T) {
	p := NewPool(localHost{}, Options{}, 2)
	t.Cleanup(p.Close)
	if !p.Quiet() {
		t.Fatal("a new pool is not quiet")
	}
	runPool(t, p, Request{Command: "true"})
	if !p.Quiet() {
		t.Fatal("a pool whose command ended is not quiet")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.Run(context.Background(), Request{Command: "sleep 1"})
	}()
	deadline := time.Now().Add(time.Minute)
	for p.Quiet() {
		if time.Now().After(deadline) {
			t.Fatal("a pool running a command stayed quiet")
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-done
	if !p.Quiet() {
		t.Fatal("not quiet once the command ended")
	}
	if r := runPool(t, p, Request{Command: "sleep 5 >/dev/null 2>&1 &"}); !r.res.LeftBehind {
		t.Fatalf("the command left nothing behind: %+v", r.res)
	}
	if p.Quiet() {
		t.Fatal("quiet with a process a command left behind in one of its shells")
	}

	// A shell lost under a command (here it kills the shell; a cut
	// stream leaves the far end running) keeps the pool from being quiet.
	lost := NewPool(localHost{}, Options{}, 2)
	t.Cleanup(lost.Close)
	if r := runPool(t, lost, Request{Command: "kill -KILL $$"}); !r.res.ShellLost {
		t.Fatalf("the shell was not lost: %+v", r.res)
	}
	if lost.Quiet() {
		t.Fatal("quiet after a shell was lost under a command")
	}
}

// TestDeadIdleShellRetried: a command handed an idle shell that dies
// before the command begins (it exits on its next input, as one killed
// just as it was taken does) runs on another shell, once, and the agent
// sees its output, not a lost shell.
func TestDeadIdleShellRetried(t *testing.T) {
	dir := t.TempDir()
	p := NewPool(localHost{}, Options{EachCommand: `[ -e '` + dir + `'/die-$$ ] && exit 9`}, 2)
	t.Cleanup(p.Close)
	pid := strings.TrimSpace(runPool(t, p, Request{Command: "echo $$"}).stdout)
	if err := os.WriteFile(filepath.Join(dir, "die-"+pid), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := runPool(t, p, Request{Command: "echo ran in $$"})
	if r.res.ShellLost || r.res.ExitCode != 0 || r.stdout == "ran in "+pid+"\n" || !strings.HasPrefix(r.stdout, "ran in ") {
		t.Fatalf("a command handed a shell that died first: %+v %q", r.res, r.stdout)
	}
	// A shell that dies once the command has begun is not a retry's.
	r = runPool(t, p, Request{Command: "echo once >>'" + dir + "'/ran; kill -9 $$"})
	if !r.res.ShellLost || r.res.NotStarted {
		t.Fatalf("a shell killed by its command: %+v", r.res)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "ran")); string(data) != "once\n" {
		t.Fatalf("a command whose shell died after it began ran %q", data)
	}
}

// A shell that holds the server's own stdin pipe can have it reopened for
// writing by a process it started (/proc/PID/fd/0), filled, and be
// stopped: the next command's write then blocks, and its timeout must end
// it all the same, as an interrupt, with the shell replaced.
func TestFilledStdinDoesNotHoldACommandPastItsTimeout(t *testing.T) {
	sh := openShell(t)
	// Detached (no $! in the shell), after this command's frame: stop the
	// shell, then fill its stdin pipe through a writer of its own.
	r := runOn(t, sh, Request{Command: `( ( exec >/dev/null 2>&1; sleep 0.3; kill -STOP $$; exec 9>/proc/$$/fd/0; exec head -c 1000000 /dev/zero >&9 ) & )`})
	if r.res.ExitCode != 0 || r.res.LeftBehind {
		t.Fatalf("the set-up: %+v", r.res)
	}
	pid := sh.PID()
	t.Cleanup(func() { _ = exec.Command("kill", "-KILL", strconv.Itoa(pid)).Run() })
	waitStopped(t, pid)
	time.Sleep(200 * time.Millisecond) // the filler writes until the pipe is full
	done := make(chan Result, 1)
	go func() {
		res, _ := sh.Run(context.Background(), Request{Command: "echo late", Timeout: time.Second, Stdout: io.Discard, Stderr: io.Discard}, "")
		done <- res
	}()
	select {
	case res := <-done:
		if !res.TimedOut && !res.ShellLost {
			t.Fatalf("a command on a stopped shell with a full stdin: %+v", res)
		}
	case <-time.After(hangGuard):
		t.Fatal("a command whose write blocks on a full stdin outlived its timeout")
	}
	_ = exec.Command("pkill", "-KILL", "-f", "head -c 1000000 /dev/zero").Run()
}

// waitStopped waits until process pid is stopped (state T).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for time.Now().Before(deadline) {
		if procState(pid) == "T" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("shell %d never stopped", pid)
}

// procState is process pid's state letter from /proc (R, S, T, Z…), ""
// when there is no such process.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// A shell killed while processes it started hold its stdout and stderr:
// the command ends as the shell's end says, at once, not at its timeout
// (the held pipes give no end of file).
func TestShellKilledWhileItsOutputIsHeld(t *testing.T) {
	sh := openShell(t)
	start := time.Now()
	r := runOn(t, sh, Request{Command: `echo before; sleep 987653 & kill -9 $$`, Timeout: hangGuard})
	took := time.Since(start)
	t.Cleanup(func() { _ = exec.Command("pkill", "-KILL", "-f", "sleep 987653").Run() })
	if !r.res.ShellLost || r.res.TimedOut {
		t.Fatalf("got %+v after %v", r.res, took)
	}
	if took > hangGuard/2 {
		t.Fatalf("the command ended %v after its shell died", took)
	}
	if r.stdout != "before\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
}
