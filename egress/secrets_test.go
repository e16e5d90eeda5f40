package egress

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// echoHandler answers with the Authorization header it got, in a header
// and in the body.
var echoHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Seen", r.Header.Get("Authorization"))
	fmt.Fprintf(w, "seen=%s", r.Header.Get("Authorization"))
})

func TestSecretsSwappedInOnlyForTheirHosts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Host+" "+r.Header.Get("Authorization"))
		echoHandler(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	res := &fakeResolver{names: map[string][]string{"api.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}}}
	chain := []Policy{mustPolicy(t, ModeAllowlist, nil, "api.test", "other.test", "127.0.0.0/8")}
	rules, err := ParseSecretHosts([]string{"api.test"})
	if err != nil {
		t.Fatal(err)
	}
	sec := Secret{Name: "TOKEN", Placeholder: NewPlaceholder("TOKEN"), Value: "s3cr3t-value-0123456789", Hosts: rules}
	h := Handler{
		Decide:  func(ctx context.Context, host string, port int) Decision { return Decide(ctx, res, chain, host, port) },
		Secrets: func() []Secret { return []Secret{sec} },
	}
	open := proxyFixture(t, h)
	get := func(host string) (string, http.Header) {
		c := open()
		fmt.Fprintf(c, "GET http://%s:%d/ HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", host, port, host, sec.Placeholder)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.Header
	}
	body, hdr := get("api.test")
	if strings.Contains(body, sec.Value) || strings.Contains(hdr.Get("X-Seen"), sec.Value) || !strings.Contains(body, sec.Placeholder) {
		t.Fatalf("the value came back into the sandbox: %q %v", body, hdr)
	}
	body, _ = get("other.test")
	if !strings.Contains(body, sec.Placeholder) {
		t.Fatalf("other.test: %q", body)
	}
	if len(seen) != 2 || seen[0] != fmt.Sprintf("api.test:%d Bearer %s", port, sec.Value) || seen[1] != fmt.Sprintf("other.test:%d Bearer %s", port, sec.Placeholder) {
		t.Fatalf("upstream saw %q", seen)
	}
	if _, err := ParseSecretHosts([]string{"10.0.0.0/8"}); err == nil {
		t.Error("a secret for an address range was accepted")
	}
	if _, err := ParseSecretHosts(nil); err == nil {
		t.Error("a secret for no host was accepted")
	}
}

// TestInterceptedHTTPS: a CONNECT to a host the user opted in to
// interception for is answered under the CA's certificate, the secret
// goes into the request's headers, the upstream's own certificate is
// verified, and the value does not come back; a host not opted in is a
// plain tunnel (the client sees the upstream's certificate).
func TestInterceptedHTTPS(t *testing.T) {
	up := httptest.NewTLSServer(echoHandler)
	t.Cleanup(up.Close)
	upAddr := netip.MustParseAddrPort(up.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	// The test server's certificate names example.com.
	h, caPool, sec := interceptFixture(t, roots, "tls-s3cr3t-abcdefghijkl", "example.com")
	ca := h.CA
	intercept := true
	h.Intercept = func(string, int) bool { return intercept }
	open := proxyFixture(t, h)
	client := func(trust *x509.CertPool) (string, *x509.Certificate, error) {
		tc := connectTLS(t, open, upAddr.Port(), trust)
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", sec.Placeholder)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return "", nil, err
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b) + " X-Seen=" + resp.Header.Get("X-Seen"), tc.ConnectionState().PeerCertificates[0], nil
	}
	body, cert, err := client(caPool)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Issuer.CommonName != ca.cert.Subject.CommonName {
		t.Fatalf("intercepted under %q", cert.Issuer)
	}
	if strings.Contains(body, sec.Value) || strings.Count(body, sec.Placeholder) != 2 {
		t.Fatalf("the value came back, or never went: %q", body)
	}
	// The upstream saw the value: its echo, scrubbed, says so by length.
	if !strings.Contains(body, "seen=Bearer "+sec.Placeholder) {
		t.Fatalf("body %q", body)
	}
	// Not opted in: a plain tunnel, the upstream's own certificate.
	intercept = false
	body, cert, err = client(roots)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Issuer.CommonName == ca.cert.Subject.CommonName || !strings.Contains(body, "seen=Bearer "+sec.Placeholder) {
		t.Fatalf("not opted in: %q under %q", body, cert.Issuer)
	}
	// The CA is reread, not remade, and its key is private.
	dir := filepath.Join(t.TempDir(), "ca2")
	a, _ := LoadOrCreateCA(dir)
	b, err := LoadOrCreateCA(dir)
	if err != nil || string(a.CertPEM()) != string(b.CertPEM()) {
		t.Fatalf("reload: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode: %v %v", fi, err)
	}
}

func peekAll(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return append([]byte(nil), b...)
}

// TestScrubberAcrossReads: a value cut by reads of any size is still
// replaced, and nothing else changes.
func TestScrubberAcrossReads(t *testing.T) {
	sec := Secret{Placeholder: "PH_LONGER_THAN_THE_VALUE", Value: "VALUE123"}
	in := "aVALUE123bVALUE12cVALUE123VALUE123" + strings.Repeat("x", 100000) + "VALUE123"
	want := strings.ReplaceAll(in, "VALUE123", "PH_LONGER_THAN_THE_VALUE")
	for _, wrap := range []func(io.Reader) io.Reader{iotest.OneByteReader, iotest.HalfReader, func(r io.Reader) io.Reader { return r }} {
		s := &scrubber{r: io.NopCloser(wrap(strings.NewReader(in))), secrets: []Secret{sec}}
		got, err := io.ReadAll(s)
		if err != nil || string(got) != want {
			t.Fatalf("got %d bytes (%v), want %d", len(got), err, len(want))
		}
	}
	// A stream of lines (server-sent events): each comes out whole before
	// the next is sent; only an end that may begin a value waits.
	pr, pw := io.Pipe()
	s := &scrubber{r: pr, secrets: []Secret{sec}}
	br := bufio.NewReader(s)
	for _, line := range []string{"data: one VALUE123\n", "data: two\n"} {
		go func() { _, _ = io.WriteString(pw, line) }()
		got, err := readLineWithin(br, time.Minute)
		if want := strings.ReplaceAll(line, "VALUE123", sec.Placeholder); err != nil || got != want {
			t.Fatalf("line %q came out as %q (%v)", line, got, err)
		}
	}
	go func() { _, _ = io.WriteString(pw, "end VAL") }()
	buf := make([]byte, 64)
	if n, err := s.Read(buf); err != nil || string(buf[:n]) != "end " {
		t.Fatalf("an end that may begin the value: %q %v", buf[:n], err)
	}
	go func() { _, _ = io.WriteString(pw, "UE123 done"); pw.Close() }()
	if rest, err := io.ReadAll(s); err != nil || string(rest) != sec.Placeholder+" done" {
		t.Fatalf("the value cut between reads: %q %v", rest, err)
	}
}

// TestKeptConnectionAnswersEnd: an answer whose body runs to its close
// (or whose length scrubbing changed) ends the client's connection after
// it, so a client waiting for the end is not left hanging on a kept one.
func TestKeptConnectionAnswersEnd(t *testing.T) {
	port := rawUpstream(t, func(c net.Conn, _ *http.Request) {
		io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\nto the close")
	})
	res := &fakeResolver{names: map[string][]string{"api.test": {"127.0.0.1"}}}
	chain := []Policy{mustPolicy(t, ModeAllowlist, nil, "api.test", "127.0.0.0/8")}
	h := Handler{Decide: func(ctx context.Context, host string, port int) Decision { return Decide(ctx, res, chain, host, port) }}
	c := proxyFixture(t, h)()
	fmt.Fprintf(c, "GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\n\r\n", port)
	done := make(chan string, 1)
	go func() { b, _ := io.ReadAll(c); done <- string(b) }()
	select {
	case got := <-done:
		if !strings.HasSuffix(got, "to the close") {
			t.Fatalf("got %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the kept connection never ended after a close-delimited answer")
	}
}

// TestReflectedSecretsStayOut: an upstream that reflects the value in
// every place an answer has (status, header names and values, trailers,
// the body under any encoding) never gets it into the sandbox: it is put
// back to the placeholder, dropped, or the answer refused. An answer to a
// request that carried no secret keeps its length (and its connection).
func TestReflectedSecretsStayOut(t *testing.T) {
	const value = "S3CR3TVALUE-abcdef"
	port := rawUpstream(t, func(c net.Conn, req *http.Request) {
		if req.Header.Get("Expect") == "100-continue" {
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		}
		body, _ := io.ReadAll(req.Body)
		a := req.Header.Get("Authorization")
		switch req.URL.Path {
		case "/status":
			fmt.Fprintf(c, "HTTP/1.1 200 %s\r\nContent-Length: 2\r\n\r\nok", a)
		case "/names":
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-%s: 1\r\nContent-Length: 2\r\n\r\nok", a)
		case "/trailer":
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: %s\r\n\r\n", a)
		case "/identity":
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\nContent-Length: %d\r\n\r\n%s", len(a), a)
		case "/gzip":
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s", len(a), a)
		case "/upload":
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		default:
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
		}
	})
	h, sec := secretHandler(t, value, "echo.test")
	open := proxyFixture(t, h)
	get := func(path, extra string) string {
		c := open()
		fmt.Fprintf(c, "GET http://echo.test:%d%s HTTP/1.1\r\nHost: echo.test\r\nAuthorization: %s\r\n%sConnection: close\r\n\r\n", port, path, sec.Placeholder, extra)
		b, _ := io.ReadAll(c)
		return string(b)
	}
	for _, path := range []string{"/status", "/names", "/trailer", "/identity", "/gzip"} {
		got := get(path, "")
		if strings.Contains(strings.ToLower(got), strings.ToLower(value)) {
			t.Errorf("%s: the value came back: %q", path, got)
		}
		if path == "/gzip" && !strings.Contains(got, "came encoded") {
			t.Errorf("%s: %q", path, got)
		}
	}
	// An upload that waits for 100 Continue gets it, then the answer.
	c := open()
	fmt.Fprintf(c, "POST http://echo.test:%d/upload HTTP/1.1\r\nHost: echo.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\n", port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 100 {
		t.Fatalf("interim answer: %v %v", resp, err)
	}
	io.WriteString(c, "hello")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "hello" {
		t.Fatalf("upload answer %q", b)
	}
	// No secret in the request: the answer keeps its length.
	c = open()
	fmt.Fprintf(c, "GET http://echo.test:%d/plain HTTP/1.1\r\nHost: echo.test\r\n\r\n", port)
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.ContentLength != 5 || resp.Close {
		t.Fatalf("an answer without a secret lost its length or connection: %+v %v", resp, err)
	}
}

// TestSpecialAddressesNeedANarrowRule: 0.0.0.0/0 allows public addresses,
// not the loopback or the metadata service; a narrow rule does; this
// host's own addresses are special.
func TestSpecialAddressesNeedANarrowRule(t *testing.T) {
	wide := mustPolicy(t, ModeAllowlist, nil, "0.0.0.0/0", "::/0")
	for _, a := range []string{"127.0.0.1", "169.254.169.254", "::1", "10.1.2.3"} {
		if d := Decide(context.Background(), &fakeResolver{}, []Policy{wide}, a, 80); d.Allowed {
			t.Errorf("0.0.0.0/0 allowed %s", a)
		}
	}
	if d := Decide(context.Background(), &fakeResolver{}, []Policy{wide}, "93.184.215.14", 80); !d.Allowed {
		t.Errorf("0.0.0.0/0 refused a public address: %s", d.Reason)
	}
	narrow := mustPolicy(t, ModeAllowlist, nil, "10.0.0.0/8")
	if d := Decide(context.Background(), &fakeResolver{}, []Policy{narrow}, "10.1.2.3", 80); !d.Allowed {
		t.Errorf("10.0.0.0/8 refused 10.1.2.3: %s", d.Reason)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		if cls, ok := Special(p.Addr()); !ok {
			t.Errorf("this host's address %s is not special", p.Addr())
		} else if !p.Addr().IsLoopback() && !p.Addr().IsPrivate() && !p.Addr().IsLinkLocalUnicast() && cls != "this host's own" {
			t.Errorf("%s: %s", p.Addr(), cls)
		}
	}
	for _, a := range []string{"2002:7f00:1::1", "2001::1", "fec0::1", "64:ff9b:1::a00:1", "::7f00:1"} {
		if _, ok := Special(netip.MustParseAddr(a)); !ok {
			t.Errorf("%s is not special", a)
		}
	}
}

// TestScrubWhereThePlaceholderHoldsTheValue: a value found inside its own
// placeholder ("secret" in SANDBOX_SECRET_…) is still scrubbed, once.
func TestScrubWhereThePlaceholderHoldsTheValue(t *testing.T) {
	sec := Secret{Placeholder: NewPlaceholder("K"), Value: "secret"}
	resp := &http.Response{Status: "200 secret", Header: http.Header{"X-Secret-Name": {"a secret"}}, Body: io.NopCloser(strings.NewReader("the secret"))}
	done := make(chan error, 1)
	go func() { done <- scrubResponse(resp, []Secret{sec}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("scrubbing did not end")
	}
	b, _ := io.ReadAll(resp.Body)
	if strings.Contains(resp.Status, " secret") || string(b) != "the "+sec.Placeholder {
		t.Fatalf("%q %q %v", resp.Status, b, resp.Header)
	}
}

// chunks reads data in pieces of the sizes given, in turn (1 to 7 bytes).
type chunks struct {
	data  []byte
	sizes []byte
	i     int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = int(c.sizes[c.i%len(c.sizes)])%7 + 1
		c.i++
	}
	n = min(n, len(c.data), len(p))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func (c *chunks) Close() error { return nil }

// FuzzScrubberStream: however a stream is cut into reads, the scrubber
// gives what scrubbing it whole gives, and no value is left in it
// outside a placeholder: values inside others, values that repeat their
// own start, and a placeholder that ends with a value's start included
// (letters a and b only, so that they overlap).
func FuzzScrubberStream(f *testing.F) {
	f.Add("aab", "ab", "aaabab", []byte{1, 2})
	f.Add("abab", "ba", "ababababa", []byte{3})
	f.Add("bbb", "", "bbabbbbbbb", []byte{0})
	f.Add("aa", "baab", "baabaab", []byte{2, 5})
	f.Fuzz(func(t *testing.T, v1, v2, data string, sizes []byte) {
		secs, v1, data, ok := fuzzSecrets(v1, v2, data)
		if !ok {
			return
		}
		out, err := io.ReadAll(&scrubber{r: &chunks{data: []byte(data), sizes: sizes}, secrets: secs})
		if err != nil {
			t.Fatal(err)
		}
		whole := scrubValue(data, secs)
		if string(out) != whole {
			t.Fatalf("secrets %+v, %q read in pieces %v: %q, whole: %q", secs, data, sizes, out, whole)
		}
		for _, s := range secs {
			if strings.Contains(whole, s.Value) {
				t.Fatalf("secrets %+v, %q: a value is left in %q", secs, data, whole)
			}
		}
		// The placeholder itself ending with the start of a value.
		secs = []Secret{{Placeholder: "a" + v1[:len(v1)/2], Value: v1}}
		out, err = io.ReadAll(&scrubber{r: &chunks{data: []byte(data), sizes: sizes}, secrets: secs})
		if err != nil || string(out) != scrubValue(data, secs) {
			t.Fatalf("placeholder %q, value %q, %q in pieces %v: %q, whole %q", secs[0].Placeholder, v1, data, sizes, out, scrubValue(data, secs))
		}
	})
}

// fuzzSecrets reads a fuzzer's strings as letters a and b only (so that
// values, placeholders and data overlap): one or two secrets of values
// up to 8 letters with placeholders "<1>" and "<2>", and data up to 64
// letters. ok is false for inputs out of those bounds.
func fuzzSecrets(v1, v2, data string) (secs []Secret, value1, abData string, ok bool) {
	ab := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			b.WriteByte("ab"[s[i]%2])
		}
		return b.String()
	}
	v1, v2, data = ab(v1), ab(v2), ab(data)
	if v1 == "" || len(v1) > 8 || len(v2) > 8 || len(data) > 64 {
		return nil, "", "", false
	}
	secs = []Secret{{Placeholder: "<1>", Value: v1}}
	if v2 != "" && v2 != v1 {
		secs = append(secs, Secret{Placeholder: "<2>", Value: v2})
	}
	return secs, v1, data, true
}
