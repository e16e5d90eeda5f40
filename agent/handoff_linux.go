//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// handMarker is the one byte that carries a handed connection's
// descriptor over a channel.
const handMarker = 'H'

// HandConn gives the server, over the channel connection uc, the
// descriptor of the proxy connection c itself: the server then reads and
// writes the sandbox's side of c without the agent copying it through
// another socket. On success the caller closes its own c (the server
// holds the connection now); on an error nothing was handed and c is the
// caller's still.
func HandConn(uc *net.UnixConn, c *net.TCPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = uc.WriteMsgUnix([]byte{handMarker}, unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return werr
}

// TakeConn reads from uc, a connection on a sandbox's channel, the proxy
// connection the sandbox's agent hands over (HandConn), waiting at most
// wait for it. Whatever the sandbox sends is untrusted: anything but one
// marker byte with exactly one descriptor of a connected TCP socket is
// refused, and every descriptor that came with it is closed.
func TakeConn(uc *net.UnixConn, wait time.Duration) (*HandedConn, error) {
	_ = uc.SetReadDeadline(time.Now().Add(wait))
	var b [1]byte
	// Room for one descriptor: the kernel drops any more (MSG_CTRUNC).
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(b[:], oob)
	fds := rightsIn(oob[:oobn])
	defer func() {
		for _, fd := range fds {
			closeBounded(fd)
		}
	}()
	switch {
	case err != nil:
		return nil, fmt.Errorf("read a handed connection: %w", err)
	case n != 1 || b[0] != handMarker:
		return nil, errors.New("the channel's first byte is not a handed connection")
	case flags&unix.MSG_CTRUNC != 0 || len(fds) != 1:
		return nil, fmt.Errorf("a handed connection came with %d descriptors (want 1)", len(fds))
	}
	if err := connectedTCP(fds[0]); err != nil {
		return nil, err
	}
	noLinger(fds[0])
	f := os.NewFile(uintptr(fds[0]), "handed proxy connection")
	fds = nil // f owns it now
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("a handed connection: %w", err)
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close() // not a socket FileConn makes of a TCP one: no linger to wait on
		return nil, fmt.Errorf("a handed connection is a %T, not TCP", nc)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		tc.Close()
		return nil, err
	}
	return &HandedConn{tc: tc, rc: rc}, nil
}

// closeBounded closes fd, a descriptor a sandbox handed over, without
// letting the close hold a thread: the sandbox may set a linger on the
// socket again between noLinger and the close (it can spin on it through
// a copy it keeps, then drop that copy), and the close of the last
// reference then waits for the linger. The close runs on a thread of its
// own, which a signal (SIGURG, which Go's runtime takes as a preemption
// request) wakes every closeKick while the close has not returned: the
// kernel's wait for a linger ends at a pending signal, and the socket
// goes on closing without anyone waiting.
func closeBounded(fd int) {
	done := make(chan struct{})
	tid := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		noLinger(fd)
		if hook := beforeClose.Load(); hook != nil {
			(*hook)(fd)
		}
		unix.Close(fd)
		close(done)
	}()
	t := <-tid
	kick := time.NewTicker(closeKick)
	defer kick.Stop()
	for {
		select {
		case <-done:
			return
		case <-kick.C:
			// A kick that comes once the close returned reaches this
			// thread, or another of the process's, as one more
			// preemption request: harmless.
			_ = unix.Tgkill(os.Getpid(), t, unix.SIGURG)
		}
	}
}

// closeKick is how often a close that waits is woken.
const closeKick = 50 * time.Millisecond

// beforeClose, when set, runs between a handed descriptor's noLinger
// and its close (tests set a linger there, as a sandbox's copy may).
var beforeClose atomic.Pointer[func(int)]

// noLinger turns SO_LINGER off on fd (when it is a socket), so that
// closing it never waits for its unsent data: the sandbox may have set a
// linger of years on a socket whose peer never reads.
func noLinger(fd int) {
	_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{})
}

// HandedConn is a TCP connection a sandbox handed over. Its open file
// description is shared with whatever copy the sandbox kept, O_NONBLOCK
// and socket options included: every read and write asks the kernel not
// to block (MSG_DONTWAIT) whatever that flag says, and waits in the
// runtime's poller, where deadlines hold; its close turns SO_LINGER off
// first. It offers no ReadFrom or WriteTo: splice(2) on the socket would
// block on the shared flag.
type HandedConn struct {
	tc *net.TCPConn
	rc syscall.RawConn
}

func (h *HandedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var serr error
	err := h.rc.Read(func(fd uintptr) bool {
		for {
			n, _, serr = unix.Recvfrom(int(fd), p, unix.MSG_DONTWAIT)
			if serr != unix.EINTR {
				return serr != unix.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case serr != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: h.tc.LocalAddr(), Addr: h.tc.RemoteAddr(), Err: os.NewSyscallError("recvfrom", serr)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (h *HandedConn) Write(p []byte) (int, error) {
	var done int
	var serr error
	err := h.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			n, err := unix.SendmsgN(int(fd), p[done:], nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
			switch err {
			case nil:
				done += n
			case unix.EINTR:
			case unix.EAGAIN:
				return false
			default:
				serr = err
				return true
			}
		}
		return true
	})
	if err == nil && serr != nil {
		err = &net.OpError{Op: "write", Net: "tcp", Source: h.tc.LocalAddr(), Addr: h.tc.RemoteAddr(), Err: os.NewSyscallError("sendmsg", serr)}
	}
	return done, err
}

// Close ends the connection without waiting on a linger the sandbox set:
// the connection's own descriptor is closed while a copy of it is held
// (so that close is never the last, and never waits), then the copy with
// closeBounded.
func (h *HandedConn) Close() error {
	dup := -1
	_ = h.rc.Control(func(fd uintptr) {
		if d, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err == nil {
			dup = d
		}
	})
	err := h.tc.Close()
	if dup >= 0 {
		closeBounded(dup)
	}
	return err
}

func (h *HandedConn) CloseWrite() error                  { return h.tc.CloseWrite() }
func (h *HandedConn) LocalAddr() net.Addr                { return h.tc.LocalAddr() }
func (h *HandedConn) RemoteAddr() net.Addr               { return h.tc.RemoteAddr() }
func (h *HandedConn) SetDeadline(t time.Time) error      { return h.tc.SetDeadline(t) }
func (h *HandedConn) SetReadDeadline(t time.Time) error  { return h.tc.SetReadDeadline(t) }
func (h *HandedConn) SetWriteDeadline(t time.Time) error { return h.tc.SetWriteDeadline(t) }

// rightsIn is the descriptors in control messages oob.
func rightsIn(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if r, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

// connectedTCP checks that fd is a TCP socket (IPv4 or IPv6; MPTCP, which
// Go's listeners ask for by default, is one) that is not listening.
func connectedTCP(fd int) error {
	get := func(opt int) int {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, opt)
		if err != nil {
			return -1
		}
		return v
	}
	dom, typ, proto, listening := get(unix.SO_DOMAIN), get(unix.SO_TYPE), get(unix.SO_PROTOCOL), get(unix.SO_ACCEPTCONN)
	if (dom != unix.AF_INET && dom != unix.AF_INET6) || typ != unix.SOCK_STREAM || (proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_MPTCP) {
		return fmt.Errorf("a handed descriptor is not a TCP socket (domain %d, type %d, protocol %d)", dom, typ, proto)
	}
	if listening != 0 {
		return errors.New("a handed descriptor is a listening socket")
	}
	return nil
}
