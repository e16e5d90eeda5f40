package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// proc is a real server process with a client session on its stdio,
// whose input and signals the test controls.
type proc struct {
	cs      *mcp.ClientSession
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has exited
	waitErr error         // how it exited, once exited is closed
	close   func() error  // closes the server's input
}

// startProc starts a real server on stateDir (with extra arguments) and
// connects a client to it.
// When the test ends its input is closed and it is killed if it has not
// exited.
func startProc(t *testing.T, tg enginetest.Target, prefix, stateDir string, extra ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix,
		"--state-dir", stateDir, "--no-boot-default"}, withNetwork(extra)...)...)
	cmd.Env = append(os.Environ(), tg.Env...)
	cmd.Stderr = &prefixWriter{t: t}
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), close: stdin.Close}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(enginetest.HangGuard):
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "0"}, nil)
	// The connect includes the server's start: a hang guard, not seconds.
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	defer cancel()
	p.cs, err = client.Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return p
}

// waitExit waits until the server process has exited.
func (p *proc) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(enginetest.HangGuard):
		t.Fatalf("the server did not exit\nengine processes now:\n%s", enginetest.EngineProcesses())
	}
}

// callAsync calls a tool in the background; the result (or the protocol
// error, as text) arrives later.
func callAsync(cs *mcp.ClientSession, name string, args map[string]any) <-chan string {
	done := make(chan string, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			done <- "protocol error: " + err.Error()
			return
		}
		var b strings.Builder
		if res.IsError {
			b.WriteString("isError: ")
		}
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		done <- b.String()
	}()
	return done
}

// processes counts the processes in ctr whose command line is args; -1
// if ctr cannot be looked into.
func processes(t *testing.T, rt sandbox.Runtime, ctr, args string) int {
	t.Helper()
	out, err := rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"ps", "-eo", "args"}})
	if err != nil {
		return -1
	}
	n := 0
	for _, l := range strings.Split(string(out.Stdout), "\n") {
		if strings.TrimSpace(l) == args {
			n++
		}
	}
	return n
}

// waitProcess waits until a process with command line args runs in ctr.
func waitProcess(t *testing.T, rt sandbox.Runtime, ctr, args string) {
	t.Helper()
	enginetest.WaitFor(t, fmt.Sprintf("%q to run in %s", args, ctr), func() error {
		if n := processes(t, rt, ctr, args); n <= 0 {
			return fmt.Errorf("%d such processes (-1: the container could not be looked into)", n)
		}
		return nil
	})
}

func exists(t *testing.T, rt sandbox.Runtime, ctr, path string) bool {
	t.Helper()
	out, err := rt.Exec(context.Background(), ctr, sandbox.ExecSpec{Argv: []string{"test", "-e", path}})
	if err != nil {
		t.Fatal(err)
	}
	return out.ExitCode == 0
}

// historyEntry waits until a server's history of box has an entry whose
// error contains why (and whose command starts with command[0], if
// given), and returns it.
func historyEntry(t *testing.T, cs *mcp.ClientSession, box, why string, command ...string) sandbox.HistoryEntry {
	t.Helper()
	var entry sandbox.HistoryEntry
	enginetest.WaitFor(t, fmt.Sprintf("a history entry of %s that says %q", box, why), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), callGuard)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "history", Arguments: map[string]any{"sandbox": box}})
		if err != nil {
			t.Fatal(err)
		}
		var list struct{ Entries []sandbox.HistoryEntry }
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &list)
		for _, e := range list.Entries {
			if strings.Contains(e.Error, why) && (len(command) == 0 || strings.HasPrefix(e.Command, command[0])) {
				entry = e
				return nil
			}
		}
		return fmt.Errorf("entries: %+v", list.Entries)
	})
	return entry
}

// TestServerExitEndsCommands: when a server's input ends or it gets
// SIGTERM, a command still running is ended inside the sandbox (nothing
// of it runs on, nothing after it runs) and recorded as ended by the
// shutdown, a Python session's processes are ended, and the server exits
// with status 0.
func TestServerExitEndsCommands(t *testing.T) {
	runBeside(t)
	enginetest.RunFirstAndKubernetes(t, testServerExitEndsCommands)
}

