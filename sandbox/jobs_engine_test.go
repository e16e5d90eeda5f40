package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
	bolt "go.etcd.io/bbolt"
)

// jobProcs counts, by a command of its own in the sandbox, the processes
// that carry job id's marker (zombies have no environment and do not count).
func jobProcs(t *testing.T, m *sandbox.Manager, name, id string) int {
	t.Helper()
	o := run(t, m, name, shell.Request{Command: "grep -l '" + guest.JobMarker(id) + "' /proc/[0-9]*/environ 2>/dev/null | wc -l"})
	n, err := strconv.Atoi(strings.TrimSpace(o.stdout))
	if err != nil {
		t.Fatalf("count: %q %q", o.stdout, o.stderr)
	}
	return n
}

// jobAt polls a job's status until ok accepts it.
func jobAt(t *testing.T, m *sandbox.Manager, name, job string, ok func(sandbox.JobStatus) bool) sandbox.JobStatus {
	t.Helper()
	var st sandbox.JobStatus
	enginetest.WaitFor(t, "job "+job+" to reach the state the test waits for", func() error {
		l, err := m.JobLogs(context.Background(), name, job, sandbox.LogOptions{Since: -1, Tail: 1, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		if st = l.JobStatus; !ok(st) {
			return fmt.Errorf("job %s: %+v", job, st)
		}
		return nil
	})
	return st
}

func startJob(t *testing.T, m *sandbox.Manager, name, job, command string) sandbox.JobStatus {
	t.Helper()
	st, err := m.StartJob(context.Background(), name, job, command, "")
	if err != nil {
		t.Fatalf("bg %s: %v", job, err)
	}
	return st
}

// TestJobKillOnEngine: kill ends a job's whole tree, processes that ignore
// TERM or left its session included, and says what it could not end.
func TestJobKillOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			m := newManager(t, tg, enginetest.Prefix(t, tg.New()))
			ctx := context.Background()

			t.Run("TERM then KILL", func(t *testing.T) {
				const box = "kill"
				st := startJob(t, m, box, "srv", `(trap '' TERM; exec sleep 1000) & setsid sleep 1001 & setsid sh -c "trap '' TERM; exec sleep 1002" & wait`)
				// The two that ignore TERM ignore it once they run sleep: a
				// subshell counted before its trap would die of the TERM.
				enginetest.WaitFor(t, "the TERM-proof sleeps to run", func() error {
					if o := run(t, m, box, shell.Request{Command: "pgrep -fc '^sleep 100[02]$'"}); strings.TrimSpace(o.stdout) != "2" {
						return fmt.Errorf("%q sleeps", strings.TrimSpace(o.stdout))
					}
					return nil
				})
				sb, _ := m.Lookup(box)
				before := sb.LastUsed()
				jobAt(t, m, box, "srv", func(s sandbox.JobStatus) bool { return s.Processes == 4 })
				// Polling a job is use: the idle watchdog must not stop a
				// sandbox whose agent waits on its build.
				if !sb.LastUsed().After(before) {
					t.Errorf("reading a job's logs did not count as use (last used %v, before %v)", sb.LastUsed(), before)
				}

				r, err := m.KillJobWith(ctx, box, "srv", sandbox.KillOptions{Signal: "TERM", Grace: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				// The leader and setsid sleep 1001 end; the two that ignore TERM live on.
				if r.Signalled != 4 || r.Processes != 2 || r.ProcessesEnded != 2 || r.Ended || r.AlreadyEnded ||
					r.State != "exited" || r.ExitCode == nil || *r.ExitCode != 143 {
					t.Fatalf("TERM: %+v", r)
				}
				if n := jobProcs(t, m, box, st.ID); n != 2 {
					t.Fatalf("after TERM %d processes carry the marker, want 2", n)
				}
				if l := jobAt(t, m, box, "srv", func(sandbox.JobStatus) bool { return true }); l.State != "exited" || l.Processes != 2 {
					t.Fatalf("logs after TERM: %+v", l)
				}
				// Its name is not free while something of it runs.
				if _, err := m.StartJob(ctx, box, "srv", "true", ""); !errors.Is(err, sandbox.ErrJobRunning) || !strings.Contains(err.Error(), "2 processes") {
					t.Fatalf("bg over survivors: %v", err)
				}

				r, err = m.KillJob(ctx, box, "srv", "KILL")
				if err != nil {
					t.Fatal(err)
				}
				if r.AlreadyEnded || r.Signalled != 2 || !r.Ended || r.Processes != 0 || *r.ExitCode != 143 {
					t.Fatalf("second kill, KILL: %+v", r)
				}
				if n := jobProcs(t, m, box, st.ID); n != 0 {
					t.Fatalf("after KILL %d processes carry the marker", n)
				}
				o := run(t, m, box, shell.Request{Command: "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 100[0-2]' || true"})
				if strings.TrimSpace(o.stdout) != "0" {
					t.Fatalf("sleeps left: %q", o.stdout)
				}
				r, err = m.KillJob(ctx, box, "srv", "KILL")
				if err != nil || !r.AlreadyEnded || r.Signalled != 0 {
					t.Fatalf("third kill: %+v %v", r, err)
				}
			})

			t.Run("200 processes", func(t *testing.T) {
				const box = "many"
				st := startJob(t, m, box, "fan", `i=0; while [ $i -lt 200 ]; do if [ $((i % 4)) = 0 ]; then setsid sleep 1000 & else sleep 1000 & fi; i=$((i+1)); done; wait`)
				jobAt(t, m, box, "fan", func(s sandbox.JobStatus) bool { return s.Processes == 201 })
				r, err := m.KillJob(ctx, box, "fan", "KILL")
				if err != nil {
					t.Fatal(err)
				}
				if r.Signalled != 201 || !r.Ended || r.Processes != 0 || r.State != "exited" || *r.ExitCode != 137 {
					t.Fatalf("KILL: %+v", r)
				}
				if n := jobProcs(t, m, box, st.ID); n != 0 {
					t.Fatalf("after KILL %d processes carry the marker", n)
				}
			})

			t.Run("STOP and CONT", func(t *testing.T) {
				const box = "kill"
				startJob(t, m, box, "ticker", `while :; do date +%s%N; sleep 0.05; done`)
				jobAt(t, m, box, "ticker", func(s sandbox.JobStatus) bool { return s.LogSize > 0 })
				r, err := m.KillJob(ctx, box, "ticker", "STOP")
				if err != nil || r.Signalled == 0 || r.State != "running" || r.Ended {
					t.Fatalf("STOP: %+v %v", r, err)
				}
				a := jobAt(t, m, box, "ticker", func(sandbox.JobStatus) bool { return true }).LogSize
				// The window the test watches, not a wait: a job that ran
				// would write in it.
				time.Sleep(300 * time.Millisecond)
				if b := jobAt(t, m, box, "ticker", func(sandbox.JobStatus) bool { return true }).LogSize; b != a {
					t.Fatalf("a stopped job wrote: %d then %d bytes", a, b)
				}
				if r, err = m.KillJob(ctx, box, "ticker", "CONT"); err != nil || r.Signalled == 0 {
					t.Fatalf("CONT: %+v %v", r, err)
				}
				jobAt(t, m, box, "ticker", func(s sandbox.JobStatus) bool { return s.LogSize > a })
				if r, err = m.KillJob(ctx, box, "ticker", ""); err != nil || !r.Ended || *r.ExitCode != 143 {
					t.Fatalf("TERM: %+v %v", r, err)
				}
			})

			t.Run("process gone", func(t *testing.T) {
				const box = "kill"
				// The leader killed from outside: its exit status is
				// recorded, and the child it leaves is still counted.
				st := startJob(t, m, box, "victim", "sleep 1000; true")
				jobAt(t, m, box, "victim", func(s sandbox.JobStatus) bool { return s.Processes == 2 })
				run(t, m, box, shell.Request{Command: "kill -9 " + strconv.Itoa(st.PID)})
				l := jobAt(t, m, box, "victim", func(s sandbox.JobStatus) bool { return s.State != "running" })
				if l.State != "exited" || *l.ExitCode != 137 || l.Processes != 1 {
					t.Fatalf("killed from outside: %+v", l)
				}
				r, err := m.KillJob(ctx, box, "victim", "")
				if err != nil || r.AlreadyEnded || r.Signalled != 1 || !r.Ended || *r.ExitCode != 137 {
					t.Fatalf("kill what it left: %+v %v", r, err)
				}
			})

			t.Run("bad job name", func(t *testing.T) {
				for _, bad := range []string{"../x", ".bad", "a b", strings.Repeat("j", 64)} {
					_, err1 := m.StartJob(ctx, "kill", bad, "true", "")
					_, err2 := m.JobLogs(ctx, "kill", bad, sandbox.LogOptions{Since: -1, Tail: 1, Max: 10})
					_, err3 := m.KillJob(ctx, "kill", bad, "")
					for _, err := range []error{err1, err2, err3} {
						if !errors.Is(err, sandbox.ErrInvalidJobName) || !strings.Contains(err.Error(), "invalid job name") || strings.Contains(err.Error(), "sandbox name") {
							t.Errorf("%q: %v", bad, err)
						}
					}
				}
			})
		})
	}
}

