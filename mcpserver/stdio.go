package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// The stdio transport: newline-delimited JSON-RPC on one reader and one
// writer, with one client. One worker at a time reads; it decodes a line
// once, to tell a request from a notification and from the client's
// answer to a request of the server's, and serves notifications and
// answers itself, in order. When it reads a request it passes the reading
// to another worker (an idle one, or a new one) and serves the request
// itself, answering it in one write as soon as it is done; then it waits
// for its next turn to read. The request so goes on in the goroutine that
// read it, with no hand-off before its handler runs (on a warm exec that
// hand-off, a wake of a parked goroutine, cost about 50µs), and the next
// reader wakes while it runs. mcp-go's own stdio server decoded each line
// five times and passed it through three goroutines, one of them new,
// before a handler saw it: on a warm exec that was a fifth of the server's
// time.

// maxInFlight is how many requests may be served at once (each by a
// worker of its own, one more worker reading). The reader waits for a
// worker past it, which holds back a client that sends faster than the
// server answers.
const maxInFlight = 1024

// notificationQueue is how many notifications may wait for the writer.
const notificationQueue = 256

// stdioTransport serves one MCPServer over one reader and writer.
type stdioTransport struct {
	ms     *server.MCPServer
	direct directCaller // nil: every message goes to ms
	out    io.Writer
	errLog *log.Logger

	writeMu sync.Mutex
	sess    *stdioSession
	// inflight holds the requests handed to workers, by idKey, for
	// notifications/cancelled.
	inflight sync.Map
	// barriers are flushNotifications' channels, by number.
	barriers sync.Map
	barrierN atomic.Int64

	// The reading, which workers pass on to each other: ctx is the
	// session's, br the input, turn hands the reading to an idle worker,
	// slots counts the workers (maxInFlight serving, one reading), running
	// the requests being served, and ended gets how the reading ended.
	ctx     context.Context
	br      *bufio.Reader
	turn    chan struct{}
	slots   chan struct{}
	running *workers
	ended   chan error
}

// line is what the transport reads of a message to route it; the members
// stay raw, so that a message whose members have unexpected types is
// still routed (and answered by mcp-go as it sees fit), not taken for one
// that is not JSON.
type line struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
	Params  json.RawMessage `json:"params"`
}

// present reports whether a member was given, and not as null.
func present(v json.RawMessage) bool { return len(v) > 0 && !bytes.Equal(v, []byte("null")) }

// directCall reports whether the message is a tools/call of JSON-RPC
// 2.0, spelled plainly: one for the transport's direct path to try.
func (l *line) directCall() bool {
	return bytes.Equal(l.Method, []byte(`"tools/call"`)) && bytes.Equal(l.JSONRPC, []byte(`"2.0"`))
}

// hasID reports whether the message carries an id other than null: a
// request (or an answer), not a notification.
func (l *line) hasID() bool { return present(l.ID) }

// serveStdio serves MCP on in and out until in ends or ctx is done. The
// requests still running then are cancelled, and waited for.
// direct, if set, serves the tools/call requests it takes.
func serveStdio(ctx context.Context, ms *server.MCPServer, direct directCaller, in io.Reader, out io.Writer, errLog *log.Logger) error {
	if errLog == nil {
		errLog = log.New(io.Discard, "", 0)
	}
	t := &stdioTransport{ms: ms, direct: direct, out: out, errLog: errLog, turn: make(chan struct{}),
		slots: make(chan struct{}, maxInFlight+1), ended: make(chan error, 1), br: bufio.NewReaderSize(in, 64<<10)}
	t.sess = &stdioSession{
		notifications: make(chan mcp.JSONRPCNotification, notificationQueue),
		pending:       map[int64]chan reply{},
		t:             t,
	}
	if err := ms.RegisterSession(ctx, t.sess); err != nil {
		return fmt.Errorf("register the stdio session: %w", err)
	}
	defer ms.UnregisterSession(context.WithoutCancel(ctx), t.sess.SessionID())

	outer := ctx
	ctx, cancel := context.WithCancel(ms.WithContext(ctx, t.sess))
	defer cancel()
	running := &workers{}
	defer running.closeAndWait(endWait, errLog)
	defer cancel() // before the wait: the requests still running end

	go t.writeNotifications(ctx)

	t.ctx, t.running = ctx, running
	t.slots <- struct{}{}
	go t.work()
	select {
	case err := <-t.ended:
		return err
	case <-outer.Done():
		// The reader may be blocked on in for ever; it is left to the
		// process's end, and starts nothing more.
		return outer.Err()
	}
}

