//go:build linux

package hostkill

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseStatCountsFieldsFromTheLastParen(t *testing.T) {
	s := "4242 (a) b (c)) S 17 4242 4242 0 -1 4194560 99 0 0 0 0 0 0 0 20 0 1 0 987654 2215936 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	p, err := parseStat(4242, s)
	if err != nil {
		t.Fatal(err)
	}
	if p.ppid != 17 || p.start != 987654 {
		t.Fatalf("ppid %d start %d, want 17 987654", p.ppid, p.start)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 2"} {
		if _, err := parseStat(1, bad); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

func TestWritersKeepsInitWatchdogAndExecSessions(t *testing.T) {
	// Host view: 100 is the engine (conmon), 10 the container's init,
	// 11 the watchdog (init's first child) with its checker 12, 13 a job
	// started under init, 20 an exec session (parent 100) running the
	// user's command 21, which started 22 in a nested namespace.
	procs := map[int]*proc{}
	add := func(pid, ppid int, start uint64, inNS bool) {
		procs[pid] = &proc{pid: pid, ppid: ppid, start: start, inNS: inNS}
	}
	add(1, 0, 0, false)
	add(100, 1, 5, false)
	add(10, 100, 10, true)
	add(11, 10, 11, true)
	add(12, 11, 12, true)
	add(13, 10, 13, true)
	add(20, 100, 20, true)
	add(21, 20, 21, true)
	add(22, 21, 22, false)
	add(30, 1, 30, false) // an unrelated host process
	add(23, 20, 41, true) // the user's next command, begun after the cutoff
	add(24, 20, 40, true) // a writer begun in the cutoff's own tick
	var got []int
	for _, p := range writers(10, procs, 40) {
		got = append(got, p.pid)
	}
	slices.Sort(got)
	if want := []int{13, 21, 22, 24}; !slices.Equal(got, want) {
		t.Fatalf("writers = %v, want %v", got, want)
	}
}

func TestKillWritersSignalsOnlyThatTree(t *testing.T) {
	// The test stands for the engine: a shell plays the container's init,
	// its first child the watchdog, its second a writer and its third a
	// command begun after the kill was decided. Only the writer may die.
	if _, err := os.Stat("/proc/self/ns/pid"); err != nil {
		t.Skip("no /proc here: hostkill is for Linux hosts")
	}
	cmd := exec.Command("sh", "-c", "sleep 300 & sleep 300 & read -r _; sleep 300 & wait")
	later, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// A group of its own: the cleanup ends the sleeps the test keeps
	// alive too, not only the shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	kids := func() []int {
		procs, err := readProcs("none")
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, p := range procs {
			if p.ppid == cmd.Process.Pid {
				out = append(out, p.pid)
			}
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(kids()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the children did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := Open(cmd.Process.Pid); err == nil {
		t.Fatal("Open accepted a process in the server's own PID namespace")
	}
	by, err := Now()
	if err != nil {
		t.Fatal(err)
	}
	// Two ticks on, so that the third child's start time is past by.
	time.Sleep(3 * time.Second / userHZ)
	if _, err := later.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	for len(kids()) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the third child did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The test shares the host's namespace, which holds every process:
	// narrow the container to init's tree.
	c, err := open(cmd.Process.Pid, "none")
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.KillWriters(by)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("signalled %d processes, want the one writer", n)
	}
	for time.Now().Before(deadline) && len(kids()) > 2 {
		time.Sleep(10 * time.Millisecond)
	}
	if k := kids(); len(k) != 2 {
		t.Fatalf("children left: %v, want the first (the watchdog's slot) and the third (begun after the cutoff)", k)
	}
}

func TestNowIsInTheUnitOfStartTimes(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here: hostkill is for Linux hosts")
	}
	before, err := Now()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	p, err := readProc(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	after, err := Now()
	if err != nil {
		t.Fatal(err)
	}
	// /proc rounds down to a tick, as Now does.
	if p.start < before || p.start > after {
		t.Fatalf("a process started between Now readings %d and %d has start time %d", before, after, p.start)
	}
}

func TestKillAllEndsInitAndWaits(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 300 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c, err := open(cmd.Process.Pid, "none")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KillAll(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("init's exit: %v", err)
	}
	if err := c.KillAll(time.Second); err == nil {
		t.Fatal("a second KillAll of a gone container succeeded")
	}
}
