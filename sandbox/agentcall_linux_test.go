//go:build linux

package sandbox

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"golang.org/x/sys/unix"
)

func callDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "0123456789abcdef")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// What the sandbox sends on the agent's socket is untrusted: connections
// that say nothing, or another token, or the token with something other
// than agent.CallCA after it, are closed, and the agent that says the
// token is taken, its session answering, with what it said of the CA's
// install; the socket is gone after.
func TestAgentCallTakesTheTokenOnly(t *testing.T) {
	defer func(h time.Duration) { callHello = h }(callHello)
	callHello = time.Minute // see the silent connections below
	for _, caInstalled := range []bool{false, true} {
		t.Run(map[bool]string{false: "no CA", true: "CA installed"}[caInstalled], func(t *testing.T) {
			testAgentCallTakesTheTokenOnly(t, caInstalled)
		})
	}
}

func testAgentCallTakesTheTokenOnly(t *testing.T, caInstalled bool) {
	dir := callDir(t)
	call, err := listenAgentCall(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(call.at, ChannelMount+"/") || len(call.token) != 32 {
		t.Fatalf("call at %q with token %q", call.at, call.token)
	}
	path := filepath.Join(dir, call.name)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Fatalf("the socket: %v, %v", fi, err)
	}
	taken := make(chan net.Conn, 1)
	var caSaid bool
	go func() {
		c, ca, err := call.accept(context.Background(), 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		caSaid = ca
		taken <- c
	}()
	// One says another token, one says nothing and hangs up, one says a
	// part of the right one and hangs up; two say the right one with
	// something else after it.
	for _, say := range []string{strings.Repeat("0", 32) + "\n", "", call.token[:10],
		call.token + " cb\n", call.token + " ca"} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(say))
		c.Close()
	}
	// Two more connect and say nothing, and stay: the agent's call
	// behind them (the eighth connection, the last accept takes) is taken
	// all the same, while they still wait (read one after another, it
	// would wait a minute behind each).
	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	served := make(chan error, 1)
	go func() { served <- agent.Call(path, call.token, caInstalled) }()
	var conn net.Conn
	select {
	case conn = <-taken:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent's call waited behind connections that say nothing")
	}
	for _, c := range silent {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a silent connection was ended before the agent was taken: %v", err)
		}
	}
	if conn == nil {
		t.FailNow()
	}
	if caSaid != caInstalled {
		t.Errorf("the call said the CA was installed: %v, want %v", caSaid, caInstalled)
	}
	c, err := agent.NewClient(conn, conn, conn.Close)
	if err != nil {
		t.Fatalf("the called agent's session: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there after the call: %v", err)
	}
	c.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("the agent ended with %v when the server went away", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not end when the server went away")
	}
}

// No call within the wait, a canceled wait, and a socket flooded with
// connections that never say the token each end accept with an error,
// and remove the socket.
func TestAgentCallGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flood bool
		ctx   func() (context.Context, context.CancelFunc)
	}{
		{"nobody calls", false, func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
		{"canceled", false, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}},
		{"flooded", true, func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := callDir(t)
			call, err := listenAgentCall(dir)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, call.name)
			wait := 300 * time.Millisecond
			if tc.name == "canceled" || tc.flood {
				wait = time.Minute
			}
			if tc.flood {
				for range maxCallTries {
					c, err := net.Dial("unix", path)
					if err != nil {
						t.Fatal(err)
					}
					c.Write([]byte("nope\n" + strings.Repeat("x", 40)))
					defer c.Close()
				}
			}
			ctx, cancel := tc.ctx()
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, _, err := call.accept(ctx, wait)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("accept took a call nobody made")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("accept did not give up")
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the socket is still there: %v", err)
			}
		})
	}
}

