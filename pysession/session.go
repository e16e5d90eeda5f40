// Package pysession keeps Python interpreters in sandboxes whose
// variables and imports survive between calls: one driver process
// (guest.PythonDriver) per session, run through an engine exec and spoken
// to in JSON lines on its stdin and stdout.
//
// What comes back from the driver is untrusted: the sandbox's code may
// have replaced python3 or the driver. Every line is bounded, parsed into
// fixed fields, and a driver that breaks the protocol is ended.
package pysession

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// Starter prepares the engine command that runs the driver in the
// sandbox (stdin and stdout left for the session to take), and end,
// which ends the driver (its process id in the sandbox as it said, 0 if
// it never did) and every process it started, and returns when that is
// done. end is called once, before the command is killed, so that the
// driver's process tree is still whole.
type Starter func() (cmd proc.Process, end func(pid int), err error)

// Request is one call: code to run and how long it may take.
type Request struct {
	Code string
	// Timeout is how long the code may run before it is interrupted
	// (KeyboardInterrupt); 0 means no bound beyond the context's.
	Timeout time.Duration
	// Limit bounds each of stdout and stderr: the first and the last
	// Limit/2 bytes are kept.
	Limit int
	// Progress, if set, is told about every ProgressEvery/2 while the
	// code runs how many bytes it has written and the newest of its
	// stdout.
	Progress func(total int64, newest string)
}

// ProgressEvery is how often a running call's Progress is told.
const ProgressEvery = time.Second

// Stream is one output stream of a call: its first and last bytes, and
// how many were written in all.
type Stream struct {
	Head  string `json:"head"`
	Tail  string `json:"tail"`
	Total int64  `json:"total"`
	// Omitted counts the bytes between Head and Tail left out.
	Omitted int64 `json:"omitted"`
}

// Text is the stream as one string, with a mark where bytes were left out.
func (s Stream) Text() string {
	if s.Omitted <= 0 {
		return s.Head + s.Tail
	}
	return s.Head + fmt.Sprintf("\n… [%d bytes omitted] …\n", s.Omitted) + s.Tail
}

// Truncated reports whether bytes of the stream were left out.
func (s Stream) Truncated() bool { return s.Omitted > 0 }

// Exception is what the code raised: its type's name, and the traceback
// (whose last line has the message).
type Exception struct {
	Type      string `json:"type"`
	Traceback string `json:"traceback"`
}

// Image is a figure the code drew (matplotlib), PNG in base64.
type Image struct {
	Format string `json:"format,omitempty"`
	Data   string `json:"data,omitempty"`
	Name   string `json:"name,omitempty"`
	Error  string `json:"error,omitempty"`
	// File identifies the version of the file in the outputs directory
	// the image was read from (nil for a figure).
	File *ImageFile `json:"file,omitempty"`
}

// ImageFile is one version of a file: its inode, modification time (ns)
// and size.
type ImageFile struct {
	Ino     uint64 `json:"ino"`
	MtimeNs int64  `json:"mtime_ns"`
	Size    int64  `json:"size"`
}

// Result is what a call did.
type Result struct {
	// Count numbers the session's calls, from 1.
	Count  int    `json:"count"`
	Stdout Stream `json:"stdout"`
	Stderr Stream `json:"stderr"`
	// Value is the repr of the last expression's value, if it had one
	// other than None.
	Value *string    `json:"value,omitempty"`
	Error *Exception `json:"error,omitempty"`
	// Interrupted is set when the code was stopped with
	// KeyboardInterrupt.
	Interrupted bool `json:"interrupted,omitempty"`
	// InterruptedBy says what interrupted it: the call's timeout or its
	// end (the client cancelled it).
	InterruptedBy string  `json:"-"`
	Images        []Image `json:"images,omitempty"`
	// Seconds is how long the code ran, as the driver measured it.
	Seconds float64 `json:"duration"`
}

// message is any line the driver sends.
type message struct {
	Op      string `json:"op"`
	ID      int64  `json:"id"`
	PID     int    `json:"pid"`
	Version string `json:"version"`
	// Total and Newest are a progress report's.
	Total  int64  `json:"total"`
	Newest string `json:"newest"`
	Result
}

// Grace is how long code has to stop after KeyboardInterrupt before its
// session is ended.
const Grace = 5 * time.Second

// startWait bounds the driver's start: python3's own start, and an
// engine exec's.
const startWait = time.Minute

