package e2e

import (
	"bytes"
	"crypto/rand"
	"debug/elf"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// portsServer is a TCP server for the sandbox: it greets first, then reads
// to EOF and answers with what it read, reversed by halves (so it needs
// the client's half-close to answer), then closes.
const portsServer = `import socket, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8766))
s.listen(64)
def serve(c):
    c.sendall(b"220 ready\n")
    data = b""
    while True:
        d = c.recv(65536)
        if not d:
            break
        data += d
    h = len(data) // 2
    c.sendall(data[h:] + data[:h])
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,)).start()
`

// dialGreeting waits until a connection to addr gets portsServer's
// greeting, and returns it, read up to the greeting. One try's reads are
// bounded so that a try that hangs gives way to the next; the returned
// connection's, by the hang guard.
func dialGreeting(t *testing.T, what, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	enginetest.WaitFor(t, what, func() error {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		conn.SetDeadline(time.Now().Add(time.Minute))
		greet := make([]byte, 10)
		if _, err := io.ReadFull(conn, greet); err != nil || string(greet) != "220 ready\n" {
			conn.Close()
			return fmt.Errorf("greeting %q, %v", greet, err)
		}
		conn.SetDeadline(time.Now().Add(enginetest.HangGuard))
		c = conn
		return nil
	})
	return c
}

// TestPorts: expose forwards a host port to a web server in the sandbox
// (many connections, each one stream of the agent); a server that speaks
// first and one that reads to EOF get binary data through exactly, with
// the half-close carried; list_ports counts the connections; unexpose
// closes the host port; bad ports are refused.
func TestPorts(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "", "--toolsets", "all")
			if r := s.call(t, "write_file", map[string]any{"path": "/tmp/ports.py", "content": portsServer}); r.isError {
				t.Fatal(r.text)
			}
			for _, cmd := range []string{
				"mkdir -p /tmp/www && echo hello-ports >/tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8765 --bind 127.0.0.1",
				"exec python3 /tmp/ports.py",
			} {
				if r := s.call(t, "bg", map[string]any{"command": cmd}); r.isError {
					t.Fatal(r.text)
				}
			}
			r := s.call(t, "expose", map[string]any{"port": 8765})
			if r.isError || !strings.HasPrefix(r.str("url"), "http://127.0.0.1:") || r.str("via") != "agent" {
				t.Fatalf("expose: %s", r.text)
			}
			url := r.str("url")
			client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
			get := func() (string, error) {
				resp, err := client.Get(url + "/index.html")
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return string(b), err
			}
			enginetest.WaitFor(t, "the web server through the forward", func() error {
				if body, err := get(); body != "hello-ports\n" {
					return fmt.Errorf("GET %s: %q %v", url, body, err)
				}
				return nil
			})
			for i := range 30 {
				if body, err := get(); body != "hello-ports\n" {
					t.Fatalf("GET %d: %q %v", i, body, err)
				}
			}

			if r := s.call(t, "status", map[string]any{}); r.isError || !strings.Contains(r.text, "port 8765 exposed at "+url) {
				t.Fatalf("status does not show the forward: %s", r.text)
			}
			r = s.call(t, "expose", map[string]any{"port": 8766})
			if r.isError {
				t.Fatal(r.text)
			}
			addr := strings.TrimPrefix(r.str("url"), "http://")
			if again := s.call(t, "expose", map[string]any{"port": 8766}); again.isError || again.str("url") != r.str("url") ||
				!strings.Contains(again.text, "already exposed") || strings.Contains(again.text, "taken") {
				t.Fatalf("expose again: %s", again.text)
			}
			data := make([]byte, 1<<20)
			rand.Read(data)
			c := dialGreeting(t, "the greeting server", addr)
			go func() {
				c.Write(data)
				c.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			c.Close()
			if want := append(append([]byte{}, data[len(data)/2:]...), data[:len(data)/2]...); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("binary round trip: %d bytes back, %v", len(got), err)
			}

			r = s.call(t, "list_ports", map[string]any{})
			if r.isError || !strings.Contains(r.text, fmt.Sprintf("%q:8765", "default")) || !strings.Contains(r.text, ":8766") {
				t.Fatalf("list_ports: %s", r.text)
			}
			if r := s.call(t, "unexpose", map[string]any{"port": 8765}); r.isError || r.num("connections") < 31 {
				t.Fatalf("unexpose: %s", r.text)
			}
			if _, err := get(); err == nil {
				t.Fatal("the host port still answers after unexpose")
			}
			for _, tc := range []struct {
				tool string
				args map[string]any
				want string
			}{
				{"expose", map[string]any{"port": 0}, "port"},
				{"expose", map[string]any{"port": 70000}, "port"},
				{"expose", map[string]any{"port": 8000, "host_port": 22}, "below 1024"},
				{"expose", map[string]any{"port": 8000, "host_port": 1023}, "below 1024"},
				{"expose", map[string]any{"port": 8000, "host_port": 65536}, "host_port"},
				{"unexpose", map[string]any{"port": 8765}, "not forwarded"},
			} {
				if r := s.call(t, tc.tool, tc.args); !r.isError || !strings.Contains(r.text, tc.want) {
					t.Errorf("%s %v: %s", tc.tool, tc.args, r.text)
				}
			}
			s.call(t, "unexpose", map[string]any{"port": 8766})
			// A sandbox port below 1024 gets a host port from 1024 up.
			if r := s.call(t, "expose", map[string]any{"port": 22}); r.isError || r.num("host_port") < 1024 || !strings.Contains(r.text, "below 1024") {
				t.Errorf("expose port 22: %s", r.text)
			}
			s.call(t, "unexpose", map[string]any{"port": 22})

			// network_info: the sandbox with its address, how sandboxes
			// reach each other here, and a clear error for an unknown one.
			r = s.call(t, "network_info", map[string]any{})
			if r.isError || !strings.Contains(r.text, "default (running): ") || !strings.Contains(r.text, "reach each other") {
				t.Fatalf("network_info: %s", r.text)
			}
			if r := s.call(t, "network_info", map[string]any{"sandbox": "nosuch"}); !r.isError || !strings.Contains(r.text, "nosuch") {
				t.Fatalf("network_info of an unknown sandbox: %s", r.text)
			}
		})
	}
}

