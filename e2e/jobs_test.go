package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// waitJob polls logs until the job is no longer running.
func waitJob(t *testing.T, s *server, sb, job string) result {
	t.Helper()
	var r result
	enginetest.WaitFor(t, "job "+job+" to end", func() error {
		r = s.call(t, "logs", map[string]any{"sandbox": sb, "name": job})
		if r.isError {
			t.Fatalf("logs %s: %s", job, r.text)
		}
		if r.str("state") == "running" {
			return fmt.Errorf("logs: %.300s", r.text)
		}
		return nil
	})
	return r
}

func TestJobs(t *testing.T) {
	enginetest.QuietDisk(t) // job records live in the state file
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			s := startServer(t, tg, prefix, "")
			const sb = "jobs"

			// A job that prints over time and exits 7; poll with since.
			r := s.call(t, "bg", map[string]any{"sandbox": sb, "name": "count",
				"command": "for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done; echo oops >&2; exit 7"})
			if r.isError || r.num("pid") <= 0 || r.str("name") != "count" {
				t.Fatalf("bg: %+v", r)
			}
			var seen strings.Builder
			offset := 0.0
			enginetest.WaitFor(t, "job count to end", func() error {
				r = s.call(t, "logs", map[string]any{"sandbox": sb, "name": "count", "since": offset})
				if r.isError {
					t.Fatal(r.text)
				}
				seen.WriteString(r.str("output"))
				offset = r.num("next_offset")
				if r.str("state") == "running" {
					return fmt.Errorf("polled output %q so far", seen.String())
				}
				return nil
			})
			r = s.call(t, "logs", map[string]any{"sandbox": sb, "name": "count", "since": offset})
			seen.WriteString(r.str("output"))
			if seen.String() != "line1\nline2\nline3\nline4\nline5\noops\n" || r.str("state") != "exited" || r.num("exit_code") != 7 ||
				!strings.Contains(r.text, "exited with code 7") {
				t.Fatalf("polled output %q, last %+v", seen.String(), r)
			}

			// A job that exits at once; the tail form.
			s.call(t, "bg", map[string]any{"sandbox": sb, "name": "quick", "command": "echo done"})
			r = waitJob(t, s, sb, "quick")
			if r.str("state") != "exited" || r.num("exit_code") != 0 || r.str("output") != "done\n" {
				t.Fatalf("quick: %+v", r)
			}

			// 100 MB of output: logs stays small and says there is more.
			s.call(t, "bg", map[string]any{"sandbox": sb, "name": "big", "command": "head -c 100000000 /dev/zero | tr '\\0' x; echo; echo END"})
			r = waitJob(t, s, sb, "big")
			if r.str("state") != "exited" || len(r.text) > 20000 || !strings.HasSuffix(r.str("output"), "END\n") || r.num("log_size") < 100000000 {
				out := r.str("output")
				t.Fatalf("big: state %s, exit %v, text %d bytes, log %v, output ends %q; %s", r.str("state"), r.data["exit_code"],
					len(r.text), r.num("log_size"), out[max(0, len(out)-80):], r.text[:min(len(r.text), 300)])
			}
			r = s.call(t, "logs", map[string]any{"sandbox": sb, "name": "big", "since": 0, "max_bytes": 1000})
			if len(r.str("output")) != 1000 || r.data["more"] != true || r.num("next_offset") != 1000 {
				t.Fatalf("big from 0: %d bytes, %+v", len(r.str("output")), r.data["more"])
			}

			// kill ends the whole process group, children included.
			r = s.call(t, "bg", map[string]any{"sandbox": sb, "name": "srv", "workdir": "/tmp",
				"command": "pwd; sleep 1001 & sleep 1002 & wait"})
			if r.isError {
				t.Fatal(r.text)
			}
			r = s.call(t, "bg", map[string]any{"sandbox": sb, "name": "srv", "command": "true"})
			if !r.isError || !strings.Contains(r.text, "still running") {
				t.Fatalf("reusing a running job's name: %+v", r)
			}
			r = s.call(t, "jobs", map[string]any{"sandbox": sb})
			if r.isError || !strings.Contains(r.text, "srv: running") || !strings.Contains(r.text, "count: exited with code 7") {
				t.Fatalf("jobs: %s", r.text)
			}
			r = s.call(t, "kill", map[string]any{"sandbox": sb, "name": "srv"})
			if r.isError || r.data["ended"] != true || r.num("exit_code") != 128+15 || r.num("signalled") != 3 ||
				!strings.Contains(r.text, "sent SIGTERM to 3 processes") || !strings.Contains(r.text, "none of them is left") {
				t.Fatalf("kill: %+v", r)
			}
			r = s.call(t, "exec", map[string]any{"sandbox": sb, "command": "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 100[12]' || true"})
			if strings.TrimSpace(r.str("stdout")) != "0" {
				t.Fatalf("sleeps left after kill: %q", r.str("stdout"))
			}
			if r = s.call(t, "logs", map[string]any{"sandbox": sb, "name": "srv"}); r.str("output") != "/tmp\n" {
				t.Fatalf("workdir: %q", r.str("output"))
			}
			// Killing a job that already ended says so, without error.
			r = s.call(t, "kill", map[string]any{"sandbox": sb, "name": "srv", "signal": "KILL"})
			if r.isError || r.data["already_ended"] != true || !strings.Contains(r.text, "already ended") {
				t.Fatalf("kill again: %+v", r)
			}

			// Bad input.
			for _, c := range []struct {
				tool string
				args map[string]any
				want string
			}{
				{"logs", map[string]any{"sandbox": sb, "name": "nope"}, "no such job"},
				{"kill", map[string]any{"sandbox": sb, "name": "nope"}, "no such job"},
				{"logs", map[string]any{"sandbox": "never-made", "name": "count"}, "it has none"},
				{"kill", map[string]any{"sandbox": ".bad", "name": "x"}, `"sandbox" must be a name`},
				{"kill", map[string]any{"sandbox": sb, "name": ".bad"}, `"name" must be a name`},
				{"logs", map[string]any{"sandbox": sb, "name": "a/b"}, `"name" must be a name`},
				{"bg", map[string]any{"sandbox": sb, "name": "-x", "command": "true"}, `"name" must be a name`},
				{"kill", map[string]any{"sandbox": sb, "name": "count", "signal": "SEGV"}, `"signal" must be one of "TERM", "KILL"`},
				{"bg", map[string]any{"sandbox": sb, "command": "true", "workdir": "/no/such/dir"}, "no such directory"},
				{"bg", map[string]any{"sandbox": sb, "command": "  "}, "command is required"},
			} {
				r := s.call(t, c.tool, c.args)
				if !r.isError || !strings.Contains(r.text, c.want) {
					t.Errorf("%s %v: %v %q", c.tool, c.args, r.isError, r.text)
				}
			}
			// A token in a job's command is kept out of the records and history.
			const token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
			if r := s.call(t, "bg", map[string]any{"sandbox": sb, "name": "tok", "command": "echo " + token + " >/dev/null"}); r.isError {
				t.Fatal(r.text)
			}
			for _, tool := range []string{"jobs", "history"} {
				var r result
				// History is written in batches: wait for the entry (or
				// the token, which fails at once below).
				enginetest.WaitFor(t, tool+" to show the job's command", func() error {
					r = s.call(t, tool, map[string]any{"sandbox": sb})
					if !strings.Contains(r.text, "echo ***") && !strings.Contains(r.text, token) {
						return fmt.Errorf("%s: %s", tool, r.text)
					}
					return nil
				})
				if strings.Contains(r.text, token) || !strings.Contains(r.text, "echo ***") {
					t.Errorf("%s shows the token: %s", tool, r.text)
				}
			}
			// bg and logs are in the history as what the user asked; polling is not.
			r = s.call(t, "history", map[string]any{"sandbox": sb})
			if !strings.Contains(r.text, "bg count: for i in") || strings.Count(r.text, "\n") > 30 {
				t.Fatalf("history: %s", r.text)
			}
		})
	}
}

