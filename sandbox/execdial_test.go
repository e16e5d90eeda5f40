package sandbox

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// relayRT runs every exec as `cat`, a relay that answers what it is sent,
// and counts the execs it started.
type relayRT struct {
	fakeRT
	started atomic.Int32
}

func (r *relayRT) ExecCommand(ctx context.Context, name string, spec ExecSpec) proc.Process {
	r.started.Add(1)
	return proc.FromCmd(exec.CommandContext(ctx, "cat"))
}

// TestExecConnectionsAreBounded: where connections go through an exec
// each, a client that keeps opening them gets maxExecConns execs at once;
// the next dial waits for one to close, and gives up with its context.
func TestExecConnectionsAreBounded(t *testing.T) {
	if _, err := exec.LookPath("cat"); err != nil {
		t.Skip("no cat on this host")
	}
	rt := &relayRT{}
	m := &Manager{rt: rt}
	life, end := context.WithCancel(context.Background())
	defer end()
	sb := &Sandbox{Name: "s", life: life, own: &owner{ctr: "c"}}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range maxExecConns {
		c, err := m.dialExec(context.Background(), sb, 80)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// The connections carry data.
	if _, err := conns[0].Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := conns[0].Read(buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if c, err := m.dialExec(ctx, sb, 80); err == nil {
		c.Close()
		t.Fatalf("dial %d went through: %d execs started", maxExecConns+1, rt.started.Load())
	} else if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connections through an exec are open") {
		t.Fatalf("dial past the bound: %v", err)
	}
	if n := rt.started.Load(); n != maxExecConns {
		t.Fatalf("%d execs started, want %d", n, maxExecConns)
	}

	// One closes: a waiting dial gets its slot.
	type dialed struct {
		c   net.Conn
		err error
	}
	got := make(chan dialed, 1)
	go func() {
		c, err := m.dialExec(context.Background(), sb, 80)
		got <- dialed{c, err}
	}()
	conns[1].Close()
	select {
	case d := <-got:
		if d.err != nil {
			t.Fatal(d.err)
		}
		conns = append(conns, d.c)
	case <-time.After(time.Minute):
		t.Fatal("a dial waiting for a slot did not get the one a close gave back")
	}
}
