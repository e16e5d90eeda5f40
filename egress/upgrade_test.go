package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// upgradeEcho switches a request that asks for a WebSocket and then
// answers each line it reads in capitals; it counts the requests it got.
func upgradeEcho(got *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
			http.Error(w, "want an upgrade", http.StatusUpgradeRequired)
			return
		}
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Auth: %s\r\n\r\n", r.Header.Get("Authorization"))
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString(strings.ToUpper(line))
			brw.Flush()
		}
	})
}

// talkUpgraded sends request on c, with a line the client sends before
// the answer comes, and returns the answer's status, its Upgrade header
// and what the switched connection answers to that line and to one more.
func talkUpgraded(t *testing.T, c io.ReadWriter, request string) (int, string, string) {
	t.Helper()
	if _, err := io.WriteString(c, request+"early\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), ""
	}
	if _, err := io.WriteString(c, "later\n"); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for range 2 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after the switch: %q, %v", got.String(), err)
		}
		got.WriteString(line)
	}
	return resp.StatusCode, resp.Header.Get("Upgrade") + " auth=" + resp.Header.Get("X-Auth"), got.String()
}

// TestUpgrades: a WebSocket's handshake goes through the proxy, over plain
// HTTP and through intercepted HTTPS, and the switched connection carries
// bytes both ways, those the client sent early too; a handshake that
// carries a secret is refused before it reaches the upstream, and an
// upstream that switches unasked gets the client a 502.
func TestUpgrades(t *testing.T) {
	var plainGot, tlsGot atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Server{Handler: upgradeEcho(&plainGot)}
	go plain.Serve(ln)
	t.Cleanup(func() { plain.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	up := httptest.NewTLSServer(upgradeEcho(&tlsGot))
	t.Cleanup(up.Close)
	upAddr := netip.MustParseAddrPort(up.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	ca, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	unasked := rawUpstream(t, func(c net.Conn, req *http.Request) {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nframes")
		time.Sleep(100 * time.Millisecond)
	})
	res := &fakeResolver{names: map[string][]string{"api.test": {"127.0.0.1"}, "example.com": {"127.0.0.1"}}}
	chain := []Policy{mustPolicy(t, ModeAllowlist, nil, "api.test", "example.com", "127.0.0.0/8")}
	rules, _ := ParseSecretHosts([]string{"api.test", "example.com"})
	sec := Secret{Name: "TOKEN", Placeholder: NewPlaceholder("TOKEN"), Value: "ws-s3cr3t-abcdefghijkl", Hosts: rules}
	h := Handler{
		Decide:        func(ctx context.Context, host string, port int) Decision { return Decide(ctx, res, chain, host, port) },
		Secrets:       func() []Secret { return []Secret{sec} },
		Intercept:     func(string, int) bool { return true },
		CA:            ca,
		UpstreamRoots: roots,
	}
	open := proxyFixture(t, h)
	ws := func(target, host, extra string) string {
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n%s\r\n", target, host, extra)
	}

	// Plain HTTP.
	status, hdr, got := talkUpgraded(t, open(), ws(fmt.Sprintf("http://api.test:%d/ws", port), "api.test", ""))
	if status != 101 || hdr != "websocket auth=" || got != "EARLY\nLATER\n" {
		t.Fatalf("plain HTTP: %d %q %q", status, hdr, got)
	}
	before := plainGot.Load()
	status, body, _ := talkUpgraded(t, open(), ws(fmt.Sprintf("http://api.test:%d/ws", port), "api.test", "Authorization: Bearer "+sec.Placeholder+"\r\n"))
	if status != http.StatusNotImplemented || !strings.Contains(body, "carries a secret") || plainGot.Load() != before {
		t.Fatalf("plain HTTP with a secret: %d %q, the upstream got %d requests", status, body, plainGot.Load()-before)
	}
	status, body, _ = talkUpgraded(t, open(), fmt.Sprintf("GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\n\r\n", unasked))
	if status != http.StatusBadGateway || !strings.Contains(body, "did not ask") {
		t.Fatalf("switched unasked: %d %q", status, body)
	}

	// Intercepted HTTPS.
	viaTLS := func(extra string) (int, string, string) {
		c := open()
		fmt.Fprintf(c, "CONNECT example.com:%d HTTP/1.1\r\nHost: example.com\r\n\r\n", upAddr.Port())
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		caPool := x509.NewCertPool()
		caPool.AppendCertsFromPEM(ca.CertPEM())
		tc := tls.Client(&prefixConn{Conn: c, pre: peekAll(br)}, &tls.Config{ServerName: "example.com", RootCAs: caPool})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		return talkUpgraded(t, tc, ws("/ws", "example.com", extra))
	}
	status, hdr, got = viaTLS("")
	if status != 101 || hdr != "websocket auth=" || got != "EARLY\nLATER\n" {
		t.Fatalf("intercepted HTTPS: %d %q %q", status, hdr, got)
	}
	before = tlsGot.Load()
	status, body, _ = viaTLS("Authorization: Bearer " + sec.Placeholder + "\r\n")
	if status != http.StatusNotImplemented || !strings.Contains(body, "carries a secret") || tlsGot.Load() != before {
		t.Fatalf("intercepted HTTPS with a secret: %d %q, the upstream got %d requests", status, body, tlsGot.Load()-before)
	}
}
