package mcpserver

import "io"

// redrawWriter collapses progress redraws in a stream: a line that a
// program rewrites in place with carriage returns (apt's and pip's progress
// bars) keeps only its last state, and CRLF becomes LF. Install uses it:
// its output is the package manager's, where only the end of a redraw
// matters. exec and python output stays exact.
type redrawWriter struct {
	w    io.Writer
	line []byte
	cr   bool // the last byte seen was '\r'
	err  error
}

// maxRedrawLine bounds the bytes held for one line: past it the line is
// passed on as it is.
const maxRedrawLine = 64 << 10

func newRedrawWriter(w io.Writer) *redrawWriter { return &redrawWriter{w: w} }

func (r *redrawWriter) Write(p []byte) (int, error) {
	for _, c := range p {
		if r.cr {
			r.cr = false
			if c != '\n' {
				r.line = r.line[:0] // redrawn: the line starts again
			}
		}
		switch c {
		case '\r':
			r.cr = true
		case '\n':
			r.line = append(r.line, '\n')
			r.flush()
		default:
			r.line = append(r.line, c)
			if len(r.line) >= maxRedrawLine {
				r.flush()
			}
		}
	}
	if r.err != nil {
		return 0, r.err
	}
	return len(p), nil
}

// Close passes on the last line (its state before a final '\r').
func (r *redrawWriter) Close() error {
	r.flush()
	return r.err
}

func (r *redrawWriter) flush() {
	if len(r.line) > 0 && r.err == nil {
		_, r.err = r.w.Write(r.line)
	}
	r.line = r.line[:0]
}
