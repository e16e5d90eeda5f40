//go:build linux

package agent

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// passPair is a connected pair of unix sockets: what the agent writes on
// the first, ReceiveConn reads on the second.
func passPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "p.s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	w, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); r.Close() })
	return w, r
}

// TestReceiveConnRefusesWhatIsNotOneTCPConnection: what a hostile agent
// may pass instead of its proxy connection (no descriptor, a pipe, a unix
// socket, a listener, two descriptors, another byte) is refused, and
// every descriptor it sent is closed on the host.
func TestReceiveConnRefusesWhatIsNotOneTCPConnection(t *testing.T) {
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcpLn.Close()
	fdOf := func(sc syscall.Conn) int {
		raw, err := sc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var n int
		raw.Control(func(fd uintptr) { n = int(fd) })
		return n
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	other, _ := passPair(t)
	good, err := net.Dial("tcp", tcpLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	cases := []struct {
		name string
		data []byte
		fds  []int
		want string
	}{
		{"no descriptor", []byte{passByte}, nil, "0 descriptors"},
		{"a pipe", []byte{passByte}, []int{int(pr.Fd())}, "not a socket"},
		{"a unix socket", []byte{passByte}, []int{fdOf(other)}, "not TCP"},
		{"a listener", []byte{passByte}, []int{fdOf(tcpLn.(*net.TCPListener))}, "listener"},
		{"two descriptors", []byte{passByte}, []int{fdOf(good.(*net.TCPConn)), int(pr.Fd())}, "2 descriptors"},
		{"another byte", []byte{'X'}, []int{fdOf(good.(*net.TCPConn))}, "not one connection"},
		{"more bytes", []byte("CONNECT"), []int{fdOf(good.(*net.TCPConn))}, "not one connection"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, r := passPair(t)
			before := openFDs(t)
			var oob []byte
			if len(tc.fds) > 0 {
				oob = syscall.UnixRights(tc.fds...)
			}
			if _, _, err := w.WriteMsgUnix(tc.data, oob, nil); err != nil {
				t.Fatal(err)
			}
			conn, err := ReceiveConn(r)
			if err == nil {
				conn.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with %q, want it to say %q", err, tc.want)
			}
			if after := openFDs(t); after != before {
				t.Fatalf("%d descriptors open before, %d after: a passed one was kept", before, after)
			}
		})
	}
	t.Run("nothing, then the agent goes", func(t *testing.T) {
		w, r := passPair(t)
		w.Close()
		if conn, err := ReceiveConn(r); err == nil {
			conn.Close()
			t.Fatal("accepted")
		}
	})
}

// TestPassConnHandsTheConnectionOver: a connection passed with PassConn
// reaches the receiver whole, both ways, and the sender keeps no copy
// (its close does not end the connection; the receiver's does).
func TestPassConnHandsTheConnectionOver(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "p.s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		pc, err := ReceiveConn(c)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- pc
	}()
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcpLn.Close()
	client, err := net.Dial("tcp", tcpLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	accepted, err := tcpLn.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if err := PassConn(sock, accepted); err != nil {
		t.Fatal(err)
	}
	pc := <-got
	if pc == nil {
		t.FailNow()
	}
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(pc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("the receiver read %q, %v", buf, err)
	}
	if _, err := pc.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("the client read %q, %v", buf, err)
	}
	pc.Close()
	if n, err := client.Read(buf); err != io.EOF {
		t.Fatalf("after the receiver closed, the client read %d bytes, %v; want EOF (a copy was kept)", n, err)
	}
	if err := PassConn(sock+".none", client); err == nil {
		t.Fatal("passed to a socket nobody listens on")
	}
	if _, err := client.Write([]byte("x")); err != nil && strings.Contains(err.Error(), "closed") {
		t.Fatal("a connection that could not be passed was closed; it should stay for the caller")
	}
}
