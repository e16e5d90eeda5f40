// Package ctl is the control protocol that code inside a sandbox speaks to
// the host (through sandbox-ctl) to start and drive child sandboxes.
//
// One request per connection, as newline-delimited JSON: the client sends
// {"id", "method", "params"}; the server answers {"id", "result"} or
// {"id", "error": {"code", "message"}}. A method that runs a command
// (exec, run) first streams its output as {"id", "stdout"|"stderr": text}
// lines, then the result.
//
// The client keeps its end open until the reply: a connection closed (or
// half-closed) before it ends the call.
//
// The server never learns who calls from the request: the transport tells
// it (a connection arrives through one sandbox's own channel), so a
// sandbox can name only itself as the caller. Everything a request carries
// is untrusted: its line is bounded, its reading is timed, and the
// connections of one caller are limited.
package ctl

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Methods.
const (
	MethodPing    = "ping"
	MethodSpawn   = "spawn"
	MethodList    = "list"
	MethodDestroy = "destroy"
	MethodExec    = "exec"
	MethodRun     = "run"
)

// Error codes.
const (
	CodeInvalidRequest   = "INVALID_REQUEST"
	CodePermissionDenied = "PERMISSION_DENIED"
	CodeNotFound         = "NOT_FOUND"
	CodeLimitReached     = "LIMIT_REACHED"
	CodeInternalError    = "INTERNAL_ERROR"
)

// Limits of the server.
const (
	// MaxLine bounds a request line.
	MaxLine = 64 << 10
	// DefaultReadTimeout bounds the wait for a whole request line.
	DefaultReadTimeout = 30 * time.Second
	// DefaultMaxConns bounds one caller's connections at once.
	DefaultMaxConns = 8
	// DefaultWriteStall bounds how long a client may leave a reply line
	// unread (a pager on sandbox-ctl's output may pause it this long).
	DefaultWriteStall = 2 * time.Minute
)

