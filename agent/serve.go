package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
	"golang.org/x/sys/unix"
)

// Serve runs the agent's end of a session over r and w (the stdio of
// `sandbox-ctl agent`) until the server goes away.
func Serve(r io.Reader, w io.Writer) error {
	sess, err := yamux.Server(pipeConn{Reader: r, Writer: &joinWriter{w: w}, close: func() error { return nil }}, config())
	if err != nil {
		return err
	}
	defer sess.Close()
	a := &agentState{sess: sess, listening: map[string]bool{}, outputs: make(chan struct{}, outputOps), touches: make(chan struct{}, touchOps)}
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			if sess.IsClosed() {
				return nil
			}
			return err
		}
		go a.handle(st)
	}
}

// agentState is what the agent keeps across streams.
type agentState struct {
	sess      *yamux.Session
	mu        sync.Mutex
	listening map[string]bool // control sockets served
	egress    int             // the proxy port served (or tried), 0 for none
	// outputs and touches bound the streams of each op that do blocking
	// file system calls at once: each holds a thread while it blocks, and
	// a thread is a process in the sandbox's table (see maxProcs). A
	// touch has its own, so that outputs streams never hold up a mark.
	outputs, touches chan struct{}
	// channel is the server's unix socket for proxy connections, mounted
	// in from the host ("" when the sandbox has none): a connection
	// handed over it skips the exec's pipes. A connection it refuses is
	// carried as a stream.
	channel string
}

// handle answers one stream's request.
func (a *agentState) handle(st *yamux.Stream) {
	br := bufio.NewReader(st)
	line, err := readLine(br)
	if err != nil {
		st.Close()
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		_ = writeJSON(st, Reply{Error: "bad request: " + err.Error()})
		st.Close()
		return
	}
	switch req.Op {
	case OpHello:
		_ = writeJSON(st, Reply{OK: true, Version: Version})
		st.Close()
	case OpDial:
		if req.Port < 1 || req.Port > 65535 {
			_ = writeJSON(st, Reply{Error: fmt.Sprintf("port %d is not a TCP port", req.Port)})
			st.Close()
			return
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(req.Port)), 10*time.Second)
		if err != nil {
			_ = writeJSON(st, Reply{Error: err.Error()})
			st.Close()
			return
		}
		if err := writeJSON(st, Reply{OK: true}); err != nil {
			c.Close()
			st.Close()
			return
		}
		Splice(c, bufferedConn{Conn: st, r: br})
	case OpEgressListen:
		err := a.listenEgress(req.Port, req.Path)
		rep := Reply{OK: err == nil}
		if err != nil {
			rep.Error = err.Error()
		}
		_ = writeJSON(st, rep)
		st.Close()
	case OpCtlListen:
		err := a.listenCtl(req.Path)
		rep := Reply{OK: err == nil}
		if err != nil {
			rep.Error = err.Error()
		}
		_ = writeJSON(st, rep)
		st.Close()
	case OpOutputs:
		a.outputs <- struct{}{}
		serveOutputs(st, req.Path, req.Stamp, time.Duration(req.Window))
		<-a.outputs
		st.Close()
	case OpTouch:
		a.touches <- struct{}{}
		err := touch(req.Path)
		<-a.touches
		rep := Reply{OK: err == nil}
		if err != nil {
			rep.Error = err.Error()
		}
		_ = writeJSON(st, rep)
		st.Close()
	default:
		_ = writeJSON(st, Reply{Error: "unknown op " + strconv.Quote(req.Op)})
		st.Close()
	}
}

