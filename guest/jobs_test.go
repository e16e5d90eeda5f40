package guest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestJobSweepOnHost runs the sweep on this machine's own /proc against
// processes marked with a fresh job id: one in its own session that
// ignores TERM, with a child that cleared its environment; one in its own
// process group; and decoys (another job's marker, none) that must live.
func TestJobSweepOnHost(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc here")
	}
	id, other := randomJobID(t), randomJobID(t)
	start := func(env []string, attr *syscall.SysProcAttr, script string) *exec.Cmd {
		c := exec.Command("sh", "-c", script)
		c.Env, c.SysProcAttr = append(os.Environ(), env...), attr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	mark := []string{JobMarker(id)}
	leader := start(mark, &syscall.SysProcAttr{Setsid: true}, `env -i sleep 1002 & trap "" TERM; exec sleep 1000`)
	start(mark, &syscall.SysProcAttr{Setpgid: true}, `exec sleep 1001`)
	decoys := []*exec.Cmd{
		start([]string{JobMarker(other)}, nil, `exec sleep 1003`),
		start(nil, nil, `exec sleep 1004`),
		// A name that forges the fields after it: the job's session.
		start(nil, nil, forgedSession(leader.Process.Pid)+`; sleep 1005; :`),
	}

	sweep := func(sig string) JobSweep {
		t.Helper()
		script, err := JobSignalScript(id, sig)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("sweep %q: %v", sig, err)
		}
		sw, err := ParseJobSweep(out)
		if err != nil {
			t.Fatal(err)
		}
		return sw
	}
	// until polls a counting sweep until it finds want processes.
	until := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			sw := sweep("")
			if sw.Processes == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sweep finds %d processes, want %d", sw.Processes, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Cleanup(func() { // whatever a failure left behind
		if script, err := JobSignalScript(id, "KILL"); err == nil {
			_ = exec.Command("sh", "-c", script).Run()
		}
	})
	until(3)
	if sw := sweep("TERM"); sw.Processes != 3 || !sw.Gone || sw.Exited || sw.Leader {
		t.Fatalf("TERM: %+v", sw)
	}
	until(1) // sleep 1000 ignores TERM
	if sw := sweep("KILL"); sw.Processes != 1 {
		t.Fatalf("KILL: %+v", sw)
	}
	until(0)
	for _, d := range decoys {
		if err := d.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("decoy %v was hit: %v", d.Args, err)
		}
	}
}

// forgedSession is shell text that gives the shell running it a name
// whose newline cuts its stat line where the name says it is in session
// sid (its real session is another). The shell must not exec its last
// command (bash and busybox would): that would take the name back.
func forgedSession(sid int) string {
	return `printf ') S 1 1 ` + strconv.Itoa(sid) + `\n' >/proc/$$/comm`
}

func randomJobID(t *testing.T) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(b[:])
	if !strings.HasPrefix(JobMarker(id), JobMarkerVar+"=") {
		t.Fatal(id)
	}
	return id
}

// TestJobsListOnHost runs the one-pass listing on this machine's /proc and
// a job directory made here, with dash and busybox sh: a running job with
// a child in its session that cleared its environment, an ended one, one
// whose leader is gone without a status, one whose boot file is a planted
// 5 MB line (not read: its boot is unknown), and a directory that is not a
// job.
func TestJobsListOnHost(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc here")
	}
	dir := t.TempDir()
	running, ended, lost, big := randomJobID(t), randomJobID(t), randomJobID(t), randomJobID(t)
	c := exec.Command("sh", "-c", `env -i sleep 1002 & exec sleep 1000`)
	c.Env, c.SysProcAttr = append(os.Environ(), JobMarker(running)), &syscall.SysProcAttr{Setsid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() })
	// Not the job's, whatever its name says.
	forger := exec.Command("sh", "-c", forgedSession(c.Process.Pid)+`; sleep 1005; :`)
	if err := forger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = forger.Process.Kill(); _ = forger.Wait() })
	write := func(id, name, content string) {
		t.Helper()
		if err := os.MkdirAll(dir+"/"+id, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+"/"+id+"/"+name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(running, "log", "hello\n")
	write(running, "pid", strconv.Itoa(c.Process.Pid)+"\n")
	write(ended, "log", strings.Repeat("x", 12345))
	write(ended, "pid", "999999\n")
	write(ended, "rc", "3\n")
	write(lost, "log", "")
	write(lost, "pid", "999998\n")
	write(lost, "boot", "0123abcd-4567-89ef-0000-000000000000-12345\n")
	write(big, "log", "")
	write(big, "pid", "999997\n")
	write(big, "boot", strings.Repeat("0", 5<<20)+"\n")
	write("not-a-job", "log", "?")

	for _, sh := range []string{"dash", "busybox"} {
		t.Run(sh, func(t *testing.T) {
			argv := []string{sh, "-c", jobsListScript(dir)}
			if sh == "busybox" {
				argv = []string{"busybox", "sh", "-c", jobsListScript(dir)}
			}
			if _, err := exec.LookPath(argv[0]); err != nil {
				t.Skipf("%s is not installed here", argv[0])
			}
			var l JobsList
			deadline := time.Now().Add(30 * time.Second)
			for {
				out, err := exec.Command(argv[0], argv[1:]...).Output()
				if err != nil {
					t.Fatalf("list: %v", err)
				}
				if l, err = ParseJobsList(out); err != nil {
					t.Fatal(err)
				}
				if n, _ := l.Processes(running); n == 2 || time.Now().After(deadline) {
					break // sleep 1000 (sh execs it) and its env -i child, once both have started
				}
				time.Sleep(20 * time.Millisecond)
			}
			if l.Boot == "" || len(l.Jobs) != 4 {
				t.Fatalf("boot %q, jobs %+v", l.Boot, l.Jobs)
			}
			if n, alive := l.Processes(running); n != 2 || !alive {
				t.Errorf("running job: %d processes, leader alive %v", n, alive)
			}
			if j := l.Jobs[running]; j.Size != 6 || j.ExitCode != -1 || j.Leader != c.Process.Pid {
				t.Errorf("running job's files: %+v", j)
			}
			if j := l.Jobs[ended]; j.Size != 12345 || j.ExitCode != 3 {
				t.Errorf("ended job's files: %+v", j)
			}
			if n, alive := l.Processes(lost); n != 0 || alive || l.Jobs[lost].Boot != "0123abcd-4567-89ef-0000-000000000000-12345" || l.Jobs[lost].ExitCode != -1 {
				t.Errorf("lost job: %d processes, alive %v, files %+v", n, alive, l.Jobs[lost])
			}
			if j := l.Jobs[big]; j.Boot != "" || j.Leader != 999997 {
				t.Errorf("job with a 5 MB boot file: %+v; want its boot unknown, its pid read", j)
			}
		})
	}
}
