// Package mcphttp serves an MCP server over streamable HTTP, beside
// stdio, for several clients at once: every request carries a bearer
// token; the Host and Origin headers are checked against DNS rebinding
// and cross-site requests; a body is bounded; sessions are ids no one can
// guess, bounded in number and idle time; a non-loopback address is
// served only with TLS.
package mcphttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandbox-mcp/sandbox-mcp/internal/msglimit"
)

// Defaults of Options.
const (
	DefaultMaxBody     = msglimit.DefaultMax
	DefaultMaxSessions = 100
	DefaultSessionTTL  = time.Hour
)

// Path is where the MCP endpoint is served.
const Path = "/mcp"

// Options configure the HTTP face.
type Options struct {
	// Token is the bearer token every request must carry; required.
	Token string
	// CertFile and KeyFile, both or neither, serve TLS.
	CertFile, KeyFile string
	// Hosts are names besides the listening address (and, on loopback,
	// localhost) that the Host header may carry; the names and addresses
	// of the TLS certificate count too.
	Hosts []string
	// MaxBody bounds a request's body (default DefaultMaxBody); Hint ends
	// the error of a larger one (how to send large data instead).
	MaxBody int64
	Hint    func() string
	// Fix, if set, is applied to each message the server writes (one
	// Write is one message, as JSON or as one SSE event) and returns it
	// as it goes out.
	Fix func([]byte) []byte
	// MaxSessions bounds the sessions held at once (default
	// DefaultMaxSessions); SessionTTL is the idle time after which a
	// session ends (default DefaultSessionTTL).
	MaxSessions int
	SessionTTL  time.Duration
	// Metrics, if set, writes the server's metrics in Prometheus' text
	// format for GET /metrics (behind the same token).
	Metrics func(io.Writer) error
	// Logger receives the transport's logs; nil discards them.
	Logger *slog.Logger
}

// Server is the HTTP face of one MCP server.
type Server struct {
	opts     Options
	streams  *server.StreamableHTTPServer
	sessions *sessions
	http     *http.Server
	ln       net.Listener
	hosts    map[string]bool // Host header names accepted
	origins  map[string]bool // Origin header values accepted
	tokenSum [32]byte
	scheme   string
	large    chan struct{} // bounds the large bodies held at once
	initMu   sync.Mutex    // serializes the admission of new sessions
}

// Listen checks opts against addr, listens there and returns the server,
// not yet serving (see Serve). A non-loopback address needs TLS: the
// token would otherwise cross the network in clear.
func Listen(addr string, ms *server.MCPServer, opts Options) (*Server, error) {
	if opts.Token == "" {
		return nil, errors.New("http: a bearer token is required")
	}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("http: give both a TLS certificate and its key, or neither")
	}
	var cert *tls.Certificate
	if opts.CertFile != "" {
		c, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("http: TLS certificate: %w", err)
		}
		cert = &c
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("http: address %q: %w (give host:port, e.g. 127.0.0.1:8765)", addr, err)
	}
	if !loopbackName(host) && cert == nil {
		return nil, fmt.Errorf("http: %s is not a loopback address: serving it needs TLS (--tls-cert and --tls-key); on this machine only, listen on 127.0.0.1", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	tcp, _ := ln.Addr().(*net.TCPAddr)
	if tcp == nil || (!tcp.IP.IsLoopback() && cert == nil) {
		ln.Close()
		return nil, fmt.Errorf("http: %s is not a loopback address: serving it needs TLS (--tls-cert and --tls-key)", ln.Addr())
	}
	s := newServer(ms, opts, tcp, cert)
	s.ln = &limitListener{Listener: ln, slots: make(chan struct{}, maxConns), closed: make(chan struct{})}
	if cert != nil {
		s.ln = tls.NewListener(s.ln, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12})
	}
	return s, nil
}

// Loopback reports whether addr (host:port) listens on the loopback
// only, so that its clients are on this machine.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopbackName(host)
}

