package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"golang.org/x/net/http2"
)

// An intercepted connection on which the sandbox's client chose HTTP/2
// (curl, Go, gRPC) is served as HTTP/2: each stream is a request whose
// headers get the secrets meant for the host, sent on to the host over
// HTTP/2 where it speaks it (streams and trailers carried through, so
// gRPC works) and over HTTP/1.1 connections otherwise. The answers are
// scrubbed as on HTTP/1.1; their trailers too.

// h2MaxStreams bounds the streams a sandbox's client has open at once
// on one intercepted connection; h2MaxUpstream the connections to the
// host behind them, where it speaks HTTP/1.1 only.
const (
	h2MaxStreams  = 100
	h2MaxUpstream = 8
)

// errUpstreamTLS marks a host whose TLS handshake failed (its
// certificate did not verify).
var errUpstreamTLS = errors.New("its certificate did not verify")

// upstreams dials the host's connections for one intercepted client
// connection: the first is the one the CONNECT made, the next ones are
// dialed to the same decided addresses. It counts their bytes.
type upstreams struct {
	first  net.Conn
	redial func(context.Context) (net.Conn, error)
	tls    *tls.Config

	mu    sync.Mutex
	conns []*countConn
}

func (u *upstreams) dialTLS(ctx context.Context, _, _ string) (net.Conn, error) {
	u.mu.Lock()
	c := u.first
	u.first = nil
	u.mu.Unlock()
	if c == nil {
		var err error
		if c, err = u.redial(ctx); err != nil {
			return nil, err
		}
	}
	cc := &countConn{Conn: c}
	u.mu.Lock()
	u.conns = append(u.conns, cc)
	u.mu.Unlock()
	tc := tls.Client(cc, u.tls.Clone())
	hctx, cancel := context.WithTimeout(ctx, firstTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %w", errUpstreamTLS, err)
	}
	return tc, nil
}

// close closes every connection, and the first if no request took it.
func (u *upstreams) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.first != nil {
		u.first.Close()
	}
	for _, c := range u.conns {
		c.Close()
	}
}

// counts are the bytes sent to and read from the host.
func (u *upstreams) counts() (up, down int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.conns {
		up += c.wrote.Load()
		down += c.read.Load()
	}
	return up, down
}

// serveH2 serves the sandbox's HTTP/2 connection tc, intercepted for
// host:port, until it ends. up is the connection to the host the CONNECT
// made; redial makes more.
func (h Handler) serveH2(ctx context.Context, tc *tls.Conn, up net.Conn, redial func(context.Context) (net.Conn, error), host string, port int) (upN, downN int64) {
	ups := &upstreams{first: up, redial: redial,
		tls: &tls.Config{ServerName: host, RootCAs: h.UpstreamRoots, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}}
	tr := &http.Transport{
		Proxy:                  nil,
		DialTLSContext:         ups.dialTLS,
		ForceAttemptHTTP2:      true,
		DisableCompression:     true, // the client's own Accept-Encoding, or none, goes as it is
		MaxConnsPerHost:        h2MaxUpstream,
		MaxIdleConnsPerHost:    h2MaxUpstream,
		IdleConnTimeout:        idleTimeout,
		MaxResponseHeaderBytes: maxHeader,
		// What the host sends ahead of a sandbox that does not read is
		// held on the host: a window of 64 KiB a stream, 1 MiB a
		// connection, not Go's default of 4 MiB and 1 GiB. And one
		// connection to an HTTP/2 host: more streams wait for room on
		// it rather than open more.
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     64 << 10,
			MaxReceiveBufferPerConnection: 1 << 20,
			StrictMaxConcurrentRequests:   true,
		},
	}
	defer func() {
		tr.CloseIdleConnections()
		ups.close()
	}()
	authority := hostPort(host, port)
	if port == 443 {
		authority = host
	}
	srv := &http2.Server{MaxConcurrentStreams: h2MaxStreams, IdleTimeout: idleTimeout, MaxUploadBufferPerConnection: 1 << 20}
	srv.ServeConn(tc, &http2.ServeConnOpts{
		Context:    ctx,
		BaseConfig: &http.Server{MaxHeaderBytes: maxHeader},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.forwardH2(w, r, tr, host, port, authority)
		}),
	})
	return ups.counts()
}

// forwardH2 sends one request of an intercepted HTTP/2 connection to the
// host and streams the answer back.
func (h Handler) forwardH2(w http.ResponseWriter, r *http.Request, tr http.RoundTripper, host string, port int, authority string) {
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, msg+"\n")
	}
	if r.Method == http.MethodConnect {
		// Extended CONNECT (a WebSocket over HTTP/2) would carry bytes
		// the proxy does not read.
		fail(http.StatusNotImplemented, fmt.Sprintf("the sandbox's proxy does not carry CONNECT streams to %s over HTTP/2", hostPort(host, port)))
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = "https", authority, authority
	stripHop(out.Header)
	if strings.EqualFold(strings.TrimSpace(r.Header.Get("Te")), "trailers") {
		out.Header.Set("Te", "trailers") // gRPC asks for its trailers so
	}
	used := swapIn(out, secretsFor(h.secrets(), host, port))
	if len(used) > 0 && out.Header.Get("Grpc-Accept-Encoding") != "" {
		// As with Accept-Encoding: an answer the scrubber can read.
		out.Header.Set("Grpc-Accept-Encoding", "identity")
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client gave up on the stream
		}
		fail(http.StatusBadGateway, unreadAnswer(host, port, err, used))
		return
	}
	defer resp.Body.Close()
	if err := scrubResponse(resp, used); err != nil {
		fail(http.StatusBadGateway, err.Error())
		return
	}
	hdr := w.Header()
	for k, vs := range resp.Header {
		hdr[k] = vs
	}
	stripHop(hdr)
	hdr.Del("Trailer")
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return // the stream is reset: the client sees it cut
		}
	}
	// The trailers (gRPC's status) arrive with the body's end, in
	// resp.Trailer.
	for k, vs := range scrubHeader(resp.Trailer, used) {
		for _, v := range vs {
			hdr.Add(http.TrailerPrefix+k, v)
		}
	}
}
