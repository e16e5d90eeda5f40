package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pair runs Serve on one end of two pipes and returns the Client on the
// other.
func pair(t *testing.T) *Client {
	t.Helper()
	return clientOf(t, func(r io.Reader, w io.Writer) { _ = Serve(r, w) })
}

// clientOf runs agent on one end of two pipes and returns the Client on
// the other, closed when the test ends.
func clientOf(t *testing.T, agent func(r io.Reader, w io.Writer)) *Client {
	t.Helper()
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	go agent(toAgentR, fromAgentW)
	c, err := NewClient(fromAgentR, toAgentW, func() error {
		toAgentW.Close()
		return fromAgentR.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// listen starts a TCP server on 127.0.0.1 that runs serve per connection.
func listen(t *testing.T, serve func(net.Conn)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func TestDialCarriesBinaryAndHalfClose(t *testing.T) {
	c := pair(t)
	// The server reads to EOF, then answers with what it read, reversed
	// in order of halves: it needs the client's half-close to answer.
	port := listen(t, func(conn net.Conn) {
		defer conn.Close()
		in, _ := io.ReadAll(conn)
		conn.Write(in[len(in)/2:])
		conn.Write(in[:len(in)/2])
	})
	data := make([]byte, 3<<20)
	rand.Read(data)
	conn, err := c.Dial(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		conn.Write(data)
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	conn.SetDeadline(time.Now().Add(time.Minute))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, data[len(data)/2:]...), data[:len(data)/2]...)
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, not what was sent", len(got))
	}
}

func TestDialServerSpeaksFirstAndStreamsAreIndependent(t *testing.T) {
	c := pair(t)
	port := listen(t, func(conn net.Conn) {
		defer conn.Close()
		conn.Write([]byte("220 hello\n"))
		io.Copy(conn, conn)
	})
	var conns []net.Conn
	for i := 0; i < 20; i++ {
		conn, err := c.Dial(context.Background(), port)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
	}
	for i, conn := range conns {
		conn.SetDeadline(time.Now().Add(time.Minute))
		buf := make([]byte, 10)
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "220 hello\n" {
			t.Fatalf("stream %d greeting: %q %v", i, buf, err)
		}
		msg := []byte(strings.Repeat("x", i+1))
		conn.Write(msg)
		back := make([]byte, len(msg))
		if _, err := io.ReadFull(conn, back); err != nil || !bytes.Equal(back, msg) {
			t.Fatalf("stream %d echo: %q %v", i, back, err)
		}
	}
}

func TestDialRefusedPortAndBadPort(t *testing.T) {
	c := pair(t)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if _, err := c.Dial(context.Background(), port); !errors.Is(err, ErrPortClosed) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a closed port: %v", err)
	}
	if _, err := c.Dial(context.Background(), 70000); err == nil || errors.Is(err, ErrPortClosed) || !strings.Contains(err.Error(), "not a TCP port") {
		t.Fatalf("port 70000: %v", err)
	}
}

func TestStaleAgentIsTold(t *testing.T) {
	// An "agent" that answers the hello with another version.
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	go func() {
		sess, err := yamuxServer(toAgentR, fromAgentW)
		if err != nil {
			return
		}
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		buf := make([]byte, 100)
		st.Read(buf)
		writeJSON(st, Reply{OK: true, Version: "0"})
		st.Close()
	}()
	_, err := NewClient(fromAgentR, toAgentW, func() error { toAgentW.Close(); return fromAgentR.Close() })
	if err == nil || !strings.Contains(err.Error(), "another version") {
		t.Fatalf("a stale agent: %v", err)
	}
}

func TestGoArch(t *testing.T) {
	for m, want := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": ""} {
		if got := GoArch(m); got != want {
			t.Errorf("GoArch(%q) = %q, want %q", m, got, want)
		}
	}
}