// loopbackName reports whether a listening host is the loopback: an
// address of it, or localhost. "" and unspecified addresses listen on
// every interface, so they are not.
func loopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func newServer(ms *server.MCPServer, opts Options, addr *net.TCPAddr, cert *tls.Certificate) *Server {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, hosts: map[string]bool{}, origins: map[string]bool{},
		tokenSum: sha256.Sum256([]byte(opts.Token)), scheme: "http", large: make(chan struct{}, 2)}
	if cert != nil {
		s.scheme = "https"
	}
	s.hosts[canonicalHost(addr.IP.String())] = true
	if addr.IP.IsLoopback() {
		for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
			s.hosts[h] = true
		}
	}
	if cert != nil && len(cert.Certificate) > 0 {
		if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
			for _, n := range leaf.DNSNames {
				s.hosts[canonicalHost(n)] = true
			}
			for _, ip := range leaf.IPAddresses {
				s.hosts[canonicalHost(ip.String())] = true
			}
		}
	}
	for _, h := range opts.Hosts {
		s.hosts[canonicalHost(h)] = true
	}
	// A page the server itself would serve is the only origin allowed: a
	// browser tab of any other site is refused, and no CORS header lets
	// one read an answer.
	port := strconv.Itoa(addr.Port)
	for h := range s.hosts {
		s.origins[s.scheme+"://"+net.JoinHostPort(h, port)] = true
		if (s.scheme == "http" && port == "80") || (s.scheme == "https" && port == "443") {
			s.origins[s.scheme+"://"+bracket(h)] = true
		}
	}
	s.sessions = newSessions(opts.MaxSessions, opts.SessionTTL, s.forget)
	s.streams = server.NewStreamableHTTPServer(ms,
		server.WithSessionIdManager(s.sessions),
		// No idle sweeper of mcp-go's: it would end a session whose call
		// runs longer than the TTL. The guard expires sessions (and has
		// the transport forget them, see forget).
		server.WithHeartbeatInterval(30*time.Second),
		// mcp-go says session ids at info; only its warnings go on.
		server.WithStreamableHTTPLogger(slog.New(floor{opts.Logger.Handler(), slog.LevelWarn})),
		// The checks here cover every connection, loopback or not.
		server.WithDisableLocalhostProtection(true),
	)
	mux := http.NewServeMux()
	mux.Handle(Path, s.guard(http.HandlerFunc(s.serveMCP)))
	if opts.Metrics != nil {
		mux.Handle("/metrics", s.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				http.Error(w, "method not allowed: GET /metrics", http.StatusMethodNotAllowed)
				return
			}
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			if err := opts.Metrics(w); err != nil {
				opts.Logger.Warn("http: writing /metrics", "err", err)
			}
		})))
	}
	mux.Handle("/", s.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found: the MCP endpoint is "+Path, http.StatusNotFound)
	})))
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	return s
}

