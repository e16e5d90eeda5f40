package portfwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
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
	s := New(toLocal(map[int]int{8000: echoServer(t)}), "", nil)
	defer s.Close()
	info, err := s.Expose("box", 8000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if info.HostPort == 0 || !strings.HasPrefix(info.URL, "http://127.0.0.1:") || info.Via != "agent" {
		t.Fatalf("info %+v", info)
	}
	if again, err := s.Expose("box", 8000, 0); err != nil || again.HostPort != info.HostPort {
		t.Fatalf("expose again: %+v %v", again, err)
	}
	if _, err := s.Expose("box", 8000, info.HostPort+1); err == nil {
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
	s := New(toLocal(nil), "", nil)
	defer s.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if info, err := s.Expose("box", free, 0); err != nil || info.HostPort != free {
		t.Fatalf("a free number: %+v %v", info, err)
	}
	// Now that number is taken on the host: another sandbox gets another.
	if info, err := s.Expose("other", free, 0); err != nil || info.HostPort == free || info.HostPort == 0 {
		t.Fatalf("a taken number: %+v %v", info, err)
	}
}

func TestBadPortsAndBusyHostPort(t *testing.T) {
	s := New(toLocal(nil), "", nil)
	defer s.Close()
	for _, c := range []struct{ port, host int }{{0, 0}, {70000, 0}, {80, -1}, {80, 65536}} {
		if _, err := s.Expose("box", c.port, c.host); err == nil || !strings.Contains(err.Error(), "not a TCP port") {
			t.Errorf("expose(%d, %d): %v", c.port, c.host, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	if _, err := s.Expose("box", 80, busy); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("a busy host port: %v", err)
	}
}

func TestUnreachablePortClosesTheConnection(t *testing.T) {
	s := New(toLocal(nil), "", nil)
	defer s.Close()
	info, err := s.Expose("box", 9, 0)
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
	s := New(toLocal(nil), "", nil)
	defer s.Close()
	s.Expose("a", 1, 0)
	s.Expose("a", 2, 0)
	s.Expose("b", 1, 0)
	s.Drop("a")
	if l := s.List(""); len(l) != 1 || l[0].Sandbox != "b" {
		t.Fatalf("after drop: %+v", l)
	}
}