// TestJobsSurviveSIGKILL: a server killed with SIGKILL in the middle of an
// exec and after starting a job; the next server on the same state finds
// the sandbox, runs commands, and reads and kills the job.
func TestJobsSurviveSIGKILL(t *testing.T) {
	enginetest.RunFirstAndKubernetes(t, testJobsSurviveSIGKILL)
}

// testJobsSurviveSIGKILL is TestJobsSurviveSIGKILL on one target.
func testJobsSurviveSIGKILL(t *testing.T, tg enginetest.Target) {
	enginetest.QuietDisk(t) // job records live in the state file
	prefix := enginetest.Prefix(t, tg.New())
	stateDir := t.TempDir()
	args := []string{"serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", stateDir, "--no-boot-default"}

	first, cmd := connectKillable(t, tg.Env, args...)
	if text, isErr := callText(t, first, "bg", map[string]any{"name": "tick", "command": "while :; do echo tick; sleep 0.2; done"}); isErr {
		t.Fatal(text)
	}
	go func() { // an exec in flight when the server dies (which ends this call)
		ctx, cancel := context.WithTimeout(context.Background(), callGuard)
		defer cancel()
		_, _ = first.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "sleep 60; echo late"}})
	}()
	// In flight: its command runs in the sandbox. It sleeps long enough to
	// be seen there however slowly the engine answers.
	waitProcess(t, tg.New(), sandbox.ContainerName(prefix, "default"), "sleep 60")
	// The transport reaps the process; the kill takes effect at once.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	second := connectRaw(t, tg.Env, args...)
	text, isErr := callText(t, second, "exec", map[string]any{"command": "echo alive"})
	if isErr || !strings.Contains(text, "alive") {
		t.Fatalf("exec after SIGKILL: %v %q", isErr, text)
	}
	text, isErr = callText(t, second, "logs", map[string]any{"name": "tick", "tail": 2})
	if isErr || !strings.Contains(text, "running") || !strings.Contains(text, "tick\n") {
		t.Fatalf("logs after SIGKILL: %v %q", isErr, text)
	}
	text, isErr = callText(t, second, "kill", map[string]any{"name": "tick"})
	if isErr || !strings.Contains(text, "ended by signal 15") {
		t.Fatalf("kill after SIGKILL: %v %q", isErr, text)
	}
}

