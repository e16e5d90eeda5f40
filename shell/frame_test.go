package shell

import (
	"bytes"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
)

func TestFrameReaderSplitsAcrossReads(t *testing.T) {
	marker := "sbxabc"
	stream := "one\ntwo" + "\n" + marker + " 0\n/\n" + marker + ".\n" + "next frame"
	for _, r := range []io.Reader{strings.NewReader(stream), iotest.OneByteReader(strings.NewReader(stream)), iotest.HalfReader(strings.NewReader(stream))} {
		f := newFrameReader(r)
		var out, tr bytes.Buffer
		if err := f.until([]byte("\n"+marker+" "), &out); err != nil {
			t.Fatal(err)
		}
		if err := f.until([]byte("\n"+marker+".\n"), &tr); err != nil {
			t.Fatal(err)
		}
		if out.String() != "one\ntwo" || tr.String() != "0\n/" {
			t.Fatalf("out %q trailer %q", out.String(), tr.String())
		}
		var rest bytes.Buffer
		if err := f.until([]byte("never"), &rest); err != io.EOF || rest.String() != "next frame" {
			t.Fatalf("rest %q err %v", rest.String(), err)
		}
	}
}

func FuzzFrameReader(f *testing.F) {
	f.Add([]byte("hello\n"), uint8(3))
	f.Add([]byte("\nsbx"), uint8(1))
	f.Add([]byte{0, 0xff, '\n'}, uint8(7))
	f.Fuzz(func(t *testing.T, payload []byte, chunk uint8) {
		pat := []byte("\nsbxdeadbeef ")
		if bytes.Contains(payload, pat) {
			t.Skip()
		}
		stream := append(append([]byte{}, payload...), pat...)
		stream = append(stream, "tail"...)
		r := iotest.DataErrReader(&chunkReader{data: stream, n: int(chunk%16) + 1})
		fr := newFrameReader(r)
		var out bytes.Buffer
		if err := fr.until(pat, &out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), payload) {
			t.Fatalf("got %q want %q", out.Bytes(), payload)
		}
	})
}

type chunkReader struct {
	data []byte
	n    int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[n:]
	return n, nil
}

// TestStderrFrames: a frame's stderr is stray bytes up to the start
// beacon, counted, then the command's output. An isolated command's frame
// opens with M( before its subshell's beacon; one that ends without the
// beacon is a command the shell did not start, and what the shell wrote
// after M( is its error, which goes to stderr (what came before M( is
// stray all the same; a marker followed by anything else there is text
// like any other). Anything else after the first marker is refused.
func TestStderrFrames(t *testing.T) {
	const m = "sbxabc"
	for _, c := range []struct {
		name, stream, stderr string
		stray                int64
		started, fails       bool
	}{
		{"started", "left behind\n" + m + "<\noops\n\n" + m + "\n", "oops\n", 12, true, false},
		{"isolated, started", "left\n" + m + "(\nlate\n" + m + "<\nout\n\n" + m + "\n", "out\n", 10, true, false},
		{"isolated, not started", "left\n" + m + "(\n" + "sh: can't fork\n\n" + m + "\n", "sh: can't fork\n", 5, false, false},
		{"malformed", m + "<x\n", "", 0, false, true},
		{"isolated, the shell ended before it started", "left\n" + m + "(\n" + "sh: Cannot fork\n", "sh: Cannot fork", 5, false, true},
		{"isolated, a quoted marker just before the beacon", m + "(\nq" + m + m + "<\nout\n\n" + m + "\n", "out\n", int64(len("q" + m)), true, false},
		{"isolated, a quoted marker at a line's end", m + "(\nq" + m + "\nerr\n\n" + m + "\n", "q" + m + "\nerr\n", 0, false, false},
		{"isolated, the marker quoted before the beacon", m + "(\nnotice " + m + " 1>&2\n" + m + "<\nout\n\n" + m + "\n", "out\n", int64(len("notice " + m + " 1>&2\n")), true, false},
		{"cut short", "left\n" + m, "", 5, false, true},
	} {
		for _, r := range []io.Reader{strings.NewReader(c.stream), iotest.OneByteReader(strings.NewReader(c.stream))} {
			s := &Shell{errs: newFrameReader(r)}
			var stray countWriter
			var stderr bytes.Buffer
			var started atomic.Bool
			err := s.readStderr(m, &stray, &stderr, &started)
			if (err != nil) != c.fails || stderr.String() != c.stderr || stray.n.Load() != c.stray || started.Load() != c.started {
				t.Errorf("%s: err %v, stderr %q, stray %d, started %v; want failure %v, %q, %d, %v",
					c.name, err, stderr.String(), stray.n.Load(), started.Load(), c.fails, c.stderr, c.stray, c.started)
			}
		}
	}
}