// TestJobsOfStoppedSandboxOnEngine: a sandbox's container stopped or
// removed behind the server's back: the job tools answer from what they
// know, lost or exited, and never boot or start it.
func TestJobsOfStoppedSandboxOnEngine(t *testing.T) {
	enginetest.QuietDisk(t) // job records live in the state file
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			a, b, _ := servers(t, tg, prefix)
			ctx := context.Background()
			const box = "stopped"
			ctr := a.ContainerFor(box)

			startJob(t, a, box, "sleeper", "sleep 1000")
			startJob(t, a, box, "done", "exit 3")
			jobAt(t, a, box, "done", func(s sandbox.JobStatus) bool { return s.State == "exited" })
			if err := rt.Stop(ctx, ctr, time.Second); err != nil {
				t.Fatal(err)
			}
			stillStopped := func(when string) {
				t.Helper()
				c, err := rt.Inspect(ctx, ctr)
				if err != nil || c.Running() {
					t.Fatalf("%s: the container is %+v (%v), want it stopped", when, c.State, err)
				}
			}
			// a has shells in the sandbox (now dead); b never booted it.
			for _, m := range []*sandbox.Manager{a, b} {
				list, err := m.Jobs(ctx, box)
				if err != nil || len(list) != 2 {
					t.Fatalf("jobs: %+v %v", list, err)
				}
				for _, j := range list {
					switch {
					case j.Name == "sleeper" && (j.State != "lost" || !strings.Contains(j.Reason, "stopped")):
						t.Errorf("sleeper: %+v", j)
					case j.Name == "done" && (j.State != "exited" || *j.ExitCode != 3):
						t.Errorf("done: %+v", j)
					}
				}
				l, err := m.JobLogs(ctx, box, "sleeper", sandbox.LogOptions{Since: -1, Tail: 10, Max: 100})
				if err != nil || l.State != "lost" || len(l.Data) != 0 {
					t.Fatalf("logs: %+v %v", l, err)
				}
				r, err := m.KillJob(ctx, box, "sleeper", "KILL")
				if err != nil || r.State != "lost" || !r.AlreadyEnded {
					t.Fatalf("kill: %+v %v", r, err)
				}
				stillStopped("after the job tools")
			}

			// Started again (by a command): the job's process is gone
			// without an exit status.
			run(t, a, box, shell.Request{Command: "true"})
			l := jobAt(t, b, box, "sleeper", func(sandbox.JobStatus) bool { return true })
			if l.State != "lost" || !strings.Contains(l.Reason, "without an exit status") || l.Processes != 0 {
				t.Fatalf("after a restart: %+v", l)
			}
			if r, err := b.KillJob(ctx, box, "sleeper", ""); err != nil || !r.AlreadyEnded || r.State != "lost" {
				t.Fatalf("kill after a restart: %+v %v", r, err)
			}

			// Removed: lost, and nothing is created.
			if err := rt.Remove(ctx, ctr); err != nil {
				t.Fatal(err)
			}
			for _, m := range []*sandbox.Manager{a, b} {
				list, err := m.Jobs(ctx, box)
				if err != nil || len(list) != 2 || list[0].State != "lost" || !strings.Contains(list[0].Reason, "removed") {
					t.Fatalf("jobs of a removed sandbox: %+v %v", list, err)
				}
			}
			if n := containers(t, tg, prefix, box); n != 0 {
				t.Fatalf("the job tools created %d containers", n)
			}
		})
	}
}

