package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/mcphttp"
)

// httpServer is one sandbox-mcp serving streamable HTTP.
type httpServer struct {
	url, token, stateDir string
	cmd                  *exec.Cmd
	stderr               *prefixWriter
}

var servingAt = regexp.MustCompile(`serving MCP at (\S+);`)

// startHTTP starts sandbox-mcp serving HTTP on a free loopback port.
func startHTTP(t *testing.T, tg enginetest.Target, prefix string, extra ...string) *httpServer {
	t.Helper()
	return startHTTPEnv(t, tg, prefix, nil, extra...)
}

// startHTTPEnv is startHTTP with more environment variables.
func startHTTPEnv(t *testing.T, tg enginetest.Target, prefix string, env []string, extra ...string) *httpServer {
	t.Helper()
	h := &httpServer{stateDir: t.TempDir(), stderr: &prefixWriter{t: t}}
	args := append([]string{"serve", "--http", "127.0.0.1:0", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix,
		"--state-dir", h.stateDir, "--no-boot-default"}, withNetwork(extra)...)
	h.cmd = exec.Command(binary, args...)
	h.cmd.Env = append(append(os.Environ(), tg.Env...), env...)
	h.cmd.Stderr = h.stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { h.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		h.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(enginetest.HangGuard):
			t.Errorf("the HTTP server did not end on SIGTERM")
			h.cmd.Process.Kill()
			<-exited
		}
	})
	enginetest.WaitFor(t, "the server to listen", func() error {
		select {
		case <-exited:
			t.Fatalf("the server ended: %s", h.stderr.all.String())
		default:
		}
		h.stderr.mu.Lock()
		m := servingAt.FindStringSubmatch(h.stderr.all.String())
		h.stderr.mu.Unlock()
		if m == nil {
			return os.ErrNotExist
		}
		h.url = m[1]
		return nil
	})
	tok, err := os.ReadFile(filepath.Join(h.stateDir, "http-token"))
	if err != nil {
		t.Fatal(err)
	}
	h.token = strings.TrimSpace(string(tok))
	return h
}

// connect opens a session of client on the server, into s (nil: a new
// one); client nil: s.newClient. s is the server's face the tests call.
func (h *httpServer) connect(t *testing.T, protocol string, s *server, client *mcp.Client) *server {
	t.Helper()
	if s == nil {
		s = &server{}
	}
	s.stateDir, s.stderr = h.stateDir, h.stderr
	if client == nil {
		client = s.newClient("e2e-http")
	}
	var opts *mcp.ClientSessionOptions
	if protocol != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: protocol}
	}
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: &http.Client{Transport: mcphttp.TokenTransport(nil, h.token)}}, opts)
	if err != nil {
		t.Fatalf("connect over HTTP: %v", err)
	}
	s.cs = cs
	t.Cleanup(func() { cs.Close() })
	return s
}

// TestEndToEndOverHTTP runs every scenario of the stdio suite through a
// client of the streamable HTTP face, on the newest protocol revision
// (no sessions) and on 2025-06-18 (sessions).
func TestEndToEndOverHTTP(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	for _, protocol := range []string{"", "2025-06-18"} {
		t.Run("protocol "+protocol, func(t *testing.T) {
			t.Parallel()
			h := startHTTP(t, tg, enginetest.Prefix(t, tg.New()))
			scenarios(t, h.connect(t, protocol, nil, nil))
		})
	}
}