// waitProcs polls logs until the job has n processes alive.
func waitProcs(t *testing.T, s *server, sb, job string, n float64) result {
	t.Helper()
	var r result
	enginetest.WaitFor(t, fmt.Sprintf("job %s to have %v processes", job, n), func() error {
		r = s.call(t, "logs", map[string]any{"sandbox": sb, "name": job})
		if r.isError {
			t.Fatalf("logs %s: %s", job, r.text)
		}
		if r.num("processes") != n {
			return fmt.Errorf("%v processes: %s", r.num("processes"), r.text)
		}
		return nil
	})
	return r
}

// waitSleeps waits until a process runs `sleep N` for each N: a process
// that set its trap to ignore TERM before it exec'd sleep ignores it from then on
// (the job's process count sees it earlier, while it may not have yet).
func waitSleeps(t *testing.T, s *server, sb string, ns ...int) {
	t.Helper()
	var check strings.Builder
	for _, n := range ns {
		fmt.Fprintf(&check, "pgrep -f '^sleep %d$' >/dev/null || exit 1; ", n)
	}
	enginetest.WaitFor(t, fmt.Sprintf("sleeps %v to run", ns), func() error {
		if r := s.call(t, "exec", map[string]any{"sandbox": sb, "command": check.String()}); r.isError || r.num("exit_code") != 0 {
			return fmt.Errorf("not yet: %s", r.text)
		}
		return nil
	})
}