// refillingBomb keeps a sandbox's process table full: its children turn
// into sleeps (a small process each) and it tries a fork again a few
// milliseconds after one fails, so every slot that frees is taken back.
const refillingBomb = `exec python3 -c '
import os, time
while True:
    try:
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "1000"])
    except OSError:
        time.sleep(0.003)
'`

// hostPids reads how many processes a container holds, and how many it
// may, from its pids cgroup on the host (v1 or v2): nothing runs in the
// container, whose table may be full.
func hostPids(rt sandbox.Runtime, ctr string) (n, limit int, err error) {
	hp, ok := rt.(sandbox.HostPIDs)
	if !ok {
		return 0, 0, fmt.Errorf("%s runs its containers on another kernel", rt.Kind())
	}
	pid, err := hp.InitPID(context.Background(), ctr)
	if err != nil {
		return 0, 0, err
	}
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return 0, 0, err
	}
	read := func(f string) (int, error) {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	for line := range strings.Lines(string(cg)) {
		var dirs []string
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			dirs = []string{"/sys/fs/cgroup" + p}
		} else if _, p, ok := strings.Cut(strings.TrimSpace(line), ":pids:"); ok {
			dirs = []string{"/sys/fs/cgroup/pids" + p}
		}
		for _, d := range dirs {
			if n, err = read(d + "/pids.current"); err == nil {
				limit, err = read(d + "/pids.max")
				return n, limit, err
			}
		}
	}
	return 0, 0, fmt.Errorf("no pids cgroup in %q", cg)
}

