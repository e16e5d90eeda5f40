//go:build linux

package agent

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unixPair is two ends of a unix stream connection, as a channel's.
func unixPair(t *testing.T) (sandboxEnd, serverEnd *net.UnixConn) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "c.s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan *net.UnixConn, 1)
	go func() {
		c, _ := ln.AcceptUnix()
		got <- c
	}()
	c, err := net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// tcpPair is a client connection and the proxy's accepted end of it.
func tcpPair(t *testing.T) (client, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		got <- c
	}()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	a := <-got
	t.Cleanup(func() { c.Close(); a.Close() })
	return c, a
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// A handed connection is the server's: bytes flow both ways between it
// and the client, a half-close reaches the client, and the agent's copy
// is closed without ending it.
func TestHandConn(t *testing.T) {
	sbEnd, srvEnd := unixPair(t)
	client, accepted := tcpPair(t)
	if err := HandConn(sbEnd, accepted); err != nil {
		t.Fatal(err)
	}
	accepted.Close()
	tc, err := TakeConn(srvEnd, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := tc.Read(buf)
	if err != nil || string(buf[:n]) != "GET / HTTP/1.1\r\n\r\n" {
		t.Fatalf("server read %q, %v", buf[:n], err)
	}
	if _, err := tc.Write([]byte("HTTP/1.1 200 OK\r\n\r\nbody")); err != nil {
		t.Fatal(err)
	}
	if err := tc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, err := io.ReadAll(client)
	if err != nil || string(all) != "HTTP/1.1 200 OK\r\n\r\nbody" {
		t.Fatalf("client read %q, %v", all, err)
	}
}

// What a hostile sandbox sends on its channel instead of a handed
// connection is refused, and every descriptor it sent is closed.
func TestTakeConnRefuses(t *testing.T) {
	listening := func(t *testing.T) int {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		f, err := ln.File()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return int(f.Fd())
	}
	tcpFD := func(t *testing.T) int {
		_, a := tcpPair(t)
		f, err := a.File()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return int(f.Fd())
	}
	cases := []struct {
		name string
		send func(t *testing.T, c *net.UnixConn)
		want string
	}{
		{"bytes, no descriptor", func(t *testing.T, c *net.UnixConn) { c.Write([]byte("GET / HTTP/1.1\r\n")) }, "not a handed connection"},
		{"marker, no descriptor", func(t *testing.T, c *net.UnixConn) { c.Write([]byte{handMarker}) }, "0 descriptors"},
		{"nothing, then close", func(t *testing.T, c *net.UnixConn) { c.Close() }, "read a handed connection"},
		{"another marker", func(t *testing.T, c *net.UnixConn) {
			c.WriteMsgUnix([]byte{'X'}, unix.UnixRights(tcpFD(t)), nil)
		}, "not a handed connection"},
		{"two descriptors", func(t *testing.T, c *net.UnixConn) {
			c.WriteMsgUnix([]byte{handMarker}, unix.UnixRights(tcpFD(t), tcpFD(t)), nil)
		}, "descriptors"},
		{"a pipe", func(t *testing.T, c *net.UnixConn) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer w.Close()
			c.WriteMsgUnix([]byte{handMarker}, unix.UnixRights(int(r.Fd())), nil)
		}, "not a TCP socket"},
		{"a file", func(t *testing.T, c *net.UnixConn) {
			f, err := os.Open("/etc/hostname")
			if err != nil {
				f, err = os.Open(os.Args[0])
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c.WriteMsgUnix([]byte{handMarker}, unix.UnixRights(int(f.Fd())), nil)
		}, "not a TCP socket"},
		{"a UDP socket", func(t *testing.T, c *net.UnixConn) {
			u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			f, _ := u.File()
			defer f.Close()
			c.WriteMsgUnix([]byte{handMarker}, unix.UnixRights(int(f.Fd())), nil)
		}, "not a TCP socket"},
		{"a unix socket", func(t *testing.T, c *net.UnixConn) {
			other, _ := unixPair(t)
			f, _ := other.File()
			defer f.Close()
			c.WriteMsgUnix([]byte{handMarker}, unix.UnixRights(int(f.Fd())), nil)
		}, "not a TCP socket"},
		{"a listening socket", func(t *testing.T, c *net.UnixConn) {
			c.WriteMsgUnix([]byte{handMarker}, unix.UnixRights(listening(t)), nil)
		}, "listening"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sbEnd, srvEnd := unixPair(t)
			before := openFDs(t)
			tc.send(t, sbEnd)
			// What the sender made is the sender's to close: count
			// only what the server's end may have taken in.
			sent := openFDs(t) - before
			got, err := TakeConn(srvEnd, 2*time.Second)
			if err == nil {
				got.Close()
				t.Fatal("taken")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to say %q", err, tc.want)
			}
			// More open than the sender left is what the refusal kept;
			// fewer is another test of the package closing its own.
			if after := openFDs(t) - before; after > sent {
				t.Fatalf("%d descriptors open after the refusal, %d before it", after, sent)
			}
		})
	}
}

// A sandbox that connects and sends nothing is dropped after the wait.
func TestTakeConnWaits(t *testing.T) {
	_, srvEnd := unixPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := TakeConn(srvEnd, 100*time.Millisecond)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "timeout") {
			t.Fatalf("err %v, want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("TakeConn did not give up")
	}
}