// workers counts the requests being served, and once closed starts no
// more, so that the transport's end can wait for the last.
type workers struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// start counts one more request, or reports false once closed.
func (f *workers) start() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.wg.Add(1)
	return true
}

func (f *workers) done() { f.wg.Done() }

// endWait bounds how long the transport's end waits for the requests
// being served (one may be stuck writing to a client that reads no more).
// A variable for tests.
var endWait = 10 * time.Second

// closeAndWait starts no more requests and waits for those running, at
// most d.
func (f *workers) closeAndWait(d time.Duration, errLog *log.Logger) {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		errLog.Printf("requests still under way %s after the end; not waiting for them", d)
	}
}

// work is one worker: it takes its turn to read (the first worker starts
// with it), serves the request it read, and waits for its next turn, until
// the reading ends or it has been idle for workerIdle. It holds one of
// slots while it lives.
func (t *stdioTransport) work() {
	defer func() { <-t.slots }()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		r, ok := t.readTurn()
		if !ok {
			return
		}
		t.run(r)
		t.running.done()
		idle.Reset(workerIdle)
		select {
		case <-t.turn:
		case <-idle.C:
			return
		case <-t.ctx.Done():
			return
		}
	}
}

// readTurn reads messages, serving notifications and the client's answers
// as it reads them, until it reads a request: it then passes the reading
// to another worker and returns the request, for the calling worker to
// serve. It reports false once the reading has ended (the input's end, an
// error reading it, or ctx), having sent how on ended.
func (t *stdioTransport) readTurn() (*request, bool) {
	for {
		msg, err := t.br.ReadBytes('\n')
		if len(bytes.TrimSpace(msg)) > 0 {
			if t.ctx.Err() != nil {
				t.ended <- nil
				return nil, false
			}
			if r := t.dispatch(msg); r != nil {
				// Counted before the reading goes on, so that the
				// transport's end, which the next read may bring, waits
				// for it.
				if !t.running.start() {
					t.done(r) // the transport has ended
					return nil, false
				}
				if err != nil {
					// The input's last message: the reading ends here,
					// and this worker serves it.
					t.endReading(err)
					return r, true
				}
				if t.pass(r) {
					return r, true
				}
				t.running.done() // answered busy, or the session ended
			}
		}
		if err != nil {
			t.endReading(err)
			return nil, false
		}
	}
}

// endReading reports the reading's end, by err (io.EOF: the input's end).
func (t *stdioTransport) endReading(err error) {
	if errors.Is(err, io.EOF) {
		err = nil
	} else {
		t.errLog.Printf("read: %v", err)
	}
	t.ended <- err
}

// dispatch serves one message, and returns the request it is (with a
// context of its own, which a notifications/cancelled read later ends at
// once), for the caller to serve; a notification it serves itself, in
// order, and it gives an answer to the request waiting for it.
func (t *stdioTransport) dispatch(msg []byte) *request {
	var l line
	if err := json.Unmarshal(msg, &l); err != nil {
		t.write(errorAnswer(nil, mcp.PARSE_ERROR, "Parse error"))
		return nil
	}
	raw := json.RawMessage(msg)
	switch {
	case l.Method == nil && l.hasID() && (l.Result != nil || present(l.Error)):
		t.sess.answer(l)
	case l.hasID():
		rctx, cancel := context.WithCancel(t.ctx)
		r := &request{id: l.ID, raw: raw, ctx: rctx, cancel: cancel, key: idKey(l.ID)}
		if t.direct != nil && l.directCall() {
			r.params = l.Params
		}
		t.inflight.Store(r.key, r)
		return r
	default:
		if bytes.Equal(l.Method, []byte(`"notifications/cancelled"`)) {
			t.cancelInFlight(l.Params)
		}
		t.handle(t.ctx, nil, raw, nil)
	}
	return nil
}