// tableFull reports, as an error, a container's process table that has a
// free slot: it is full to the last slot when nothing ends there and a
// bomb takes back at once the slot of a process that does.
func tableFull(rt sandbox.Runtime, ctr string) func() error {
	return func() error {
		n, limit, err := hostPids(rt, ctr)
		if err == nil && n < limit {
			err = fmt.Errorf("%d processes of %d", n, limit)
		}
		return err
	}
}

// awaitMarkWhileFull has the agent's commands hold every open shell of
// sandbox box, whose process table is full (a read of a fifo, /tmp/hold,
// forks nothing and blocks until released), while those that want
// another find that none can start; then it waits until an activity mark
// lands, calling poll between looks. A mark counts once the holds have had
// one mark's period to take the shells (so none went to a shell still
// idle): the activity file's time, read from the container's upper layer
// on the host (nothing can run in the container), must pass that, and the
// table must still be full once it did. The bound is generous, since a
// mark that never lands is the failure. It returns what ends the hold and
// waits for the commands.
func awaitMarkWhileFull(t *testing.T, rt sandbox.Runtime, m *sandbox.Manager, box string, period time.Duration, full func() error, poll func()) (release func()) {
	t.Helper()
	hold, cancel := context.WithCancel(context.Background())
	var held sync.WaitGroup
	for range 10 {
		held.Go(func() {
			_, _ = m.Exec(hold, box, shell.Request{Command: "read x </tmp/hold", Timeout: 5 * time.Minute})
		})
	}
	release = func() { cancel(); held.Wait() }
	activity, err := hostFilePath(rt, m.ContainerFor(box), guest.ActivityFile)
	if err != nil {
		release()
		t.Fatalf("find the activity file on the host: %v", err)
	}
	from := time.Now().Add(period)
	var marked time.Time
	for end := from.Add(2 * time.Minute); ; {
		poll()
		if fi, err := os.Stat(activity); err == nil {
			marked = fi.ModTime()
		}
		if marked.After(from) {
			break
		}
		if time.Now().After(end) {
			release()
			t.Fatalf("no activity mark landed while the table was full: the last is at %s, the shells were all held from %s",
				marked.Format(time.TimeOnly), from.Format(time.TimeOnly))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := full(); err != nil {
		release()
		t.Fatalf("the table did not stay full while the test waited for a mark (%v): the test watched nothing", err)
	}
	t.Logf("a mark landed %s after the shells were all held", marked.Sub(from).Round(time.Millisecond))
	return release
}

// hostFilePath is where a file that a container wrote in its root file
// system lies on the host, in the container's upper layer: nothing runs in
// the container, whose table may be full.
func hostFilePath(rt sandbox.Runtime, ctr, path string) (string, error) {
	ud, ok := rt.(sandbox.UsageDirs)
	if !ok {
		return "", fmt.Errorf("%s keeps its containers' files out of the host's reach", rt.Kind())
	}
	upper, err := ud.RootfsDir(context.Background(), ctr)
	if err != nil {
		return "", err
	}
	return filepath.Join(upper, path), nil
}

// TestJobForkBombOnEngine: a job that keeps the sandbox's process table
// full leaves the server two things it must still do with no process to
// spare, while the agent's commands hold shells and it polls the job:
// mark the sandbox in use, so that the idle watchdog does not take it,
// and kill the job to the last process. No new shell can start there;
// both scripts fork nothing.
func TestJobForkBombOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			destroyAtEnd := bombTest(t, rt)
			const box = "bomb"
			// An explicit limit: docker sets none by default, and the bomb
			// must fill the sandbox's table, never the host's. A short idle
			// TTL: the server marks a sandbox in use every TTL/3. Not too
			// short: the sandbox is idle between the job's start and the
			// holds, and on a loaded machine the table may take more than
			// 10 s to fill, after which the watchdog stopped the sandbox.
			const idleTTL = time.Minute
			m := limitsManager(t, tg, enginetest.Prefix(t, rt), map[string]sandbox.Profile{box: {Pids: 256, CPUs: bombCPUs, IdleTTL: idleTTL.String()}})
			destroyAtEnd(m, box)
			ctx := context.Background()
			run(t, m, box, shell.Request{Command: "true"})
			if in, err := m.Status(ctx, box); err != nil || in.Limits.Pids != 256 {
				// Never run a bomb the sandbox does not bound: it fills the host's table.
				t.Skipf("the engine here enforces no pids limit (%+v, %v; a rootless engine on cgroup v1 cannot)", in.Limits, err)
			}
			run(t, m, box, shell.Request{Command: "mkfifo /tmp/hold"})
			st := startJob(t, m, box, "bomb", refillingBomb)
			full := tableFull(rt, m.ContainerFor(box))
			enginetest.WaitFor(t, "the bomb to fill the table", full)
			// The agent polls the job back to back meanwhile; the marks go
			// through a chore shell the job's start opened.
			release := awaitMarkWhileFull(t, rt, m, box, idleTTL/3, full, func() {
				_, _ = m.JobLogs(ctx, box, "bomb", sandbox.LogOptions{Since: -1, Tail: 1, Max: 100})
			})
			defer release()
			r, err := m.KillJob(ctx, box, "bomb", "KILL")
			if err != nil {
				t.Fatalf("KILL with the table full: %v", err)
			}
			if !r.Ended || r.Processes != 0 || r.Signalled < 100 {
				t.Fatalf("KILL: %+v", r)
			}
			t.Logf("killed %d processes", r.Signalled)
			release()
			if n := jobProcs(t, m, box, st.ID); n != 0 {
				t.Fatalf("after KILL %d processes carry the marker", n)
			}
			if c, err := rt.Inspect(ctx, m.ContainerFor(box)); err != nil || !c.Running() {
				t.Fatalf("the sandbox stopped under the bomb: %+v %v", c, err)
			}
			// Gone before the test ends: a bomb container that a slow
			// cleanup left behind would load the machine for the rest.
			dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			if _, err := m.Destroy(dctx, box); err != nil {
				t.Errorf("destroy the bomb's sandbox: %v", err)
			}
		})
	}
}

