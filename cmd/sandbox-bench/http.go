package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/mcphttp"
)

// httpClients is the concurrent case of the HTTP figures.
const httpClients = 8

// benchHTTP: a warm exec through a server's streamable HTTP face against
// the same call over stdio, on one sandbox in one run (the two servers
// share the state, as servers do), one call of each in turn; then 8 HTTP
// clients at once against one.
func (b *bench) benchHTTP() error {
	if _, err := b.main.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	hs, err := b.launch.startHTTP(b.ctx, filepath.Join(b.dir, "state"))
	if err != nil {
		return err
	}
	defer hs.stop()
	one, err := hs.connect(b.ctx)
	if err != nil {
		return err
	}
	defer one.Close()
	execOn := func(cs *mcp.ClientSession) func() error {
		return func() error {
			res, err := cs.CallTool(b.ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "true"}})
			if err == nil && res.IsError {
				err = fmt.Errorf("exec over HTTP: %s", text(res))
			}
			return err
		}
	}
	lat, err := timeInterleaved(b.n, func() error { _, err := b.main.execTrue(b.ctx, "default"); return err }, execOn(one))
	if err != nil {
		return err
	}
	stdio, overHTTP := pct(lat[0], 0.5), pct(lat[1], 0.5)
	report("warm exec `true` p50 over HTTP", us(overHTTP), us(stdio)+" (stdio, same sandbox)", ratio(overHTTP, stdio),
		"<= stdio + 0.2 ms", overHTTP <= stdio+200*time.Microsecond)
	fmt.Printf("%-44s p95 over HTTP %s, over stdio %s\n", "", us(pct(lat[1], 0.95)), us(pct(lat[0], 0.95)))

	// The same two faces through minimal clients speaking one revision
	// (rawStdioProtocol) on both: what the server's HTTP face adds to a
	// call, without either client library's own work (the go-sdk client
	// decodes each message more times over HTTP than over stdio). Each
	// call reads its answer itself on both, with no goroutine of the
	// client's between: net/http's client adds two hand-offs of its own
	// to every call, which would count as the server's.
	rawStdio, err := startSyncRawClient(b.launch, filepath.Join(b.dir, "state"))
	if err != nil {
		return err
	}
	defer rawStdio.close()
	rawHTTP, closeRaw, err := hs.rawCallerAt(b.ctx, 0, rawStdioProtocol)
	if err != nil {
		return err
	}
	lat, err = timeInterleaved(b.n, func() error { return rawStdio.call(rawExecTrue) }, rawHTTP)
	closeRaw()
	if err != nil {
		return err
	}
	stdio, overHTTP = pct(lat[0], 0.5), pct(lat[1], 0.5)
	report("warm exec `true` p50 over HTTP, minimal client", us(overHTTP), us(stdio)+" (stdio, minimal client)", ratio(overHTTP, stdio),
		"<= stdio + 0.2 ms", overHTTP <= stdio+200*time.Microsecond)
	fmt.Printf("%-44s p95 over HTTP %s, over stdio %s (both at protocol %s)\n", "", us(pct(lat[1], 0.95)), us(pct(lat[0], 0.95)), rawStdioProtocol)

	setup := func(int) (func() error, func(), error) {
		cs, err := hs.connect(b.ctx)
		if err != nil {
			return nil, nil, err
		}
		return execOn(cs), func() { cs.Close() }, nil
	}
	if err := b.clientRows("HTTP", setup); err != nil {
		return err
	}
	// The same through a minimal client: the server's share, without
	// the go-sdk client's own work on the same cores.
	if err := b.clientRows("raw HTTP", func(w int) (func() error, func(), error) { return hs.rawCaller(b.ctx, w) }); err != nil {
		return err
	}
	// What the engine itself gives the same concurrency: framed round
	// trips on 8 shells of the sandbox at once against one, no server.
	ctr := b.launch.prefix + "-default"
	frame1, err := timeParallel(1, b.n, func(int) (func() error, func(), error) { return openFrameShell(b.engine, ctr) })
	if err != nil {
		return fmt.Errorf("framing floor: %w", err)
	}
	frame8, err := timeParallel(httpClients, b.n, func(int) (func() error, func(), error) { return openFrameShell(b.engine, ctr) })
	if err != nil {
		return fmt.Errorf("framing floor: %w", err)
	}
	f1, f8 := pct(frame1, 0.5), pct(frame8, 0.5)
	fmt.Printf("%-44s the engine's own floor, no server: a framed round trip p50 %s on %d shells at once, %s on one (%.2fx)\n", "",
		us(f8), httpClients, us(f1), ratio(f8, f1))
	// The same concurrency over one stdio session tells what HTTP adds
	// to it from what the machine's cores allow.
	stdio8, err := timeParallel(httpClients, b.n, func(int) (func() error, func(), error) {
		return func() error { _, err := b.main.execTrue(b.ctx, "default"); return err }, func() {}, nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("%-44s the same %d at once over one stdio session: p50 %s, p95 %s\n", "", httpClients, us(pct(stdio8, 0.5)), us(pct(stdio8, 0.95)))
	return nil
}

// clientRows reports warm exec p50 with httpClients clients of kind at
// once against one, each client made by setup.
func (b *bench) clientRows(kind string, setup func(worker int) (func() error, func(), error)) error {
	single, err := timeParallel(1, b.n, setup)
	if err != nil {
		return err
	}
	many, err := timeParallel(httpClients, b.n, setup)
	if err != nil {
		return err
	}
	s, m := pct(single, 0.5), pct(many, 0.5)
	report(fmt.Sprintf("warm exec p50, %d %s clients at once", httpClients, kind), us(m), us(s)+" (one "+kind+" client)", ratio(m, s), "<= 1.5x", ratio(m, s) <= 1.5)
	fmt.Printf("%-44s %d %s clients: p95 %s; throughput %.0f calls/s against %.0f for one\n", "", httpClients, kind, us(pct(many, 0.95)),
		float64(httpClients)/m.Seconds(), 1/s.Seconds())
	return nil
}

// httpProtocol is the protocol revision of the HTTP clients ("" for the
// newest, which has no sessions): -http-protocol.
var httpProtocol string

// httpBench is a server serving streamable HTTP.
type httpBench struct {
	cmd        *exec.Cmd
	url, token string
}

var servingAt = regexp.MustCompile(`serving MCP at (\S+);`)

// startHTTP runs a server on stateDir serving HTTP on a free loopback
// port, and waits until it listens.
func (l launcher) startHTTP(ctx context.Context, stateDir string) (*httpBench, error) {
	cmd := exec.Command(l.bin, "serve", "--http", "127.0.0.1:0", "--runtime", l.engine, "--image", l.image, "--prefix", l.prefix,
		"--state-dir", stateDir, "--no-boot-default", "--log-level", "warn")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &httpBench{cmd: cmd}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingAt.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
			if strings.Contains(sc.Text(), "level=WARN") || strings.Contains(sc.Text(), "level=ERROR") {
				fmt.Fprintln(os.Stderr, sc.Text())
			}
		}
	}()
	select {
	case h.url = <-found:
	case <-time.After(time.Minute):
		h.stop()
		return nil, fmt.Errorf("the HTTP server did not say where it listens within a minute")
	}
	tok, err := os.ReadFile(filepath.Join(stateDir, "http-token"))
	if err != nil {
		h.stop()
		return nil, err
	}
	h.token = strings.TrimSpace(string(tok))
	return h, nil
}

