package mcphttp

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

const testToken = "0123456789abcdef0123456789abcdef"

// echoServer is an MCP server with one tool that sends n progress
// notifications to its caller, then answers with the caller's session.
func echoServer() *server.MCPServer {
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("progress", mcp.WithNumber("n"), mcp.WithString("tag")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tag := req.GetString("tag", "")
			tok := req.Params.Meta
			for i := range req.GetInt("n", 0) {
				if tok == nil || tok.ProgressToken == nil {
					break
				}
				_ = server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress", map[string]any{
					"progressToken": tok.ProgressToken, "progress": float64(i + 1), "message": tag,
				})
			}
			return mcp.NewToolResultText(tag), nil
		})
	ms.AddTool(mcp.NewTool("wait"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-released:
		case <-ctx.Done():
		}
		return mcp.NewToolResultText("waited"), nil
	})
	return ms
}

// released ends the wait tool's calls.
var released = make(chan struct{})

// serve starts an HTTP face of echoServer on the loopback.
func serve(t *testing.T, opts Options) *Server {
	t.Helper()
	if opts.Token == "" {
		opts.Token = testToken
	}
	s, err := Listen("127.0.0.1:0", echoServer(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, 5*time.Second); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

// connect opens a go-sdk client session; progress receives the messages
// of the progress notifications it gets.
func connect(t *testing.T, url, tok string, base http.RoundTripper, progress func(string)) (*sdk.ClientSession, error) {
	return connectAt(t, "", url, tok, base, progress)
}

// connectAt is connect on a protocol revision ("" for the newest).
func connectAt(t *testing.T, protocol, url, tok string, base http.RoundTripper, progress func(string)) (*sdk.ClientSession, error) {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			if progress != nil {
				progress(r.Params.Message)
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var opts *sdk.ClientSessionOptions
	if protocol != "" {
		opts = &sdk.ClientSessionOptions{ProtocolVersion: protocol}
	}
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: TokenTransport(base, tok)}, MaxRetries: -1}, opts)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func callTag(t *testing.T, cs *sdk.ClientSession, tag string, n int, token any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &sdk.CallToolParams{Name: "progress", Arguments: map[string]any{"tag": tag, "n": n}}
	if token != nil {
		p.SetProgressToken(token)
	}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	return res.Content[0].(*sdk.TextContent).Text
}

// post sends one raw JSON-RPC message.
func post(t *testing.T, url string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

func TestClientsCarryTheToken(t *testing.T) {
	s := serve(t, Options{})
	if _, err := connect(t, s.URL(), "", nil, nil); err == nil {
		t.Fatal("a client without the token connected")
	}
	if _, err := connect(t, s.URL(), testToken+"x", nil, nil); err == nil {
		t.Fatal("a client with a wrong token connected")
	}
	resp, body := post(t, s.URL(), nil, initBody)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "Authorization: Bearer") ||
		!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("no token: %d %q", resp.StatusCode, body)
	}
	resp, _ = post(t, s.URL(), map[string]string{"Authorization": "Basic " + testToken}, initBody)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a token of another scheme: %d", resp.StatusCode)
	}
	cs, err := connect(t, s.URL(), testToken, nil, nil)
	if err != nil {
		t.Fatalf("a client with the token: %v", err)
	}
	if got := callTag(t, cs, "hi", 0, nil); got != "hi" {
		t.Fatalf("call answered %q", got)
	}
}

