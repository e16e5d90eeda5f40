package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
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
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			if sess.IsClosed() {
				return nil
			}
			return err
		}
		go handle(st)
	}
}

// handle answers one stream's request.
func handle(st *yamux.Stream) {
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
	default:
		_ = writeJSON(st, Reply{Error: "unknown op " + strconv.Quote(req.Op)})
		st.Close()
	}
}

// yamuxServer starts the agent's session (tests use it to play other
// agents).
func yamuxServer(r io.Reader, w io.Writer) (*yamux.Session, error) {
	return yamux.Server(pipeConn{Reader: r, Writer: w, close: func() error { return nil }}, config())
}
