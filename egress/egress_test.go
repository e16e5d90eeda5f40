package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeResolver answers from a map; a name it lacks is not found. It
// counts lookups, so a test can tell that a refused name was never asked.
type fakeResolver struct {
	mu    sync.Mutex
	names map[string][]string
	asked []string
}

func (f *fakeResolver) LookupNetIP(_ context.Context, _ string, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, host)
	as, ok := f.names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range as {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func requested(p Policy) Policy {
	p.Requested = true
	return p
}

func mustPolicy(t *testing.T, mode string, presets []string, allow ...string) Policy {
	t.Helper()
	p, err := NewPolicy(mode, presets, allow)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseRule(t *testing.T) {
	good := map[string]Rule{
		"pypi.org":        {Host: "pypi.org"},
		"*.PyPI.org":      {Host: "pypi.org", Wildcard: true},
		"github.com:443":  {Host: "github.com", Port: 443},
		"host:*":          {Host: "host"},
		"10.0.0.0/8":      {Prefix: netip.MustParsePrefix("10.0.0.0/8")},
		"10.1.2.3":        {Prefix: netip.MustParsePrefix("10.1.2.3/32")},
		"10.0.0.0/8:5432": {Prefix: netip.MustParsePrefix("10.0.0.0/8"), Port: 5432},
		"fd00::/8":        {Prefix: netip.MustParsePrefix("fd00::/8")},
		"[fd00::1]:443":   {Prefix: netip.MustParsePrefix("fd00::1/128"), Port: 443},
	}
	for in, want := range good {
		r, err := ParseRule(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if r.Host != want.Host || r.Wildcard != want.Wildcard || r.Prefix != want.Prefix || r.Port != want.Port {
			t.Errorf("%q: got %+v, want %+v", in, r, want)
		}
	}
	for _, bad := range []string{"", "a b", "host:0", "host:70000", "host:x", "[fd00::1", "ex/ample.com", "*.", "a..b", strings.Repeat("a", 400)} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	if _, err := NewPolicy("allowlist", []string{"nope"}, nil); err == nil {
		t.Error("an unknown preset was accepted")
	}
	if _, err := NewPolicy("wide", nil, nil); err == nil {
		t.Error("an unknown mode was accepted")
	}
}

func TestSpecialAddresses(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
		"fe80::1", "fc00::1", "fd00:ec2::254", "100.64.0.1", "100.100.100.200", "0.0.0.0", "::", "224.0.0.1",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "255.255.255.255"} {
		if _, ok := Special(netip.MustParseAddr(s)); !ok {
			t.Errorf("%s is not special", s)
		}
	}
	for _, s := range []string{"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "64:ff9b::5db8:d70e"} {
		if cls, ok := Special(netip.MustParseAddr(s)); ok {
			t.Errorf("%s is %s", s, cls)
		}
	}
}

func TestDecide(t *testing.T) {
	res := &fakeResolver{names: map[string][]string{
		"pypi.org":               {"151.101.0.223"},
		"files.pythonhosted.org": {"151.101.1.63"},
		"github.com":             {"140.82.112.3"},
		"evil.example":           {"127.0.0.1"},
		"meta.example":           {"169.254.169.254"},
		"lan.example":            {"192.168.1.20"},
		"v6.example":             {"::1"},
		"mixed.example":          {"10.0.0.5", "151.101.0.9"},
		"db.corp":                {"10.1.2.3"},
	}}
	ctx := context.Background()
	def := mustPolicy(t, ModeAllowlist, []string{"packages", "git"})
	cases := []struct {
		chain   []Policy
		host    string
		port    int
		allowed bool
		reason  string
	}{
		{[]Policy{def}, "pypi.org", 443, true, ""},
		{[]Policy{def}, "pypi.org", 80, false, "not on the allowlist"},
		{[]Policy{def}, "github.com", 22, false, "not on the allowlist"},
		{[]Policy{def}, "example.com", 443, false, "not on the allowlist"},
		{[]Policy{def}, "151.101.0.223", 443, false, "no CIDR rule holds"},
		{[]Policy{def}, "::1", 443, false, "no CIDR rule holds"},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "evil.example")}, "evil.example", 443, false, "loopback"},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "meta.example")}, "meta.example", 80, false, "cloud metadata"},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "lan.example")}, "lan.example", 80, false, "private"},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "v6.example")}, "v6.example", 80, false, "loopback"},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "*.corp", "10.0.0.0/8:5432")}, "db.corp", 5432, true, ""},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "*.corp", "10.0.0.0/8:5432")}, "db.corp", 22, false, "keeps out"},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "169.254.169.254")}, "169.254.169.254", 80, true, ""},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "mixed.example")}, "mixed.example", 443, true, ""},
		{[]Policy{mustPolicy(t, ModeNone, nil)}, "pypi.org", 443, false, "network none"},
		// A child never gets more than its parent.
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "*.example", "github.com"), mustPolicy(t, ModeAllowlist, []string{"git"})}, "github.com", 443, true, ""},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "*.example", "github.com"), mustPolicy(t, ModeAllowlist, []string{"git"})}, "github.com", 80, false, "of its parent"},
		{[]Policy{mustPolicy(t, ModeOpen, nil), mustPolicy(t, ModeAllowlist, []string{"git"})}, "pypi.org", 443, false, "of its parent"},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "10.0.0.0/8"), mustPolicy(t, ModeOpen, nil)}, "db.corp", 5432, false, "not on the allowlist"},
		{[]Policy{mustPolicy(t, ModeOpen, nil), mustPolicy(t, ModeNone, nil)}, "pypi.org", 443, false, "parent's network is none"},
		// A child's own request narrows it further, and is named.
		{[]Policy{mustPolicy(t, ModeAllowlist, []string{"git"}), requested(mustPolicy(t, ModeAllowlist, nil, "pypi.org"))}, "github.com", 443, false, "not on the allowlist of its spawn request"},
		{[]Policy{mustPolicy(t, ModeAllowlist, []string{"git"}), requested(mustPolicy(t, ModeAllowlist, nil, "github.com"))}, "github.com", 443, true, ""},
		{[]Policy{mustPolicy(t, ModeOpen, nil), requested(mustPolicy(t, ModeAllowlist, nil, "10.0.0.0/8"))}, "192.168.1.1", 80, false, "no CIDR rule holds of its spawn request"},
		{[]Policy{mustPolicy(t, ModeAllowlist, nil, "nowhere.example")}, "nowhere.example", 443, false, "no such host"},
		{[]Policy{def}, "bad host", 443, false, "not a host name"},
	}
	for _, c := range cases {
		d := Decide(ctx, res, c.chain, c.host, c.port)
		if d.Allowed != c.allowed || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("%s:%d under %v: allowed=%v reason=%q, want allowed=%v reason ~%q", c.host, c.port, c.chain, d.Allowed, d.Reason, c.allowed, c.reason)
		}
	}
	d := Decide(ctx, res, []Policy{mustPolicy(t, ModeAllowlist, nil, "mixed.example")}, "mixed.example", 443)
	if len(d.Addrs) != 1 || d.Addrs[0].String() != "151.101.0.9" {
		t.Errorf("mixed.example: dials %v, want only its public address", d.Addrs)
	}
	res.asked = nil
	Decide(ctx, res, []Policy{def}, "example.com", 443)
	if len(res.asked) != 0 {
		t.Errorf("a name off the list was resolved: %v", res.asked)
	}
}