// cancelInFlight cancels the request a notifications/cancelled names, on
// the reader: a request handed to a worker is cancelled even before
// mcp-go has registered it.
func (t *stdioTransport) cancelInFlight(params json.RawMessage) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil || !present(p.RequestID) {
		return
	}
	if v, ok := t.inflight.Load(idKey(p.RequestID)); ok {
		v.(*request).cancel()
	}
}

// idKey is a request id as a map key: the id as requestID reads it (an
// integer, a string whatever its escapes, another number as written),
// with its type, so that 7 and "7" differ. The ids clients send (small
// integers, strings) skip the general reading.
func idKey(raw json.RawMessage) string {
	if id, ok := directID(raw); ok {
		switch v := id.Value().(type) {
		case int64:
			return "int64:" + strconv.FormatInt(v, 10)
		case string:
			return "string:" + v
		}
	}
	v := requestID(raw).Value()
	return fmt.Sprintf("%T:%v", v, v)
}

// request is one request for a worker.
type request struct {
	id, raw json.RawMessage
	// params are a tools/call's, for the transport's direct path; nil
	// for other requests.
	params json.RawMessage
	ctx    context.Context
	cancel context.CancelFunc
	key    string
}

// workerIdle is how long a worker waits for its next turn before it
// ends.
const workerIdle = 10 * time.Second

// pass hands the reading to an idle worker, or to a new worker when none
// is idle and fewer than maxInFlight serve; past that it waits busyWait
// for one, then answers r that the server is busy, and reports false, as
// it does when ctx ends (the caller reads on). A worker lives on for the
// next requests: a request's handlers run deep, and a new goroutine's
// stack would grow (and be copied) each time.
func (t *stdioTransport) pass(r *request) bool {
	select {
	case t.turn <- struct{}{}:
		return true
	default:
	}
	select {
	case t.turn <- struct{}{}:
		return true
	case t.slots <- struct{}{}:
	case <-t.ctx.Done():
		t.done(r)
		return false
	default:
		// Every worker is busy: the reader waits a moment for one, and no
		// longer, or the client's answers (roots/list) and cancellations
		// that would free one would go unread.
		busy := time.NewTimer(busyWait)
		defer busy.Stop()
		select {
		case t.turn <- struct{}{}:
			return true
		case t.slots <- struct{}{}:
		case <-t.ctx.Done():
			t.done(r)
			return false
		case <-busy.C:
			t.write(errorAnswer(r.id, mcp.INTERNAL_ERROR, fmt.Sprintf("server busy: %d requests under way; send this one again once one is answered", maxInFlight)))
			t.done(r)
			return false
		}
	}
	go t.work()
	return true
}

// busyWait is how long the reader waits for a worker once maxInFlight run.
const busyWait = 100 * time.Millisecond

// run serves r on a worker.
func (t *stdioTransport) run(r *request) {
	defer t.done(r)
	t.handle(r.ctx, r.id, r.raw, r.params)
}

// done ends r's context and forgets it.
func (t *stdioTransport) done(r *request) {
	r.cancel()
	t.inflight.CompareAndDelete(r.key, r)
}

// handle runs one message through the server and writes its answer, if
// it has one: a tools/call with params through the direct path when it
// takes it. A handler's panic answers the request with an internal
// error, and ends nothing else.
func (t *stdioTransport) handle(ctx context.Context, id, raw, params json.RawMessage) {
	var resp mcp.JSONRPCMessage
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.errLog.Printf("panic serving a message: %v", r)
				if id != nil {
					resp = errorAnswer(id, mcp.INTERNAL_ERROR, fmt.Sprintf("internal panic: %v", r))
				}
			}
		}()
		if params != nil {
			var ok bool
			if resp, ok = t.direct(ctx, id, params); ok {
				return
			}
		}
		resp = t.ms.HandleMessage(ctx, raw)
	}()
	if resp != nil {
		if id != nil && bytes.Contains(raw, []byte(`"progressToken"`)) {
			t.flushNotifications(ctx)
		}
		t.write(resp)
	}
}

