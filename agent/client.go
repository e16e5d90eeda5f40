package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
)

// Client is the server's end of a session.
type Client struct {
	sess *yamux.Session
}

// replyTimeout bounds the wait for the agent's reply to a request (a
// dial included: the agent gives up on a port after 10 s). A variable for
// tests.
var replyTimeout = 30 * time.Second

// ErrStale marks an agent that answered the hello with another version.
var ErrStale = errors.New("the agent in the sandbox is of another version")

// NewClient starts a session over r (the agent's stdout) and w (its
// stdin); closeFn ends the agent. It checks the agent's version.
func NewClient(r io.Reader, w io.Writer, closeFn func() error) (*Client, error) {
	sess, err := yamux.Client(pipeConn{Reader: &pingFilter{r: r}, Writer: &joinWriter{w: w}, close: closeFn}, config())
	if err != nil {
		return nil, err
	}
	c := &Client{sess: sess}
	st, rep, err := c.open(context.Background(), Request{Op: OpHello})
	if err != nil {
		sess.Close()
		return nil, err
	}
	st.Close()
	if rep.Version != Version {
		sess.Close()
		return nil, fmt.Errorf("%w: it speaks %q, this server %q", ErrStale, rep.Version, Version)
	}
	return c, nil
}

// open opens a stream, sends req and reads the reply; the stream is the
// caller's to close. When ctx ends first, the stream is closed and the
// session kept: the caller gave up, which says nothing of the agent.
func (c *Client) open(ctx context.Context, req Request) (net.Conn, Reply, error) {
	if err := ctx.Err(); err != nil {
		return nil, Reply{}, err
	}
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, Reply{}, fmt.Errorf("agent: open a stream: %w", err)
	}
	// An agent that does not answer (a hung or replaced binary) must not
	// hold the caller forever.
	_ = st.SetDeadline(time.Now().Add(replyTimeout))
	stop := context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Now()) })
	defer stop()
	if err := writeJSON(st, req); err != nil {
		st.Close()
		if ctx.Err() != nil {
			return nil, Reply{}, ctx.Err()
		}
		return nil, Reply{}, fmt.Errorf("agent: %w", err)
	}
	br := bufio.NewReader(st)
	rep, err := readReply(br)
	if err != nil {
		st.Close()
		if ctx.Err() != nil {
			return nil, rep, ctx.Err()
		}
		// An agent that does not answer in time is wedged (or its exec
		// is gone without the engine saying so): end the session, so
		// that the next stream starts a new agent.
		c.sess.Close()
		return nil, rep, err
	}
	if !stop() { // ctx ended as the reply came: the deadline may be set
		st.Close()
		return nil, rep, ctx.Err()
	}
	_ = st.SetDeadline(time.Time{})
	return bufferedConn{Conn: st, r: br}, rep, nil
}

// Dial connects to 127.0.0.1:port inside the sandbox, as one stream,
// giving up when ctx ends.
func (c *Client) Dial(ctx context.Context, port int) (net.Conn, error) {
	conn, rep, err := c.open(ctx, Request{Op: OpDial, Port: port})
	if err != nil {
		return nil, err
	}
	if !rep.OK {
		conn.Close()
		if strings.Contains(rep.Error, "connection refused") {
			return nil, fmt.Errorf("port %d in the sandbox: %s: %w", port, rep.Error, ErrPortClosed)
		}
		return nil, fmt.Errorf("port %d in the sandbox: %s", port, rep.Error)
	}
	return conn, nil
}

// Touch asks the agent to mark the file at path (absolute) as modified
// now, making it when missing; see OpTouch.
func (c *Client) Touch(ctx context.Context, path string) error {
	conn, rep, err := c.open(ctx, Request{Op: OpTouch, Path: path})
	if err != nil {
		return err
	}
	conn.Close()
	if !rep.OK {
		return fmt.Errorf("touch %s in the sandbox: %s", path, textLimit(rep.Error, 300))
	}
	return nil
}

// ErrPortClosed marks a dial the sandbox refused: nothing listens on the
// port (yet).
var ErrPortClosed = errors.New("nothing listens there")

// ListenCtl asks the agent to serve the control socket at path in the
// sandbox; Accept then hands over its connections.
func (c *Client) ListenCtl(path string) error {
	conn, rep, err := c.open(context.Background(), Request{Op: OpCtlListen, Path: path})
	if err != nil {
		return err
	}
	conn.Close()
	if !rep.OK {
		return fmt.Errorf("control socket %s in the sandbox: %s", path, rep.Error)
	}
	return nil
}

