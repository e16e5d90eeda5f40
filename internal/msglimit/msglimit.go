// Package msglimit bounds the JSON-RPC messages a stdio server reads. It
// sits between the process's stdin and stdout and the transport, which
// reads newline-delimited messages from Reader and writes replies to
// Writer.
//
// Messages up to Max bytes pass through unchanged and without being held:
// the transport reads them as they arrive. A longer message is cut off at
// the point where it passes Max; the rest of it is read and dropped up to
// its newline, and the client gets an error reply carrying the message's
// id (found in its first IDWindow bytes, else null) with a text that says
// how to send large data instead. The transport, which saw the first part,
// ends it with a byte that makes it invalid JSON; its own "Parse error"
// reply (id null) for that line is held back, so the client gets exactly
// one reply. Later messages are served as before.
package msglimit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"unicode/utf8"
)

const (
	// DefaultMax is the default message limit: 32 MiB.
	DefaultMax = 32 << 20
	// IDWindow is how much of a message's start is kept to find its id.
	IDWindow = 64 << 10
	// CodeTooLarge is the JSON-RPC error code of the reply: the message is
	// an invalid request.
	CodeTooLarge = -32600
	// CodeParseError is the JSON-RPC error code of a message that is not
	// valid JSON text (here: not valid UTF-8).
	CodeParseError = -32700
	// readSize is how much of stdin is read at a time.
	readSize = 64 << 10
)

// Options configure a Limiter.
type Options struct {
	// Max is the largest message in bytes, without its newline; 0 means
	// DefaultMax.
	Max int64
	// Hint, if set, gives the end of the error text: how to send large
	// data instead.
	Hint func() string
	// Dropped, if set, is called once an over-long message has been read
	// through and the transport is done with its part (a place to return
	// memory to the OS).
	Dropped func()
	// Blobs, if set, receives the long strings of messages of LiftAt bytes
	// or more (see lift.go); such messages are held whole before they
	// pass. LiftAt 0 means DefaultLiftAt.
	Blobs  *Blobs
	LiftAt int64
}

// Limiter is a bounded stdin and a stdout for one transport.
type Limiter struct {
	opts Options
	br   *bufio.Reader

	// Read side, used by the transport's one reader goroutine.
	out        []byte   // passable bytes not yet read
	queue      [][]byte // more passable bytes, after out
	held       pieces   // the current message, held to lift its strings
	err        error
	n          int64  // bytes of the current message read
	prefix     []byte // the current message's first IDWindow bytes
	discarding bool   // dropping the rest of an over-long message
	carry      []byte // a UTF-8 sequence the last piece ended in
	cutPassed  bool   // ...of which the transport saw a part

	// Write side.
	mu      sync.Mutex
	w       io.Writer
	swallow int // transport parse-error replies to hold back
}

// New returns a Limiter reading in and writing out.
func New(in io.Reader, out io.Writer, opts Options) *Limiter {
	if opts.Max <= 0 {
		opts.Max = DefaultMax
	}
	if opts.LiftAt <= 0 {
		opts.LiftAt = DefaultLiftAt
	}
	return &Limiter{opts: opts, br: bufio.NewReaderSize(in, readSize), w: out}
}

// Reader is the stdin to give the transport.
func (l *Limiter) Reader() io.Reader { return limitReader{l} }

// Writer is the stdout to give the transport. Each Write is one message
// and is written whole, never interleaved with another.
func (l *Limiter) Writer() io.Writer { return limitWriter{l} }

type limitReader struct{ l *Limiter }

func (r limitReader) Read(p []byte) (int, error) {
	l := r.l
	for len(l.out) == 0 {
		if len(l.queue) > 0 {
			l.out, l.queue = l.queue[0], l.queue[1:]
			continue
		}
		if l.err != nil {
			return 0, l.err
		}
		l.fill()
	}
	n := copy(p, l.out)
	l.out = l.out[n:]
	return n, nil
}

// fill reads the next piece of stdin and decides what of it passes on.
// The piece stays valid in br until the next fill, which happens only
// once it has been read out.
func (l *Limiter) fill() {
	piece, err := l.br.ReadSlice('\n')
	complete := err == nil
	if err != nil && err != bufio.ErrBufferFull {
		l.err = err
	}
	if l.discarding {
		if complete {
			l.discarding = false
			l.endMessage()
			if !l.cutPassed {
				l.dropped()
			}
		}
		return
	}
	body := int64(len(piece))
	if complete {
		body--
	}
	if l.n+body <= l.opts.Max && !l.validUTF8(piece, complete) {
		// Invalid UTF-8 would reach the handler replaced by U+FFFD, the
		// request changed without a word: it is a parse error instead,
		// answered here, and the rest of the message is dropped.
		l.keepPrefix(piece)
		l.refuse(findID(l.prefix), complete, CodeParseError, "parse error: the message is not valid UTF-8 (JSON text must be); send binary data base64-encoded", nil)
		return
	}
	if l.n+body <= l.opts.Max {
		l.keepPrefix(piece)
		l.n += body
		switch {
		case l.opts.Blobs == nil || (complete && l.held == nil):
			l.out = piece // whole in one piece, or nothing to lift into
		default:
			l.held = append(l.held, bytes.Clone(piece))
			if complete {
				l.pass()
			}
		}
		if complete {
			l.endMessage()
		}
		return
	}
	// Over the limit: what passed so far is made invalid JSON and ended,
	// and the rest is dropped.
	l.keepPrefix(piece)
	msg := fmt.Sprintf("message too large: over the %s limit of one JSON-RPC message", sizeText(l.opts.Max))
	if l.opts.Hint != nil {
		msg += "; " + l.opts.Hint()
	}
	l.refuse(findID(l.prefix), complete, CodeTooLarge, msg, map[string]any{"limit_bytes": l.opts.Max})
}

