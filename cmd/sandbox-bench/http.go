package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

	setup := func(int) (func() error, func(), error) {
		cs, err := hs.connect(b.ctx)
		if err != nil {
			return nil, nil, err
		}
		return execOn(cs), func() { cs.Close() }, nil
	}
	single, err := timeParallel(1, b.n, setup)
	if err != nil {
		return err
	}
	many, err := timeParallel(httpClients, b.n, setup)
	if err != nil {
		return err
	}
	s, m := pct(single, 0.5), pct(many, 0.5)
	report(fmt.Sprintf("warm exec p50, %d HTTP clients at once", httpClients), us(m), us(s)+" (one HTTP client)", ratio(m, s), "<= 1.5x", ratio(m, s) <= 1.5)
	fmt.Printf("%-44s %d clients: p95 %s; throughput %.0f calls/s against %.0f for one\n", "", httpClients, us(pct(many, 0.95)),
		float64(httpClients)/m.Seconds(), 1/s.Seconds())
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
	tr := http.DefaultTransport.(*http.Transport).Clone()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench-http", Version: "0"}, nil)
	var opts *mcp.ClientSessionOptions
	if httpProtocol != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: httpProtocol}
	}
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url,
		HTTPClient: &http.Client{Transport: mcphttp.TokenTransport(tr, h.token)}}, opts)
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
