package portfwd

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
)

// stallingAgent answers the hello, then accepts every other stream and
// never replies (a wedged, paused or hostile agent).
func stallingAgent(t *testing.T) *agent.Client {
	t.Helper()
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	go func() {
		cfg := yamux.DefaultConfig()
		cfg.LogOutput = io.Discard
		cfg.EnableKeepAlive = false
		sess, err := yamux.Server(struct {
			io.Reader
			io.Writer
			io.Closer
		}{toAgentR, fromAgentW, io.NopCloser(nil)}, cfg)
		if err != nil {
			return
		}
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		bufio.NewReader(st).ReadString('\n')
		b, _ := json.Marshal(agent.Reply{OK: true, Version: agent.Version})
		st.Write(append(b, '\n'))
		st.Close()
		for {
			if _, err := sess.AcceptStream(); err != nil {
				return
			}
		}
	}()
	c, err := agent.NewClient(fromAgentR, toAgentW, func() error { toAgentW.Close(); return fromAgentR.Close() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestUnexposeEndsADialIntoAStalledAgent: a connection being opened
// through an agent that never answers (wedged, paused or hostile) does not
// hold unexpose (nor destroy, which drops forwards under the sandbox's
// lock) for the agent's 30 s reply timeout: the dial ends with its context.
func TestUnexposeEndsADialIntoAStalledAgent(t *testing.T) {
	c := stallingAgent(t)
	dialing := make(chan struct{}, 1)
	s := New(Options{Dial: func(ctx context.Context, _ string, port int) (net.Conn, error) {
		dialing <- struct{}{}
		return c.Dial(ctx, port) // what sandbox.Manager.Dial does with the agent
	}})
	info, _, err := s.Expose("box", 8000, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(info.HostPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	<-dialing
	done := make(chan struct{})
	start := time.Now()
	go func() { s.Unexpose("box", 8000); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // the reply timeout is 30 s
		t.Fatalf("unexpose still blocked after %v: a dial into the sandbox in progress holds it", time.Since(start).Round(time.Second))
	}
}