// barrierMethod marks a notification that is not one: the writer reaching
// it has written every notification queued before it, and closes the
// channel registered under its "n".
const barrierMethod = "\x00barrier"

// flushNotifications waits until the notifications queued so far (a
// request's progress) are written, so that none follows its answer.
func (t *stdioTransport) flushNotifications(ctx context.Context) {
	done := make(chan struct{})
	n := t.barrierN.Add(1)
	t.barriers.Store(n, done)
	defer t.barriers.Delete(n)
	b := mcp.JSONRPCNotification{Notification: mcp.Notification{Method: barrierMethod,
		Params: mcp.NotificationParams{AdditionalFields: map[string]any{"n": n}}}}
	select {
	case t.sess.notifications <- b:
	case <-ctx.Done():
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// passBarrier closes the channel of barrier b.
func (t *stdioTransport) passBarrier(b mcp.JSONRPCNotification) {
	if n, ok := b.Params.AdditionalFields["n"].(int64); ok {
		if done, ok := t.barriers.LoadAndDelete(n); ok {
			close(done.(chan struct{}))
		}
	}
}

// errorAnswer is the error answer to the request with id (nil: null).
func errorAnswer(id json.RawMessage, code int, msg string) mcp.JSONRPCError {
	return mcp.JSONRPCError{JSONRPC: mcp.JSONRPC_VERSION, ID: requestID(id), Error: mcp.NewJSONRPCErrorDetails(code, msg, nil)}
}

// requestID is a request's id as mcp-go represents it (null for none).
func requestID(raw json.RawMessage) mcp.RequestId {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return mcp.NewRequestId(nil)
	}
	if n, ok := v.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return mcp.NewRequestId(i)
		}
	}
	return mcp.NewRequestId(v)
}

// write sends one message, whole, on its own line.
func (t *stdioTransport) write(msg any) {
	b, err := json.Marshal(msg)
	if err != nil {
		t.errLog.Printf("encode a message: %v", err)
		return
	}
	if err := t.writeLine(b); err != nil {
		t.errLog.Printf("write: %v", err)
	}
}

// writeLine writes b and a newline in one Write: the writers below (the
// message limiter, the roots-request fix) take one Write for one message.
func (t *stdioTransport) writeLine(b []byte) error {
	b = append(b, '\n')
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	_, err := t.out.Write(b)
	return err
}

// writeNotifications writes the server's notifications until ctx ends.
func (t *stdioTransport) writeNotifications(ctx context.Context) {
	for {
		select {
		case n := <-t.sess.notifications:
			if n.Method == barrierMethod {
				t.passBarrier(n)
				continue
			}
			t.write(n)
		case <-ctx.Done():
			return
		}
	}
}

// reply is the client's answer to a request of the server's.
type reply struct {
	result json.RawMessage
	err    error
}

// stdioSession is the stdio transport's one client session.
type stdioSession struct {
	t             *stdioTransport
	notifications chan mcp.JSONRPCNotification
	initialized   atomic.Bool
	level         atomic.Value // mcp.LoggingLevel
	info          atomic.Value // mcp.Implementation
	caps          atomic.Value // mcp.ClientCapabilities
	version       atomic.Value // string

	nextID  atomic.Int64
	mu      sync.Mutex
	pending map[int64]chan reply
}

var (
	_ server.ClientSession              = (*stdioSession)(nil)
	_ server.SessionWithLogging         = (*stdioSession)(nil)
	_ server.SessionWithClientInfo      = (*stdioSession)(nil)
	_ server.SessionWithRoots           = (*stdioSession)(nil)
	_ server.SessionWithProtocolVersion = (*stdioSession)(nil)
)