// connect opens one go-sdk client session over HTTP, on its own
// connections.
func (h *httpBench) connect(ctx context.Context) (*mcp.ClientSession, error) {
	return h.connectVia(ctx, h.transport())
}

// transport is a transport of its own that carries the server's token.
func (h *httpBench) transport() http.RoundTripper {
	return mcphttp.TokenTransport(http.DefaultTransport.(*http.Transport).Clone(), h.token)
}

// connectVia opens one go-sdk client session over HTTP through rt.
func (h *httpBench) connectVia(ctx context.Context, rt http.RoundTripper) (*mcp.ClientSession, error) {
	return h.connectAt(ctx, rt, httpProtocol)
}

// connectAt is connectVia at protocol revision protocol ("" for the newest).
func (h *httpBench) connectAt(ctx context.Context, rt http.RoundTripper, protocol string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "bench-http", Version: "0"}, nil)
	var opts *mcp.ClientSessionOptions
	if protocol != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: protocol}
	}
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url, HTTPClient: &http.Client{Transport: rt}}, opts)
}

// stop ends the server as a signal does and waits for it.
func (h *httpBench) stop() {
	h.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		h.cmd.Process.Kill()
		<-done
	}
}

// captureCall records the first tools/call request that goes through it.
type captureCall struct {
	next   http.RoundTripper
	mu     sync.Mutex
	header http.Header
	body   []byte
}