// Request is one call.
type Request struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Reply is one line the server writes: output of a running command, or
// the final result or error.
type Reply struct {
	ID     json.RawMessage `json:"id"`
	Result any             `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	Stdout string          `json:"stdout,omitempty"`
	Stderr string          `json:"stderr,omitempty"`
}

// Error is a refused or failed call.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *Error.
func Errorf(code, format string, a ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, a...)}
}

// Handler answers the calls of one caller (the sandbox the connection
// came from). Output streams the output of a command as it comes; its
// writes may fail once the client is gone, which should end the command.
type Handler interface {
	Handle(ctx context.Context, caller string, req Request, out Output) (any, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, caller string, req Request, out Output) (any, error)

// Handle implements Handler.
func (f HandlerFunc) Handle(ctx context.Context, caller string, req Request, out Output) (any, error) {
	return f(ctx, caller, req, out)
}

// Output carries a command's output to the client as it comes.
type Output interface {
	Stdout() io.Writer
	Stderr() io.Writer
}

// Server serves connections.
type Server struct {
	Handler Handler
	// ReadTimeout, MaxConns and WriteStall: 0 means DefaultReadTimeout,
	// DefaultMaxConns and DefaultWriteStall.
	ReadTimeout time.Duration
	MaxConns    int
	// WriteStall is how long a reply line may wait for a client that
	// does not read before the connection is closed and its call ended.
	WriteStall time.Duration

	mu    sync.Mutex
	conns map[string]int // open connections by caller
}

// Serve answers the one request on c, from caller, and closes c. It
// returns when the call is done (or refused), or ctx ends.
func (s *Server) Serve(ctx context.Context, caller string, c net.Conn) {
	defer c.Close()
	w := &replyWriter{c: c, stall: cmp.Or(s.WriteStall, DefaultWriteStall)}
	maxConns, timeout := cmp.Or(s.MaxConns, DefaultMaxConns), cmp.Or(s.ReadTimeout, DefaultReadTimeout)
	if !s.enter(caller, maxConns) {
		_ = w.write(Reply{ID: json.RawMessage("null"), Error: Errorf(CodeLimitReached, "%d connections of this sandbox are open already, the most at once", maxConns)})
		return
	}
	defer s.leave(caller)
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	line, err := readLine(bufio.NewReaderSize(c, 4096), timeout)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		_ = w.write(Reply{ID: json.RawMessage("null"), Error: Errorf(CodeInvalidRequest, "%v", err)})
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		_ = w.write(Reply{ID: json.RawMessage("null"), Error: Errorf(CodeInvalidRequest, "the request is not a JSON object: %v", err)})
		return
	}
	if !validID(req.ID) {
		_ = w.write(Reply{ID: json.RawMessage("null"), Error: Errorf(CodeInvalidRequest, "the request needs an id: a string or a number")})
		return
	}
	w.id = req.ID
	if req.Method == "" {
		_ = w.write(Reply{ID: req.ID, Error: Errorf(CodeInvalidRequest, "the request needs a method")})
		return
	}
	// A client that goes away ends the call: reading past the request
	// sees the close.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(c, MaxLine))
		cancel()
	}()
	res, err := s.Handler.Handle(ctx, caller, req, w)
	if err != nil {
		var ce *Error
		if !errors.As(err, &ce) {
			ce = Errorf(CodeInternalError, "%v", err)
		}
		_ = w.write(Reply{ID: req.ID, Error: ce})
		return
	}
	if res == nil {
		res = struct{}{}
	}
	_ = w.write(Reply{ID: req.ID, Result: res})
}

func (s *Server) enter(caller string, maxConns int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[string]int{}
	}
	if s.conns[caller] >= maxConns {
		return false
	}
	s.conns[caller]++
	return true
}

func (s *Server) leave(caller string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[caller]--; s.conns[caller] <= 0 {
		delete(s.conns, caller)
	}
}

// readLine reads one request line of at most MaxLine bytes.
func readLine(r *bufio.Reader, timeout time.Duration) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line)+len(frag) > MaxLine+1 {
			return nil, fmt.Errorf("the request line is over %d KiB", MaxLine>>10)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return bytes.TrimSpace(line), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(line)) > 0:
			return bytes.TrimSpace(line), nil
		case errors.Is(err, io.EOF):
			return nil, errors.New("no request before the connection closed")
		default:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, fmt.Errorf("no whole request line within %v", timeout)
			}
			return nil, err
		}
	}
}

func validID(id json.RawMessage) bool {
	if len(id) == 0 || len(id) > 256 {
		return false
	}
	var v any
	if json.Unmarshal(id, &v) != nil {
		return false
	}
	switch v.(type) {
	case string, float64:
		return true
	}
	return false
}

// replyWriter writes whole reply lines, one at a time, and carries a
// command's output as stdout and stderr lines.
type replyWriter struct {
	mu    sync.Mutex
	c     net.Conn
	id    json.RawMessage
	stall time.Duration // how long one line may wait for the client
}

func (w *replyWriter) write(r Reply) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.c.SetWriteDeadline(time.Now().Add(w.stall))
	if _, err = w.c.Write(append(b, '\n')); err != nil {
		// A client that stopped reading (or left) must not hold the
		// call, and the child's shell behind it: closing the connection
		// ends the call (Serve's reader sees the close).
		_ = w.c.Close()
	}
	return err
}

func (w *replyWriter) Stdout() io.Writer { return streamWriter{w, false} }
func (w *replyWriter) Stderr() io.Writer { return streamWriter{w, true} }

type streamWriter struct {
	w      *replyWriter
	stderr bool
}

func (s streamWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil // an empty line would carry nothing at all
	}
	r := Reply{ID: s.w.id}
	if s.stderr {
		r.Stderr = string(p)
	} else {
		r.Stdout = string(p)
	}
	if err := s.w.write(r); err != nil {
		return 0, err
	}
	return len(p), nil
}