// Bounds on what the driver sends, which come from the sandbox: a line
// (the ready line, then a result of two streams of the call's limit
// and up to MaxImages images of MaxImage, JSON-escaped: a longer one is
// a driver that is not ours) and the fields of a result.
const (
	readyLine  = 64 << 10
	MaxImages  = 8
	MaxImage   = 1 << 20
	valueLimit = 20000
	traceLimit = 20000
)

// lineFor bounds a result line of a call with the given output limit.
func lineFor(limit int) int64 {
	return int64(MaxImages)*(MaxImage*4/3+1024) + 12*int64(limit) + 6*(valueLimit+traceLimit) + 64<<10
}

// ErrEnded is the cause of errors from a session whose driver is gone.
var ErrEnded = errors.New("the Python session ended")

// Session is one interpreter in a sandbox. Its calls run one at a time,
// in the order they came.
type Session struct {
	// Version is the driver's Python's, as it said.
	Version string
	// pid is the driver's process id in the sandbox, as it said; read by
	// end, which may run as it is set.
	pid atomic.Int64

	cmd    proc.Process
	stdin  io.WriteCloser
	stdout io.Closer // closed once cmd was waited for
	finish func(pid int)

	turn     chan struct{} // held by the call that runs
	results  chan message
	progress chan message
	dead     chan struct{} // closed when the driver is gone
	waited   chan struct{} // closed once the command was waited for
	once     sync.Once
	why      string      // why it ended, set before dead closes
	killed   atomic.Bool // the host killed the command (its status says nothing)
	stderr   *tailBuffer
	maxLine  atomic.Int64 // the bound on the driver's next line

	mu       sync.Mutex
	next     int64
	lastUsed time.Time

	grace time.Duration // Grace, shorter in tests
}

// Start runs the driver and waits for it to say it is ready.
func Start(ctx context.Context, start Starter) (*Session, error) {
	cmd, finish, err := start()
	if err != nil {
		return nil, err
	}
	s := &Session{cmd: cmd, finish: finish, turn: make(chan struct{}, 1), results: make(chan message, 1), progress: make(chan message, 1),
		dead: make(chan struct{}), waited: make(chan struct{}), stderr: &tailBuffer{max: 8 << 10}, lastUsed: time.Now(), grace: Grace}
	s.maxLine.Store(readyLine)
	stdin, stdout, err := proc.Piped(cmd, s.stderr)
	if err != nil {
		finish(0)
		return nil, fmt.Errorf("python session: start: %w", err)
	}
	s.stdin, s.stdout = stdin, stdout
	ready := make(chan message, 1)
	go s.read(bufio.NewReaderSize(stdout, 64<<10), ready)
	wait := time.NewTimer(startWait)
	defer wait.Stop()
	select {
	case <-ready:
		return s, nil
	case <-s.dead:
		return nil, fmt.Errorf("could not start: %w", s.endErr())
	case <-wait.C:
		s.end("its driver did not start within "+startWait.String(), true)
		return nil, s.endErr()
	case <-ctx.Done():
		s.end("its start was cancelled", true)
		return nil, ctx.Err()
	}
}

// read takes the driver's lines until it is gone: the first must say it
// is ready, the rest are results.
func (s *Session) read(r *bufio.Reader, ready chan<- message) {
	first := true
	for {
		line, err := readLine(r, &s.maxLine)
		if err != nil {
			why, alive := "its interpreter exited", false
			if !errors.Is(err, io.EOF) {
				why, alive = "its driver broke the protocol: "+err.Error(), true
			}
			s.end(why, alive)
			return
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			s.end("its driver sent a line that is not JSON", true)
			return
		}
		switch {
		case first && m.Op == "ready":
			first = false
			s.pid.Store(int64(m.PID))
			s.Version = textcut.Shorten(m.Version, 40)
			ready <- m
		case !first && m.Op == "result":
			select {
			case s.results <- m:
			default: // nobody asked for it
			}
		case !first && m.Op == "progress":
			select {
			case s.progress <- m:
			default:
			}
		default:
			s.end(fmt.Sprintf("its driver sent %q out of turn", textcut.Shorten(m.Op, 40)), true)
			return
		}
	}
}