func (c *captureCall) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Method == http.MethodPost {
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		c.mu.Lock()
		if c.body == nil && bytes.Contains(body, []byte(`"tools/call"`)) {
			c.header, c.body = r.Header.Clone(), body
		}
		c.mu.Unlock()
	}
	return c.next.RoundTrip(r)
}

// rawCaller returns a minimal client of the HTTP face, on a connection of
// its own: each call is one POST of the tools/call request the go-sdk
// client sends for an exec of `true` (its headers, session and _meta, so
// the protocol's), with its own id; it reads the whole answer and checks
// that it is a result and not an error. Beside the go-sdk rows it tells
// the server's share of a call from the client library's, as the floor
// section's raw rows do for stdio.
func (h *httpBench) rawCaller(ctx context.Context, worker int) (func() error, func(), error) {
	return h.rawCallerAt(ctx, worker, httpProtocol)
}

// rawCallerAt is rawCaller on a session of protocol revision protocol
// ("" for the newest).
func (h *httpBench) rawCallerAt(ctx context.Context, worker int, protocol string) (func() error, func(), error) {
	capture := &captureCall{next: h.transport()}
	cs, err := h.connectAt(ctx, capture, protocol)
	if err != nil {
		return nil, nil, err
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "true"}}); err != nil {
		cs.Close()
		return nil, nil, err
	}
	capture.mu.Lock()
	header, body := capture.header, capture.body
	capture.mu.Unlock()
	if body == nil {
		cs.Close()
		return nil, nil, fmt.Errorf("raw HTTP client: no tools/call request was seen")
	}
	// The request with its id set apart: {"id":<id>, then the rest, as
	// encoding/json writes a map's keys in order.
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body, &msg); err != nil {
		cs.Close()
		return nil, nil, err
	}
	msg["id"] = json.RawMessage("0")
	whole, _ := json.Marshal(msg)
	rest, ok := bytes.CutPrefix(whole, []byte(`{"id":0`))
	if !ok {
		cs.Close()
		return nil, nil, fmt.Errorf("raw HTTP client: unexpected request %s", whole)
	}
	call, closeConn, err := syncHTTPCaller(h.url, h.token, header, rest, (worker+1)*1_000_000)
	if err != nil {
		cs.Close()
		return nil, nil, err
	}
	return call, func() { closeConn(); cs.Close() }, nil
}

// syncHTTPCaller returns calls of the request {"id":N<rest> (N counting
// up from firstID) on one kept-alive connection of its own: each writes
// the whole request (head and body, with its length) and reads the
// answer itself. No goroutine stands between the connection and the
// call, as with net/http's client (which hands each request to a writer
// goroutine and each answer back from a reader), so what the figures add
// to the stdio client's (startSyncRawClient) is the server's HTTP face.
func syncHTTPCaller(endpoint, token string, header http.Header, rest []byte, firstID int) (func() error, func(), error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, nil, err
	}
	if u.Scheme != "http" {
		return nil, nil, fmt.Errorf("raw HTTP client: %s: only http:// is spoken", endpoint)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		return nil, nil, err
	}
	var head bytes.Buffer
	head.WriteString("POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n")
	for k, vs := range header {
		if k == "Content-Length" || k == "Authorization" || k == "Host" {
			continue
		}
		for _, v := range vs {
			head.WriteString(k + ": " + v + "\r\n")
		}
	}
	head.WriteString("Authorization: Bearer " + token + "\r\n")
	br := bufio.NewReader(conn)
	id := firstID
	var buf []byte
	call := func() error {
		id++
		body := `{"id":` + strconv.Itoa(id) + string(rest)
		buf = append(append(buf[:0], head.Bytes()...), "Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"...)
		buf = append(buf, body...)
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		if _, err := conn.Write(buf); err != nil {
			return fmt.Errorf("raw HTTP call: %w", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("raw HTTP call: %w", err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			return fmt.Errorf("raw HTTP call: %w", err)
		case resp.StatusCode != http.StatusOK || !bytes.Contains(got, []byte(`"result"`)) || bytes.Contains(got, []byte(`"isError":true`)):
			return fmt.Errorf("raw HTTP call: %s: %s", resp.Status, got)
		case resp.Close:
			return fmt.Errorf("raw HTTP call: the server closed the connection after its answer")
		}
		return nil
	}
	return call, func() { conn.Close() }, nil
}
