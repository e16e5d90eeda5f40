//go:build linux

package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
)

// listenChannel listens in channel directory dir and hands each proxy
// connection the sandbox's agent hands over it (agent.TakeConn) to serve,
// until the listener is closed. It returns the
// socket's path as the sandbox sees it. The socket is made through a
// descriptor of dir (no path length limit, no symlink followed on the
// way), and sockets in dir that no server answers on any more (left by a
// killed one) are removed first.
func listenChannel(dir string, serve func(net.Conn)) (*channelListener, string, error) {
	ln, fd, name, err := listenInChannel(dir, "e-")
	if err != nil {
		return nil, "", err
	}
	cl := &channelListener{ln: ln, dirfd: fd, name: name}
	// A connection waiting for its handed descriptor holds one: no more
	// than maxPendingHands at once, the others wait in the listen backlog
	// (and the agent, after channelDialTimeout, carries them as streams).
	pending := make(chan struct{}, maxPendingHands)
	go func() {
		for {
			pending <- struct{}{}
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				<-pending
				// Out of descriptors, say: the agent falls back to the
				// exec meanwhile.
				time.Sleep(50 * time.Millisecond)
				continue
			}
			cl.conns.Add(1)
			go func() {
				tc, err := agent.TakeConn(c.(*net.UnixConn), handWait)
				<-pending
				c.Close()
				if err == nil {
					serve(tc)
				}
			}()
		}
	}()
	return cl, ChannelMount + "/" + name, nil
}

// listenInChannel makes a socket named prefix<random>.s in channel
// directory dir, open to the sandbox's user, through a descriptor of dir
// (no path length limit, no symlink followed on the way), after removing
// the sockets of that prefix no server answers on any more (a killed
// one's). It returns the listener, the descriptor and the socket's name;
// the caller closes the listener, unlinks the name at the descriptor and
// closes it.
func listenInChannel(dir, prefix string) (*net.UnixListener, int, string, error) {
	if !validChannelDir(dir) {
		return nil, -1, "", fmt.Errorf("%q is not a channel directory", dir)
	}
	fd, at, err := openSwept(dir, prefix)
	if err != nil {
		return nil, -1, "", err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:]) + ".s"
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: at + name, Net: "unix"})
	if err != nil {
		unix.Close(fd)
		return nil, -1, "", fmt.Errorf("listen in channel %s: %w", dir, err)
	}
	// The path goes through this descriptor: Close must not unlink by it.
	ln.SetUnlinkOnClose(false)
	if err := unix.Fchmodat(fd, name, 0o666, 0); err != nil {
		ln.Close()
		_ = unix.Unlinkat(fd, name, 0)
		unix.Close(fd)
		return nil, -1, "", fmt.Errorf("open channel socket to the sandbox's user: %w", err)
	}
	return ln, fd, name, nil
}

// handWait bounds the wait for a handed connection on a channel
// connection: the agent sends it as soon as it connects.
const handWait = 2 * time.Second

// maxPendingHands bounds the channel connections waiting for a handed
// descriptor.
const maxPendingHands = 64

// Close stops listening and removes the socket.
func (cl *channelListener) Close() {
	cl.ln.Close()
	_ = unix.Unlinkat(cl.dirfd, cl.name, 0)
	unix.Close(cl.dirfd)
}

// openSwept opens channel directory dir (a descriptor, and the path to
// its entries through it) with the sockets of prefix that nothing listens
// on removed (sweepChannel).
func openSwept(dir, prefix string) (fd int, at string, err error) {
	fd, err = unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("open channel %s: %w", dir, err)
	}
	at = "/proc/self/fd/" + strconv.Itoa(fd) + "/"
	sweepChannel(fd, at, prefix)
	return fd, at, nil
}

// sweepChannel removes the sockets named prefix… in the directory at
// dirfd that refuse a connection: a killed server's.
func sweepChannel(dirfd int, at, prefix string) {
	f, err := os.Open(at)
	if err != nil {
		return
	}
	names, _ := f.Readdirnames(64)
	f.Close()
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) || !strings.HasSuffix(n, ".s") {
			continue
		}
		c, err := net.DialTimeout("unix", at+n, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, unix.ECONNREFUSED) {
			_ = unix.Unlinkat(dirfd, n, 0)
		}
	}
}
