//go:build linux

package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// passTimeout bounds the wait for a passed connection's message.
const passTimeout = 5 * time.Second

// ReceiveConn takes the connection an agent passed on c (see PassConn)
// and returns it, ready to read and write. What arrives comes from the
// sandbox and is checked as such: exactly one descriptor with the one
// byte, and that descriptor a connected-or-connecting TCP socket (not a
// listener, a file, a pipe or a socket of another kind); anything else is
// closed and refused. c itself is left to the caller.
func ReceiveConn(c net.Conn) (net.Conn, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("a %T carries no descriptors", c)
	}
	_ = uc.SetReadDeadline(time.Now().Add(passTimeout))
	var b [1]byte
	// Room for one descriptor (the kernel drops what does not fit, and
	// says so in MSG_CTRUNC).
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(b[:], oob)
	if err != nil {
		return nil, fmt.Errorf("read the passed connection: %w", err)
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for i := range msgs {
			if rights, err := unix.ParseUnixRights(&msgs[i]); err == nil {
				fds = append(fds, rights...)
			}
		}
	}
	if n != 1 || b[0] != passByte || len(fds) != 1 || flags&unix.MSG_CTRUNC != 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("the agent passed %d bytes and %d descriptors, not one connection", n, len(fds))
	}
	if err := checkTCP(fds[0]); err != nil {
		unix.Close(fds[0])
		return nil, err
	}
	f := os.NewFile(uintptr(fds[0]), "sandbox connection")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("adopt the passed connection: %w", err)
	}
	return conn, nil
}

// checkTCP refuses a descriptor that is not a TCP socket, or is one that
// listens. getsockopt answers at once for any descriptor (ENOTSOCK for
// what is not a socket): nothing here waits on a file system the sandbox
// could serve.
func checkTCP(fd int) error {
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return fmt.Errorf("the passed descriptor is not a socket: %w", err)
	}
	typ, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	proto, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	listening, err3 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("the passed socket: %w", err)
	}
	if listening != 0 {
		return errors.New("the passed socket is a listener")
	}
	// A Go listener (the agent's) is multipath TCP where the kernel has
	// it; its connections are TCP all the same.
	if (domain != unix.AF_INET && domain != unix.AF_INET6) || typ != unix.SOCK_STREAM || (proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_MPTCP) {
		return fmt.Errorf("the passed socket is not TCP (domain %d, type %d, protocol %d)", domain, typ, proto)
	}
	return nil
}
