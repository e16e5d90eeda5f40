package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Serve runs the agent's end of a session over r and w (the stdio of
// `sandbox-ctl agent`) until the server goes away.
func Serve(r io.Reader, w io.Writer) error {
	sess, err := yamux.Server(pipeConn{Reader: r, Writer: &joinWriter{w: w}, close: func() error { return nil }}, config())
	if err != nil {
		return err
	}
	defer sess.Close()
	a := &agentState{sess: sess, listening: map[string]bool{}}
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
	case OpCtlListen:
		err := a.listenCtl(req.Path)
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
// carried to the server as a stream of its own. A socket left by an
// earlier agent is replaced.
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
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	// Every process of the sandbox may ask: the sandbox is one party.
	_ = os.Chmod(path, 0o666)
	a.listening[path] = true
	go func() {
		defer ln.Close()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go a.relayCtl(c)
		}
	}()
	go func() { <-a.sess.CloseChan(); ln.Close() }()
	return nil
}

// relayCtl carries one control connection to the server.
func (a *agentState) relayCtl(c net.Conn) {
	st, err := a.sess.OpenStream()
	if err != nil {
		c.Close()
		return
	}
	if err := writeJSON(st, Request{Op: OpCtl}); err != nil {
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