// An agent that never calls (a host whose policy keeps containers off the
// channel's socket) costs one wait: the Manager then readies no more
// calls, and new sandboxes keep their command as it was, their agents
// started through an exec.
func TestAgentThatNeverCallsTurnsCallsOff(t *testing.T) {
	defer func(w time.Duration) { callWait = w }(callWait)
	callWait = 200 * time.Millisecond
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	dir := callDir(t)
	call, err := listenAgentCall(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a := m.calledAgent(context.Background(), call); a != nil {
		t.Fatal("an agent was taken though none called")
	}
	if !m.callsFail.Load() {
		t.Fatal("a call that never came left calls on")
	}
	spec := RunSpec{Name: "c", Labels: map[string]string{LabelChannel: dir}, Command: []string{"sleep", "infinity"}}
	if c := m.callingAgent(context.Background(), &spec); c != nil || !slices.Equal(spec.Command, []string{"sleep", "infinity"}) {
		t.Fatalf("after a call that never came, a new sandbox's command is %q", spec.Command)
	}

	// A socket the sandbox connected to without the token says the host
	// lets containers reach it: calls stay on.
	m3 := &Manager{log: slog.New(slog.DiscardHandler)}
	dir3 := callDir(t)
	call, err = listenAgentCall(dir3)
	if err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("unix", filepath.Join(dir3, call.name))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if a := m3.calledAgent(context.Background(), call); a != nil || m3.callsFail.Load() {
		t.Fatalf("a connection without the token: agent %v, calls off %v", a, m3.callsFail.Load())
	}

	// A wait the boot ended (its context) says nothing of the host.
	m2 := &Manager{log: slog.New(slog.DiscardHandler)}
	call, err = listenAgentCall(callDir(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if a := m2.calledAgent(ctx, call); a != nil || m2.callsFail.Load() {
		t.Fatalf("a canceled wait: agent %v, calls off %v", a, m2.callsFail.Load())
	}
}

// A call socket whose server was killed before it took the call stays in
// the channel: the next start of the container must not find it (its
// start script installs the CA it was made with while it is there), so
// channelBeforeStart removes it; a socket a server still listens on stays.
func TestStaleCallSocketGoesBeforeAStart(t *testing.T) {
	dir := callDir(t)
	live, err := listenAgentCall(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	dead, err := listenAgentCall(dir)
	if err != nil {
		t.Fatal(err)
	}
	dead.ln.Close() // what a kill leaves: the file, no listener
	unix.Close(dead.dirfd)
	if _, err := os.Lstat(filepath.Join(dir, dead.name)); err != nil {
		t.Fatalf("the killed server's socket: %v", err)
	}
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	m.channelBeforeStart(Container{Name: "c", Labels: map[string]string{LabelChannel: dir}})
	if _, err := os.Lstat(filepath.Join(dir, dead.name)); !os.IsNotExist(err) {
		t.Fatalf("the killed server's socket is still there before the start: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, live.name)); err != nil {
		t.Fatalf("a socket a server listens on went: %v", err)
	}
}

// A sandbox whose main process was to install the egress CA counts it as
// installed only when its agent's call says the install held: otherwise
// the CA goes in through a shell (controlSoon), which the first command
// waits for.
func TestCalledAgentSaysWhetherTheCAHeld(t *testing.T) {
	for _, held := range []bool{false, true} {
		m := &Manager{log: slog.New(slog.DiscardHandler)}
		dir := callDir(t)
		call, err := listenAgentCall(dir)
		if err != nil {
			t.Fatal(err)
		}
		call.ca = true
		served := make(chan error, 1)
		go func() { served <- agent.Call(filepath.Join(dir, call.name), call.token, held) }()
		a := m.calledAgent(context.Background(), call)
		if a == nil {
			t.Fatal("the agent's call was not taken")
		}
		if a.caAtStart != held {
			t.Errorf("the install held: %v; the agent taken says %v", held, a.caAtStart)
		}
		a.c.Close()
		<-served
	}
}

// The main process's start script parses in the shells images carry.
func TestAgentStartScriptParses(t *testing.T) {
	shells := 0
	for _, sh := range [][]string{{"sh"}, {"dash"}, {"bash", "--posix"}, {"busybox", "sh"}} {
		if _, err := exec.LookPath(sh[0]); err != nil {
			continue
		}
		shells++
		out, err := exec.Command(sh[0], append(sh[1:], "-n", "-c", agentStartScript)...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v: %s", sh, err, out)
		}
	}
	if shells == 0 {
		t.Skip("no shell here to parse it with")
	}
}