func TestOtherSitesAndNamesAreRefused(t *testing.T) {
	s := serve(t, Options{})
	auth := "Bearer " + testToken
	port := s.URL()[len("http://127.0.0.1:") : len(s.URL())-len(Path)]
	for _, c := range []struct {
		hdr  map[string]string
		want int
		why  string
	}{
		{map[string]string{"Authorization": auth, "Origin": "https://evil.example"}, 403, "a page of another site"},
		{map[string]string{"Authorization": auth, "Origin": "null"}, 403, "an opaque origin"},
		{map[string]string{"Authorization": auth, "Origin": "http://127.0.0.1:1"}, 403, "another port of this machine"},
		{map[string]string{"Authorization": auth, "Host": "evil.example:" + port}, 403, "a rebound name"},
		{map[string]string{"Authorization": auth, "Host": "127.0.0.1.evil.example"}, 403, "a name that starts like the loopback"},
		{map[string]string{"Authorization": auth, "Origin": "http://localhost:" + port}, 200, "the server's own origin"},
		{map[string]string{"Authorization": auth, "Host": "localhost:" + port}, 200, "localhost"},
	} {
		resp, body := post(t, s.URL(), c.hdr, initBody)
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d: %s", c.why, resp.StatusCode, c.want, body)
		}
		if v := resp.Header.Get("Access-Control-Allow-Origin"); v != "" {
			t.Errorf("%s: a CORS header %q", c.why, v)
		}
	}
	// A preflight gets nothing that lets a browser go on.
	req, _ := http.NewRequest(http.MethodOptions, s.URL(), nil)
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another site: %d, allow-origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
}

func TestALargeBodyIsRefusedAndTheServerGoesOn(t *testing.T) {
	// With a fix of the answers, as the server runs.
	s := serve(t, Options{Hint: func() string { return "send a large file in parts" }, Fix: func(p []byte) []byte { return p }})
	cs, err := connect(t, s.URL(), testToken, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"progress","arguments":{"tag":"` +
		strings.Repeat("a", 40<<20) + `"}}}`
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	resp, body := post(t, s.URL(), auth, big)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "message too large") ||
		!strings.Contains(body, "send a large file in parts") || !strings.Contains(body, `"id":7`) {
		t.Fatalf("40 MiB body: %d %.300s", resp.StatusCode, body)
	}
	// Without a length given beforehand, the read stops at the limit, and
	// the client gets the answer, not a reset (a smaller limit, tried
	// more times).
	small := serve(t, Options{MaxBody: 1 << 20, Fix: func(p []byte) []byte { return p }})
	chunked := big[:8<<20]
	for range 20 {
		req, _ := http.NewRequest(http.MethodPost, small.URL(), io.MultiReader(strings.NewReader(chunked), strings.NewReader("")))
		req.ContentLength = -1
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testToken)
		r2, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("chunked 8 MiB body: %v", err)
		}
		r2.Body.Close()
		if r2.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked 8 MiB body: %d", r2.StatusCode)
		}
	}
	if got := callTag(t, cs, "after", 0, nil); got != "after" {
		t.Fatalf("after the large bodies: %q", got)
	}
}

