//go:build linux

package agent

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A hostile sandbox hands a connected TCP socket but keeps its own copy:
// both share one open file description, and so one O_NONBLOCK flag. The
// sandbox clears it after the server took the socket: the server's reads
// then block in the kernel, its deadlines no longer apply, and the
// goroutine and its OS thread are stuck until the sandbox sends a byte.
func TestHostileClearsNonblock(t *testing.T) {
	sbEnd, srvEnd := unixPair(t)
	client, accepted := tcpPair(t)
	kept, err := accepted.File() // the sandbox's own copy
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	if err := HandConn(sbEnd, accepted); err != nil {
		t.Fatal(err)
	}
	tc, err := TakeConn(srvEnd, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	// The sandbox, on its copy (same file description):
	if err := unix.SetNonblock(int(kept.Fd()), false); err != nil {
		t.Fatal(err)
	}
	_ = tc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	done := make(chan error, 1)
	go func() {
		_, err := tc.Read(make([]byte, 1))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read a byte nobody sent")
		}
	case <-time.After(5 * time.Second):
		client.Write([]byte("x")) // unblock the stuck read for the test's end
		<-done
		t.Fatal("the server's read ignored its deadline: a sandbox that clears O_NONBLOCK on its copy blocks a server thread")
	}
}

// lingeringTCP is a connected TCP socket with SO_LINGER set for an hour
// and its send queue full (the peer, client, never reads): closing its last
// descriptor blocks in close(2), O_NONBLOCK or not.
func lingeringTCP(t *testing.T) (client *net.TCPConn, f *os.File) {
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
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-got
	_ = a.SetWriteBuffer(4096)
	if err := a.SetLinger(3600); err != nil {
		t.Fatal(err)
	}
	_ = a.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 64<<10)
	for {
		if _, err := a.Write(buf); err != nil {
			break
		}
	}
	f, err = a.File()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	return c.(*net.TCPConn), f
}

// A hostile sandbox hands a TCP socket with SO_LINGER on and unsent data
// queued, and closes its own copy: the server's descriptor is the last
// one, and the server's close of it (here the refusal's, for a wrong
// marker; for a taken one, when the proxy is done) blocks its thread for
// as long as the linger says. Every such connection costs the server an
// OS thread; at Go's 10000 the whole server dies.
func TestHostileLingerBlocksClose(t *testing.T) {
	for _, marker := range []byte{'X', handMarker} {
		t.Run(string(marker), func(t *testing.T) {
			sbEnd, srvEnd := unixPair(t)
			client, f := lingeringTCP(t)
			if _, _, err := sbEnd.WriteMsgUnix([]byte{marker}, unix.UnixRights(int(f.Fd())), nil); err != nil {
				t.Fatal(err)
			}
			f.Close() // the sandbox drops its copy: in flight, the server's is the last
			done := make(chan struct{})
			go func() {
				defer close(done)
				if tc, err := TakeConn(srvEnd, 2*time.Second); err == nil {
					tc.Close() // what the proxy does when it is done
				}
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				client.Close() // unread data: a reset, which ends the linger
				<-done
				t.Fatal("the server's close of a handed socket blocked: SO_LINGER set by the sandbox holds a server thread")
			}
		})
	}
}

// The sandbox sets the linger again between the server's noLinger and its
// close (as a copy it keeps and spins on can): the close still returns,
// woken, and a refusal's close too.
func TestHostileLingerRaceBounded(t *testing.T) {
	relinger := func(fd int) {
		_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 3600})
	}
	beforeClose.Store(&relinger)
	t.Cleanup(func() { beforeClose.Store(nil) })
	for _, marker := range []byte{'X', handMarker} {
		t.Run(string(marker), func(t *testing.T) {
			sbEnd, srvEnd := unixPair(t)
			client, f := lingeringTCP(t)
			if _, _, err := sbEnd.WriteMsgUnix([]byte{marker}, unix.UnixRights(int(f.Fd())), nil); err != nil {
				t.Fatal(err)
			}
			f.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				if tc, err := TakeConn(srvEnd, 2*time.Second); err == nil {
					tc.Close()
				}
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				client.Close()
				<-done
				t.Fatal("a close the sandbox made linger held the server's thread")
			}
		})
	}
}