// TestJobsTellTheTruth: kill ends a child that ignores TERM and one in its
// own session (a second kill with KILL finishes the work), and a sandbox
// whose container was stopped behind the server's back is neither started
// by jobs, logs or kill nor shown with running jobs.
func TestJobsTellTheTruth(t *testing.T) {
	enginetest.QuietDisk(t) // job records live in the state file
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			s := startServer(t, tg, prefix, "")
			const sb = "truth"

			r := s.call(t, "bg", map[string]any{"sandbox": sb, "name": "tree",
				"command": `(trap '' TERM; exec sleep 1000) & setsid sh -c "trap '' TERM; exec sleep 1001" & setsid sleep 1002 & wait`})
			if r.isError {
				t.Fatal(r.text)
			}
			waitProcs(t, s, sb, "tree", 4)
			waitSleeps(t, s, sb, 1000, 1001, 1002)
			// TERM alone, when asked: what ignores it is said, and runs on.
			r = s.call(t, "kill", map[string]any{"sandbox": sb, "name": "tree", "signal": "TERM"})
			if r.isError || r.data["ended"] != false || r.num("processes") != 2 || r.num("exit_code") != 143 ||
				!strings.Contains(r.text, "ended by signal 15") ||
				!strings.Contains(r.text, "2 processes ignored TERM and still run: kill with signal KILL") {
				t.Fatalf("kill: %+v", r)
			}
			if r = s.call(t, "jobs", map[string]any{"sandbox": sb}); !strings.Contains(r.text, "tree: ended by signal 15 (exit 143); 2 processes it started still run") {
				t.Fatalf("jobs: %s", r.text)
			}
			r = s.call(t, "kill", map[string]any{"sandbox": sb, "name": "tree", "signal": "KILL"})
			if r.isError || r.data["already_ended"] != false || r.data["ended"] != true || r.num("signalled") != 2 ||
				!strings.Contains(r.text, "sent SIGKILL to 2 processes") {
				t.Fatalf("second kill: %+v", r)
			}
			r = s.call(t, "exec", map[string]any{"sandbox": sb, "command": "grep -l SANDBOX_MCP_JOB= /proc/[0-9]*/environ 2>/dev/null | wc -l"})
			if strings.TrimSpace(r.str("stdout")) != "0" {
				t.Fatalf("marked processes left: %q", r.str("stdout"))
			}

			// kill without a signal ends the job in one call: TERM, the
			// grace, then KILL for what ignored it, setsid children too.
			r = s.call(t, "bg", map[string]any{"sandbox": sb, "name": "tree2",
				"command": `(trap '' TERM; exec sleep 1003) & setsid sh -c "trap '' TERM; exec sleep 1004" & setsid sleep 1005 & wait`})
			if r.isError {
				t.Fatal(r.text)
			}
			waitProcs(t, s, sb, "tree2", 4)
			waitSleeps(t, s, sb, 1003, 1004, 1005)
			r = s.call(t, "kill", map[string]any{"sandbox": sb, "name": "tree2"})
			if r.isError || r.data["ended"] != true || r.num("processes") != 0 || r.num("killed") != 2 || r.num("signalled") != 4 ||
				!strings.Contains(r.text, "sent SIGTERM to 4 processes") || !strings.Contains(r.text, "2 processes ignored it for 2s and were killed") {
				t.Fatalf("kill that escalates: %+v", r)
			}
			r = s.call(t, "exec", map[string]any{"sandbox": sb, "command": "grep -l SANDBOX_MCP_JOB= /proc/[0-9]*/environ 2>/dev/null | wc -l"})
			if strings.TrimSpace(r.str("stdout")) != "0" {
				t.Fatalf("marked processes left after the escalating kill: %q", r.str("stdout"))
			}

			// Stopped behind the server's back.
			if r = s.call(t, "bg", map[string]any{"sandbox": sb, "name": "sleeper", "command": "sleep 1000"}); r.isError {
				t.Fatal(r.text)
			}
			ctx := context.Background()
			ctr := sandbox.ContainerName(prefix, sb)
			if err := rt.Stop(ctx, ctr, time.Second); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ { // the age of a lost job does not grow: it has none
				r = s.call(t, "jobs", map[string]any{"sandbox": sb})
				if r.isError || !strings.Contains(r.text, "sleeper: lost: the sandbox's container is stopped") || strings.Contains(r.text, "running") {
					t.Fatalf("jobs: %s", r.text)
				}
				time.Sleep(1100 * time.Millisecond) // past a second, which an age would show
			}
			r = s.call(t, "logs", map[string]any{"sandbox": sb, "name": "sleeper"})
			if r.isError || r.str("state") != "lost" || !strings.Contains(r.text, "lost: the sandbox's container is stopped") {
				t.Fatalf("logs: %+v", r)
			}
			r = s.call(t, "kill", map[string]any{"sandbox": sb, "name": "sleeper"})
			if r.isError || r.str("state") != "lost" || !strings.Contains(r.text, "nothing of it was left") {
				t.Fatalf("kill: %+v", r)
			}
			if c, err := rt.Inspect(ctx, ctr); err != nil || c.Running() {
				t.Fatalf("the job tools started the container: %v %v", c.State, err)
			}
		})
	}
}