// maxPending bounds the streams from the agent whose first line is not
// read yet: a sandbox that opens streams and sends nothing holds little.
const maxPending = 64

// headerTimeout bounds the wait for the first line of a stream the agent
// opens.
const headerTimeout = 10 * time.Second

// ListenEgress asks the agent to serve the sandbox's proxy on
// 127.0.0.1:port; ServeStreams then hands over its connections. When
// channel is set (a unix socket the server listens on, as the sandbox sees
// it), the agent hands each connection's descriptor there instead (the
// server takes it with TakeConn), and carries it as a stream when the
// channel refuses it. An error that the port is in use still
// leaves the agent waiting to take it.
func (c *Client) ListenEgress(port int, channel string) error {
	conn, rep, err := c.open(context.Background(), Request{Op: OpEgressListen, Port: port, Path: channel})
	if err != nil {
		return err
	}
	conn.Close()
	if !rep.OK {
		return fmt.Errorf("proxy on 127.0.0.1:%d in the sandbox: %s", port, rep.Error)
	}
	return nil
}

// ServeCtl is ServeStreams for control connections alone.
func (c *Client) ServeCtl(handle func(net.Conn)) {
	c.ServeStreams(map[string]func(net.Conn){OpCtl: handle})
}

// ServeStreams hands each stream the agent opens to the handler of its
// first line's op (OpCtl, OpEgress), until the session ends. A stream
// whose first line does not come in time, or names an op without a
// handler, ends the session: that is not the agent this server installed.
func (c *Client) ServeStreams(handlers map[string]func(net.Conn)) {
	pending := make(chan struct{}, maxPending)
	go func() {
		for {
			st, err := c.sess.AcceptStream()
			if err != nil {
				return
			}
			// The agent opens a stream per connection and writes its
			// first line at once. One whose streams stay without it (no
			// slot frees within headerTimeout) is not the agent this
			// server installed: end the session. (A stream closed alone
			// would keep what was sent into its window for a minute:
			// closing streams one by one would not bound the memory.) A
			// burst of real connections waits here for a slot.
			select {
			case pending <- struct{}{}:
			case <-time.After(headerTimeout):
				st.Close()
				c.sess.Close()
				return
			}
			go func() {
				_ = st.SetReadDeadline(time.Now().Add(headerTimeout))
				br := bufio.NewReader(st)
				line, err := readLine(br)
				<-pending
				var req Request
				if err != nil || json.Unmarshal(line, &req) != nil {
					st.Close()
					c.sess.Close()
					return
				}
				handle, ok := handlers[req.Op]
				if !ok {
					st.Close()
					if req.Op != OpCtl && req.Op != OpEgress {
						c.sess.Close()
					}
					return
				}
				_ = st.SetReadDeadline(time.Time{})
				handle(bufferedConn{Conn: st, r: br})
			}()
		}
	}()
}

// pingFilter passes the agent's yamux frames on, except pings. Neither
// end sends keepalives, so the agent this server installed never pings;
// yamux answers each ping from its own goroutine, so a sandbox that sent
// pings and stopped reading would grow the server's goroutines without
// bound.
type pingFilter struct {
	r    io.Reader
	hdr  [headerSize]byte
	out  []byte // the rest of a header to pass on
	body int64  // the rest of a data frame's body to pass on
}

func (f *pingFilter) Read(p []byte) (int, error) {
	for {
		if len(f.out) > 0 {
			n := copy(p, f.out)
			f.out = f.out[n:]
			return n, nil
		}
		if f.body > 0 {
			if int64(len(p)) > f.body {
				p = p[:f.body]
			}
			n, err := f.r.Read(p)
			f.body -= int64(n)
			return n, err
		}
		if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
			return 0, err
		}
		switch f.hdr[1] {
		case typePing:
			continue
		case typeData:
			f.body = int64(binary.BigEndian.Uint32(f.hdr[8:]))
		}
		f.out = f.hdr[:]
	}
}

// Done is closed when the session ends (the agent or its exec died).
func (c *Client) Done() <-chan struct{} { return c.sess.CloseChan() }

// Close ends the session and the agent.
func (c *Client) Close() error { return c.sess.Close() }
