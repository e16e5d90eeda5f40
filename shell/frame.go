package shell

import (
	"bytes"
	"io"
)

// frameReader splits one of the shell's output streams at marker lines. Bytes
// read past a frame's end stay buffered for the next frame.
type frameReader struct {
	r   io.Reader
	buf []byte // read from r, not yet handed out
	tmp []byte
}

const readChunk = 64 << 10

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: r, tmp: make([]byte, readChunk)}
}

// until copies the stream to w up to the first occurrence of pat, consumes
// pat, and returns nil. Output is written as it arrives, holding back only
// the bytes that could be the start of pat. At EOF before pat it writes
// what it holds and returns io.EOF (or the read error).
func (f *frameReader) until(pat []byte, w io.Writer) error {
	for {
		if end := bytes.Index(f.buf, pat); end >= 0 {
			if _, err := w.Write(f.buf[:end]); err != nil {
				return err
			}
			f.buf = f.buf[end+len(pat):]
			return nil
		}
		// Everything except a partial match at the end is output now, so
		// short output streams out (progress) instead of waiting for more.
		if n := len(f.buf) - partialSuffix(f.buf, pat); n > 0 {
			if _, err := w.Write(f.buf[:n]); err != nil {
				return err
			}
			f.buf = append(f.buf[:0], f.buf[n:]...)
		}
		n, err := f.r.Read(f.tmp)
		f.buf = append(f.buf, f.tmp[:n]...)
		if n == 0 && err != nil {
			if len(f.buf) > 0 {
				if _, werr := w.Write(f.buf); werr != nil {
					return werr
				}
				f.buf = f.buf[:0]
			}
			return err
		}
	}
}

// partialSuffix returns the length of the longest suffix of b that is a
// proper prefix of pat.
func partialSuffix(b, pat []byte) int {
	for i := max(0, len(b)-len(pat)+1); i < len(b); i++ {
		if bytes.HasPrefix(pat, b[i:]) {
			return len(b) - i
		}
	}
	return 0
}

// next consumes and returns one byte.
func (f *frameReader) next() (byte, error) {
	for len(f.buf) == 0 {
		n, err := f.r.Read(f.tmp)
		f.buf = append(f.buf, f.tmp[:n]...)
		if n == 0 && err != nil {
			return 0, err
		}
	}
	c := f.buf[0]
	f.buf = f.buf[1:]
	return c, nil
}

// unread puts c back in front of what next and until read.
func (f *frameReader) unread(c byte) {
	f.buf = append([]byte{c}, f.buf...)
}

// drain discards the rest of the stream until it ends.
func (f *frameReader) drain() {
	f.buf = nil
	_, _ = io.Copy(io.Discard, f.r)
}