// canonicalHost is a Host header's name in the form hosts holds it:
// lower case, without brackets.
func canonicalHost(h string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

func bracket(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// URL is the endpoint's address as clients give it.
func (s *Server) URL() string {
	tcp, _ := s.ln.Addr().(*net.TCPAddr)
	host := tcp.IP.String()
	if tcp.IP.IsLoopback() {
		host = "127.0.0.1"
		if tcp.IP.To4() == nil {
			host = "[::1]"
		}
	} else {
		host = bracket(host)
	}
	return s.scheme + "://" + host + ":" + strconv.Itoa(tcp.Port) + Path
}

// Serve answers requests until ctx ends, then stops taking new ones and
// waits up to grace for those under way.
func (s *Server) Serve(ctx context.Context, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	_ = s.streams.Shutdown(sctx) // ends the open GET streams and the session sweeper
	if err := s.http.Shutdown(sctx); err != nil {
		s.http.Close()
	}
	return nil
}

// guard admits a request that names this server (Host), comes from no
// other site (Origin) and carries the token. A refusal closes the
// connection without reading what the client may still send, and every
// request must have arrived whole within bodyTimeout, so a client without
// the token holds no connection.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout))
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !s.hosts[canonicalHost(host)] {
			// A page of another site whose name now resolves to this
			// machine (DNS rebinding) sends its own name. Said at debug
			// only: any page can make these.
			s.opts.Logger.Debug("http: request refused: Host header names another server", "host", cut(r.Host), "remote", r.RemoteAddr)
			refuse(w, "forbidden: the Host header names another server", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !s.origins[canonicalOrigin(o)] {
			s.opts.Logger.Debug("http: request refused: from a page of another site", "origin", cut(o), "remote", r.RemoteAddr)
			refuse(w, "forbidden: requests from pages of other sites are refused", http.StatusForbidden)
			return
		}
		if !s.tokenOK(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbox-mcp"`)
			refuse(w, "unauthorized: send the server's token as Authorization: Bearer TOKEN (sandbox-mcp doctor --http says where it is)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refuse answers with an error and closes the connection.
func refuse(w http.ResponseWriter, msg string, status int) {
	closeAfter(w)
	http.Error(w, msg, status)
}

// closeAfter has the connection closed once answered, without waiting
// long for the rest of a body that will not be read (net/http would
// otherwise read up to 256 KiB of it first, for as long as the client
// takes).
func closeAfter(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	// Half a second lets net/http read a little of what is left and
	// close gently (the client then sees the answer, not a reset).
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(500 * time.Millisecond))
}

// serveMCP hands a guarded request of the MCP endpoint to the transport,
// with its body read once; it keeps count of each session's requests, so
// a busy session is never taken for idle, and lets a session have one
// listening stream, the newest.
func (s *Server) serveMCP(raw http.ResponseWriter, r *http.Request) {
	// The fix applies to what the transport writes; the body is read
	// through net/http's own writer, which closes gently on a refusal.
	w := raw
	if s.opts.Fix != nil {
		w = fixingWriter{raw, s.opts.Fix}
	}
	req := &server.HTTPRequest{Method: r.Method, URL: r.URL, Header: r.Header, Context: r.Context()}
	id := r.Header.Get(server.HeaderKeySessionID)
	version := r.Header.Get(mcp.HeaderProtocolVersion)
	switch r.Method {
	case http.MethodGet:
		if id == "" {
			refuse(w, "bad request: "+server.HeaderKeySessionID+" header missing (initialize first)", http.StatusBadRequest)
			return
		}
		if version != "" && (mcp.IsModernProtocol(version) || !mcp.IsValidProtocolVersion(version)) {
			// Refused by the transport: it must not end the session's
			// working stream first.
			refuse(w, "bad request: no listening stream for protocol version "+cut(version), http.StatusBadRequest)
			return
		}
		// A listening stream reads nothing more; its end is the client's.
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		st, err := s.sessions.begin(id, cancel)
		if err != nil {
			refuse(w, "not found: "+err.Error(), http.StatusNotFound)
			return
		}
		defer s.sessions.end(id, st)
		req.Context = ctx
	case http.MethodDelete:
		if _, err := s.sessions.Validate(id); err != nil || id == "" {
			refuse(w, "not found: "+errNoSession.Error(), http.StatusNotFound)
			return
		}
	case http.MethodPost:
		// The session is busy from the start of its upload.
		var st *stream
		counted := false
		if id != "" {
			var err error
			if st, err = s.sessions.begin(id, nil); err == nil {
				counted = true
				defer func() {
					if counted {
						s.sessions.end(id, st)
					}
				}()
			}
			// An unknown id is refused by the transport (404).
		}
		body, release, ok := s.readBody(raw, r)
		if !ok {
			return
		}
		defer release()
		req.Body = body
		if isInitialize(body) && !mcp.IsModernProtocol(version) {
			if counted {
				s.sessions.end(id, st)
				counted = false
			}
			// A new session, whatever id the request names: admitted one
			// at a time, so the table never holds more than its bound.
			r.Header.Del(server.HeaderKeySessionID)
			s.initMu.Lock()
			defer s.initMu.Unlock()
			if !s.sessions.admit() {
				s.opts.Logger.Warn("http: new session refused: too many sessions", "max", s.opts.MaxSessions)
				w.Header().Set("Retry-After", "60")
				writeRPCError(w, http.StatusServiceUnavailable, peekID(body), fmt.Sprintf(
					"too many sessions: this server holds %d, all in use within the last minute; end one (DELETE) or try again later", s.opts.MaxSessions))
				return
			}
			break
		}
		if counted && !s.sessions.listening(id) {
			req.Context = context.WithValue(req.Context, deafKey{}, true)
		}
	}
	s.streams.Handle(responseAdapter{w}, req)
}

// forget has the transport and the MCP server forget a session the guard
// ended (idle or pushed out), as a DELETE from its client would.
func (s *Server) forget(id string) {
	h := http.Header{}
	h.Set(server.HeaderKeySessionID, id)
	s.streams.Handle(discard{}, &server.HTTPRequest{Method: http.MethodDelete, Header: h, Context: context.Background()})
}

// responseAdapter is an http.ResponseWriter as the transport takes one.
type responseAdapter struct{ http.ResponseWriter }

func (a responseAdapter) Flush() {
	if f, ok := a.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (a responseAdapter) CanStream() bool {
	_, ok := a.ResponseWriter.(http.Flusher)
	return ok
}

// discard is a response no one reads.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) WriteHeader(int)             {}
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) Flush()                      {}
func (discard) CanStream() bool             { return false }

// deafKey marks a request of a session whose client has no listening
// stream open: the server cannot send it a request of its own.
type deafKey struct{}

// ClientListens reports whether the client of a request can be sent a
// request of the server's own (roots/list, for clients of revisions
// before 2026-07-28, goes over the session's listening stream): false
// for a session with no stream open, true otherwise.
func ClientListens(ctx context.Context) bool {
	deaf, _ := ctx.Value(deafKey{}).(bool)
	return !deaf
}

// cut bounds a header value that goes into the log.
func cut(v string) string {
	if len(v) > 128 {
		return v[:128] + "…"
	}
	return v
}

// fixingWriter applies a fix to each message written.
type fixingWriter struct {
	http.ResponseWriter
	fix func([]byte) []byte
}

func (f fixingWriter) Write(p []byte) (int, error) {
	if q := f.fix(p); len(q) != len(p) {
		if _, err := f.ResponseWriter.Write(q); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return f.ResponseWriter.Write(p)
}

// Flush passes on a flush, so SSE events go out as they are written.
func (f fixingWriter) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (f fixingWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }

func (s *Server) tokenOK(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) == 1
}

// Body reading bounds.
const (
	smallBody   = 1 << 20          // read without waiting for a slot
	bodyTimeout = time.Minute      // to send a whole body
	slotWait    = 30 * time.Second // for a slot for a large body
)

// readBody reads a POST's body whole, refusing one over MaxBody without
// reading past the limit, or one not sent within bodyTimeout (the guard
// set the deadline; it is lifted once the body is in). A body over 1 MiB
// needs one of two slots, held until release is called (when the request
// is answered), so large messages in memory stay bounded.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), ok bool) {
	release = func() {}
	if r.ContentLength > s.opts.MaxBody {
		head := make([]byte, 4096)
		n, _ := io.ReadFull(r.Body, head)
		s.tooLarge(w, r, head[:n])
		return nil, release, false
	}
	in := http.MaxBytesReader(w, r.Body, s.opts.MaxBody)
	var err error
	if r.ContentLength >= 0 && r.ContentLength <= smallBody {
		body, err = io.ReadAll(in)
	} else {
		body, err = io.ReadAll(io.LimitReader(in, smallBody+1))
		if err == nil && len(body) > smallBody {
			t := time.NewTimer(slotWait)
			defer t.Stop()
			select {
			case s.large <- struct{}{}:
				release = func() { <-s.large }
				// The minute to send the body starts once it may be sent.
				_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout))
			case <-t.C:
				w.Header().Set("Retry-After", "10")
				closeAfter(w)
				writeRPCError(w, http.StatusServiceUnavailable, peekID(body), "busy: two large messages are being handled; send this one again shortly")
				return nil, release, false
			case <-r.Context().Done():
				return nil, release, false
			}
			var rest []byte
			rest, err = io.ReadAll(in)
			body = append(body, rest...)
		}
	}
	if err != nil {
		release()
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			s.tooLarge(w, r, body)
		case errors.As(err, &ne) && ne.Timeout():
			msg := fmt.Sprintf("request timeout: the body did not arrive within %s", bodyTimeout)
			if s.opts.Hint != nil {
				msg += "; " + s.opts.Hint()
			}
			closeAfter(w)
			writeRPCError(w, http.StatusRequestTimeout, peekID(body), msg)
		default:
			refuse(w, "bad request: reading the body: "+err.Error(), http.StatusBadRequest)
		}
		return nil, func() {}, false
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, release, true
}

// tooLarge refuses a body over the limit, answering the request whose
// start head is, when its id comes before its parameters (as clients
// write them).
func (s *Server) tooLarge(w http.ResponseWriter, r *http.Request, head []byte) {
	msg := fmt.Sprintf("message too large: over the %d MiB limit of one JSON-RPC message", s.opts.MaxBody>>20)
	if s.opts.Hint != nil {
		msg += "; " + s.opts.Hint()
	}
	s.opts.Logger.Warn("http: request refused: body too large", "limit", s.opts.MaxBody, "remote", r.RemoteAddr)
	closeAfter(w)
	writeRPCError(w, http.StatusRequestEntityTooLarge, peekID(head), msg)
}

// peekID finds the id of a JSON-RPC request among the members that come
// before its params in head, the start of the message; nil if it is not
// there.
func peekID(head []byte) json.RawMessage {
	if len(head) > 4096 {
		head = head[:4096]
	}
	d := json.NewDecoder(bytes.NewReader(head))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for d.More() {
		k, err := d.Token()
		if err != nil || k == "params" {
			return nil
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil
		}
		if k == "id" {
			return v
		}
	}
	return nil
}

// canonicalOrigin is an Origin header in the form origins holds it.
func canonicalOrigin(o string) string {
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return o
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}

// isInitialize reports whether a message is an initialize request.
func isInitialize(body []byte) bool {
	var m struct {
		Method string `json:"method"`
	}
	return json.Unmarshal(body, &m) == nil && m.Method == "initialize"
}

// writeRPCError answers with a JSON-RPC error (to the request id, if
// known) and an HTTP status, so a client shows the text.
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": -32600, "message": msg},
	})
}

// maxConns bounds the connections served at once; more wait to be
// accepted.
const maxConns = 512

// limitListener accepts a connection only while fewer than its slots are
// open.
type limitListener struct {
	net.Listener
	slots  chan struct{}
	closed chan struct{}
	once   sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// floor passes on records at or above its level only.
type floor struct {
	slog.Handler
	min slog.Level
}

func (f floor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= f.min && f.Handler.Enabled(ctx, l)
}

func (f floor) WithAttrs(a []slog.Attr) slog.Handler { return floor{f.Handler.WithAttrs(a), f.min} }
func (f floor) WithGroup(g string) slog.Handler      { return floor{f.Handler.WithGroup(g), f.min} }

// TokenTransport is a client's side of the token: it sends token with
// every request it makes through base (http.DefaultTransport if nil).
func TokenTransport(base http.RoundTripper, token string) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return tokenTransport{base, token}
}

type tokenTransport struct {
	base  http.RoundTripper
	token string
}

func (t tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(r)
}