// refuse answers the current message with an error (code, msg, data)
// itself and drops it: what of it the transport saw is made invalid JSON
// and ended (its parse error held back), and the rest of the message,
// up to its newline, is read and dropped.
func (l *Limiter) refuse(id json.RawMessage, complete bool, code int, msg string, data map[string]any) {
	passed := l.n > 0 && l.opts.Blobs == nil
	l.held = nil
	l.carry = l.carry[:0]
	if passed {
		l.out = []byte("#\n")
	}
	l.reply(id, passed, code, msg, data)
	if complete {
		l.endMessage()
		if !passed {
			l.dropped()
		}
	} else {
		l.discarding, l.cutPassed = true, passed
	}
}

// validUTF8 reports whether piece, the next part of the current message,
// keeps it valid UTF-8. A sequence cut at the end of a piece that is not
// the message's last is completed by the next one.
func (l *Limiter) validUTF8(piece []byte, complete bool) bool {
	p := piece
	for len(l.carry) > 0 && len(p) > 0 && !utf8.FullRune(l.carry) {
		l.carry, p = append(l.carry, p[0]), p[1:]
	}
	if len(l.carry) > 0 {
		if !utf8.FullRune(l.carry) {
			return !complete // still cut, and more is to come
		}
		if r, n := utf8.DecodeRune(l.carry); r == utf8.RuneError && n <= 1 || n != len(l.carry) {
			return false
		}
		l.carry = l.carry[:0]
	}
	if !complete {
		for i := 1; i <= 3 && i <= len(p); i++ {
			if tail := p[len(p)-i:]; utf8.RuneStart(tail[0]) {
				if !utf8.FullRune(tail) {
					l.carry = append(l.carry[:0], tail...)
					p = p[:len(p)-i]
				}
				break
			}
		}
	}
	return utf8.Valid(p)
}

// pass hands the held message on, with its long strings lifted when it
// is long enough.
func (l *Limiter) pass() {
	held := l.held
	l.held = nil
	if l.n >= l.opts.LiftAt {
		if out := held.lift(l.opts.Blobs); out != nil {
			l.queue = append(l.queue, out)
			// The pieces are garbage now: give their memory back before
			// the handler makes its own copies.
			debug.FreeOSMemory()
			return
		}
	}
	l.queue = append(l.queue, held...)
}

func (l *Limiter) keepPrefix(piece []byte) {
	if l.prefix == nil {
		l.prefix = make([]byte, 0, IDWindow)
	}
	if room := IDWindow - len(l.prefix); room > 0 {
		l.prefix = append(l.prefix, piece[:min(room, len(piece))]...)
	}
}

func (l *Limiter) endMessage() {
	l.n = 0
	l.carry = l.carry[:0]
	l.prefix = l.prefix[:0]
}

func (l *Limiter) dropped() {
	if l.opts.Dropped != nil {
		l.opts.Dropped()
	}
}

// reply writes the error for an over-long message; swallow says the
// transport saw part of it and will answer with a parse error to hold back.
func (l *Limiter) reply(id json.RawMessage, swallow bool, code int, msg string, data map[string]any) {
	if id == nil {
		id = json.RawMessage("null")
	}
	resp, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{"2.0", id, struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data,omitempty"`
	}{code, msg, data}})
	l.mu.Lock()
	defer l.mu.Unlock()
	if swallow {
		l.swallow++
	}
	_, _ = l.w.Write(append(resp, '\n'))
}

type limitWriter struct{ l *Limiter }

func (w limitWriter) Write(p []byte) (int, error) {
	l := w.l
	l.mu.Lock()
	if l.swallow > 0 && isParseError(p) {
		l.swallow--
		l.mu.Unlock()
		l.dropped()
		return len(p), nil
	}
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// isParseError reports whether p is a JSON-RPC parse-error reply with a
// null id, as the transport sends for a line that is not JSON.
func isParseError(p []byte) bool {
	if len(p) > 1024 || !bytes.Contains(p, []byte("-32700")) {
		return false
	}
	var m struct {
		ID    *json.RawMessage `json:"id"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(p, &m) != nil || m.Error == nil || m.Error.Code != -32700 {
		return false
	}
	return m.ID == nil || string(*m.ID) == "null"
}

// findID returns the top-level "id" of a JSON object from its start, or
// nil when the start holds none (or it comes after a value too long for
// the window).
func findID(prefix []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if key == "id" {
			if len(v) > 0 && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) && len(v) <= 256 {
				return v
			}
			return nil
		}
	}
	return nil
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
