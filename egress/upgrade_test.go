package egress

import (
	"bufio"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
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
// bytes both ways, those the client sent early too; a handshake for
// another protocol than a WebSocket that carries a secret is refused
// before it reaches the upstream, and an upstream that switches unasked
// gets the client a 502.
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
	unasked := rawUpstream(t, func(c net.Conn, req *http.Request) {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nframes")
		time.Sleep(100 * time.Millisecond)
	})
	h, caPool, sec := interceptFixture(t, roots, "ws-s3cr3t-abcdefghijkl", "api.test", "example.com")
	open := proxyFixture(t, h)
	ws := func(target, host, extra string) string {
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n%s\r\n", target, host, extra)
	}

	// Plain HTTP.
	status, hdr, got := talkUpgraded(t, open(), ws(fmt.Sprintf("http://api.test:%d/ws", port), "api.test", ""))
	if status != 101 || hdr != "websocket auth=" || got != "EARLY\nLATER\n" {
		t.Fatalf("plain HTTP: %d %q %q", status, hdr, got)
	}
	// A switch to another protocol than a WebSocket, with a secret: its
	// bytes could not be read for the value.
	notWS := func(req string) string { return strings.Replace(req, "Upgrade: websocket", "Upgrade: h2c", 1) }
	before := plainGot.Load()
	status, body, _ := talkUpgraded(t, open(), notWS(ws(fmt.Sprintf("http://api.test:%d/ws", port), "api.test", "Authorization: Bearer "+sec.Placeholder+"\r\n")))
	if status != http.StatusNotImplemented || !strings.Contains(body, "carries a secret") || plainGot.Load() != before {
		t.Fatalf("plain HTTP with a secret: %d %q, the upstream got %d requests", status, body, plainGot.Load()-before)
	}
	status, body, _ = talkUpgraded(t, open(), fmt.Sprintf("GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\n\r\n", unasked))
	if status != http.StatusBadGateway || !strings.Contains(body, "did not ask") {
		t.Fatalf("switched unasked: %d %q", status, body)
	}

	// Intercepted HTTPS.
	viaTLS := func(extra string) (int, string, string) {
		tc := connectTLS(t, open, upAddr.Port(), caPool)
		req := ws("/ws", "example.com", extra)
		if extra != "" {
			req = notWS(req)
		}
		return talkUpgraded(t, tc, req)
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