// testServerExitEndsCommands is TestServerExitEndsCommands on one target.
func testServerExitEndsCommands(t *testing.T, tg enginetest.Target) {
	enginetest.QuietDisk(t) // history lives in the state file
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	stateDir := t.TempDir()
	for _, how := range []string{"eof", "sigterm"} {
		t.Run(how, func(t *testing.T) {
			box := "exit-" + how
			ctr := sandbox.ContainerName(prefix, box)
			p := startProc(t, tg, prefix, stateDir)
			// Booted first, so that the wait for the command counts from
			// a running sandbox.
			if text, isErr := callText(t, p.cs, "exec", map[string]any{"command": "true", "sandbox": box}); isErr {
				t.Fatal(text)
			}
			// A Python session's child goes with the server too.
			if text, isErr := callText(t, p.cs, "python", map[string]any{"code": "import subprocess\nchild = subprocess.Popen(['sleep', '988'])", "sandbox": box}); isErr {
				t.Fatal(text)
			}
			waitProcess(t, rt, ctr, "sleep 988")
			command := "sleep 987; touch /workspace/after"
			done := callAsync(p.cs, "exec", map[string]any{"command": command, "timeout": 600, "sandbox": box})
			waitProcess(t, rt, ctr, "sleep 987")

			if how == "eof" {
				_ = p.close()
			} else if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case text := <-done:
				if how == "sigterm" && (!strings.HasPrefix(text, "isError") || !strings.Contains(text, "shutting down")) {
					t.Fatalf("the command's result: %q", text)
				}
			case <-time.After(enginetest.HangGuard):
				t.Fatalf("the command's call hung\nengine processes now:\n%s", enginetest.EngineProcesses())
			}
			p.waitExit(t)
			if p.waitErr != nil {
				t.Fatalf("the server ended by %s exited with %v, want status 0", how, p.waitErr)
			}

			if n := processes(t, rt, ctr, "sleep 987"); n != 0 {
				t.Fatal("the command runs on after the server exited")
			}
			if n := processes(t, rt, ctr, "sleep 988"); n != 0 {
				t.Fatal("a Python session's child runs on after the server exited")
			}
			time.Sleep(time.Second) // what would follow sleep 987, had its shell lived
			if exists(t, rt, ctr, "/workspace/after") {
				t.Fatal("the rest of the command ran after the server exited")
			}

			next := startProc(t, tg, prefix, stateDir)
			e := historyEntry(t, next.cs, box, "shutting down")
			if e.Command != command {
				t.Fatalf("history entry: %+v", e)
			}
		})
	}
}

// TestKilledServerCommandsEndedByNext: a command still running when its
// server is killed (SIGKILL) runs on; the next server to start ends it,
// every process of it (one in a session of its own too), leaves alone
// what a finished command left behind, and records it in the history.
func TestKilledServerCommandsEndedByNext(t *testing.T) {
	runBeside(t)
	enginetest.RunFirstAndKubernetes(t, testKilledServerCommandsEndedByNext)
}

// testKilledServerCommandsEndedByNext is TestKilledServerCommandsEndedByNext on one target.
func testKilledServerCommandsEndedByNext(t *testing.T, tg enginetest.Target) {
	enginetest.QuietDisk(t)
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	stateDir := t.TempDir()
	const box = "killed"
	ctr := sandbox.ContainerName(prefix, box)

	a := startProc(t, tg, prefix, stateDir, "--toolsets", "all")
	if text, isErr := callText(t, a.cs, "exec", map[string]any{"command": "(sleep 976 >/dev/null 2>&1 &)", "sandbox": box}); isErr {
		t.Fatal(text)
	}
	// A terminal session: its processes are ended too, and recorded.
	if text, isErr := callText(t, a.cs, "terminal_open", map[string]any{"command": "sleep 979", "sandbox": box}); isErr {
		t.Fatal(text)
	}
	waitProcess(t, rt, ctr, "sleep 979")
	// A Python session's child: ended too, and recorded.
	if text, isErr := callText(t, a.cs, "python", map[string]any{"code": "import subprocess\nchild = subprocess.Popen(['sleep', '981'])", "sandbox": box}); isErr {
		t.Fatal(text)
	}
	waitProcess(t, rt, ctr, "sleep 981")
	// The command marks its processes as the command frame does, so the
	// one that leaves its shell's tree can be found.
	command := "export SANDBOX_MCP_RUN=" + strings.Repeat("5", 32) +
		"; (setsid sleep 977 >/dev/null 2>&1 &); sleep 978; touch /workspace/after"
	callAsync(a.cs, "exec", map[string]any{"command": command, "timeout": 600, "sandbox": box})
	waitProcess(t, rt, ctr, "sleep 977")
	waitProcess(t, rt, ctr, "sleep 978")

	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t)
	// A moment for the command to end with its server, were it tied to
	// it (then there is nothing to test).
	time.Sleep(500 * time.Millisecond)
	if processes(t, rt, ctr, "sleep 978") != 1 {
		t.Fatal("the command did not outlive its server: nothing to test")
	}

	b := startProc(t, tg, prefix, stateDir)
	e := historyEntry(t, b.cs, box, "was killed")
	if !strings.HasPrefix(e.Command, "sleep 978") || e.ExitCode != 137 ||
		!strings.Contains(e.Error, "the server that ran it (pid "+strconv.Itoa(a.cmd.Process.Pid)+") was killed") {
		t.Fatalf("history entry: %+v", e)
	}
	if e := historyEntry(t, b.cs, box, "processes still running and ended them", "terminal"); e.Command != "terminal: sleep 979" || e.ExitCode != 137 {
		t.Errorf("the terminal's history entry: %+v", e)
	}
	if e := historyEntry(t, b.cs, box, "processes still running and ended them", "python session"); e.Command != "python session default" || e.ExitCode != 137 {
		t.Errorf("the Python session's history entry: %+v", e)
	}
	for args, want := range map[string]int{"sleep 976": 1, "sleep 977": 0, "sleep 978": 0, "sleep 979": 0, "sleep 981": 0} {
		if n := processes(t, rt, ctr, args); n != want {
			t.Errorf("%d × %q after the next server started, want %d", n, args, want)
		}
	}
	if exists(t, rt, ctr, "/workspace/after") {
		t.Error("the rest of the killed server's command ran")
	}
	locks, _ := filepath.Glob(filepath.Join(stateDir, "locks", prefix+"-server-*.lock"))
	if len(locks) != 1 {
		t.Errorf("server lock files: %v (want only the running server's)", locks)
	}
}