// TestActivityMarkThroughTheAgentOnEngine: in a sandbox whose agent runs
// and whose process table a command's background bomb keeps full (no job,
// so no chore shell was opened for it), the activity marks go through the
// agent, which starts no process, while the agent's commands hold every
// shell and other calls keep the agent busy; the agent lives through it.
func TestActivityMarkThroughTheAgentOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			destroyAtEnd := bombTest(t, rt)
			const box, idleTTL = "agentmark", time.Minute // see TestJobForkBombOnEngine
			log := &lockedBuffer{}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: enginetest.Prefix(t, rt), Defaults: sandbox.Profile{Image: tg.Image},
				Profiles: map[string]sandbox.Profile{box: {Pids: 256, CPUs: bombCPUs, IdleTTL: idleTTL.String()}},
				Logger:   slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			t.Cleanup(m.Close)
			destroyAtEnd(m, box)
			t.Cleanup(func() {
				if t.Failed() {
					var lines []string
					for l := range strings.Lines(log.String()) {
						if strings.Contains(l, "agent") || strings.Contains(l, "mark") {
							lines = append(lines, l)
						}
					}
					t.Logf("the server's log of marks and the agent:\n%s", strings.Join(lines[max(0, len(lines)-40):], ""))
				}
			})
			ctx := context.Background()
			run(t, m, box, shell.Request{Command: "mkfifo /tmp/hold"})
			in, err := m.Status(ctx, box)
			if err != nil || in.Limits.Pids != 256 {
				t.Skipf("the engine here enforces no pids limit (%+v, %v; a rootless engine on cgroup v1 cannot)", in.Limits, err)
			}
			// A dial starts the agent (nothing listens on the port).
			if c, err := m.Dial(ctx, box, 1); err == nil {
				c.Close()
			}
			if st := m.AgentStatus(ctx, in); st.State != sandbox.AgentRunning {
				t.Fatalf("the agent does not run after a dial: %s", st)
			}
			run(t, m, box, shell.Request{Command: "(" + refillingBomb + ") </dev/null >/dev/null 2>&1 &"})
			full := tableFull(rt, m.ContainerFor(box))
			enginetest.WaitFor(t, "the bomb to fill the table", full)
			log.Reset()
			// The agent's other work goes on meanwhile, 30 calls at once
			// (each reads a directory, a blocking call): the agent lives
			// through it, though no thread can start in the sandbox.
			release := awaitMarkWhileFull(t, rt, m, box, idleTTL/3, full, func() {
				var wg sync.WaitGroup
				for range 30 {
					wg.Go(func() {
						if _, _, err := m.Outputs(ctx, box, time.Now()); err != nil {
							t.Errorf("the outputs through the agent, with the table full: %v", err)
						}
					})
				}
				wg.Wait()
			})
			defer release()
			// Every mark the server tried went through the agent: none
			// waited for a shell that could not start.
			marks := regexp.MustCompile(`msg="mark sandbox active" sandbox=`+box+` via=(\w+) err=(.*) agent_err=`).FindAllStringSubmatch(log.String(), -1)
			if len(marks) == 0 {
				t.Fatalf("no mark in the server's log:\n%s", log.String())
			}
			for _, mk := range marks {
				if mk[1] != "agent" || mk[2] != "<nil>" {
					t.Fatalf("a mark with the agent running: %s", mk[0])
				}
			}
			if st := m.AgentStatus(ctx, in); st.State != sandbox.AgentRunning {
				t.Errorf("the agent ended with the table full: %s", st)
			}
			release()
			dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			if _, err := m.Destroy(dctx, box); err != nil {
				t.Errorf("destroy the bomb's sandbox: %v", err)
			}
		})
	}
}

