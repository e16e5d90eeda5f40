package app

import (
	"io"
	"sync"
)

// Console is where a command's output and sandbox-mcp's own lines meet
// (a person's terminal, where stdout and stderr interleave): it notes
// whether the last byte written left a line unfinished, so that a log
// line or an error message starts a line of its own rather than ending a
// command's unfinished one.
type Console struct {
	mu      sync.Mutex
	unended bool
}

// Output returns w, noting where its writes leave the line: for a
// command's output.
func (c *Console) Output(w io.Writer) io.Writer { return consoleWriter{c: c, w: w} }

// Lines returns w, starting each write on a line of its own: for log
// lines and messages, each written whole in one call.
func (c *Console) Lines(w io.Writer) io.Writer { return consoleWriter{c: c, w: w, fresh: true} }

type consoleWriter struct {
	c     *Console
	w     io.Writer
	fresh bool
}

func (cw consoleWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !cw.fresh {
		// Not under the lock: a reader that drains stderr before
		// stdout must not find stderr held up behind a full stdout.
		n, err := cw.w.Write(p)
		if n > 0 {
			cw.c.mu.Lock()
			cw.c.unended = p[n-1] != '\n'
			cw.c.mu.Unlock()
		}
		return n, err
	}
	cw.c.mu.Lock()
	defer cw.c.mu.Unlock()
	if cw.c.unended {
		if _, err := cw.w.Write([]byte{'\n'}); err != nil {
			return 0, err
		}
		cw.c.unended = false
	}
	n, err := cw.w.Write(p)
	if n > 0 {
		cw.c.unended = p[n-1] != '\n'
	}
	return n, err
}