// TestHTTPClientsApart: clients of one HTTP server work at once, each
// with its own roots and its own progress, and one without the token
// gets nothing.
func TestHTTPClientsApart(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	h := startHTTP(t, tg, enginetest.Prefix(t, tg.New()), "--toolsets", "all")

	stranger := mcp.NewClient(&mcp.Implementation{Name: "stranger", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	defer cancel()
	if _, err := stranger.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url, MaxRetries: -1}, nil); err == nil {
		t.Fatal("a client without the token connected")
	}

	type client struct {
		name, protocol, root string
		s                    *server
	}
	var clients []*client
	for _, c := range []struct{ name, protocol string }{{"a", ""}, {"b", "2025-06-18"}} {
		root := t.TempDir()
		os.WriteFile(filepath.Join(root, "f-"+c.name), []byte(c.name), 0o644)
		cl := &client{name: c.name, protocol: c.protocol, root: root}
		cl.s = &server{}
		sdk := cl.s.newClient("e2e-" + c.name)
		sdk.AddRoots(&mcp.Root{URI: "file://" + root, Name: c.name})
		h.connect(t, c.protocol, cl.s, sdk)
		clients = append(clients, cl)
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		other := clients[1-i]
		wg.Go(func() {
			sb := "http-" + c.name
			// A command long enough to report progress, tagged with the
			// client's name.
			r := c.s.callWith(t, "exec", map[string]any{"sandbox": sb, "command": "for i in 1 2 3 4; do echo tick-" + c.name + "; sleep 1; done"}, "p-"+c.name)
			if r.isError || strings.Count(r.text, "tick-"+c.name) != 4 {
				t.Errorf("%s: exec: %s", c.name, r.text)
			}
			c.s.mu.Lock()
			progress := strings.Join(c.s.progress, "\n")
			c.s.mu.Unlock()
			if progress == "" || strings.Contains(progress, "tick-"+other.name) {
				t.Errorf("%s: progress %q", c.name, progress)
			}
			r = c.s.call(t, "upload", map[string]any{"sandbox": sb, "local_path": filepath.Join(c.root, "f-"+c.name), "sandbox_path": "/tmp/f"})
			if r.isError {
				t.Errorf("%s: upload from its own root: %s", c.name, r.text)
			}
			r = c.s.call(t, "upload", map[string]any{"sandbox": sb, "local_path": filepath.Join(other.root, "f-"+other.name), "sandbox_path": "/tmp/g"})
			if !r.isError || !strings.Contains(r.text, c.root) {
				t.Errorf("%s: upload from the other client's root: %s", c.name, r.text)
			}
		})
	}
	wg.Wait()
}

// TestTelemetryOverHTTP: a server with an OTLP endpoint sends a span per
// tool call, in the caller's trace and with the sandbox's name, and one
// per other request (tools/list), and its
// /metrics answers only with the token.
func TestTelemetryOverHTTP(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	var mu sync.Mutex
	var traces []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			traces = append(traces, string(b))
			mu.Unlock()
		}
	}))
	defer recv.Close()
	h := startHTTPEnv(t, tg, enginetest.Prefix(t, tg.New()), []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.URL})
	s := h.connect(t, "", nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), callGuard)
	defer cancel()
	p := &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox": "traced", "command": "exit 3"}}
	p.Meta = mcp.Meta{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	if _, err := s.cs.CallTool(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitFor(t, "the spans at the receiver", func() error {
		mu.Lock()
		defer mu.Unlock()
		call, list := false, false
		for _, tr := range traces {
			if strings.Contains(tr, `"traceId":"4bf92f3577b34da6a3ce929d0e0e4736"`) && strings.Contains(tr, `"parentSpanId":"00f067aa0ba902b7"`) &&
				strings.Contains(tr, `"name":"tools/call exec"`) && strings.Contains(tr, `{"key":"sandbox.name","value":{"stringValue":"traced"}}`) {
				call = true
			}
			if strings.Contains(tr, `"name":"tools/list"`) && strings.Contains(tr, `{"key":"network.transport","value":{"stringValue":"tcp"}}`) {
				list = true
			}
		}
		if !call || !list {
			return fmt.Errorf("%d exports; the tool call's span seen: %v, tools/list's: %v", len(traces), call, list)
		}
		return nil
	})
	get := func(tok string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(h.url, "/mcp")+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %d", code)
	}
	code, body := get(h.token)
	if code != http.StatusOK || !strings.Contains(body, `gen_ai_tool_name="exec"`) || !strings.Contains(body, "sandbox_mcp_boots_total") {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	if strings.Contains(body, "traced") {
		t.Fatalf("a metric names the sandbox:\n%s", body)
	}
}