// TestJobsAtScaleOnEngine: a sandbox with a thousand ended jobs, two live
// ones and a record the state file cannot decode lists every one of them
// right in one call; jobs that ended before the retention are forgotten
// and their files removed; the exit statuses seen are saved in one write.
func TestJobsAtScaleOnEngine(t *testing.T) {
	enginetest.QuietDisk(t) // job records live in the state file
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			a, _, st := servers(t, tg, prefix)
			ctx := context.Background()
			const box = "many"
			startJob(t, a, box, "sleeper", "sleep 1000")
			startJob(t, a, box, "done", "exit 3")
			jobAt(t, a, box, "done", func(s sandbox.JobStatus) bool { return s.State == "exited" })

			const n, old = 1000, 10
			ids := make([]string, n)
			recs := make([]state.Job, n)
			started := time.Now().Add(-time.Hour).UTC()
			longAgo := time.Now().Add(-30 * 24 * time.Hour).UTC()
			var mk strings.Builder
			mk.WriteString("set -e; mkdir -p " + guest.JobsDir + "; cd " + guest.JobsDir + "; mkdir")
			for i := range ids {
				ids[i] = fmt.Sprintf("%016x", 0xa000000000000000+uint64(i))
				mk.WriteString(" " + ids[i])
				recs[i] = state.Job{Sandbox: box, Name: fmt.Sprintf("j%04d", i), ID: ids[i], Command: "true", PID: 100000 + i,
					Dir: guest.JobDir(ids[i]), Container: a.ContainerFor(box), Started: started}
				if i < old {
					code := 0
					recs[i].Ended, recs[i].ExitCode = &longAgo, &code
				}
			}
			mk.WriteString("\nfor d in " + strings.Join(ids, " ") + "; do echo log-of-$d >$d/log; echo $((0x${d#a} % 7)) >$d/rc; done")
			if o := run(t, a, box, shell.Request{Command: mk.String()}); o.res.ExitCode != 0 {
				t.Fatalf("make job dirs: %d %s", o.res.ExitCode, o.stderr)
			}
			if err := st.PutJobs(recs...); err != nil {
				t.Fatal(err)
			}
			damage(t, st.Path, box, "broken")

			list, err := a.Jobs(ctx, box)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != n-old+3 {
				t.Fatalf("jobs listed %d, want %d", len(list), n-old+3)
			}
			byName := map[string]sandbox.JobStatus{}
			for _, j := range list {
				byName[j.Name] = j
			}
			if j := byName["sleeper"]; j.State != "running" || j.Processes < 1 {
				t.Errorf("sleeper: %+v", j)
			}
			if j := byName["done"]; j.State != "exited" || j.ExitCode == nil || *j.ExitCode != 3 {
				t.Errorf("done: %+v", j)
			}
			if j := byName["broken"]; j.State != "lost" || !strings.Contains(j.Reason, "cannot be read") {
				t.Errorf("the damaged record: %+v", j)
			}
			for i := old; i < n; i++ {
				j := byName[recs[i].Name]
				if j.State != "exited" || j.ExitCode == nil || *j.ExitCode != i%7 || j.LogSize != int64(len("log-of-"+ids[i]+"\n")) || j.Ended == nil {
					t.Fatalf("%s: %+v", recs[i].Name, j)
				}
			}
			for i := range old {
				if _, ok := byName[recs[i].Name]; ok {
					t.Errorf("%s ended 30 days ago and is still listed", recs[i].Name)
				}
			}
			left := run(t, a, box, shell.Request{Command: "ls " + guest.JobsDir + " | wc -l"})
			if got := strings.TrimSpace(left.stdout); got != strconv.Itoa(n-old+2) {
				t.Errorf("%s job directories left in the sandbox, want %d", got, n-old+2)
			}
			saved, err := st.Jobs(box)
			if err != nil {
				t.Fatal(err)
			}
			ended := 0
			for _, j := range saved {
				if j.Ended != nil && j.ExitCode != nil {
					ended++
				}
			}
			if len(saved) != n-old+3 || ended != n-old+1 {
				t.Errorf("state keeps %d records, %d with an exit status; want %d and %d", len(saved), ended, n-old+3, n-old+1)
			}

			// Hostile job directories: a fifo for a pid file, a 5 MB boot
			// line, and fifty jobs of this boot whose leader is gone
			// without a status (their waiter was killed). The list still
			// answers, once, with every job, the fifty lost.
			var bad strings.Builder
			bad.WriteString("cd " + guest.JobsDir + " && mkdir fifo0000fifo0000 && : >fifo0000fifo0000/log && mkfifo fifo0000fifo0000/pid && " +
				"mkdir b00000000000b000 && : >b00000000000b000/log && head -c 5000000 /dev/zero | tr '\\0' a >b00000000000b000/boot && " +
				"jobBoot() { cat /proc/sys/kernel/random/boot_id | tr -d '\\n'; printf -- '-%s\\n' \"$(cut -d' ' -f22 /proc/1/stat)\"; }; b=$(jobBoot)")
			var dead []state.Job
			for i := range 50 {
				id := fmt.Sprintf("%016x", 0xd000000000000000+uint64(i))
				bad.WriteString(" && mkdir " + id + " && : >" + id + "/log && echo 99999 >" + id + "/pid && echo \"$b\" >" + id + "/boot")
				dead = append(dead, state.Job{Sandbox: box, Name: fmt.Sprintf("dead%02d", i), ID: id, Command: "true", PID: 99999,
					Dir: guest.JobDir(id), Container: a.ContainerFor(box), Started: started})
			}
			if o := run(t, a, box, shell.Request{Command: bad.String()}); o.res.ExitCode != 0 {
				t.Fatalf("plant hostile job dirs: %s", o.stderr)
			}
			if err := st.PutJobs(dead...); err != nil {
				t.Fatal(err)
			}
			list, err = a.Jobs(ctx, box)
			if err != nil {
				t.Fatalf("jobs with hostile job directories: %v", err)
			}
			lostN := 0
			for _, j := range list {
				if strings.HasPrefix(j.Name, "dead") && j.State == "lost" && strings.Contains(j.Reason, "without an exit status") {
					lostN++
				}
				if j.Name == "sleeper" && j.State != "running" {
					t.Errorf("sleeper among hostile directories: %+v", j)
				}
			}
			if lostN != 50 {
				t.Errorf("%d of the 50 jobs whose waiter died are listed lost", lostN)
			}
		})
	}
}

