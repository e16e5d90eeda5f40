package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// Where the agent cannot run (no sandbox-ctl build for the sandbox's
// machine, a binary the sandbox cannot execute), a connection falls back
// to one engine exec of a relay per connection: slower to open (an exec
// start each time) but it needs nothing of the sandbox beyond python3, nc
// or socat.

// relayScript connects its stdio to 127.0.0.1:$1 in the sandbox, passing
// a half-close on where the tool can.
const relayScript = `p="$1"
if command -v python3 >/dev/null 2>&1; then exec python3 -c '
import os, socket, sys, threading
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def up():
    while True:
        b = os.read(0, 65536)
        if not b:
            break
        s.sendall(b)
    s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=up, daemon=True)
t.start()
while True:
    b = s.recv(65536)
    if not b:
        break
    v = memoryview(b)
    while v:
        v = v[os.write(1, v):]
os.close(1)
t.join()
' "$p"; fi
if command -v nc >/dev/null 2>&1; then
  if nc -h 2>&1 | grep -q -e ' -N'; then exec nc -N 127.0.0.1 "$p"; fi
  exec nc 127.0.0.1 "$p"
fi
if command -v socat >/dev/null 2>&1; then exec socat - "TCP:127.0.0.1:$p"; fi
echo "no python3, nc or socat in the sandbox to reach port $p" >&2
exit 127
`

// ViaAgent and ViaExec name the path a connection takes into a sandbox.
const (
	ViaAgent = "agent"
	ViaExec  = "exec"
)

// Via reports the path a connection from Dial takes: ViaAgent or ViaExec.
func Via(c net.Conn) string {
	if v, ok := c.(interface{ Via() string }); ok {
		return v.Via()
	}
	return ""
}

// maxExecConns bounds the connections one sandbox serves through execs
// at once. Each holds an engine exec, a process or two on the host: a
// client that opens connections in a loop must not start hundreds. A dial
// past the bound waits for a connection to close, as long as its context
// allows.
const maxExecConns = 32

// execSlots is a sandbox's count of open connections through execs.
type execSlots struct {
	once sync.Once
	c    chan struct{}
}

// take waits for a free slot; the caller gives it back with put.
func (s *execSlots) take(ctx context.Context) error {
	s.once.Do(func() { s.c = make(chan struct{}, maxExecConns) })
	// A free slot is taken even when ctx has ended: a select with both
	// ready would pick either at random.
	select {
	case s.c <- struct{}{}:
		return nil
	default:
	}
	select {
	case s.c <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("all %d connections through an exec are open (the agent cannot run in this sandbox): %w", maxExecConns, context.Cause(ctx))
	}
}

func (s *execSlots) put() { <-s.c }

// dialExec connects to port in sb through one exec of relayScript.
func (m *Manager) dialExec(ctx context.Context, sb *Sandbox, port int) (net.Conn, error) {
	if err := sb.execConns.take(ctx); err != nil {
		return nil, err
	}
	c, err := m.startRelay(sb, port, sb.execConns.put)
	if err != nil {
		sb.execConns.put()
		return nil, err
	}
	return c, nil
}

// startRelay starts relayScript for port in sb; ended runs once the exec
// has ended.
func (m *Manager) startRelay(sb *Sandbox, port int, ended func()) (*execConn, error) {
	cmd := m.rt.ExecCommand(sb.life, sb.own.target(), ExecSpec{
		Argv: []string{"sh", "-c", relayScript, "sh", strconv.Itoa(port)}, Interactive: true})
	stdin, stdout, err := proc.Piped(cmd, io.Discard)
	if err != nil {
		return nil, err
	}
	c := &execConn{cmd: cmd, stdin: stdin, stdout: stdout, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		ended()
		close(c.exited)
	}()
	return c, nil
}

// execConn is a net.Conn over an exec's stdio.
type execConn struct {
	cmd    proc.Process
	stdin  io.WriteCloser
	stdout io.ReadCloser
	exited chan struct{}
	once   sync.Once
}

func (c *execConn) Read(p []byte) (int, error)  { return c.stdout.Read(p) }
func (c *execConn) Write(p []byte) (int, error) { return c.stdin.Write(p) }

// CloseWrite ends the exec's stdin: the relay half-closes its connection.
func (c *execConn) CloseWrite() error { return c.stdin.Close() }

// Close ends the exec.
func (c *execConn) Close() error {
	c.once.Do(func() {
		c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(100 * time.Millisecond):
			_ = c.cmd.Kill()
			<-c.exited
		}
		c.stdout.Close()
	})
	return nil
}

func (c *execConn) Via() string          { return ViaExec }
func (c *execConn) LocalAddr() net.Addr  { return execAddr{} }
func (c *execConn) RemoteAddr() net.Addr { return execAddr{} }

var errNoDeadline = errors.New("a connection through an exec has no deadlines")

func (c *execConn) SetDeadline(time.Time) error      { return errNoDeadline }
func (c *execConn) SetReadDeadline(time.Time) error  { return errNoDeadline }
func (c *execConn) SetWriteDeadline(time.Time) error { return errNoDeadline }

type execAddr struct{}

func (execAddr) Network() string { return "exec" }
func (execAddr) String() string  { return "exec" }
