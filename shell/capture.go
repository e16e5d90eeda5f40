package shell

import (
	"fmt"
	"os"
	"sync"
	"unicode/utf8"
)

// Capture collects one output stream of a command under a size cap. Up to
// the cap it keeps everything in memory. Past it, it keeps the first and last
// cap/2 bytes in memory and, when SpillPath is set, writes the whole stream
// to that file so it can be fetched later. It is safe for one writer and
// concurrent readers (progress reporting).
type Capture struct {
	// Limit is the cap in bytes; 0 means 16 KiB.
	Limit int
	// SpillPath, if set, is where the full stream goes once it exceeds Limit.
	SpillPath string

	mu      sync.Mutex
	buf     []byte // everything, while total <= Limit; then the head
	tail    []byte // ring of the last Limit-len(head) bytes once over
	tailPos int
	total   int64
	spill   *os.File
	err     error
}

const defaultLimit = 16 << 10

func (c *Capture) limit() int {
	if c.Limit <= 0 {
		return defaultLimit
	}
	return c.Limit
}

// Write implements io.Writer. It never fails: a spill-file error is kept
// and reported by Close, and the capped view stays correct.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	lim := c.limit()
	if c.total+int64(n) <= int64(lim) {
		c.buf = append(c.buf, p...)
		c.total += int64(n)
		return n, nil
	}
	if c.tail == nil {
		c.buf = append(c.buf, p...)
		c.total += int64(n)
		c.overflow(lim)
		return n, nil
	}
	if c.spill != nil && c.err == nil {
		if _, err := c.spill.Write(p); err != nil {
			c.err = err
		}
	}
	c.total += int64(n)
	c.ring(p)
	return n, nil
}

// overflow switches from keeping everything to head plus tail.
func (c *Capture) overflow(lim int) {
	head := lim / 2
	if c.SpillPath != "" {
		f, err := os.OpenFile(c.SpillPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			c.err = err
		} else {
			c.spill = f
			if _, err := f.Write(c.buf); err != nil {
				c.err = err
			}
		}
	}
	c.tail = make([]byte, 0, lim-head)
	if len(c.buf) > head {
		c.ring(c.buf[head:])
		c.buf = c.buf[:head:head]
	}
}

// ring appends p to the tail ring.
func (c *Capture) ring(p []byte) {
	size := cap(c.tail)
	if size == 0 {
		return
	}
	if len(p) >= size {
		c.tail = append(c.tail[:0], p[len(p)-size:]...)
		c.tailPos = 0
		return
	}
	for len(p) > 0 {
		if len(c.tail) < size {
			k := min(size-len(c.tail), len(p))
			c.tail = append(c.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(c.tail[c.tailPos:], p)
		c.tailPos = (c.tailPos + k) % size
		p = p[k:]
	}
}

func (c *Capture) tailBytes() []byte {
	if len(c.tail) < cap(c.tail) || c.tailPos == 0 {
		return append([]byte(nil), c.tail...)
	}
	out := make([]byte, 0, len(c.tail))
	out = append(out, c.tail[c.tailPos:]...)
	return append(out, c.tail[:c.tailPos]...)
}

// Total is the number of bytes written.
func (c *Capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Truncated reports whether bytes were left out of the capped view.
func (c *Capture) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tail != nil
}

// Parts returns the kept head, the kept tail and how many bytes were left out
// between them. Without truncation, head is everything and tail is nil.
func (c *Capture) Parts() (head, tail []byte, omitted int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	head = append([]byte(nil), c.buf...)
	if c.tail == nil {
		return head, nil, 0
	}
	tail = c.tailBytes()
	// The cuts fall on byte counts; where they split a UTF-8 character,
	// its pieces count as left out, so text stays text and the offset of
	// what was left out starts on a character.
	head = head[:len(head)-PartialRuneEnd(head)]
	tail = tail[partialRuneStart(tail):]
	return head, tail, c.total - int64(len(head)) - int64(len(tail))
}

// PartialRuneEnd is how many bytes at the end of b start a UTF-8 character
// that b does not finish (0 to 3).
func PartialRuneEnd(b []byte) int {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if utf8.FullRune(b[len(b)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}

// partialRuneStart is how many continuation bytes b starts with (0 to 3):
// the end of a character cut off before b.
func partialRuneStart(b []byte) int {
	n := 0
	for n < utf8.UTFMax-1 && n < len(b) && !utf8.RuneStart(b[n]) {
		n++
	}
	return n
}

// Newest returns up to n of the most recent bytes, for progress reports.
func (c *Capture) Newest(n int) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []byte
	if c.tail != nil {
		all = c.tailBytes()
	} else {
		all = c.buf
	}
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return append([]byte(nil), all...)
}

// Spilled reports whether the full stream is in SpillPath.
func (c *Capture) Spilled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spill != nil && c.err == nil
}

// Close closes the spill file, if any, and reports a spill error.
func (c *Capture) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spill != nil {
		if err := c.spill.Close(); err != nil && c.err == nil {
			c.err = err
		}
	}
	if c.err != nil {
		return fmt.Errorf("save full output: %w", c.err)
	}
	return nil
}
