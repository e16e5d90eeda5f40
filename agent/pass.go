package agent

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// A proxy connection's way to the server over its channel: the agent
// connects to the server's unix socket and sends one byte, passByte, with
// the descriptor of the sandbox's accepted connection attached
// (SCM_RIGHTS). The server then reads and writes that connection itself,
// so no byte of it passes through the agent or a second socket. The
// descriptor goes from the sandbox to the host and never the other way:
// the host's own sockets stay out of the sandbox's reach.
const passByte = 'F'

// PassConn hands c to the server listening on the unix socket at path and
// closes the agent's copy of it. On an error c is left open, for the
// caller to carry another way.
func PassConn(path string, c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("a %T has no descriptor to pass", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	conn, err := net.DialTimeout("unix", path, channelDialTimeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return errors.New("the channel is not a unix socket")
	}
	var werr error
	if err := raw.Control(func(fd uintptr) {
		_, _, werr = uc.WriteMsgUnix([]byte{passByte}, syscall.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("pass the connection to the server: %w", werr)
	}
	// The server holds its own reference now; this one goes.
	c.Close()
	return nil
}