// readLine reads one line of at most max bytes (read as the line comes:
// a call sets it as it sends), without its newline.
func readLine(r *bufio.Reader, max *atomic.Int64) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if bound := max.Load(); int64(len(buf)+len(chunk)) > bound {
			return nil, fmt.Errorf("a line over %d bytes", bound)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// end ends the session, once, and tells callers why at once. Behind
// them, a driver that may still run (alive) and its processes are ended
// in the sandbox before the engine command is killed, while its process
// tree is whole; a driver that exited is waited for first, so that its
// last words on stderr are kept for endErr.
func (s *Session) end(why string, alive bool) {
	s.once.Do(func() {
		s.why = why
		pid := int(s.pid.Load())
		close(s.dead)
		go func() {
			defer close(s.waited)
			if alive {
				s.finish(pid)
			}
			_ = s.stdin.Close()
			exited := make(chan struct{})
			go func() {
				// A driver that exited by itself takes its command
				// with it; one that did not, or a command that lingers,
				// is killed.
				t := time.NewTimer(5 * time.Second)
				defer t.Stop()
				if !alive {
					select {
					case <-exited:
						return
					case <-t.C:
					}
				}
				s.killed.Store(true)
				_ = s.cmd.Kill()
			}()
			_ = s.cmd.Wait()
			_ = s.stdout.Close()
			close(exited)
			if !alive {
				s.finish(pid)
			}
		}()
	})
}

// Close ends the session.
func (s *Session) Close(why string) { s.end(why, true) }

// Ended reports whether the session is over, and why.
func (s *Session) Ended() (bool, string) {
	select {
	case <-s.dead:
		return true, s.why
	default:
		return false, ""
	}
}

// Idle is how long the session has had no call, 0 while one runs.
func (s *Session) Idle(now time.Time) time.Duration {
	if len(s.turn) > 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Sub(s.lastUsed)
}

func (s *Session) endErr() error {
	// What the driver said last, and how it ended, once its command was
	// waited for (the copy of its stderr ends then), within a bound.
	waited := s.wait(3 * time.Second)
	msg := s.why
	// The exit code is read only once the command was waited for: before
	// that, Wait may be writing it.
	if waited && !s.killed.Load() {
		if code := s.cmd.ExitCode(); code >= 0 {
			msg += " (" + exitText(code) + ")"
		}
	}
	if tail := strings.TrimSpace(s.stderr.String()); tail != "" {
		msg += ": " + textcut.Shorten(tail, 2000)
	}
	return fmt.Errorf("%w: %s", ErrEnded, msg)
}

// wait waits at most d for the session's command to be over; it reports
// whether it was.
func (s *Session) wait(d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-s.waited:
		return true
	case <-t.C:
		return false
	}
}

// exitText says how the driver's command ended, as the engine tells
// (it passes the process's status on; 128+N is signal N).
func exitText(code int) string {
	switch {
	case code == 137:
		return "exit status 137: killed (SIGKILL), often for want of memory"
	case code == 139:
		return "exit status 139: a segmentation fault"
	case code > 128 && code < 160:
		return fmt.Sprintf("exit status %d: signal %d", code, code-128)
	}
	return fmt.Sprintf("exit status %d", code)
}

// StopError is a call whose code did not stop on KeyboardInterrupt
// within Grace: its session was ended.
type StopError struct {
	Why   string
	Grace time.Duration
}

func (e *StopError) Error() string {
	return fmt.Sprintf("the code ran past %s and did not stop on KeyboardInterrupt within %s: its Python session was ended (variables and imports are gone; the next call starts a new one)", e.Why, e.Grace)
}

