package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/hostkill"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// serverShell starts, in container ctr, a shell as a server with the
// given ID opens one (its ID in the environment it starts with, unset by
// its init) and gives it script; the shell stays open until the test ends.
func serverShell(t *testing.T, rt sandbox.Runtime, ctr, id, script string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := rt.ExecCommand(ctx, ctr, sandbox.ExecSpec{Argv: []string{"sh"}, Interactive: true, Env: map[string]string{guest.ShellVar: id}})
	in, err := proc.Input(cmd, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cancel()
		_ = cmd.Wait()
	})
	if _, err := io.WriteString(in, "unset "+guest.ShellVar+"\n"+script+"\n"); err != nil {
		t.Fatal(err)
	}
}

// procs lists the command lines of the processes running in ctr.
func procs(t *testing.T, rt sandbox.Runtime, ctr string) []string {
	t.Helper()
	out, err := rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"ps", "-eo", "args"}})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(out.Stdout)), "\n")
}

func count(list []string, args string) int {
	n := 0
	for _, a := range list {
		if a == args {
			n++
		}
	}
	return n
}

// engineBox boots sandbox name on the first engine under test and returns
// the engine, the manager and the sandbox's container.
func engineBox(t *testing.T, name string) (sandbox.Runtime, *sandbox.Manager, string) {
	t.Helper()
	tg := enginetest.Targets(t)[0]
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	m := newManager(t, tg, prefix)
	run(t, m, name, shell.Request{Command: "true"})
	return rt, m, sandbox.ContainerName(prefix, name)
}

// waitProcs polls ctr's processes until done holds of them, and fails
// with what when it never does.
func waitProcs(t *testing.T, rt sandbox.Runtime, ctr, what string, done func(ps []string) bool) []string {
	t.Helper()
	var ps []string
	enginetest.WaitFor(t, "the processes the test waits for", func() error {
		if ps = procs(t, rt, ctr); !done(ps) {
			return fmt.Errorf("%s:\n%s", what, strings.Join(ps, "\n"))
		}
		return nil
	})
	return ps
}

// TestSweepOnEngine runs guest.SweepScript in a real sandbox: it ends
// what a killed server's shell was running, every process of it (one
// that left the shell's tree with setsid, and hundreds of children),
// and nothing else: not a process a finished command of that server left
// behind, not a job it started (and its waiter), not what a running
// server's shell runs.
func TestSweepOnEngine(t *testing.T) {
	rt, _, ctr := engineBox(t, "sweep")
	const gone, alive = "0123456789abcdef", "fedcba9876543210"
	runID := func(c string) string { return strings.Repeat(c, 32) }

	// The killed server's shell: a command in flight, which started a
	// process in a session of its own and 200 children.
	// Before it, a job that server started, whose waiter waits for it: it
	// is no part of any command.
	job, err := guest.JobStartScript("0123456789abcdef", "", "sleep 976")
	if err != nil {
		t.Fatal(err)
	}
	serverShell(t, rt, ctr, gone, "{ "+job+"; } >/dev/null 2>&1; "+
		"export SANDBOX_MCP_RUN="+runID("a")+
		"; (setsid sleep 971 &); i=0; while [ $i -lt 200 ]; do sleep 972 & i=$((i+1)); done; sleep 973; touch /tmp/after")
	// What a finished command of that server left behind.
	if _, err := rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"sh", "-c",
		"export SANDBOX_MCP_RUN=" + runID("b") + "; (sleep 974 >/dev/null 2>&1 &)"}}); err != nil {
		t.Fatal(err)
	}
	// A running server's shell.
	serverShell(t, rt, ctr, alive, "export SANDBOX_MCP_RUN="+runID("c")+"; sleep 975")

	waitProcs(t, rt, ctr, "the processes never all ran", func(ps []string) bool {
		return count(ps, "sleep 971") == 1 && count(ps, "sleep 972") == 200 && count(ps, "sleep 973") == 1 &&
			count(ps, "sleep 974") == 1 && count(ps, "sleep 975") == 1 && count(ps, "sleep 976") == 1
	})

	out, err := rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"sh", "-c", guest.SweepScript, "sh", gone}})
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("sweep: exit %d, %v: %s", out.ExitCode, err, out.Stderr)
	}
	swept := guest.ParseSweep(out.Stdout)
	// 202: sleep 971, 200 × sleep 972 and sleep 973 (and a shell the
	// Apple stand-in wraps the exec in); described from the oldest child
	// of the shell.
	if len(swept) != 1 || swept[0].Server != gone || swept[0].Procs < 202 || swept[0].Procs > 203 || len(swept[0].Commands) != 8 ||
		swept[0].Commands[0] != "sleep 972" {
		t.Fatalf("sweep found %+v\n%s", swept, out.Stdout)
	}

	// Killed processes take a moment to exit on a loaded machine.
	ps := waitProcs(t, rt, ctr, "what the sweep killed lives on", func(ps []string) bool {
		return count(ps, "sleep 971")+count(ps, "sleep 972")+count(ps, "sleep 973") == 0
	})
	for args, want := range map[string]int{"sleep 974": 1, "sleep 975": 1, "sleep 976": 1} {
		if n := count(ps, args); n != want {
			t.Errorf("%d × %q after the sweep, want %d:\n%s", n, args, want, strings.Join(ps, "\n"))
		}
	}
	// The window the test watches, not a wait: what would follow sleep
	// 973, had the shell lived, would run in it.
	time.Sleep(time.Second)
	if out, _ := rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"test", "-e", "/tmp/after"}}); out.ExitCode == 0 {
		t.Error("the rest of the killed server's command ran")
	}

	// Sweeping again finds nothing.
	out, err = rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"sh", "-c", guest.SweepScript, "sh", gone}})
	if err != nil || len(guest.ParseSweep(out.Stdout)) != 0 {
		t.Fatalf("second sweep: %v %q", err, out.Stdout)
	}
}