func TestSessionsAreBoundedAndNotGuessable(t *testing.T) {
	s := serve(t, Options{MaxSessions: 10})
	now := time.Now()
	var clock sync.Mutex
	s.sessions.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	advance := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }
	auth := map[string]string{"Authorization": "Bearer " + testToken}

	var ids []string
	refused := 0
	withID := map[string]string{"Authorization": "Bearer " + testToken, server.HeaderKeySessionID: "made-up"}
	for i := range 1000 {
		h := auth
		if i%2 == 1 { // naming a session does not get past the bound
			h = withID
		}
		resp, body := post(t, s.URL(), h, initBody)
		switch resp.StatusCode {
		case http.StatusOK:
			ids = append(ids, resp.Header.Get(server.HeaderKeySessionID))
		case http.StatusServiceUnavailable:
			refused++
			if !strings.Contains(body, "too many sessions") {
				t.Fatalf("refusal: %s", body)
			}
		default:
			t.Fatalf("initialize: %d %s", resp.StatusCode, body)
		}
	}
	if len(ids) != 10 || refused != 990 || s.sessions.count() != 10 {
		t.Fatalf("1000 initializes: %d sessions, %d refused, %d held", len(ids), refused, s.sessions.count())
	}
	ping := func(id string) int {
		h := map[string]string{"Authorization": "Bearer " + testToken, server.HeaderKeySessionID: id, "Mcp-Protocol-Version": "2025-06-18"}
		resp, _ := post(t, s.URL(), h, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
		return resp.StatusCode
	}
	for _, id := range ids {
		if c := ping(id); c != http.StatusOK {
			t.Fatalf("a session of the first ten: %d", c)
		}
	}
	// Guessed ids, in the form issued or not, get what an unknown id gets.
	// One differs from a real id in its last character only.
	last := "A"
	if strings.HasSuffix(ids[0], last) {
		last = "B"
	}
	for _, id := range []string{"", "x", ids[0][:len(ids[0])-1] + last, strings.Repeat("A", 43)} {
		if c := ping(id); c != http.StatusNotFound && c != http.StatusBadRequest {
			t.Errorf("guessed id %q: %d", id, c)
		}
		for _, m := range []string{http.MethodGet, http.MethodDelete} {
			req, _ := http.NewRequest(m, s.URL(), nil)
			req.Header.Set("Authorization", "Bearer "+testToken)
			req.Header.Set(server.HeaderKeySessionID, id)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s with guessed id %q: %d", m, id, resp.StatusCode)
			}
		}
	}
	// Ended by its client, an id is not taken again.
	req, _ := http.NewRequest(http.MethodDelete, s.URL(), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set(server.HeaderKeySessionID, ids[0])
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || ping(ids[0]) != http.StatusNotFound {
		t.Fatalf("ended session: delete %d, then ping %d", resp.StatusCode, ping(ids[0]))
	}
	// A session idle past the TTL is gone; one idle a minute makes room
	// for a new client when the table is full.
	advance(2 * time.Minute)
	for _, id := range append([]string{ids[1]}, ids[3:]...) { // all but ids[2]
		if c := ping(id); c != http.StatusOK {
			t.Fatalf("a session used two minutes ago: %d", c)
		}
	}
	for range 2 { // the room ids[0] left, then ids[2] (the least recently used)
		if resp, body := post(t, s.URL(), auth, initBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("initialize with idle sessions held: %d %s", resp.StatusCode, body)
		}
	}
	if ping(ids[2]) != http.StatusNotFound || ping(ids[1]) != http.StatusOK || ping(ids[3]) != http.StatusOK {
		t.Fatal("the least recently used session was not the one that made room")
	}
	advance(DefaultSessionTTL)
	if c := ping(ids[1]); c != http.StatusNotFound {
		t.Fatalf("a session idle past the TTL: %d", c)
	}
}