// Run runs req's code in the session, after the calls before it. Past
// req.Timeout (or when ctx ends) the code is interrupted with
// KeyboardInterrupt and the result says so (Interrupted); code that does
// not stop within Grace ends the session with a *StopError.
func (s *Session) Run(ctx context.Context, req Request) (Result, error) {
	select {
	case s.turn <- struct{}{}:
	case <-s.dead:
		return Result{}, s.endErr()
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	if err := ctx.Err(); err != nil { // it ended while both were ready
		<-s.turn
		return Result{}, err
	}
	defer func() {
		s.mu.Lock()
		s.lastUsed = time.Now()
		s.mu.Unlock()
		<-s.turn
	}()
	s.mu.Lock()
	s.next++
	id := s.next
	s.mu.Unlock()
	// A result left from a call given up on is not this one's.
	select {
	case <-s.results:
	default:
	}
	limit := max(req.Limit, 1024)
	line, err := json.Marshal(map[string]any{"op": "run", "id": id, "code": req.Code, "limit": limit})
	if err != nil {
		return Result{}, err
	}
	s.maxLine.Store(lineFor(limit))
	if err := s.send(line); err != nil {
		return Result{}, err
	}
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var tick <-chan time.Time
	if req.Progress != nil {
		// Twice per report, so that the one the caller sends is fresh.
		t := time.NewTicker(ProgressEvery / 2)
		defer t.Stop()
		tick = t.C
	}
	peek, _ := json.Marshal(map[string]any{"op": "peek", "id": id})
	why := ""
	for why == "" {
		select {
		case m := <-s.results:
			if m.ID == id {
				return bound(m.Result, limit), nil
			}
		case <-tick:
			if err := s.send(peek); err != nil {
				return Result{}, err
			}
		case m := <-s.progress:
			if m.ID == id {
				req.Progress(max(m.Total, 0), strings.ToValidUTF8(textcut.Shorten(m.Newest, 1000), ""))
			}
		case <-s.dead:
			return Result{}, s.endErr()
		case <-timeout:
			why = "its timeout of " + req.Timeout.String()
		case <-ctx.Done():
			why = "the call's end (" + context.Cause(ctx).Error() + ")"
		}
	}
	stop, _ := json.Marshal(map[string]any{"op": "interrupt", "id": id})
	if err := s.send(stop); err != nil {
		return Result{}, err
	}
	grace := time.NewTimer(s.grace)
	defer grace.Stop()
	for {
		select {
		case m := <-s.results:
			if m.ID == id {
				r := bound(m.Result, limit)
				if r.Interrupted {
					r.InterruptedBy = why
				}
				return r, nil
			}
		case <-s.dead:
			return Result{}, s.endErr()
		case <-grace.C:
			s.end("its code did not stop on KeyboardInterrupt", true)
			return Result{}, &StopError{Why: why, Grace: s.grace}
		}
	}
}

// send writes one line to the driver. A driver that does not read it
// within a bound (it is not ours, or it is stuck) ends the session. It
// does not give up when a call's context ends: a line half written
// would end the session, and the bound is short.
func (s *Session) send(line []byte) error {
	wrote := make(chan error, 1)
	go func() {
		_, err := s.stdin.Write(append(line, '\n'))
		wrote <- err
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case err := <-wrote:
		if err != nil {
			s.end("its driver stopped reading", true)
			return s.endErr()
		}
		return nil
	case <-s.dead:
		return s.endErr()
	case <-t.C:
		s.end("its driver stopped reading", true)
		return s.endErr()
	}
}

// bound holds a result from the driver (the sandbox's: its code can
// write on the driver's pipes) to what the driver itself would send for
// a call of this limit.
func bound(r Result, limit int) Result {
	half := max(limit/2, 1)
	cut := func(st *Stream) {
		if len(st.Head) > half {
			st.Omitted += int64(len(st.Head) - half)
			st.Head = strings.ToValidUTF8(st.Head[:half], "")
		}
		if len(st.Tail) > half {
			st.Omitted += int64(len(st.Tail) - half)
			st.Tail = strings.ToValidUTF8(st.Tail[len(st.Tail)-half:], "")
		}
		st.Omitted = max(st.Omitted, 0)
		st.Total = max(st.Total, int64(len(st.Head)+len(st.Tail))+st.Omitted)
	}
	cut(&r.Stdout)
	cut(&r.Stderr)
	if r.Value != nil && len(*r.Value) > valueLimit+100 {
		v := strings.ToValidUTF8((*r.Value)[:valueLimit], "") + "… [cut]"
		r.Value = &v
	}
	if e := r.Error; e != nil {
		e.Type = textcut.Shorten(e.Type, 200)
		if len(e.Traceback) > traceLimit+100 {
			e.Traceback = "… [cut] …" + strings.ToValidUTF8(e.Traceback[len(e.Traceback)-traceLimit:], "")
		}
	}
	var images []Image
	pictures, notes := 0, 0
	for _, img := range r.Images {
		switch {
		case img.Error == "" && pictures < MaxImages:
			pictures++
			images = append(images, img)
		case img.Error != "" && notes < MaxImages:
			notes++
			img.Data = ""
			images = append(images, img)
		}
	}
	r.Images = images
	r.Seconds = min(max(r.Seconds, 0), 1e7)
	return r
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.b, []byte("?")))
}

// touch marks the session used now.
func (s *Session) touch() {
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
}