// listenCtl serves the control socket at path: each connection to it is
// carried to the server as a stream of its own. Several servers may each
// run an agent in one sandbox: one of them holds the path, and another
// takes it over when it goes (a socket nothing answers on is replaced).
func (a *agentState) listenCtl(path string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.listening[path] {
		return nil
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("control socket %q: want an absolute path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	ln, err := claimSocket(path)
	if err != nil {
		return err
	}
	a.listening[path] = true
	go a.holdCtl(path, ln)
	return nil
}

// ctlRecheck is how often an agent looks whether it should (still) hold
// the control socket.
const ctlRecheck = 2 * time.Second

// holdCtl serves path while this agent holds it, and waits to take it
// over while another agent does, until the session ends.
func (a *agentState) holdCtl(path string, ln *net.UnixListener) {
	for {
		if ln != nil {
			a.serveCtl(path, ln)
		}
		select {
		case <-a.sess.CloseChan():
			return
		case <-time.After(ctlRecheck):
		}
		ln, _ = claimSocket(path)
	}
}

// serveCtl accepts on ln until the session ends or path no longer names
// ln's socket (another agent took it).
func (a *agentState) serveCtl(path string, ln *net.UnixListener) {
	ino := inode(path)
	done := make(chan struct{})
	go func() {
		defer ln.Close()
		for {
			select {
			case <-a.sess.CloseChan():
				return
			case <-done:
				return
			case <-time.After(ctlRecheck):
				if inode(path) != ino {
					return
				}
			}
		}
	}()
	defer close(done)
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go a.relayCtl(c)
	}
}

// claimSocket listens on path unless a live socket is there already (nil
// then); a dead one is replaced.
func claimSocket(path string) (*net.UnixListener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, nil
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// The path may be another agent's by the time this one closes.
	ln.SetUnlinkOnClose(false)
	// Every process of the sandbox may ask: the sandbox is one party.
	_ = os.Chmod(path, 0o666)
	return ln, nil
}

// inode identifies the file at path (0 when there is none).
func inode(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// listenEgress serves the proxy on 127.0.0.1:port: each connection is
// carried, raw, to the server, which decides. When the port is taken, the
// holder is most often the agent of a server that just died, on its way
// out: the reply waits up to egressTakeoverWait for the port, so that the
// first command after a server's restart reaches this agent's proxy, not
// the dead one's. A port still taken then (another live server's agent
// holds it) is taken over once it is free, and the reply says so.
func (a *agentState) listenEgress(port int, channel string) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("proxy port %d is not a TCP port", port)
	}
	if channel != "" && !filepath.IsAbs(channel) {
		return fmt.Errorf("the proxy's channel %q is not an absolute path", channel)
	}
	a.mu.Lock()
	a.channel = channel
	if a.egress == port {
		a.mu.Unlock()
		return nil
	}
	if a.egress != 0 {
		a.mu.Unlock()
		return fmt.Errorf("the proxy is served on port %d already", a.egress)
	}
	a.egress = port
	a.mu.Unlock()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ln, err := a.listenWithin(addr, egressTakeoverWait)
	go a.holdEgress(addr, ln)
	if err != nil {
		return fmt.Errorf("%w (taken over once free)", err)
	}
	return nil
}

// egressTakeoverWait bounds how long the proxy's start waits for a port
// another agent holds before it replies.
const egressTakeoverWait = 1500 * time.Millisecond

