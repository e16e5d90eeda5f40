package portfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// toLocal "dials into a sandbox" by connecting to a local port: ports
// maps sandbox ports to local listeners.
func toLocal(ports map[int]int) Dialer {
	return func(ctx context.Context, sandbox string, port int) (net.Conn, error) {
		p, ok := ports[port]
		if !ok {
			return nil, errors.New("connection refused")
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", p))
	}
}

func echoServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func TestExposeCarriesConnectionsAndUnexposeEndsThem(t *testing.T) {
	s := New(Options{Dial: toLocal(map[int]int{8000: echoServer(t)})})
	defer s.Close()
	info, _, err := s.Expose("box", 8000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if info.HostPort == 0 || !strings.HasPrefix(info.URL, "http://127.0.0.1:") {
		t.Fatalf("info %+v", info)
	}
	if again, _, err := s.Expose("box", 8000, 0); err != nil || again.HostPort != info.HostPort {
		t.Fatalf("expose again: %+v %v", again, err)
	}
	if _, _, err := s.Expose("box", 8000, info.HostPort+1); err == nil {
		t.Fatal("a second host port for one forward was accepted")
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", info.HostPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	c.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q %v", buf, err)
	}
	if l := s.List("box"); len(l) != 1 || l[0].Connections != 1 || l[0].Active != 1 {
		t.Fatalf("list: %+v", l)
	}
	if _, err := s.Unexpose("box", 8000); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(buf); err == nil {
		t.Fatal("a connection outlived its forward")
	}
	if _, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", info.HostPort)); err == nil {
		t.Fatal("the host port still listens")
	}
	if _, err := s.Unexpose("box", 8000); !errors.Is(err, ErrNotForwarded) {
		t.Fatalf("unexpose twice: %v", err)
	}
}

func TestHostPortZeroPrefersTheSameNumber(t *testing.T) {
	s := New(Options{Dial: toLocal(nil)})
	defer s.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if info, _, err := s.Expose("box", free, 0); err != nil || info.HostPort != free {
		t.Fatalf("a free number: %+v %v", info, err)
	}
	// Now that number is taken on the host: another sandbox gets another.
	if info, _, err := s.Expose("other", free, 0); err != nil || info.HostPort == free || info.HostPort == 0 {
		t.Fatalf("a taken number: %+v %v", info, err)
	}
}

func TestBadPortsAndBusyHostPort(t *testing.T) {
	s := New(Options{Dial: toLocal(nil)})
	defer s.Close()
	for _, c := range []struct{ port, host int }{{0, 0}, {70000, 0}, {80, -1}, {80, 65536}} {
		if _, _, err := s.Expose("box", c.port, c.host); err == nil || !strings.Contains(err.Error(), "not a TCP port") {
			t.Errorf("expose(%d, %d): %v", c.port, c.host, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	if _, _, err := s.Expose("box", 80, busy); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("a busy host port: %v", err)
	}
}

// TestPrivilegedHostPorts: a host port below 1024 is refused unless the
// server allows them, and a sandbox port below 1024 with host_port 0 gets
// a free port from 1024 up, whoever runs the server.
func TestPrivilegedHostPorts(t *testing.T) {
	s := New(Options{Dial: toLocal(nil)})
	defer s.Close()
	for _, host := range []int{1, 22, 80, 1023} {
		if _, _, err := s.Expose("box", 8000, host); !errors.Is(err, ErrPrivilegedPort) || !strings.Contains(err.Error(), fmt.Sprint(host)) {
			t.Errorf("host_port %d: %v", host, err)
		}
	}
	if got := s.List(""); len(got) != 0 {
		t.Fatalf("refusals made forwards: %+v", got)
	}
	for _, port := range []int{22, 80, 1023} {
		info, existing, err := s.Expose("box", port, 0)
		if err != nil || existing || info.HostPort < 1024 {
			t.Errorf("port %d, host_port 0: %+v existing %v, %v", port, info, existing, err)
		}
	}
	// From 1024 up a host port is a host port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if info, _, err := s.Expose("box", 9000, free); err != nil || info.HostPort != free {
		t.Errorf("host_port %d: %+v %v", free, info, err)
	}
	// Asking again returns the same forward and says so.
	if info, existing, err := s.Expose("box", 9000, 0); err != nil || !existing || info.HostPort != free {
		t.Errorf("again: %+v existing %v, %v", info, existing, err)
	}

	// Allowed: as root, a port below 1024 is the host's to give.
	if os.Geteuid() != 0 {
		t.Skip("listening below 1024 needs root; the refusals above are checked")
	}
	a := New(Options{Dial: toLocal(nil), AllowPrivileged: true})
	defer a.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:1023")
	if err != nil {
		t.Skipf("host port 1023 is in use here: %v", err)
	}
	ln.Close()
	if info, _, err := a.Expose("box", 8000, 1023); err != nil || info.HostPort != 1023 {
		t.Fatalf("allowed host_port 1023: %+v %v", info, err)
	}
}

func TestUnreachablePortClosesTheConnection(t *testing.T) {
	s := New(Options{Dial: toLocal(nil)})
	defer s.Close()
	info, _, err := s.Expose("box", 9, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", info.HostPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read from a forward whose port is closed: %v", err)
	}
}