// stressServer: 8770 answers HTTP; 8771 streams zeros forever; 8772
// greets then exits the whole process (a server dying mid-stream).
const stressServer = `import socket, threading, os, http.server, socketserver
def zeros(c):
    z = bytes(1 << 16)
    try:
        while True: c.sendall(z)
    except Exception: c.close()
def listen(port, fn):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen(512)
    while True:
        c, _ = s.accept(); threading.Thread(target=fn, args=(c,), daemon=True).start()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "3"); self.end_headers(); self.wfile.write(b"ok\n")
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True; request_queue_size = 512
threading.Thread(target=listen, args=(8771, zeros), daemon=True).start()
S(("127.0.0.1", 8770), H).serve_forever()
`

// TestPortsUnderStress: 200 connections at once; a client that never
// reads (the server's memory stays bounded); a port with nothing
// listening (closed soon, works once something listens); a server that
// dies mid-stream; the agent killed inside the sandbox (restarted); the
// sandbox destroyed under an open connection (closed, forward gone).
func TestPortsUnderStress(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "", "--toolsets", "all")
	if r := s.call(t, "write_file", map[string]any{"path": "/tmp/stress.py", "content": stressServer}); r.isError {
		t.Fatal(r.text)
	}
	if r := s.call(t, "bg", map[string]any{"command": "exec python3 /tmp/stress.py"}); r.isError {
		t.Fatal(r.text)
	}
	addr := func(port int) string {
		t.Helper()
		r := s.call(t, "expose", map[string]any{"port": port})
		if r.isError {
			t.Fatal(r.text)
		}
		return strings.TrimPrefix(r.str("url"), "http://")
	}
	web := addr(8770)
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func() error {
		resp, err := client.Get("http://" + web + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && string(b) != "ok\n" {
			err = fmt.Errorf("body %q", b)
		}
		return err
	}
	enginetest.WaitFor(t, "the server in the sandbox through the forward", get)

	// 200 at once.
	errs := make(chan error, 200)
	for range 200 {
		go func() { errs <- get() }()
	}
	for range 200 {
		if err := <-errs; err != nil {
			t.Fatalf("one of 200 connections at once: %v", err)
		}
	}

	// A client that never reads from a server that never stops writing.
	pid := serverPID(t, s)
	before := procKB(t, pid, "VmRSS")
	stalled, err := net.Dial("tcp", addr(8771))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a while for the stream to pile up, were it buffered
	if grew := procKB(t, pid, "VmRSS") - before; grew > 32<<10 {
		t.Errorf("a stalled client grew the server by %d KiB", grew)
	}
	stalled.Close()

	// Nothing listening yet: closed soon; then it works.
	late := addr(8773)
	c, err := net.Dial("tcp", late)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(enginetest.HangGuard))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection to a port nothing listens on got data")
	}
	c.Close()
	if r := s.call(t, "bg", map[string]any{"command": "exec python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1', 8773)); s.listen(); c,_=s.accept(); c.sendall(b'late\\n'); c.close()\""}); r.isError {
		t.Fatal(r.text)
	}
	enginetest.WaitFor(t, "the forward to work once something listens", func() error {
		c, err := net.Dial("tcp", late)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		if b, err := io.ReadAll(c); string(b) != "late\n" {
			return fmt.Errorf("read %q, %v", b, err)
		}
		return nil
	})

	// The agent killed inside the sandbox: the next connection starts it again.
	if r := s.call(t, "exec", map[string]any{"command": "pkill -KILL -f 'sandbox-ctl-[0-9]* agent'; echo killed"}); r.isError {
		t.Fatal(r.text)
	}
	enginetest.WaitFor(t, "the forward after the agent was killed", get)

	// The installed agent cut to its first 64 KiB (as a copy interrupted
	// by an older server left it) and killed: it is installed again.
	// (Killed first: a running program's file cannot be written.)
	if r := s.call(t, "exec", map[string]any{"command": "pkill -KILL -f 'sandbox-ctl-[0-9]* agent'; for i in $(seq 50); do ok=1; " +
		"for f in /tmp/.sandbox-mcp/sandbox-ctl-[0-9]*; do head -c 65536 \"$f\" >/tmp/piece && cat /tmp/piece 2>/dev/null >\"$f\" || ok=; done; " +
		"[ -n \"$ok\" ] && break; sleep 0.1; done; cat /tmp/.sandbox-mcp/sandbox-ctl-[0-9]* | wc -c"}); r.isError || strings.TrimSpace(r.str("stdout")) != "65536" {
		t.Fatalf("cut the agent: %s %s", r.text, r.str("stderr"))
	}
	enginetest.WaitFor(t, "the forward after the agent was damaged", get)
	if r := s.call(t, "exec", map[string]any{"command": "cat /tmp/.sandbox-mcp/sandbox-ctl-[0-9]* | wc -c"}); strings.TrimSpace(r.str("stdout")) == "65536" {
		t.Fatalf("the damaged agent is still in place: %s", r.text)
	}

	// A server dying mid-stream: the client sees the end soon.
	mid, err := net.Dial("tcp", addr(8771))
	if err != nil {
		t.Fatal(err)
	}
	mid.SetDeadline(time.Now().Add(enginetest.HangGuard))
	if _, err := io.ReadFull(mid, make([]byte, 1<<16)); err != nil {
		t.Fatalf("the stream before the server died: %v", err)
	}
	if r := s.call(t, "exec", map[string]any{"command": "pkill -KILL -f stress.py; echo ok"}); r.isError {
		t.Fatal(r.text)
	}
	mid.SetDeadline(time.Now().Add(enginetest.HangGuard)) // the end can come from the kill on
	if _, err := io.Copy(io.Discard, mid); err != nil {
		t.Fatalf("after the server died mid-stream: %v (want a plain end)", err)
	}
	mid.Close()

	// Destroyed under an open connection: it closes, and the forward goes.
	if r := s.call(t, "bg", map[string]any{"command": "exec python3 /tmp/stress.py"}); r.isError {
		t.Fatal(r.text)
	}
	var open net.Conn
	enginetest.WaitFor(t, "the restarted server through the forward", func() error {
		c, err := net.Dial("tcp", addr(8771))
		if err != nil {
			return err
		}
		c.SetDeadline(time.Now().Add(time.Minute))
		if _, err := io.ReadFull(c, make([]byte, 10)); err != nil {
			c.Close()
			return err
		}
		open = c
		return nil
	})
	if r := s.call(t, "destroy", map[string]any{}); r.isError {
		t.Fatal(r.text)
	}
	open.SetDeadline(time.Now().Add(enginetest.HangGuard)) // the end can come from the destroy on
	if _, err := io.Copy(io.Discard, open); err != nil && !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "closed") {
		t.Fatalf("an open connection after destroy: %v", err)
	}
	open.Close()
	if r := s.call(t, "list_ports", map[string]any{}); strings.Contains(r.text, "8771") {
		t.Fatalf("forwards after destroy: %s", r.text)
	}
}

