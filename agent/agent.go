// Package agent is the channel between the server and a sandbox: one
// long-lived `exec -i sandbox-ctl agent` per sandbox whose stdio carries a
// yamux session, with one stream per independent exchange (a forwarded TCP
// connection today; terminals, file streams and the child-control socket
// can ride it later).
//
// The server opens every stream. A stream starts with one JSON line from
// the server (a Request) and one JSON line from the agent (a Reply); what
// follows depends on the request. The first stream of a session is a hello
// that tells the two versions apart, so that a stale agent is replaced.
//
// Everything the agent sends is untrusted on the host: replies are read
// through a bounded reader and decoded into fixed types.
package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Version is the protocol version; the server replaces an agent that
// answers the hello with another one.
const Version = "5"

// Operations a stream can ask for. The server opens streams for all but
// OpCtl, which the agent opens for each connection to the control socket.
const (
	OpHello     = "hello"      // answer with Version
	OpDial      = "dial"       // connect to 127.0.0.1:Port inside the sandbox, then splice
	OpCtlListen = "ctl-listen" // listen on the unix socket Path in the sandbox
	OpCtl       = "ctl"        // (from the agent) a connection to that socket follows
	// OpEgressListen asks the agent to serve the sandbox's proxy on
	// 127.0.0.1:Port; each connection to it reaches the server as an
	// OpEgress stream.
	OpEgressListen = "egress-listen"
	OpEgress       = "egress" // (from the agent) a connection to the proxy follows, raw
	// OpOutputs asks for the PNG files in the directory Path new or
	// changed since the file Stamp's time, or within the last Window
	// nanoseconds without one (see Client.Outputs).
	OpOutputs = "outputs"
	// OpTouch asks the agent to set the modification time of the file
	// Path to now, making it (empty) and its directory when missing,
	// without starting a process: the server's activity mark, which
	// then lands in a sandbox whose process table is full.
	OpTouch = "touch"
)

// Request opens a stream.
type Request struct {
	Op     string `json:"op"`
	Port   int    `json:"port,omitempty"`
	Path   string `json:"path,omitempty"`
	Stamp  string `json:"stamp,omitempty"`
	Window int64  `json:"window,omitempty"`
}

// Reply answers a Request.
type Reply struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	Version string `json:"version,omitempty"`
	// Omitted counts what an OpOutputs reply leaves out past MaxOutputs.
	Omitted int `json:"omitted,omitempty"`
}

// maxLine bounds a request or reply line.
const maxLine = 4096

// config is the yamux configuration of both ends: keepalives off (the
// exec's own end tells a dead agent), logs off.
func config() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.LogOutput = io.Discard
	c.StreamCloseTimeout = time.Minute
	// The exec between the two ends has a long round trip: a larger
	// window keeps a bulk stream moving (and bounds what one stream whose
	// reader stalls can hold).
	c.MaxStreamWindowSize = 1 << 20
	return c
}

// yamux writes a data frame as two writes, header then body; over an
// engine exec each write is relayed on its own. joinWriter holds a data
// frame's header and writes it with its body.
type joinWriter struct {
	w   io.Writer
	hdr []byte // a held data header, or nil
	buf []byte
}

const (
	headerSize = 12 // yamux: version, type, flags, stream ID, length
	typeData   = 0
	typePing   = 2
)

func (j *joinWriter) Write(p []byte) (int, error) {
	if j.hdr == nil {
		if len(p) == headerSize && p[1] == typeData && (p[8]|p[9]|p[10]|p[11]) != 0 {
			j.hdr = append(j.buf[:0], p...)
			return len(p), nil
		}
		return j.w.Write(p)
	}
	j.buf = append(j.hdr, p...)
	j.hdr = nil
	n, err := j.w.Write(j.buf)
	return max(n-headerSize, 0), err
}

// pipeConn joins a reader and a writer (an exec's stdout and stdin) into
// the io.ReadWriteCloser yamux runs on.
type pipeConn struct {
	io.Reader
	io.Writer
	close func() error
}

func (p pipeConn) Close() error { return p.close() }

// readLine reads one line of at most maxLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxLine {
			return nil, errors.New("agent: line too long")
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Splice copies a to b and b to a until both directions end, passing on a
// half-close in each direction, then closes both.
func Splice(a, b net.Conn) {
	var wg sync.WaitGroup
	one := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		closeWrite(dst)
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// closeWrite ends the write half of c: a TCP FIN, or a yamux stream's
// close (which leaves it readable until the other end closes too).
func closeWrite(c net.Conn) {
	switch c := c.(type) {
	case interface{ CloseWrite() error }:
		_ = c.CloseWrite()
	case *yamux.Stream:
		_ = c.Close()
	default:
		_ = c.Close()
	}
}

// readReply reads the agent's reply line on a fresh stream.
func readReply(r *bufio.Reader) (Reply, error) {
	line, err := readLine(r)
	if err != nil {
		return Reply{}, fmt.Errorf("agent reply: %w", err)
	}
	var rep Reply
	if err := json.Unmarshal(line, &rep); err != nil {
		return Reply{}, fmt.Errorf("agent reply: %w", err)
	}
	return rep, nil
}

// bufferedConn is a net.Conn whose first bytes were read into r.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite passes a half-close on to the stream underneath.
func (c bufferedConn) CloseWrite() error {
	closeWrite(c.Conn)
	return nil
}
