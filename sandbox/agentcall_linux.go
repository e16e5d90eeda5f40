//go:build linux

package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// listenAgentCall listens in channel directory dir for the agent a new
// sandbox's main process starts (agentCommand), on a socket of its own,
// made as listenChannel makes its one. The call is one connection: accept
// takes it and closes the socket.
func listenAgentCall(dir string) (*agentCall, error) {
	if !validChannelDir(dir) {
		return nil, fmt.Errorf("%q is not a channel directory", dir)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open channel %s: %w", dir, err)
	}
	at := "/proc/self/fd/" + strconv.Itoa(fd) + "/"
	sweepChannel(fd, at, "a-") // a killed server's calls
	var b [6]byte
	var tok [16]byte
	_, _ = rand.Read(b[:])
	_, _ = rand.Read(tok[:])
	name := "a-" + hex.EncodeToString(b[:]) + ".s"
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: at + name, Net: "unix"})
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen in channel %s: %w", dir, err)
	}
	ln.SetUnlinkOnClose(false) // the path goes through the descriptor
	if err := unix.Fchmodat(fd, name, 0o666, 0); err != nil {
		ln.Close()
		_ = unix.Unlinkat(fd, name, 0)
		unix.Close(fd)
		return nil, fmt.Errorf("open the agent's socket to the sandbox's user: %w", err)
	}
	return &agentCall{ln: ln, dirfd: fd, name: name, token: hex.EncodeToString(tok[:]), at: ChannelMount + "/" + name}, nil
}

// accept waits, at most wait or until ctx ends, for the agent's call: the
// first connection that says the token within callHello of its accept. A
// connection that says anything else is closed, and the wait goes on (for
// at most maxCallTries connections). The socket is closed either way.
func (c *agentCall) accept(ctx context.Context, wait time.Duration) (net.Conn, error) {
	defer c.Close()
	deadline := time.Now().Add(wait)
	_ = c.ln.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.ln.SetDeadline(time.Now()) })
	defer stop()
	want := []byte(c.token + "\n")
	for range maxCallTries {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("the agent did not call: %w", err)
		}
		hello := time.Now().Add(callHello)
		if hello.After(deadline) {
			hello = deadline
		}
		_ = conn.SetReadDeadline(hello)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(conn, got); err != nil || subtle.ConstantTimeCompare(got, want) != 1 {
			conn.Close()
			continue
		}
		_ = conn.SetReadDeadline(time.Time{})
		return conn, nil
	}
	return nil, errors.New("the agent did not call: too many connections without its token")
}

// callHello bounds the wait for a connection's token: the agent writes it
// as soon as it connects.
const callHello = 2 * time.Second

// maxCallTries bounds the connections accept reads a token from.
const maxCallTries = 8

// Close stops listening and removes the socket.
func (c *agentCall) Close() {
	c.once.Do(func() {
		c.ln.Close()
		_ = unix.Unlinkat(c.dirfd, c.name, 0)
		unix.Close(c.dirfd)
	})
}