// SessionID implements server.ClientSession: stdio has one client.
func (s *stdioSession) SessionID() string { return "stdio" }

// NotificationChannel implements server.ClientSession.
func (s *stdioSession) NotificationChannel() chan<- mcp.JSONRPCNotification {
	return s.notifications
}

// Initialize implements server.ClientSession.
func (s *stdioSession) Initialize() {
	s.level.Store(mcp.LoggingLevelError)
	s.initialized.Store(true)
}

// Initialized implements server.ClientSession.
func (s *stdioSession) Initialized() bool { return s.initialized.Load() }

// SetLogLevel implements server.SessionWithLogging.
func (s *stdioSession) SetLogLevel(level mcp.LoggingLevel) { s.level.Store(level) }

// GetLogLevel implements server.SessionWithLogging.
func (s *stdioSession) GetLogLevel() mcp.LoggingLevel {
	if l, ok := s.level.Load().(mcp.LoggingLevel); ok {
		return l
	}
	return mcp.LoggingLevelError
}

// GetClientInfo implements server.SessionWithClientInfo.
func (s *stdioSession) GetClientInfo() mcp.Implementation {
	v, _ := s.info.Load().(mcp.Implementation)
	return v
}

// SetClientInfo implements server.SessionWithClientInfo.
func (s *stdioSession) SetClientInfo(info mcp.Implementation) { s.info.Store(info) }

// GetClientCapabilities implements server.SessionWithClientInfo.
func (s *stdioSession) GetClientCapabilities() mcp.ClientCapabilities {
	v, _ := s.caps.Load().(mcp.ClientCapabilities)
	return v
}

// SetClientCapabilities implements server.SessionWithClientInfo.
func (s *stdioSession) SetClientCapabilities(caps mcp.ClientCapabilities) { s.caps.Store(caps) }

// ProtocolVersion implements server.SessionWithProtocolVersion.
func (s *stdioSession) ProtocolVersion() string {
	v, _ := s.version.Load().(string)
	return v
}

// SetProtocolVersion records the version the initialize handshake agreed.
func (s *stdioSession) SetProtocolVersion(v string) { s.version.Store(v) }

// ListRoots implements server.SessionWithRoots: it asks the client for
// its roots and waits for the answer, ctx, or rootsWait.
func (s *stdioSession) ListRoots(ctx context.Context, _ mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	// A client that never answers must not hold the call for ever.
	ctx, cancel := context.WithTimeout(ctx, rootsWait)
	defer cancel()
	raw, err := s.request(ctx, string(mcp.MethodListRoots))
	if err != nil {
		return nil, fmt.Errorf("list roots: %w", err)
	}
	var res mcp.ListRootsResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("list roots: the client's answer: %w", err)
	}
	return &res, nil
}

// request sends the client a request without parameters and waits for
// its result.
func (s *stdioSession) request(ctx context.Context, method string) (json.RawMessage, error) {
	id := s.nextID.Add(1)
	ch := make(chan reply, 1)
	s.mu.Lock()
	s.pending[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}()
	req := `{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) + `,"method":` + strconv.Quote(method) + `,"params":{}}`
	if err := s.t.writeLine([]byte(req)); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.result, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// answer hands the client's answer to the request waiting for it; one
// nothing waits for (it came too late, or was never asked) is dropped.
func (s *stdioSession) answer(l line) {
	raw := string(l.ID)
	if u, err := strconv.Unquote(raw); err == nil {
		raw = u // a client that echoes the id as a string
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	ch := s.pending[id]
	s.mu.Unlock()
	if ch == nil {
		return
	}
	r := reply{result: l.Result}
	if present(l.Error) {
		var e struct {
			Code    any    `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(l.Error, &e)
		r = reply{err: fmt.Errorf("the client answered %v: %s", e.Code, e.Message)}
	}
	select {
	case ch <- r:
	default:
	}
}
