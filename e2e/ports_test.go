package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
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
			deadline := time.Now().Add(hangGuard)
			for body, err := get(); body != "hello-ports\n"; body, err = get() {
				if time.Now().After(deadline) {
					t.Fatalf("GET %s: %q %v", url, body, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			for i := range 30 {
				if body, err := get(); body != "hello-ports\n" {
					t.Fatalf("GET %d: %q %v", i, body, err)
				}
			}

			r = s.call(t, "expose", map[string]any{"port": 8766})
			if r.isError {
				t.Fatal(r.text)
			}
			addr := strings.TrimPrefix(r.str("url"), "http://")
			data := make([]byte, 1<<20)
			rand.Read(data)
			var c net.Conn
			for deadline := time.Now().Add(hangGuard); ; time.Sleep(200 * time.Millisecond) {
				var err error
				if c, err = net.Dial("tcp", addr); err == nil {
					c.SetDeadline(time.Now().Add(time.Minute))
					greet := make([]byte, 10)
					if _, err = io.ReadFull(c, greet); err == nil && string(greet) == "220 ready\n" {
						break
					}
					c.Close()
				}
				if time.Now().After(deadline) {
					t.Fatalf("the greeting server: %v", err)
				}
			}
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
				{"unexpose", map[string]any{"port": 8765}, "not forwarded"},
			} {
				if r := s.call(t, tc.tool, tc.args); !r.isError || !strings.Contains(r.text, tc.want) {
					t.Errorf("%s %v: %s", tc.tool, tc.args, r.text)
				}
			}
			s.call(t, "unexpose", map[string]any{"port": 8766})
		})
	}
}