// damage stores an undecodable job record under sandbox/name.
func damage(t *testing.T, path, sandbox, name string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("jobs"))
		if err != nil {
			return err
		}
		return b.Put(append(append([]byte(sandbox), 0), name...), []byte(`{"sandbox": 7`))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestJobLogsUnderFourServersOnEngine: four servers sharing one state
// file, each reading the logs of ten jobs at once, twenty-five times: every
// call answers.
func TestJobLogsUnderFourServersOnEngine(t *testing.T) {
	enginetest.QuietDisk(t)
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			a, b, st := servers(t, tg, prefix)
			more := func() *sandbox.Manager {
				m := sandbox.NewManager(tg.New(), sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
					History: st, Jobs: st, Sandboxes: st, LockDir: filepath.Dir(st.Path) + "/locks"})
				t.Cleanup(m.Close)
				return m
			}
			c, d := more(), more()
			const box = "four"
			for i := range 10 {
				startJob(t, a, box, fmt.Sprintf("j%d", i), fmt.Sprintf("for n in 1 2 3; do echo line $n; done; sleep %d", i%3))
			}
			ms := []*sandbox.Manager{a, b, c, d}
			errs := make(chan error, 100)
			var wg sync.WaitGroup
			for i := range 100 {
				wg.Go(func() {
					m := ms[i%4]
					_, err := m.JobLogs(context.Background(), box, fmt.Sprintf("j%d", i%10), sandbox.LogOptions{Since: -1, Tail: 10, Max: 4096})
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			failed := 0
			for err := range errs {
				if err != nil {
					failed++
					t.Log(err)
				}
			}
			if failed > 0 {
				t.Errorf("%d of 100 logs calls failed", failed)
			}
		})
	}
}