func TestSilentAgentIsGivenUpOn(t *testing.T) {
	defer func(d time.Duration) { replyTimeout = d }(replyTimeout)
	replyTimeout = 300 * time.Millisecond
	// An "agent" that accepts the session but never answers.
	toAgentR, toAgentW := io.Pipe()
	fromAgentR, fromAgentW := io.Pipe()
	go func() {
		sess, err := yamuxServer(toAgentR, fromAgentW)
		if err != nil {
			return
		}
		for {
			if _, err := sess.AcceptStream(); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	_, err := NewClient(fromAgentR, toAgentW, func() error { toAgentW.Close(); return fromAgentR.Close() })
	if err == nil {
		t.Fatal("a silent agent was accepted")
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("gave up after %v", took)
	}
}

// TestCtlRelay: each connection to the control socket in the sandbox
// reaches the server's handler as a stream of its own, both ways; a
// socket left by an earlier agent is replaced; a relative path is refused.
func TestCtlRelay(t *testing.T) {
	c := pair(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "ctl.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	old, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	old.(*net.UnixListener).SetUnlinkOnClose(false)
	old.Close() // a dead socket left behind
	if err := c.ListenCtl("run/ctl.sock"); err == nil {
		t.Fatal("a relative socket path was accepted")
	}
	if err := c.ListenCtl(sock); err != nil {
		t.Fatal(err)
	}
	if err := c.ListenCtl(sock); err != nil {
		t.Fatalf("asking again: %v", err)
	}
	c.ServeCtl(func(conn net.Conn) {
		defer conn.Close()
		line := make([]byte, 6)
		if _, err := io.ReadFull(conn, line); err != nil {
			return
		}
		conn.Write([]byte(strings.ToUpper(string(line))))
	})
	for i := range 20 {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		conn.Write([]byte("hello\n"))
		got, err := io.ReadAll(conn)
		conn.Close()
		if string(got) != "HELLO\n" {
			t.Fatalf("connection %d: %q %v", i, got, err)
		}
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket mode: %v %v", fi, err)
	}
}

// TestCtlSocketPassesBetweenAgents: two servers' agents in one sandbox
// share the control socket: one holds it, and when its session ends the
// other takes it over.
func TestCtlSocketPassesBetweenAgents(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	echo := func(tag string) func(net.Conn) {
		return func(conn net.Conn) {
			defer conn.Close()
			conn.Write([]byte(tag))
		}
	}
	first, second := pair(t), pair(t)
	for i, c := range []*Client{first, second} {
		if err := c.ListenCtl(sock); err != nil {
			t.Fatal(err)
		}
		c.ServeCtl(echo([]string{"first", "second"}[i]))
	}
	ask := func() string {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return err.Error()
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(conn)
		return string(b)
	}
	if got := ask(); got != "first" {
		t.Fatalf("while the first agent holds it: %q", got)
	}
	first.Close()
	deadline := time.Now().Add(15 * time.Second)
	for got := ask(); got != "second"; got = ask() {
		if time.Now().After(deadline) {
			t.Fatalf("the second agent did not take the socket over: %q", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEgressRelayPassesBetweenAgents: connections to the proxy port reach
// the server raw; a second agent waits for the port and takes it over
// when the first one's session ends; a stream with an op the server has
// no handler for is closed without harm.
func TestEgressRelayPassesBetweenAgents(t *testing.T) {
	port := freePort(t)
	first, second := pair(t), pair(t)
	if err := first.ListenEgress(0, ""); err == nil {
		t.Fatal("port 0 was accepted")
	}
	if err := first.ListenEgress(port, ""); err != nil {
		t.Fatal(err)
	}
	first.ServeStreams(map[string]func(net.Conn){OpEgress: tagged("first")})
	if err := second.ListenEgress(port, ""); err == nil || !strings.Contains(err.Error(), "taken over once free") {
		t.Fatalf("a second agent on a taken port: %v", err)
	}
	second.ServeStreams(map[string]func(net.Conn){OpEgress: tagged("second")})
	ask := func() string { return askProxy(port) }
	if got := ask(); got != "first:ping" {
		t.Fatalf("through the first agent: %q", got)
	}
	first.Close()
	deadline := time.Now().Add(15 * time.Second)
	for got := ask(); got != "second:ping"; got = ask() {
		if time.Now().After(deadline) {
			t.Fatalf("the second agent did not take the port over: %q", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEgressWaitsForADyingHolder: an agent whose proxy port is held by
// one on its way out (a dead server's) waits for the port before it
// replies, so the first connection after the reply reaches it.
func TestEgressWaitsForADyingHolder(t *testing.T) {
	port := freePort(t)
	first, second := pair(t), pair(t)
	if err := first.ListenEgress(port, ""); err != nil {
		t.Fatal(err)
	}
	first.ServeStreams(map[string]func(net.Conn){OpEgress: tagged("first")})
	second.ServeStreams(map[string]func(net.Conn){OpEgress: tagged("second")})
	go func() {
		time.Sleep(300 * time.Millisecond)
		first.Close()
	}()
	if err := second.ListenEgress(port, ""); err != nil {
		t.Fatalf("a port freed within the wait: %v", err)
	}
	if got := askProxy(port); got != "second:ping" {
		t.Fatalf("the first connection after the reply: %q", got)
	}
}

// TestEgressRelayPrefersChannel: with a channel, a proxy connection is
// handed to the server over its unix socket and not carried through the
// session; once the
// socket refuses, connections go as streams again. A channel that is not
// an absolute path is refused.
func TestEgressRelayPrefersChannel(t *testing.T) {
	port := freePort(t)
	sock := filepath.Join(t.TempDir(), "e.s")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			go func() {
				tc, err := TakeConn(c.(*net.UnixConn), 5*time.Second)
				c.Close()
				if err == nil {
					tagged("channel")(tc)
				}
			}()
		}
	}()
	c := pair(t)
	if err := c.ListenEgress(port, "relative.s"); err == nil {
		t.Fatal("a relative channel was accepted")
	}
	if err := c.ListenEgress(port, sock); err != nil {
		t.Fatal(err)
	}
	c.ServeStreams(map[string]func(net.Conn){OpEgress: tagged("stream")})
	ask := func() string { return askProxy(port) }
	if got := ask(); got != "channel:ping" {
		t.Fatalf("with the channel up: %q", got)
	}
	ul.Close()
	if got := ask(); got != "stream:ping" {
		t.Fatalf("with the channel gone: %q", got)
	}
}

// freePort is a TCP port of the loopback nothing listens on just now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tagged answers a connection's first four bytes with them behind tag.
func tagged(tag string) func(net.Conn) {
	return func(conn net.Conn) {
		defer conn.Close()
		line := make([]byte, 4)
		if _, err := io.ReadFull(conn, line); err != nil {
			return
		}
		conn.Write([]byte(tag + ":" + string(line)))
	}
}

// askProxy sends "ping" to the proxy port and returns the whole answer,
// or the dial's error.
func askProxy(port int) string {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	conn.Write([]byte("ping"))
	b, _ := io.ReadAll(conn)
	return string(b)
}

// TestTouchMarksAFile: the touch makes a missing file and its directory,
// moves an existing one's modification time to now, sets a FIFO's without
// waiting for a reader, and refuses a path that is not absolute and
// clean, making nothing.
func TestTouchMarksAFile(t *testing.T) {
	c := pair(t)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "active")
	if err := c.Touch(ctx, path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 0 {
		t.Fatalf("after a touch of a missing file: %v %v", fi, err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if err := c.Touch(ctx, path); err != nil {
		t.Fatal(err)
	}
	if fi, err = os.Stat(path); err != nil || !fi.ModTime().After(old) {
		t.Fatalf("an hour-old file touched: %v %v", fi, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(fifo, old, old); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute) // a hang is the failure
	defer cancel()
	if err := c.Touch(tctx, fifo); err != nil {
		t.Fatalf("touch a FIFO: %v", err)
	}
	if fi, err = os.Stat(fifo); err != nil || !fi.ModTime().After(old) {
		t.Fatalf("a FIFO touched: %v %v", fi, err)
	}
	for _, bad := range []string{"", "relative/active", dir + "/x/../active", dir + "//active", "/"} {
		if err := c.Touch(ctx, bad); err == nil || !strings.Contains(err.Error(), "absolute clean path") {
			t.Fatalf("touch %q: %v", bad, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "active")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused touch made a file: %v", err)
	}
}
