package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Handler serves one sandbox's proxied connections.
type Handler struct {
	// Decide answers a connection to host:port.
	Decide func(ctx context.Context, host string, port int) Decision
	// Dial connects to an allowed destination; nil dials d.Addrs in order.
	Dial func(ctx context.Context, d Decision) (net.Conn, error)
	// Record is told of each decision, and of the bytes an allowed
	// connection carried when it ends; nil records nothing.
	Record func(Event)
	// Secrets are the sandbox's secrets swapped in at egress (nil: none).
	Secrets func() []Secret
	// Intercept reports whether the user opted host:port in to HTTPS
	// interception, which CA then signs for (both needed).
	Intercept func(host string, port int) bool
	CA        *CA
	// UpstreamRoots verify intercepted hosts' certificates; nil: the
	// host's roots.
	UpstreamRoots *x509.CertPool
}

// Event is one line of a sandbox's network log.
type Event struct {
	Time    time.Time `json:"time"`
	Host    string    `json:"host"`
	Port    int       `json:"port"`
	Via     string    `json:"via"` // connect, http or socks
	Allowed bool      `json:"allowed"`
	// Rule allowed it; Reason refused it (or says why a dial failed).
	Rule   string `json:"rule,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Ended marks the line written when an allowed connection ends, with
	// the bytes it carried out (Up) and in (Down).
	Ended bool  `json:"ended,omitempty"`
	Up    int64 `json:"up,omitempty"`
	Down  int64 `json:"down,omitempty"`
}

// Limits of what a sandbox may send before the host decides.
const (
	maxHeader    = 64 << 10         // a request's line and headers
	firstTimeout = 30 * time.Second // the first request of a connection
	idleTimeout  = 2 * time.Minute  // between requests on a kept connection
	dialTimeout  = 15 * time.Second // the host's dial of an allowed address
)

// Serve answers one connection that the sandbox opened to its proxy,
// until it ends or ctx does.
func (h Handler) Serve(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	lr := &resetLimit{r: c, n: maxHeader}
	br := bufio.NewReaderSize(lr, 4096)
	_ = c.SetReadDeadline(time.Now().Add(firstTimeout))
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	switch first[0] {
	case 5:
		h.socks5(ctx, c, br)
	case 4:
		// SOCKS4 names addresses only and has no way to say why: refuse
		// it plainly.
		_, _ = c.Write([]byte{0, 0x5b, 0, 0, 0, 0, 0, 0})
	default:
		h.http(ctx, c, br, lr)
	}
}

// resetLimit is a reader that fails past n bytes until n is reset.
type resetLimit struct {
	r io.Reader
	n int64
}

var errTooLong = errors.New("request header too large")

func (l *resetLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errTooLong
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// http serves HTTP proxy requests: CONNECT tunnels and plain requests
// with absolute http:// URLs, one after another on a kept connection.
func (h Handler) http(ctx context.Context, c net.Conn, br *bufio.Reader, lr *resetLimit) {
	for {
		lr.n = maxHeader
		req, err := http.ReadRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !isTimeout(err) {
				msg := err.Error()
				if errors.Is(err, errTooLong) {
					msg = fmt.Sprintf("the request's line and headers are over %d bytes", maxHeader)
				}
				writeStatus(c, http.StatusBadRequest, "the sandbox's proxy could not read the request: "+shorten(msg, 200), nil)
			}
			return
		}
		lr.n = 1 << 62
		_ = c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			h.connect(ctx, c, br, req)
			return
		}
		if !h.forward(ctx, c, br, req) {
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(idleTimeout))
	}
}

// connect answers a CONNECT: 200 and a tunnel, or 403 saying why.
func (h Handler) connect(ctx context.Context, c net.Conn, br *bufio.Reader, req *http.Request) {
	host, port, err := splitHostPort(req.Host, 0)
	if err != nil {
		writeStatus(c, http.StatusBadRequest, "CONNECT wants host:port: "+err.Error(), nil)
		return
	}
	d := h.decide(ctx, host, port, "connect")
	if !d.Allowed {
		writeStatus(c, http.StatusForbidden, d.Refusal(), nil)
		return
	}
	up, err := h.dial(ctx, d)
	if err != nil {
		h.record(Event{Host: host, Port: port, Via: "connect", Allowed: true, Ended: true, Reason: err.Error()})
		writeStatus(c, http.StatusBadGateway, fmt.Sprintf("the host could not connect to %s: %v", hostPort(host, port), err), nil)
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		return
	}
	// Bytes the client sent after the request (a TLS hello sent early)
	// go first.
	var pre []byte
	if n := br.Buffered(); n > 0 {
		pre, _ = br.Peek(n)
	}
	if d.Peer == "" && h.CA != nil && h.Intercept != nil && h.Intercept(host, port) {
		h.intercept(ctx, &prefixConn{Conn: c, pre: pre}, up, func(ctx context.Context) (net.Conn, error) { return h.dial(ctx, d) }, host, port)
		return
	}
	upN, downN := splice(c, up, pre)
	h.record(Event{Host: host, Port: port, Via: "connect", Allowed: true, Ended: true, Up: upN, Down: downN})
}

// prefixConn is a connection whose first bytes were read already.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// intercept serves a CONNECT to an HTTPS host the user opted in to
// interception for: TLS with the sandbox under a certificate the CA signs
// for host, TLS to the host verified as usual, and between them HTTP/1.1
// requests whose headers get the secrets meant for host: HTTP/1.1, or
// HTTP/2 where the sandbox's client asks for it (h2.go; redial makes
// further connections to the host there).
func (h Handler) intercept(ctx context.Context, c net.Conn, up net.Conn, redial func(context.Context) (net.Conn, error), host string, port int) {
	cc, cu := &countConn{Conn: c}, &countConn{Conn: up}
	var moreUp, moreDown int64
	defer func() {
		c.Close()
		up.Close()
		h.record(Event{Host: host, Port: port, Via: "connect", Allowed: true, Ended: true,
			Up: cu.wrote.Load() + moreUp, Down: cu.read.Load() + moreDown, Rule: "intercepted"})
	}()
	stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
	defer stop()
	cert, err := h.CA.leaf(host)
	if err != nil {
		return
	}
	tc := tls.Server(cc, &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12})
	_ = c.SetDeadline(time.Now().Add(firstTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		return
	}
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		_ = c.SetDeadline(time.Time{})
		// up's bytes are counted by serveH2, as its other connections'.
		moreUp, moreDown = h.serveH2(ctx, tc, up, redial, host, port)
		return
	}
	ut := tls.Client(cu, &tls.Config{ServerName: host, RootCAs: h.UpstreamRoots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	_ = up.SetDeadline(time.Now().Add(firstTimeout))
	uerr := ut.HandshakeContext(ctx)
	_ = up.SetDeadline(time.Time{})
	lr := &resetLimit{r: tc, n: maxHeader}
	cbr := bufio.NewReaderSize(lr, 4096)
	ubr := bufio.NewReader(ut)
	for {
		lr.n = maxHeader
		req, err := http.ReadRequest(cbr)
		if err != nil {
			return
		}
		lr.n = 1 << 62
		_ = c.SetDeadline(time.Time{})
		// Only a path (or *) names what is asked of host: an absolute
		// or opaque target would name another host, which a server
		// behind one address for many names goes by over Host.
		if !strings.HasPrefix(req.RequestURI, "/") && req.RequestURI != "*" {
			drain(req)
			writeStatus(tc, http.StatusBadRequest, "inside a CONNECT tunnel the sandbox's proxy takes a path (/...) as the request target", nil)
			return
		}
		req.URL = &url.URL{Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery}
		if req.RequestURI == "*" {
			req.URL = &url.URL{Opaque: "*"}
		}
		if uerr != nil {
			drain(req)
			writeStatus(tc, http.StatusBadGateway, fmt.Sprintf("%s: its certificate did not verify: %v", hostPort(host, port), uerr), nil)
			return
		}
		keep := !req.Close
		upgrade := upgradeOf(req.Header)
		stripHop(req.Header)
		used := swapIn(req, secretsFor(h.secrets(), host, port))
		if why := checkUpgradeSecret(req.Header, host, port, upgrade, used); why != "" {
			drain(req)
			writeStatus(tc, http.StatusNotImplemented, why, nil)
			return
		}
		keepUpgrade(req.Header, upgrade)
		req.RequestURI = ""
		req.Host = hostPort(host, port)
		if port == 443 {
			req.Host = host
		}
		werr := make(chan error, 1)
		go func() { werr <- req.Write(ut) }()
		resp, err := readFinal(ubr, req, tc, used)
		if err != nil {
			<-werr
			writeStatus(tc, http.StatusBadGateway, unreadAnswer(host, port, err, used), nil)
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			if <-werr == nil {
				switchProtocols(tc, cbr, ut, ubr, resp, upgrade, hostPort(host, port), used)
			}
			return
		}
		for _, k := range hopHeaders {
			if k != "Transfer-Encoding" {
				resp.Header.Del(k)
			}
		}
		if err := scrubResponse(resp, used); err != nil {
			resp.Body.Close()
			<-werr
			writeStatus(tc, http.StatusBadGateway, err.Error(), nil)
			return
		}
		upClose := resp.Close
		resp.Close = !keep || upClose || !delimited(resp)
		err = resp.Write(tc)
		resp.Body.Close()
		if <-werr != nil || err != nil || resp.Close {
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(idleTimeout))
	}
}

// unreadAnswer says that host gave no answer the proxy could read. The
// error's text may quote what the host sent (a malformed status line, an
// HTTP/2 GOAWAY's debug data), so to a request that carried secrets
// (used) it is not given: the host may have echoed the value.
func unreadAnswer(host string, port int, err error, used []Secret) string {
	if len(used) > 0 {
		if errors.Is(err, errUpstreamTLS) {
			return fmt.Sprintf("%s: %v (the details are not shown: the request carried a secret)", hostPort(host, port), errUpstreamTLS)
		}
		return fmt.Sprintf("%s gave no answer the proxy could read (what it sent is not shown: the request carried a secret)", hostPort(host, port))
	}
	return fmt.Sprintf("%s gave no answer the proxy could read: %v", hostPort(host, port), err)
}

// readFinal reads the answer to req from br, passing interim (1xx)
// answers such as 100 Continue on to the client as they come.
//
// To a request that carried secrets (used), an interim answer goes on as
// its bare status: its headers and reason phrase are the upstream's, and
// could hold a value.
func readFinal(br *bufio.Reader, req *http.Request, client io.Writer, used []Secret) (*http.Response, error) {
	for range 16 {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if len(used) > 0 {
			_, err = fmt.Fprintf(client, "HTTP/1.1 %03d %s\r\n\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
		} else {
			err = resp.Write(client)
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, errors.New("more than 16 interim answers")
}

// delimited reports whether resp's body ends without its connection
// ending: a length, chunks, or no body. An answer whose body runs to the
// close (or whose length a scrubbed body lost) ends the client's
// connection too.
func delimited(resp *http.Response) bool {
	return resp.ContentLength >= 0 || slices.Contains(resp.TransferEncoding, "chunked")
}

// secrets are the sandbox's secrets now.
func (h Handler) secrets() []Secret {
	if h.Secrets == nil {
		return nil
	}
	return h.Secrets()
}

// stripHop removes a proxy's own headers from h: those Connection names,
// and hopHeaders.
func stripHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				h.Del(k)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// hopHeaders are a proxy's own, not passed on.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward carries one plain HTTP request, read from c through br, and its
// response, and reports whether the client's connection may carry
// another.
func (h Handler) forward(ctx context.Context, c net.Conn, br *bufio.Reader, req *http.Request) bool {
	if req.URL == nil || !req.URL.IsAbs() || req.URL.Scheme != "http" || req.URL.Opaque != "" {
		writeStatus(c, http.StatusBadRequest, "the sandbox's proxy takes CONNECT host:port and absolute http:// URLs; use https:// through CONNECT", nil)
		return false
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil {
		writeStatus(c, http.StatusBadRequest, err.Error(), nil)
		return false
	}
	d := h.decide(ctx, host, port, "http")
	if !d.Allowed {
		drain(req)
		writeStatus(c, http.StatusForbidden, d.Refusal(), nil)
		return false
	}
	up, err := h.dial(ctx, d)
	if err != nil {
		h.record(Event{Host: host, Port: port, Via: "http", Allowed: true, Ended: true, Reason: err.Error()})
		writeStatus(c, http.StatusBadGateway, fmt.Sprintf("the host could not connect to %s: %v", hostPort(host, port), err), nil)
		return false
	}
	defer up.Close()
	cu := &countConn{Conn: up}
	keep := !req.Close
	upgrade := upgradeOf(req.Header)
	stripHop(req.Header)
	used := swapIn(req, secretsFor(h.secrets(), host, port))
	if why := checkUpgradeSecret(req.Header, host, port, upgrade, used); why != "" {
		drain(req)
		writeStatus(c, http.StatusNotImplemented, why, nil)
		return false
	}
	keepUpgrade(req.Header, upgrade)
	req.RequestURI = ""
	// The request goes to the host decided on, and says so: a Host header
	// naming another would have its server answer for a name never
	// decided.
	req.Host = req.URL.Host
	// One request per upstream connection (an upgrade's connection is
	// the upgraded one's, and says Connection: Upgrade).
	req.Close = upgrade == ""
	stop := context.AfterFunc(ctx, func() { up.Close() })
	defer stop()
	werr := make(chan error, 1)
	go func() { werr <- req.Write(cu) }()
	ubr := bufio.NewReader(cu)
	resp, err := readFinal(ubr, req, c, used)
	if err != nil {
		<-werr
		h.record(Event{Host: host, Port: port, Via: "http", Allowed: true, Ended: true, Up: cu.wrote.Load(), Down: cu.read.Load(), Reason: err.Error()})
		writeStatus(c, http.StatusBadGateway, unreadAnswer(host, port, err, used), nil)
		return false
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if <-werr == nil {
			switchProtocols(c, br, cu, ubr, resp, upgrade, hostPort(host, port), used)
		}
		h.record(Event{Host: host, Port: port, Via: "http", Allowed: true, Ended: true, Up: cu.wrote.Load(), Down: cu.read.Load(), Rule: "upgraded"})
		return false
	}
	for _, k := range hopHeaders {
		if k != "Transfer-Encoding" {
			resp.Header.Del(k)
		}
	}
	if err := scrubResponse(resp, used); err != nil {
		resp.Body.Close()
		<-werr
		writeStatus(c, http.StatusBadGateway, err.Error(), nil)
		return false
	}
	if len(used) == 0 && bulky(req, resp) {
		n := sendBulky(c, resp, ubr, up)
		resp.Body.Close()
		<-werr
		h.record(Event{Host: host, Port: port, Via: "http", Allowed: true, Ended: true, Up: cu.wrote.Load(), Down: cu.read.Load() + n})
		return false
	}
	keep = keep && delimited(resp)
	resp.Close = !keep
	err = resp.Write(c)
	resp.Body.Close()
	<-werr
	h.record(Event{Host: host, Port: port, Via: "http", Allowed: true, Ended: true, Up: cu.wrote.Load(), Down: cu.read.Load()})
	return err == nil && keep
}

// bulkyAnswer is the length from which an answer that carries no secret
// goes to the sandbox without passing through the proxy's buffers.
const bulkyAnswer = 1 << 20

// bulky reports whether resp, the answer to req, has a body of a known,
// large length, for sendBulky.
func bulky(req *http.Request, resp *http.Response) bool {
	return req.Method != http.MethodHead && resp.ContentLength >= bulkyAnswer && len(resp.TransferEncoding) == 0 &&
		resp.StatusCode >= 200 && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified
}

// sendBulky sends resp to the sandbox's connection c: its head, the part
// of its body read already (in ubr), then the rest straight from the
// upstream's socket up, past the proxy's HTTP reader (copyConn). That copy runs
// to the upstream's end (it was asked for one answer), so the answer says
// Connection: close and c is not kept: bytes an upstream sends past its
// Content-Length cannot read as the sandbox's next answer. The copy also
// ends when the sandbox closes c. It returns the bytes copied from up.
func sendBulky(c net.Conn, resp *http.Response, ubr *bufio.Reader, up net.Conn) int64 {
	hdr := resp.Header.Clone()
	for _, k := range []string{"Content-Length", "Transfer-Encoding", "Trailer", "Connection"} {
		hdr.Del(k)
	}
	var head strings.Builder
	reason := strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)))
	fmt.Fprintf(&head, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, reason)
	_ = hdr.Write(&head)
	fmt.Fprintf(&head, "Content-Length: %d\r\nConnection: close\r\n\r\n", resp.ContentLength)
	if _, err := io.WriteString(c, head.String()); err != nil {
		return 0
	}
	// What came with the head, up to the body's length (ubr holds no
	// more than its buffer: nothing further is read through it).
	have := int64(ubr.Buffered())
	if _, err := io.CopyN(c, ubr, min(have, resp.ContentLength)); err != nil || have >= resp.ContentLength {
		return 0
	}
	_ = c.SetReadDeadline(time.Time{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		// A request the sandbox pipelined after this one goes unanswered
		// (the answer said close): read and dropped, until the sandbox
		// closes.
		var b [512]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				break
			}
		}
		up.Close()
	}()
	n, _ := copyConn(c, up)
	up.Close()
	c.Close() // ends the watcher's read
	<-watched
	return n
}

// socks5 answers a SOCKS5 CONNECT (no authentication).
func (h Handler) socks5(ctx context.Context, c net.Conn, br *bufio.Reader) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	if !strings.ContainsRune(string(methods), 0) {
		_, _ = c.Write([]byte{5, 0xff})
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != 5 {
		return
	}
	var host string
	switch req[3] {
	case 1, 4:
		b := make([]byte, 4)
		if req[3] == 4 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		a, _ := netip.AddrFromSlice(b)
		host = a.Unmap().String()
	case 3:
		n, err := br.ReadByte()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return
		}
		host = strings.ToLower(strings.TrimSuffix(string(b), "."))
	default:
		socksReply(c, 8) // address type not supported
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	port := int(binary.BigEndian.Uint16(pb[:]))
	if req[1] != 1 {
		socksReply(c, 7) // only CONNECT
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if port == 0 {
		socksReply(c, 2)
		return
	}
	d := h.decide(ctx, host, port, "socks")
	if !d.Allowed {
		socksReply(c, 2) // not allowed by ruleset
		return
	}
	up, err := h.dial(ctx, d)
	if err != nil {
		h.record(Event{Host: host, Port: port, Via: "socks", Allowed: true, Ended: true, Reason: err.Error()})
		code := byte(4) // host unreachable
		if strings.Contains(err.Error(), "refused") {
			code = 5
		}
		socksReply(c, code)
		return
	}
	if !socksReply(c, 0) {
		up.Close()
		return
	}
	var pre []byte
	if n := br.Buffered(); n > 0 {
		pre, _ = br.Peek(n)
	}
	upN, downN := splice(c, up, pre)
	h.record(Event{Host: host, Port: port, Via: "socks", Allowed: true, Ended: true, Up: upN, Down: downN})
}

func socksReply(c net.Conn, code byte) bool {
	_, err := c.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0})
	return err == nil
}

// decide asks for a decision and records it.
func (h Handler) decide(ctx context.Context, host string, port int, via string) Decision {
	d := h.Decide(ctx, host, port)
	ev := Event{Host: host, Port: port, Via: via, Allowed: d.Allowed, Rule: d.Rule}
	if !d.Allowed {
		ev.Reason = d.Reason
	}
	h.record(ev)
	return d
}

func (h Handler) record(ev Event) {
	if h.Record != nil {
		if ev.Time.IsZero() {
			ev.Time = time.Now().UTC()
		}
		h.Record(ev)
	}
}

func (h Handler) dial(ctx context.Context, d Decision) (net.Conn, error) {
	if h.Dial != nil {
		return h.Dial(ctx, d)
	}
	return DialAddrs(ctx, d.Addrs, d.Port)
}

// DialAddrs connects to the first of addrs that answers on port.
func DialAddrs(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	if len(addrs) == 0 {
		return nil, errors.New("no address to dial")
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var dl net.Dialer
	var first error
	for _, a := range addrs {
		c, err := dl.DialContext(dctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if dctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// writeStatus answers with status and a one-line text body, and asks the
// client to close.
func writeStatus(c net.Conn, status int, msg string, hdr http.Header) {
	body := msg + "\n"
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	if status == http.StatusForbidden {
		b.WriteString("X-Sandbox-Egress: blocked\r\n")
	}
	for k, vs := range hdr {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("Connection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, b.String())
}

// drain reads a little of a refused request's body, so that the answer is
// not lost to a reset.
func drain(req *http.Request) {
	if req.Body != nil {
		_, _ = io.CopyN(io.Discard, req.Body, 64<<10)
		req.Body.Close()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// countConn counts the bytes through a connection.
type countConn struct {
	net.Conn
	read, wrote atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// CloseWrite ends the write half of the connection counted, where it
// has one, else closes it.
func (c *countConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote.Add(int64(n))
	return n, err
}

// splice copies between the sandbox's connection s and the upstream u
// (pre first, to u) until both directions end, passing half-closes on,
// then closes both, and returns the bytes sent up and down.
func splice(s, u net.Conn, pre []byte) (up, down int64) {
	up, down = pipe(s, io.MultiReader(bytes.NewReader(pre), s), u, u, nil)
	s.Close()
	u.Close()
	return up, down
}

// pipe copies what comes from the client (cr, the reader of its
// connection cw) to the upstream uw, and what comes from the upstream
// (ur) to cw, each direction until it ends, which it passes on as a
// half-close, and returns the bytes sent up and down. A non-nil scrub
// carries the upstream's side instead (down is then not counted); an
// error from it (what it reads breaks its protocol) closes both
// connections.
func pipe(cw net.Conn, cr io.Reader, uw net.Conn, ur io.Reader, scrub func(dst io.Writer, src io.Reader) error) (up, down int64) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		up, _ = copyConn(uw, cr)
		closeWrite(uw)
	}()
	go func() {
		defer wg.Done()
		if scrub == nil {
			down, _ = copyConn(cw, ur)
		} else if err := scrub(cw, ur); err != nil {
			cw.Close()
			uw.Close()
			return
		}
		closeWrite(cw)
	}()
	wg.Wait()
	return up, down
}

// bulkBuffers holds the large buffers copyConn moves bulk through.
var bulkBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// copyConn copies src to dst until src ends. A sandbox's connection
// handed over its channel is not one the kernel may splice
// (agent.HandedConn), so the copy is the proxy's: a read that fills its
// buffer takes a large one for what follows (a bulk download in few
// system calls), and a read that drains the socket gives it back before
// the next read waits (a connection that idles holds a small one).
func copyConn(dst io.Writer, src io.Reader) (written int64, err error) {
	small := make([]byte, 32<<10)
	buf := small
	var big *[]byte
	defer func() {
		if big != nil {
			bulkBuffers.Put(big)
		}
	}()
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			written += int64(w)
			if werr != nil {
				return written, werr
			}
			if w != n {
				return written, io.ErrShortWrite
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				return written, nil
			}
			return written, rerr
		}
		switch {
		case n == len(buf) && big == nil:
			big = bulkBuffers.Get().(*[]byte)
			buf = *big
		case n < len(buf) && big != nil:
			bulkBuffers.Put(big)
			big, buf = nil, small
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// shorten cuts s to at most n bytes (and valid UTF-8), marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "?")
	}
	return strings.ToValidUTF8(s[:n], "?") + "…"
}