// TestJobToolsAnswerWhileCommandsFillThePoolOnEngine: with every shell of
// a sandbox's pool running a long command, the job tools still answer,
// on the sandbox's chore shells, while those commands run on.
func TestJobToolsAnswerWhileCommandsFillThePoolOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			const size = 2
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: enginetest.Prefix(t, rt), Defaults: sandbox.Profile{Image: tg.Image}, PoolSize: size})
			t.Cleanup(m.Close)
			const box = "full"
			startJob(t, m, box, "j", "echo hello; sleep 1000")
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			t.Cleanup(func() { cancel(); wg.Wait() })
			var ended atomic.Int32
			for i := range size {
				wg.Go(func() {
					defer ended.Add(1)
					_, _ = m.Exec(ctx, box, shell.Request{Command: fmt.Sprintf("touch /tmp/full-%d; sleep 600", i), Timeout: 10 * time.Minute})
				})
			}
			enginetest.WaitFor(t, "every shell of the pool to run its long command", func() error {
				cmd := exec.Command(rt.Binary(), "exec", m.ContainerFor(box), "sh", "-c", fmt.Sprintf("[ $(ls /tmp/full-* | wc -l) -eq %d ]", size))
				cmd.Env = append(cmd.Environ(), tg.Env...)
				return cmd.Run()
			})
			logs, err := m.JobLogs(guarded(t), box, "j", sandbox.LogOptions{Since: -1, Tail: 10, Max: 4096})
			if err != nil || !strings.Contains(string(logs.Data), "hello") {
				t.Fatalf("logs while the pool is full: %+v, %v", logs, err)
			}
			if _, err := m.Jobs(guarded(t), box); err != nil {
				t.Fatalf("jobs while the pool is full: %v", err)
			}
			if n := ended.Load(); n != 0 {
				t.Fatalf("%d of the %d long commands had ended when the job tools answered", n, size)
			}
		})
	}
}