// listenWithin listens on addr, trying again while the address is in use,
// for up to wait or until the session ends.
func (a *agentState) listenWithin(addr string, wait time.Duration) (net.Listener, error) {
	deadline := time.Now().Add(wait)
	pause := egressRetryFirst
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().Add(pause).After(deadline) {
			return ln, err
		}
		select {
		case <-a.sess.CloseChan():
			return nil, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// holdEgress serves the proxy on ln, and while the address is another's,
// tries to take it, until the session ends: soon at first (the holder is
// most often the agent of a server that just died, on its way out), then
// every ctlRecheck.
func (a *agentState) holdEgress(addr string, ln net.Listener) {
	// The wait grows with every try and is not reset when a listener
	// fails: a listener that keeps failing (out of descriptors) is tried
	// again at most every ctlRecheck.
	wait := egressRetryFirst
	for {
		if ln != nil {
			served := make(chan struct{})
			go func(ln net.Listener) {
				select {
				case <-a.sess.CloseChan():
					ln.Close()
				case <-served:
				}
			}(ln)
			for {
				c, err := ln.Accept()
				if err != nil {
					break
				}
				go a.relayEgress(c)
			}
			close(served)
			ln.Close()
		}
		select {
		case <-a.sess.CloseChan():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, ctlRecheck)
		ln, _ = net.Listen("tcp", addr)
	}
}

// egressRetryFirst is the first wait before another try at a proxy port
// that was taken; each wait doubles up to ctlRecheck.
const egressRetryFirst = 25 * time.Millisecond

// relayEgress carries one proxy connection to the server: handed over
// its channel where it has one (the server takes nothing else there),
// else as a stream.
func (a *agentState) relayEgress(c net.Conn) {
	a.mu.Lock()
	channel := a.channel
	a.mu.Unlock()
	if channel != "" {
		if uc, err := net.DialTimeout("unix", channel, channelDialTimeout); err == nil {
			err := HandConn(uc.(*net.UnixConn), c.(*net.TCPConn))
			uc.Close()
			if err == nil {
				c.Close() // the server's now
				return
			}
		}
	}
	a.relay(c, OpEgress)
}

// channelDialTimeout bounds a connect to the server's channel: a listener
// that does not answer at once is not there.
const channelDialTimeout = 2 * time.Second

// relayCtl carries one control connection to the server.
func (a *agentState) relayCtl(c net.Conn) { a.relay(c, OpCtl) }

// relay carries connection c to the server as a stream that opens with
// op.
func (a *agentState) relay(c net.Conn, op string) {
	st, err := a.sess.OpenStream()
	if err != nil {
		c.Close()
		return
	}
	if err := writeJSON(st, Request{Op: op}); err != nil {
		c.Close()
		st.Close()
		return
	}
	Splice(c, st)
}

// yamuxServer starts the agent's session (tests use it to play other
// agents).
func yamuxServer(r io.Reader, w io.Writer) (*yamux.Session, error) {
	return yamux.Server(pipeConn{Reader: r, Writer: w, close: func() error { return nil }}, config())
}

// touch sets the modification time of the file at path, an absolute
// clean path, to now, making it (empty) and its directory when missing.
// It starts no process, and never waits on what the sandbox put there (a
// FIFO's time is set without opening it).
func touch(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" {
		return fmt.Errorf("touch: %q is not an absolute clean path to a file", path)
	}
	err := unix.UtimesNanoAt(unix.AT_FDCWD, path, nil, 0)
	if !errors.Is(err, unix.ENOENT) {
		if err != nil {
			return fmt.Errorf("touch: %w", &fs.PathError{Op: "utimensat", Path: path, Err: err})
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("touch: %w", err)
	}
	// O_NONBLOCK: a FIFO made there meanwhile refuses a writer without a
	// reader at once.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return fmt.Errorf("touch: %w", err)
	}
	return f.Close()
}

// The agent's bounds in a sandbox whose process table may fill (a fork
// bomb), where its threads count too: Go's runtime ends a process that
// needs a thread it cannot make. The agent runs on at most maxProcs
// processors and at most outputOps outputs streams and touchOps touches at
// once (each blocking file call holds a thread), and makes threadReserve
// threads at its start, which the runtime keeps idle for later: enough
// for those, its blocking reads and writes of the exec's pipes, the
// network poller's wait and a few more. Other blocking calls beyond them
// (many control socket listens at once) may still need a thread then.
const (
	maxProcs      = 4
	outputOps     = 2
	touchOps      = 1
	threadReserve = maxProcs + outputOps + touchOps + 5
)

// PrepareProcess readies the agent's process for a sandbox whose process
// table may fill, before Serve: relaying needs few processors (each one
// the runtime runs on is a thread a full table may not let it make), and
// the threads it will need are made now, while there is room.
func PrepareProcess() {
	runtime.GOMAXPROCS(min(runtime.GOMAXPROCS(0), maxProcs)) // set, so never raised later
	reserveThreads(threadReserve)
}

// reserveThreads has the runtime make n threads now, which it then keeps
// idle for later use: n goroutines each hold a thread of their own
// (LockOSThread) until all hold one, then let go.
func reserveThreads(n int) {
	var held, release sync.WaitGroup
	release.Add(1)
	for range n {
		held.Add(1)
		go func() {
			runtime.LockOSThread()
			held.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	held.Wait()
	release.Done()
}
