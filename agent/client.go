package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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
	sess, err := yamux.Client(pipeConn{Reader: r, Writer: &joinWriter{w: w}, close: closeFn}, config())
	if err != nil {
		return nil, err
	}
	c := &Client{sess: sess}
	st, rep, err := c.open(Request{Op: OpHello})
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
// caller's to close.
func (c *Client) open(req Request) (net.Conn, Reply, error) {
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, Reply{}, fmt.Errorf("agent: open a stream: %w", err)
	}
	// An agent that does not answer (a hung or replaced binary) must not
	// hold the caller forever.
	_ = st.SetDeadline(time.Now().Add(replyTimeout))
	if err := writeJSON(st, req); err != nil {
		st.Close()
		return nil, Reply{}, fmt.Errorf("agent: %w", err)
	}
	br := bufio.NewReader(st)
	rep, err := readReply(br)
	if err != nil {
		st.Close()
		// An agent that does not answer in time is wedged (or its exec
		// is gone without the engine saying so): end the session, so
		// that the next stream starts a new agent.
		c.sess.Close()
		return nil, rep, err
	}
	_ = st.SetDeadline(time.Time{})
	return bufferedConn{Conn: st, r: br}, rep, nil
}

// Dial connects to 127.0.0.1:port inside the sandbox, as one stream.
func (c *Client) Dial(port int) (net.Conn, error) {
	conn, rep, err := c.open(Request{Op: OpDial, Port: port})
	if err != nil {
		return nil, err
	}
	if !rep.OK {
		conn.Close()
		return nil, fmt.Errorf("port %d in the sandbox: %s", port, rep.Error)
	}
	return conn, nil
}

// ListenCtl asks the agent to serve the control socket at path in the
// sandbox; Accept then hands over its connections.
func (c *Client) ListenCtl(path string) error {
	conn, rep, err := c.open(Request{Op: OpCtlListen, Path: path})
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

// ServeCtl hands each connection to the sandbox's control socket to
// handle, until the session ends. Streams that do not open as a control
// connection in time are closed.
func (c *Client) ServeCtl(handle func(net.Conn)) {
	pending := make(chan struct{}, maxPending)
	go func() {
		for {
			st, err := c.sess.AcceptStream()
			if err != nil {
				return
			}
			select {
			case pending <- struct{}{}:
			default:
				st.Close()
				continue
			}
			go func() {
				_ = st.SetReadDeadline(time.Now().Add(headerTimeout))
				br := bufio.NewReader(st)
				line, err := readLine(br)
				<-pending
				var req Request
				if err != nil || json.Unmarshal(line, &req) != nil || req.Op != OpCtl {
					st.Close()
					return
				}
				_ = st.SetReadDeadline(time.Time{})
				handle(bufferedConn{Conn: st, r: br})
			}()
		}
	}()
}

// Done is closed when the session ends (the agent or its exec died).
func (c *Client) Done() <-chan struct{} { return c.sess.CloseChan() }

// Close ends the session and the agent.
func (c *Client) Close() error { return c.sess.Close() }