func TestEachClientGetsItsOwnProgress(t *testing.T) {
	// The newest revision has no sessions; 2025-06-18 has.
	for _, protocol := range []string{"", "2025-06-18"} {
		t.Run("protocol="+protocol, func(t *testing.T) {
			s := serve(t, Options{})
			const clients = 4
			var wg sync.WaitGroup
			for i := range clients {
				var mu sync.Mutex
				var got []string
				cs, err := connectAt(t, protocol, s.URL(), testToken, nil, func(m string) { mu.Lock(); got = append(got, m); mu.Unlock() })
				if err != nil {
					t.Fatal(err)
				}
				if protocol != "" && cs.ID() == "" {
					t.Fatalf("%s: no session", protocol)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					tag := fmt.Sprintf("client-%d", i)
					for range 5 {
						if r := callTag(t, cs, tag, 3, tag); r != tag {
							t.Errorf("%s got the answer %q", tag, r)
						}
					}
					mu.Lock()
					defer mu.Unlock()
					if len(got) == 0 {
						t.Errorf("%s got no progress", tag)
					}
					for _, m := range got {
						if m != tag {
							t.Errorf("%s got another client's progress %q", tag, m)
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

func TestOnlyTheLoopbackWithoutTLS(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		if _, err := Listen(addr, echoServer(), Options{Token: testToken}); err == nil || !strings.Contains(err.Error(), "needs TLS") {
			t.Errorf("%s without TLS: %v", addr, err)
		}
	}
	if _, err := Listen("127.0.0.1:0", echoServer(), Options{}); err == nil {
		t.Error("no token: served")
	}
	if _, err := Listen("127.0.0.1:0", echoServer(), Options{Token: testToken, CertFile: "x"}); err == nil {
		t.Error("a certificate without its key: served")
	}

	dir := t.TempDir()
	cert, key, pool := selfSigned(t, dir)
	s, err := Listen("0.0.0.0:0", echoServer(), Options{Token: testToken, CertFile: cert, KeyFile: key, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatalf("every interface with TLS: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, 5*time.Second); close(done) }()
	defer func() { cancel(); <-done }()
	if !strings.HasPrefix(s.URL(), "https://") {
		t.Fatalf("URL %s", s.URL())
	}
	port := s.ln.Addr().(*net.TCPAddr).Port
	url := fmt.Sprintf("https://localhost:%d%s", port, Path)
	cs, err := connect(t, url, testToken, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, nil)
	if err != nil {
		t.Fatalf("a client over TLS: %v", err)
	}
	if got := callTag(t, cs, "tls", 0, nil); got != "tls" {
		t.Fatalf("over TLS: %q", got)
	}
	// Plain HTTP on the TLS port gets nothing served.
	resp, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d%s", port, Path), "application/json", bytes.NewReader([]byte(initBody)))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("plain HTTP on the TLS port answered: %s", b)
		}
	}
}

// selfSigned writes a certificate for localhost and 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return cert, key, pool
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "http-token")
	tok, created, err := LoadOrCreateToken(p)
	if err != nil || !created || len(tok) != 64 {
		t.Fatalf("first: %q %v %v", tok, created, err)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	again, created, err := LoadOrCreateToken(p)
	if err != nil || created || again != tok {
		t.Fatalf("second: %q %v %v", again, created, err)
	}
	os.Chmod(p, 0o644)
	if _, _, err := LoadOrCreateToken(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a file others may read: %v", err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(p, link)
	if _, _, err := LoadOrCreateToken(link); err == nil {
		t.Fatal("a symlink was followed")
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if _, _, err := LoadOrCreateToken(short); err == nil {
		t.Fatal("a short token was taken")
	}
	// Servers starting at once agree on one token.
	race := filepath.Join(dir, "race")
	toks := make([]string, 8)
	var wg sync.WaitGroup
	for i := range toks {
		wg.Go(func() {
			tk, _, err := LoadOrCreateToken(race)
			if err != nil {
				t.Error(err)
			}
			toks[i] = tk
		})
	}
	wg.Wait()
	for _, tk := range toks {
		if tk != toks[0] {
			t.Fatalf("servers starting at once got different tokens: %q", toks)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".token-*"))
	if len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// openStream opens session id's listening stream and returns its status
// and a function that closes it.
func openStream(t *testing.T, url, id string) (int, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(server.HeaderKeySessionID, id)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp.StatusCode, func() { cancel(); resp.Body.Close() }
}

// TestBusySessionsStayAndStreamsAreOne: a session with its listening
// stream open is never pushed out for a new client, and it has one such
// stream, the newest.
func TestBusySessionsStayAndStreamsAreOne(t *testing.T) {
	s := serve(t, Options{MaxSessions: 1})
	now := time.Now()
	var clock sync.Mutex
	s.sessions.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	advance := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	resp, _ := post(t, s.URL(), auth, initBody)
	a := resp.Header.Get(server.HeaderKeySessionID)
	code, closeA := openStream(t, s.URL(), a)
	if code != http.StatusOK {
		t.Fatalf("listening stream: %d", code)
	}
	// A listening stream the transport would refuse leaves the open one.
	req, _ := http.NewRequest(http.MethodGet, s.URL(), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set(server.HeaderKeySessionID, a)
	req.Header.Set("Mcp-Protocol-Version", "1999-01-01")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest || !s.sessions.listening(a) {
		t.Fatalf("a stream of an unknown revision: %v %v, listening %v", resp, err, s.sessions.listening(a))
	}
	// A client that reconnects gets its stream; the old one ends.
	code, closeA2 := openStream(t, s.URL(), a)
	if code != http.StatusOK {
		t.Fatalf("a second listening stream: %d", code)
	}
	defer closeA2()
	advance(2 * time.Minute)
	if resp, _ := post(t, s.URL(), auth, initBody); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a new client pushed out a session with an open stream: %d", resp.StatusCode)
	}
	closeA()
	closeA2()
	enginelessWait(t, func() bool { return !s.sessions.listening(a) })
	advance(2 * time.Minute)
	if resp, _ := post(t, s.URL(), auth, initBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("a new client after the stream closed: %d", resp.StatusCode)
	}
}

// enginelessWait polls cond for up to a minute (a hang guard).
func enginelessWait(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached in a minute")
}

// TestStalledBodiesDoNotBlockOthers: clients that send large bodies and
// stop hold no one else up: a small message goes through, chunked or not.
func TestStalledBodiesDoNotBlockOthers(t *testing.T) {
	s := serve(t, Options{})
	addr := strings.TrimPrefix(strings.TrimSuffix(s.URL(), Path), "http://")
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 2000000\r\n\r\n{", testToken)
	}
	time.Sleep(200 * time.Millisecond)
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, s.URL(), io.MultiReader(strings.NewReader(initBody)))
		req.ContentLength = -1 // chunked
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case code := <-done:
		if code != http.StatusOK {
			t.Fatalf("a small chunked message beside stalled large ones: %d", code)
		}
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("a small message waited on stalled large ones")
	}
}

func TestTokenFileOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	p := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(p, []byte(testToken+"\n"), 0o600)
	os.Chown(p, 65534, 65534)
	if _, _, err := LoadOrCreateToken(p); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("a token file of another user: %v", err)
	}
}

// TestTokenFileAsAKubernetesSecret: a token file as a pod sees a secret
// mounted with its fsGroup (root's, its group may read it, reached
// through the volume's links) is read; one root's that others may read, or
// its group change, is refused.
func TestTokenFileAsAKubernetesSecret(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a file of root's that another user reads")
	}
	// A directory the pod's user may go through (t.TempDir's parents are
	// root's alone), with a copy of this test program it may run.
	dir, err := os.MkdirTemp("", "tokentest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "reader")
	if err := os.WriteFile(prog, self, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "..2026_12_02_01_00_00.1")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "token"), []byte(testToken+"\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(data, "token"), 0, 65532)
	os.Symlink(filepath.Base(data), filepath.Join(dir, "..data"))
	os.Symlink("..data/token", filepath.Join(dir, "token"))
	// Read as the pod's user, whose group is the file's.
	readAt := func(p string) (string, error) {
		cmd := exec.Command(prog, "-test.run", "^TestReadTokenAsAnotherUser$")
		cmd.Env = append(os.Environ(), "TOKEN_TEST_FILE="+p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	read := func() (string, error) { return readAt(filepath.Join(dir, "token")) }
	if out, err := read(); err != nil || !strings.Contains(out, "token read") {
		t.Fatalf("a secret's token file as its pod sees it: %v\n%s", err, out)
	}
	// The path is only what root and the user themselves made: nobody
	// else can point it at a file whose content they know (a copy of the
	// secret's token in a place of another user's, say).
	own := filepath.Join(dir, "own")
	os.WriteFile(own, []byte(testToken+"\n"), 0o600)
	os.Chown(own, 65532, 65532)
	mine := filepath.Join(dir, "mine")
	os.Symlink("own", mine)
	os.Lchown(mine, 65532, 65532)
	if out, err := readAt(mine); err != nil || !strings.Contains(out, "token read") {
		t.Fatalf("the user's own link to their own file: %v\n%s", err, out)
	}
	others := filepath.Join(dir, "others")
	os.Mkdir(others, 0o755)
	os.Chown(others, 1000, 1000)
	os.Symlink("../"+filepath.Base(data), filepath.Join(others, "d"))
	os.Lchown(filepath.Join(others, "d"), 1000, 1000)
	if out, err := readAt(filepath.Join(others, "d", "token")); err == nil || !strings.Contains(out, "belongs to another user") {
		t.Fatalf("a path through a directory of another user's: %v\n%s", err, out)
	}
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	os.Symlink("../token", filepath.Join(open, "token"))
	if out, err := readAt(filepath.Join(open, "token")); err == nil || !strings.Contains(out, "may be written by others") {
		t.Fatalf("a link in a directory anyone may write: %v\n%s", err, out)
	}
	sticky := filepath.Join(dir, "sticky")
	os.Mkdir(sticky, 0o777)
	os.Chmod(sticky, 0o777|os.ModeSticky)
	os.Symlink("../token", filepath.Join(sticky, "token"))
	os.Lchown(filepath.Join(sticky, "token"), 1000, 1000)
	if out, err := readAt(filepath.Join(sticky, "token")); err == nil || !strings.Contains(out, "may be written by others") {
		t.Fatalf("a link of another user's in a sticky directory: %v\n%s", err, out)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(fifo, 65532, 65532)
	if out, err := readAt(fifo); err == nil || !strings.Contains(out, "not a regular file") {
		t.Fatalf("a FIFO: %v\n%s", err, out)
	}
	if out, err := readAt(own); err != nil || !strings.Contains(out, "token read") {
		t.Fatalf("the user's own file, named itself: %v\n%s", err, out)
	}
	for _, mode := range []os.FileMode{0o444, 0o460} {
		os.Chmod(filepath.Join(data, "token"), mode)
		if out, err := read(); err == nil || !strings.Contains(out, "may give its group read only") {
			t.Fatalf("a token file of root's, mode %04o: %v\n%s", mode, err, out)
		}
	}
}

// TestReadTokenAsAnotherUser is TestTokenFileAsAKubernetesSecret's reader,
// run as the pod's user: it does nothing unless that test runs it.
func TestReadTokenAsAnotherUser(t *testing.T) {
	p := os.Getenv("TOKEN_TEST_FILE")
	if p == "" {
		t.Skip("run by TestTokenFileAsAKubernetesSecret only")
	}
	if _, _, err := LoadOrCreateToken(p); err != nil {
		t.Fatal(err)
	}
	fmt.Println("token read")
}

// TestALongCallKeepsItsSession: a call that runs past the idle time keeps
// its session alive.
func TestALongCallKeepsItsSession(t *testing.T) {
	s := serve(t, Options{SessionTTL: time.Hour})
	now := time.Now()
	var clock sync.Mutex
	s.sessions.now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	cs, err := connectAt(t, "2025-06-18", s.URL(), testToken, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "wait"})
		done <- err
	}()
	enginelessWait(t, func() bool {
		s.sessions.mu.Lock()
		defer s.sessions.mu.Unlock()
		for _, se := range s.sessions.live {
			if se.busy > 1 { // the listening stream and the call
				return true
			}
		}
		return false
	})
	clock.Lock()
	now = now.Add(2 * time.Hour)
	clock.Unlock()
	s.sessions.admit() // expires what is idle past the TTL
	close(released)
	if err := <-done; err != nil {
		t.Fatalf("the long call: %v", err)
	}
	if got := callTag(t, cs, "after", 0, nil); got != "after" {
		t.Fatalf("after the long call: %q", got)
	}
}

// TestWithoutTheTokenNoConnectionIsHeld: a client without the token that
// announces a body and sends none is answered at once and let go.
func TestWithoutTheTokenNoConnectionIsHeld(t *testing.T) {
	s := serve(t, Options{})
	addr := strings.TrimPrefix(strings.TrimSuffix(s.URL(), Path), "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	b, err := io.ReadAll(c)                        // the server closes the connection
	if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 401") {
		t.Fatalf("answer %q, %v", b, err)
	}
}

// count is the number of sessions held, expired ones included until the
// next admit.
func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}
