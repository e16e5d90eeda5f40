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
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
)

// listenAgentCall listens in channel directory dir for the agent a new
// sandbox's main process starts (agentCommand), on a socket of its own
// (listenInChannel, as listenChannel's). The call is one connection: accept
// takes it and closes the socket.
func listenAgentCall(dir string) (*agentCall, error) {
	ln, fd, name, err := listenInChannel(dir, "a-") // channel_linux.go
	if err != nil {
		return nil, err
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	return &agentCall{ln: ln, dirfd: fd, name: name, token: hex.EncodeToString(tok[:]), at: ChannelMount + "/" + name}, nil
}

// dropStaleCalls removes from channel directory dir the call sockets
// (listenAgentCall's) that nothing listens on: a server killed before it
// took its sandbox's call leaves one, which a later start of the
// container must not find (agentStartScript installs the CA it was made
// with only while its socket is there).
func dropStaleCalls(dir string) {
	if !validChannelDir(dir) {
		return
	}
	if fd, _, err := openSwept(dir, "a-"); err == nil { // channel_linux.go
		unix.Close(fd)
	}
}

// accept waits, at most wait or until ctx ends, for the agent's call: the
// first connection that says the token within callHello of its accept.
// Connections are read at once, each on its own, so that ones that say
// nothing do not hold the agent's behind them; one that says anything
// else is closed, and at most maxCallTries are taken. The socket is closed
// either way. It returns errNoCall when nothing connected at all.
//
// The token's line is the token alone, or the token and agent.CallCA
// when the main process installed the egress CA before it started the
// agent (agentStartScript); the second result says which.
func (c *agentCall) accept(ctx context.Context, wait time.Duration) (net.Conn, bool, error) {
	defer c.Close()
	deadline := time.Now().Add(wait)
	_ = c.ln.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.ln.SetDeadline(time.Now()) })
	defer stop()
	want := []byte(c.token + "\n")
	helloWait := callHello
	type call struct {
		conn *net.UnixConn
		ca   bool
	}
	won := make(chan call, 1)
	var decided, connected atomic.Bool
	ended := make(chan error, 1)
	go func() {
		var reading sync.WaitGroup
		err := errors.New("too many connections without its token")
		for range maxCallTries {
			conn, aerr := c.ln.AcceptUnix()
			if aerr != nil {
				err = aerr
				break
			}
			connected.Store(true)
			reading.Add(1)
			go func() {
				defer reading.Done()
				hello := time.Now().Add(helloWait)
				if hello.After(deadline) {
					hello = deadline
				}
				_ = conn.SetReadDeadline(hello)
				got := make([]byte, len(want))
				_, err := io.ReadFull(conn, got)
				ca := false
				if err == nil && got[len(got)-1] == agent.CallCA[0] {
					// The token, then agent.CallCA: read the rest of it.
					got[len(got)-1] = '\n'
					rest := make([]byte, len(agent.CallCA))
					if _, err = io.ReadFull(conn, rest); err == nil && string(rest) != agent.CallCA[1:]+"\n" {
						err = errors.New("not a call")
					}
					ca = err == nil
				}
				if err != nil || subtle.ConstantTimeCompare(got, want) != 1 || !decided.CompareAndSwap(false, true) {
					conn.Close()
					return
				}
				won <- call{conn, ca}
			}()
		}
		reading.Wait()
		ended <- err
	}()
	var err error
	select {
	case w := <-won:
		_ = w.conn.SetReadDeadline(time.Time{})
		return w.conn, w.ca, nil
	case err = <-ended:
	}
	select {
	case w := <-won: // said as the last reader ended
		_ = w.conn.SetReadDeadline(time.Time{})
		return w.conn, w.ca, nil
	default:
	}
	switch {
	case ctx.Err() != nil:
		return nil, false, ctx.Err()
	case !connected.Load():
		return nil, false, fmt.Errorf("%w: %w", errNoCall, err)
	}
	return nil, false, fmt.Errorf("the agent did not call: %w", err)
}

// errNoCall is accept's error when nothing connected at all.
var errNoCall = errors.New("the agent did not call")

// callHello bounds the wait for a connection's token: the agent writes it
// as soon as it connects. A variable for tests.
var callHello = 2 * time.Second

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