// proxyFixture runs h on one end of each connection a test opens.
func proxyFixture(t *testing.T, h Handler) func() net.Conn {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return func() net.Conn {
		a, b := net.Pipe()
		go h.Serve(ctx, b)
		t.Cleanup(func() { a.Close() })
		return a
	}
}

// upstream is a TCP server on the loopback that answers HTTP with its
// name, and echoes lines after a CONNECT-style raw "echo" greeting.
func upstream(t *testing.T) (netip.AddrPort, *http.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s %s host=%s auth=%q proxyauth=%q", r.Method, r.URL.Path, r.Host, r.Header.Get("Authorization"), r.Header.Get("Proxy-Authorization"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return netip.MustParseAddrPort(ln.Addr().String()), srv
}

func TestProxyHTTPConnectAndSOCKS(t *testing.T) {
	up, _ := upstream(t)
	res := &fakeResolver{names: map[string][]string{"api.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}}}
	chain := []Policy{mustPolicy(t, ModeAllowlist, nil, fmt.Sprintf("api.test:%d", up.Port()), "127.0.0.0/8")}
	var mu sync.Mutex
	var events []Event
	h := Handler{
		Decide: func(ctx context.Context, host string, port int) Decision { return Decide(ctx, res, chain, host, port) },
		Record: func(ev Event) { mu.Lock(); events = append(events, ev); mu.Unlock() },
	}
	open := proxyFixture(t, h)

	// Plain HTTP, two requests on one kept connection.
	c := open()
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		fmt.Fprintf(c, "GET http://api.test:%d/x%d HTTP/1.1\r\nHost: api.test:%d\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n", up.Port(), i, up.Port())
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(body), fmt.Sprintf("GET /x%d", i)) || strings.Contains(string(body), "c2VjcmV0") {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	c.Close()

	// A refused name: 403 with the reason and the way to allow it.
	c = open()
	fmt.Fprintf(c, "GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(body), "blocked by the sandbox's network policy") || !strings.Contains(string(body), "allow=other.test:80") {
		t.Fatalf("refused: %d %s", resp.StatusCode, body)
	}

	// CONNECT to an allowed port, then HTTP inside the tunnel.
	c = open()
	fmt.Fprintf(c, "CONNECT api.test:%d HTTP/1.1\r\nHost: api.test:%d\r\n\r\nGET /tunnel HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n", up.Port(), up.Port())
	br = bufio.NewReader(c)
	resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "GET /tunnel") {
		t.Fatalf("through the tunnel: %s", body)
	}
	c.Close()

	// CONNECT to a port the rule does not allow.
	c = open()
	fmt.Fprintf(c, "CONNECT api.test:22 HTTP/1.1\r\nHost: api.test:22\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("CONNECT to port 22: %v %v", resp, err)
	}

	// SOCKS5 by name, allowed, and by an address no rule holds.
	socks := func(host string, port uint16) byte {
		c := open()
		defer c.Close()
		c.Write([]byte{5, 1, 0})
		var rep [2]byte
		if _, err := io.ReadFull(c, rep[:]); err != nil || rep != [2]byte{5, 0} {
			t.Fatalf("socks greeting: %v %v", rep, err)
		}
		req := []byte{5, 1, 0, 3, byte(len(host))}
		req = append(req, host...)
		req = binary.BigEndian.AppendUint16(req, port)
		c.Write(req)
		var r [10]byte
		if _, err := io.ReadFull(c, r[:]); err != nil {
			t.Fatalf("socks reply: %v", err)
		}
		if r[1] == 0 {
			fmt.Fprintf(c, "GET /socks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("through socks: %v %v", resp, err)
			}
		}
		return r[1]
	}
	if code := socks("api.test", up.Port()); code != 0 {
		t.Errorf("socks to an allowed name: code %d", code)
	}
	if code := socks("other.test", 80); code != 2 {
		t.Errorf("socks to a refused name: code %d, want 2", code)
	}

	// A connection's end is recorded when the proxy's side of it ends,
	// after the client has what it asked for: wait for them.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		var refused, ended int
		for _, ev := range events {
			if !ev.Allowed {
				refused++
			}
			if ev.Ended && ev.Down > 0 {
				ended++
			}
		}
		if refused == 3 && ended >= 3 {
			mu.Unlock()
			return
		}
		if refused > 3 || time.Now().After(deadline) {
			t.Errorf("events: %d refused (want 3), %d ended with bytes (want >= 3): %+v", refused, ended, events)
			mu.Unlock()
			return
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProxyHostileInput feeds the proxy what a sandbox might: an endless
// header, garbage, a SOCKS bind, a request for the proxy itself. Each gets
// an answer or a close, never a hang, and nothing is dialled.
func TestProxyHostileInput(t *testing.T) {
	dialled := false
	h := Handler{
		Decide: func(ctx context.Context, host string, port int) Decision {
			return Decide(ctx, &fakeResolver{}, []Policy{mustPolicy(t, ModeAllowlist, nil)}, host, port)
		},
		Dial: func(context.Context, Decision) (net.Conn, error) { dialled = true; return nil, fmt.Errorf("no") },
	}
	open := proxyFixture(t, h)
	answer := func(send []byte) string {
		c := open()
		done := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(io.LimitReader(c, 4096))
			done <- string(b)
		}()
		go func() { c.Write(send) }()
		select {
		case s := <-done:
			return s
		case <-time.After(20 * time.Second):
			t.Fatalf("no answer to %.40q", send)
		}
		return ""
	}
	long := append([]byte("GET http://x/ HTTP/1.1\r\nX: "), make([]byte, 2*maxHeader)...)
	if s := answer(long); !strings.Contains(s, "400") {
		t.Errorf("endless header: %q", s)
	}
	if s := answer([]byte("\x16\x03\x01garbage\r\n\r\n")); !strings.Contains(s, "400") {
		t.Errorf("garbage: %q", s)
	}
	if s := answer([]byte("GET / HTTP/1.1\r\nHost: proxy\r\n\r\n")); !strings.Contains(s, "400") {
		t.Errorf("a request for the proxy itself: %q", s)
	}
	if s := answer([]byte("CONNECT nohost HTTP/1.1\r\n\r\n")); !strings.Contains(s, "400") {
		t.Errorf("CONNECT without a port: %q", s)
	}
	if s := answer([]byte{5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80}); len(s) < 4 || s[3] != 7 {
		t.Errorf("socks BIND: %q", s)
	}
	if s := answer([]byte{4, 1, 0, 80, 127, 0, 0, 1, 0}); len(s) < 2 || s[1] != 0x5b {
		t.Errorf("socks4: %q", s)
	}
	if dialled {
		t.Error("something was dialled")
	}
}

func TestLogAndSummary(t *testing.T) {
	l := &Log{Dir: t.TempDir(), MaxBytes: 400}
	now := time.Now().UTC()
	for i := 0; i < 10; i++ {
		if err := l.Append("box", Event{Time: now, Host: "a.test", Port: 443, Via: "connect", Allowed: true, Ended: true, Up: 10, Down: 100}); err != nil {
			t.Fatal(err)
		}
	}
	_ = l.Append("box", Event{Time: now.Add(time.Second), Host: "evil.test", Port: 443, Reason: "not on the allowlist"})
	evs, err := l.Read("box", 0)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Host != "evil.test" {
		t.Fatalf("read: %v %v", evs, err)
	}
	s := Summarize(evs, 5)
	if len(s.Refused) != 1 || s.Refused[0].Host != "evil.test:443" || len(s.Bytes) != 1 || s.Bytes[0].Down == 0 {
		t.Errorf("summary: %+v", s)
	}
	if err := l.Append("../x", Event{Host: "h"}); err == nil {
		t.Error("a name with a slash was taken")
	}
}

// TestBulkyAnswers: a large answer with no secret in play comes whole, says
// Connection: close, and its connection is not kept; the proxy's side ends
// when the upstream closes, and when the sandbox closes after the body
// although the upstream keeps its connection open.
// rawUpstream serves every connection made to it, on a loopback listener
// closed with the test, by reading one request and handing it to answer,
// which writes the raw bytes of the answer; the connection is closed
// when answer returns. It returns the listener's port.
func rawUpstream(t *testing.T, answer func(c net.Conn, req *http.Request)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveEach(t, ln, func(c net.Conn) {
		if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			answer(c, req)
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// serveEach hands each connection ln accepts to serve, on a goroutine of
// its own, and closes the connection when serve returns; ln is closed
// with the test.
func serveEach(t *testing.T, ln net.Listener, serve func(c net.Conn)) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
}

func TestBulkyAnswers(t *testing.T) {
	const size = 3 << 20
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	port := rawUpstream(t, func(c net.Conn, req *http.Request) {
		fmt.Fprintf(c, "HTTP/1.1 200 Fine\r\nContent-Length: %d\r\nX-Up: yes\r\nConnection: keep-alive\r\n\r\n", size)
		c.Write(body)
		switch req.URL.Path {
		case "/stall":
			time.Sleep(time.Minute)
		case "/junk":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!")
		}
	})
	res := &fakeResolver{names: map[string][]string{"api.test": {"127.0.0.1"}}}
	chain := []Policy{mustPolicy(t, ModeAllowlist, nil, "api.test", "127.0.0.0/8")}
	ended := make(chan Event, 8)
	h := Handler{
		Decide: func(ctx context.Context, host string, port int) Decision { return Decide(ctx, res, chain, host, port) },
		Record: func(ev Event) {
			if ev.Ended {
				ended <- ev
			}
		},
	}
	open := proxyFixture(t, h)
	for _, path := range []string{"/close", "/stall", "/junk", "/pipelined"} {
		c := open()
		req := fmt.Sprintf("GET http://api.test:%d%s HTTP/1.1\r\nHost: api.test\r\n\r\n", port, path)
		if path == "/pipelined" {
			req += req // the second goes unanswered; the first comes whole
		}
		go io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(got, body) || resp.StatusCode != 200 || resp.Status != "200 Fine" || !resp.Close || resp.Header.Get("X-Up") != "yes" {
			t.Fatalf("%s: %v, %d bytes, status %q, close %v, header %v", path, err, len(got), resp.Status, resp.Close, resp.Header)
		}
		c.Close()
		select {
		case ev := <-ended:
			if ev.Down < size {
				t.Errorf("%s: recorded %d bytes down", path, ev.Down)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the proxy's side never ended", path)
		}
	}
}