// TestPortsOutliveTheirServer: a forward made by server A is served by
// server B, which shares the state directory, within seconds of A being
// killed (same host port); list_ports in B names who serves it; an
// unexpose through B ends it.
func TestPortsOutliveTheirServer(t *testing.T) {
	enginetest.RunFirstAndKubernetes(t, testPortsOutliveTheirServer)
}

// testPortsOutliveTheirServer is TestPortsOutliveTheirServer on one target.
func testPortsOutliveTheirServer(t *testing.T, tg enginetest.Target) {
	prefix := enginetest.Prefix(t, tg.New())
	stateDir := t.TempDir()
	args := []string{"serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix,
		"--state-dir", stateDir, "--no-boot-default", "--toolsets", "all"}
	a, aProc := connectKillable(t, tg.Env, args...)
	b := connectRaw(t, tg.Env, args...)
	if text, isErr := callText(t, a, "bg", map[string]any{"command": "mkdir -p /tmp/w && echo outlived >/tmp/w/index.html && cd /tmp/w && exec python3 -m http.server 8790 --bind 127.0.0.1"}); isErr {
		t.Fatal(text)
	}
	text, isErr := callText(t, a, "expose", map[string]any{"port": 8790})
	if isErr {
		t.Fatal(text)
	}
	url := strings.Fields(text)[0]
	get := func() string {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(url + "/index.html")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	answers := func(want bool) func() error {
		return func() error {
			if got := get(); (got == "outlived\n") != want {
				return fmt.Errorf("last answer %q", got)
			}
			return nil
		}
	}
	enginetest.WaitFor(t, "the forward through A", answers(true))
	if text, _ := callText(t, b, "list_ports", map[string]any{}); !strings.Contains(text, fmt.Sprintf("server pid %d", aProc.Process.Pid)) {
		t.Fatalf("B's list_ports while A serves: %s", text)
	}
	if err := aProc.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	enginetest.WaitFor(t, "B taking the forward over", answers(true))
	t.Logf("B served the forward %v after A was killed", time.Since(start).Round(time.Millisecond))
	if text, _ := callText(t, b, "list_ports", map[string]any{}); !strings.Contains(text, "this server") {
		t.Fatalf("B's list_ports after the take-over: %s", text)
	}
	if text, isErr := callText(t, b, "unexpose", map[string]any{"port": 8790}); isErr {
		t.Fatal(text)
	}
	enginetest.WaitFor(t, "the forward gone", answers(false))
}

// TestPortsWithoutAgent: where the agent cannot run (here a sandbox-ctl
// that crashes at its first instruction), expose still works, one exec
// per connection, and says so; the half-close and binary data still go
// through exactly.
func TestPortsWithoutAgent(t *testing.T) { enginetest.RunFirstAndKubernetes(t, testPortsWithoutAgent) }

// testPortsWithoutAgent is TestPortsWithoutAgent on one target.
func testPortsWithoutAgent(t *testing.T, tg enginetest.Target) {
	dir := t.TempDir()
	// The server refuses a file that is not a sandbox-ctl for the
	// sandbox's machine, and falls back to another source: this one is
	// the sandbox-ctl beside the server with its entry point zeroed, which
	// passes the checks and dies where the sandbox runs it.
	name := "sandbox-ctl-linux-" + runtime.GOARCH
	ctl, err := os.ReadFile(filepath.Join(filepath.Dir(binary), name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), zeroEntry(t, ctl), 0o755); err != nil {
		t.Fatal(err)
	}
	tg.Env = append(append([]string{}, tg.Env...), "SANDBOX_MCP_CTL_DIR="+dir)
	s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "", "--toolsets", "all")
	if r := s.call(t, "write_file", map[string]any{"path": "/tmp/ports.py", "content": portsServer}); r.isError {
		t.Fatal(r.text)
	}
	if r := s.call(t, "bg", map[string]any{"command": "exec python3 /tmp/ports.py"}); r.isError {
		t.Fatal(r.text)
	}
	r := s.call(t, "expose", map[string]any{"port": 8766})
	if r.isError || r.str("via") != "exec" || !strings.Contains(r.text, "agent cannot run") {
		t.Fatalf("expose: %s", r.text)
	}
	addr := strings.TrimPrefix(r.str("url"), "http://")
	for i := range 5 {
		data := make([]byte, 256<<10)
		rand.Read(data)
		c := dialGreeting(t, fmt.Sprintf("connection %d", i), addr)
		go func() {
			c.Write(data)
			c.(*net.TCPConn).CloseWrite()
		}()
		got, err := io.ReadAll(c)
		c.Close()
		if want := append(append([]byte{}, data[len(data)/2:]...), data[:len(data)/2]...); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("connection %d: %d bytes back, %v", i, len(got), err)
		}
	}
	if r := s.call(t, "list_ports", map[string]any{}); r.isError || !strings.Contains(r.text, "via exec") {
		t.Fatalf("list_ports: %s", r.text)
	}
	if r := s.call(t, "unexpose", map[string]any{"port": 8766}); r.isError || r.num("connections") < 5 {
		t.Fatalf("unexpose: %s", r.text)
	}
}

// zeroEntry returns a copy of the ELF executable data whose first 64 bytes
// of code at its entry point are zero: a fault on amd64 and arm64.
func zeroEntry(t *testing.T, data []byte) []byte {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && f.Entry >= p.Vaddr && f.Entry+64 <= p.Vaddr+p.Filesz {
			out := append([]byte{}, data...)
			off := p.Off + (f.Entry - p.Vaddr)
			clear(out[off : off+64])
			return out
		}
	}
	t.Fatal("no segment holds the entry point")
	return nil
}