func TestDropEndsASandboxsForwards(t *testing.T) {
	s := New(Options{Dial: toLocal(nil)})
	defer s.Close()
	s.Expose("a", 1, 0)
	s.Expose("a", 2, 0)
	s.Expose("b", 1, 0)
	s.Drop("a")
	if l := s.List(""); len(l) != 1 || l[0].Sandbox != "b" {
		t.Fatalf("after drop: %+v", l)
	}
}

// sharedOptions are the options of servers that share one state and lock
// directory, with an echo server on sandbox port 8000 and fast polls.
func sharedOptions(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	store, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return Options{Dial: toLocal(map[int]int{8000: echoServer(t)}), Store: store,
		Locks: locks.Dir{Path: filepath.Join(dir, "locks")}, Every: 20 * time.Millisecond}
}

// TestForwardsOutliveTheirServer: two servers share the state and lock
// directory. A's forward is recorded; B does not fight over it while A
// runs; when A ends, B listens on the same host port within a few polls;
// an unexpose through A (a new one) ends B's listener.
func TestForwardsOutliveTheirServer(t *testing.T) {
	opts := sharedOptions(t)
	a, b := New(opts), New(opts)
	defer b.Close()
	info, _, err := a.Expose("box", 8000, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // several of B's polls
	if l := b.List(""); len(l) != 1 || l[0].Server != fmt.Sprintf("server pid %d", os.Getpid()) || l[0].HostPort != info.HostPort {
		t.Fatalf("B's list while A serves: %+v", l)
	}
	if again, _, err := b.Expose("box", 8000, 0); err != nil || again.HostPort != info.HostPort {
		t.Fatalf("B exposing A's forward: %+v %v", again, err)
	}
	echo := func() error {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", info.HostPort))
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		buf := make([]byte, 1)
		_, err = io.ReadFull(c, buf)
		return err
	}
	if err := echo(); err != nil {
		t.Fatalf("through A: %v", err)
	}
	a.Close()
	deadline := time.Now().Add(30 * time.Second)
	for echo() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("B did not take the forward over: %v", echo())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := b.List(""); len(l) != 1 || l[0].Server != "this server" {
		t.Fatalf("B's list after the take-over: %+v", l)
	}
	c := New(opts)
	defer c.Close()
	if _, err := c.Unexpose("box", 8000); err != nil {
		t.Fatalf("unexpose through a third server: %v", err)
	}
	for echo() == nil {
		if time.Now().After(deadline) {
			t.Fatal("B still serves an unexposed forward")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if l := b.List(""); len(l) != 0 {
		t.Fatalf("after unexpose: %+v", l)
	}
}

// TestBindAddress: a Set listens on the address it is given, and its URLs
// name it.
func TestBindAddress(t *testing.T) {
	s := New(Options{Dial: toLocal(map[int]int{47613: echoServer(t)}), Bind: "127.0.0.2"})
	defer s.Close()
	info, _, err := s.Expose("box", 47613, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.URL, "http://127.0.0.2:") {
		t.Fatalf("url %s", info.URL)
	}
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(info.HostPort))); err == nil {
		c.Close()
		t.Fatal("the forward answers on 127.0.0.1 too")
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(info.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestNoTakeOverServesOnlyItsOwn: a command line's Set (NoTakeOver) does
// not take over a forward whose server ended; the forward it makes, once
// it closes, a server's Set takes over.
func TestNoTakeOverServesOnlyItsOwn(t *testing.T) {
	opts := sharedOptions(t)
	a := New(opts)
	info, _, err := a.Expose("box", 47123, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	cliOpts := opts
	cliOpts.NoTakeOver = true
	cli := New(cliOpts)
	cli.sync() // a look for forwards no server serves
	if l := cli.List(""); len(l) != 1 || l[0].Server != "waiting" {
		t.Fatalf("the command line's Set took a forward over: %+v", l)
	}
	mine, _, err := cli.Expose("box", 47124, 0)
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	b := New(opts)
	defer b.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := b.List("")
		if len(l) == 2 && l[0].Server == "this server" && l[1].Server == "this server" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a server did not take both over: %+v", l)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if info.HostPort == mine.HostPort {
		t.Fatal("two forwards on one host port")
	}
}
