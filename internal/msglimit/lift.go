package msglimit

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// A transport copies a message several times before a handler sees it
// (the line, its bytes, a raw copy, the decoded arguments), so a message
// of tens of MiB costs several times its size. A Limiter with Blobs lifts
// the long strings out of a long message as it reads it: each is decoded
// once, kept in Blobs under a token, and the transport gets the message
// with the token in its place. The server's handlers put the strings back
// (Blobs.Resolve) before they look at their arguments.

const (
	// DefaultLiftAt is the message size from which strings are lifted.
	DefaultLiftAt = 1 << 20
	// liftMin is the shortest string lifted (as it stands in the JSON).
	liftMin = 64 << 10
	// blobTTL is how long a lifted string waits for its handler (a
	// message that never reaches one, such as a call of an unknown tool,
	// leaves its strings behind); blobCap bounds what waits, oldest
	// dropped first.
	blobTTL = 10 * time.Minute
	blobCap = 4 * DefaultMax
)

// Blobs holds strings lifted out of messages until a handler takes them.
type Blobs struct {
	prefix string // random per Blobs: a client cannot forge a token
	mu     sync.Mutex
	seq    uint64
	m      map[string]blob
	held   int64 // bytes in m
}

type blob struct {
	s  string
	at time.Time
}

// NewBlobs returns an empty store.
func NewBlobs() *Blobs {
	var r [12]byte
	_, _ = rand.Read(r[:])
	return &Blobs{prefix: "\x00sandbox-mcp-lifted:" + hex.EncodeToString(r[:]) + ":", m: map[string]blob{}}
}

func (b *Blobs) put(s string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for k, v := range b.m {
		if now.Sub(v.at) > blobTTL {
			b.drop(k)
		}
	}
	for b.held+int64(len(s)) > blobCap && len(b.m) > 0 {
		oldest := ""
		for k, v := range b.m {
			if oldest == "" || v.at.Before(b.m[oldest].at) {
				oldest = k
			}
		}
		b.drop(oldest)
	}
	b.held += int64(len(s))
	b.seq++
	tok := b.prefix + hex.EncodeToString([]byte{byte(b.seq >> 24), byte(b.seq >> 16), byte(b.seq >> 8), byte(b.seq)})
	b.m[tok] = blob{s: s, at: now}
	return tok
}

// take returns and forgets the string under tok.
func (b *Blobs) take(tok string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[tok]
	b.drop(tok)
	return v.s, ok
}

// drop forgets the string under tok; b.mu is held.
func (b *Blobs) drop(tok string) {
	if v, ok := b.m[tok]; ok {
		b.held -= int64(len(v.s))
		delete(b.m, tok)
	}
}

// Len is how many lifted strings wait for their handler.
func (b *Blobs) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// Resolve puts lifted strings back into v, a decoded JSON value (maps and
// slices are changed in place), and returns it. A token whose string is
// gone (it waited too long) resolves to "", and ok is false.
func (b *Blobs) Resolve(v any) (out any, ok bool) {
	ok = true
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			if strings.HasPrefix(x, b.prefix) {
				s, found := b.take(x)
				ok = ok && found
				return s
			}
		case map[string]any:
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return v
	}
	return walk(v), ok
}

// span is a JSON string in a held message: its offsets (quotes included)
// and whether it holds an escape.
type span struct {
	start, end int64
	escaped    bool
}

// pieces is a message held in the pieces it was read in.
type pieces [][]byte

func (p pieces) size() int64 {
	var n int64
	for _, b := range p {
		n += int64(len(b))
	}
	return n
}

// longStrings finds the string values (not object keys) of at least
// liftMin bytes in the message. Whether a string is a key shows only in
// the next byte that is not space, which may lie in a later piece.
func (p pieces) longStrings() []span {
	var out []span
	var off int64
	in, esc := false, false
	var cur span
	var pending *span // a long string, a value unless a ':' follows
	for _, b := range p {
		for i, c := range b {
			switch {
			case !in:
				if pending != nil && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
					if c != ':' {
						out = append(out, *pending)
					}
					pending = nil
				}
				if c == '"' {
					in, cur = true, span{start: off + int64(i)}
				}
			case esc:
				esc = false
			case c == '\\':
				esc, cur.escaped = true, true
			case c == '"':
				in = false
				cur.end = off + int64(i) + 1
				if cur.end-cur.start >= liftMin {
					sp := cur
					pending = &sp
				}
			}
		}
		off += int64(len(b))
	}
	if pending != nil {
		out = append(out, *pending)
	}
	return out
}

// copyRange appends the bytes [from, to) of the message to dst.
func (p pieces) copyRange(dst []byte, from, to int64) []byte {
	var off int64
	for _, b := range p {
		end := off + int64(len(b))
		if end > from && off < to {
			lo, hi := max(from-off, 0), min(to-off, int64(len(b)))
			dst = append(dst, b[lo:hi]...)
		}
		off = end
	}
	return dst
}

// decode returns the value of the JSON string at s. Without escapes the
// bytes are the value (when valid UTF-8) and are copied once; otherwise
// the string is gathered and decoded by encoding/json.
func (p pieces) decode(s span) (string, bool) {
	if !s.escaped {
		var sb strings.Builder
		sb.Grow(int(s.end - s.start - 2))
		var off int64
		for _, b := range p {
			end := off + int64(len(b))
			if end > s.start+1 && off < s.end-1 {
				lo, hi := max(s.start+1-off, 0), min(s.end-1-off, int64(len(b)))
				sb.Write(b[lo:hi])
			}
			off = end
		}
		v := sb.String()
		if utf8.ValidString(v) && !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 }) {
			return v, true
		}
	}
	raw := p.copyRange(make([]byte, 0, s.end-s.start), s.start, s.end)
	var v string
	if json.Unmarshal(raw, &v) != nil {
		return "", false
	}
	return v, true
}

// lift returns the message with its long strings replaced by tokens of b,
// or nil when it lifts nothing (the message then passes as it is).
func (p pieces) lift(b *Blobs) []byte {
	spans := p.longStrings()
	if len(spans) == 0 {
		return nil
	}
	// Decode first, so a failure lifts nothing and leaves no blob.
	vals := make([]string, len(spans))
	for i, s := range spans {
		v, ok := p.decode(s)
		if !ok {
			return nil
		}
		vals[i] = v
	}
	var out []byte
	var at int64
	toks := make([]string, len(spans))
	for i, s := range spans {
		out = p.copyRange(out, at, s.start)
		toks[i] = b.put(vals[i])
		tok, _ := json.Marshal(toks[i])
		out = append(out, tok...)
		at = s.end
	}
	out = p.copyRange(out, at, p.size())
	if !json.Valid(bytes.TrimSuffix(out, []byte("\n"))) {
		// Not JSON after all: take the strings back, and the message
		// passes as sent (for the transport to answer).
		for _, t := range toks {
			b.take(t)
		}
		return nil
	}
	return out
}