// TestKillWritersSparesLaterCommandsOnEngine runs guest.KillWritersScript
// in a real sandbox with a start-time cutoff, as the disk watcher does: a
// writer begun before the cutoff dies, a command begun after it (the
// user's `rm`, which may start while the engine is still starting the
// script) lives, and so does the sandbox's shell.
func TestKillWritersSparesLaterCommandsOnEngine(t *testing.T) {
	rt, m, ctr := engineBox(t, "kw")
	start := func(args string) {
		t.Helper()
		if _, err := rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"sh", "-c", "(" + args + " >/dev/null 2>&1 &)"}}); err != nil {
			t.Fatal(err)
		}
	}
	start("sleep 981")
	by, err := hostkill.Now()
	if err != nil {
		t.Skipf("no clock to cut at: %v", err)
	}
	// A step of the scenario, not a wait: sleep 982 starts three clock
	// ticks (at least) after the cutoff.
	time.Sleep(30 * time.Millisecond)
	killWriters := func(by uint64) {
		t.Helper()
		out, err := rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"sh", "-c", guest.KillWritersScript, "sh", strconv.FormatUint(by, 10)}})
		if err != nil || out.ExitCode != 0 {
			t.Fatalf("kill writers: exit %d, %v: %s", out.ExitCode, err, out.Stderr)
		}
	}
	start("sleep 982")
	killWriters(by)
	ps := waitProcs(t, rt, ctr, "the writer begun before the cutoff lives", func(ps []string) bool { return count(ps, "sleep 981") == 0 })
	if count(ps, "sleep 982") != 1 {
		t.Fatalf("the command begun after the cutoff was killed:\n%s", strings.Join(ps, "\n"))
	}
	if o := run(t, m, "kw", shell.Request{Command: "echo alive"}); o.stdout != "alive\n" {
		t.Fatalf("the sandbox's shell after the kill: %q exit %d", o.stdout, o.res.ExitCode)
	}

	// A cutoff that cannot be this kernel's (a minute before the script
	// runs: the engine's clock is another machine's) is ignored, and every
	// writer stops rather than none.
	start("sleep 983")
	killWriters(by - 6000)
	waitProcs(t, rt, ctr, "writers live after a kill with a foreign cutoff", func(ps []string) bool {
		return count(ps, "sleep 982") == 0 && count(ps, "sleep 983") == 0
	})
}

// sweepCounter counts the sweeps of this server's shells (guest.SweepScript
// run through an exec) that a Manager over it runs.
type sweepCounter struct {
	sandbox.Runtime
	n atomic.Int32
}

func (s *sweepCounter) Exec(ctx context.Context, name string, spec sandbox.ExecSpec) (sandbox.ExecOutput, error) {
	if len(spec.Argv) > 2 && spec.Argv[2] == guest.SweepScript {
		s.n.Add(1)
	}
	return s.Runtime.Exec(ctx, name, spec)
}

// serverShells counts the processes in ctr that a server opened as its
// shells (guest.ShellVar in the environment they started with).
func serverShells(t *testing.T, rt sandbox.Runtime, ctr string) int {
	t.Helper()
	out, err := rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"sh", "-c",
		"n=0; for f in /proc/[0-9]*/environ; do grep -q " + guest.ShellVar + "= \"$f\" 2>/dev/null && n=$((n+1)); done; echo $n"}})
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("count the servers' shells: %v %s", err, out.Stderr)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out.Stdout)))
	if err != nil {
		t.Fatalf("count the servers' shells: %q", out.Stdout)
	}
	return n
}

// TestShutdownSweepsOnlyWhatRuns: a server (a command-line call among
// them) that exits with nothing running in a sandbox closes its shells,
// which end, and runs no sweep there: an exec less at every exit. One
// whose command left a process behind in its shell sweeps, and the
// process ends with the server.
func TestShutdownSweepsOnlyWhatRuns(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	rt := &sweepCounter{Runtime: tg.New()}
	prefix := enginetest.Prefix(t, rt)
	cfg := sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}}
	ctr := sandbox.ContainerName(prefix, "q")

	m := sandbox.NewManager(rt, cfg)
	run(t, m, "q", shell.Request{Command: "echo hi >/tmp/x"})
	// The server's own scripts after a boot (an activity mark, the hosts
	// file) run on its shells too, and one still running at the exit is
	// swept as a command would be: a loaded machine can be slow to end
	// them.
	enginetest.WaitFor(t, "the server's own scripts to end", func() error {
		if !m.Quiet("q") {
			return errors.New("a shell of the server's still runs a script")
		}
		return nil
	})
	m.Close()
	if n := rt.n.Load(); n != 0 {
		t.Fatalf("a server with nothing running swept %d times at its exit", n)
	}
	enginetest.WaitFor(t, "the closed server's shells to end", func() error {
		if n := serverShells(t, rt, ctr); n != 0 {
			return fmt.Errorf("%d shells of a closed server live on", n)
		}
		return nil
	})

	m = sandbox.NewManager(rt, cfg)
	if o := run(t, m, "q", shell.Request{Command: "sleep 977 >/dev/null 2>&1 &"}); !o.res.LeftBehind {
		t.Fatalf("the command left nothing behind: %+v", o.res)
	}
	m.Close()
	if n := rt.n.Load(); n != 1 {
		t.Fatalf("a server whose shell holds a process a command left swept %d times at its exit, want 1", n)
	}
	waitProcs(t, rt, ctr, "the process left behind outlived its server", func(ps []string) bool { return count(ps, "sleep 977") == 0 })
}
