// Package terminal runs interactive programs in sandboxes behind a
// pseudo-terminal and renders what they print, so that an agent can drive
// a REPL, an installer that prompts, an editor or a curses program the way
// a person would: it types text and named keys, and reads the screen.
//
// A session is one engine exec with a TTY (`podman exec -it`, `container
// exec -it`) whose terminal side is a pseudo-terminal on the host
// (github.com/creack/pty). Everything the program prints is fed to a
// terminal emulator (github.com/hinshun/vt10x: a VT100/xterm state machine
// with an alternate screen, scroll regions, cursor keys modes and the
// replies programs ask terminals for), which holds only the visible screen,
// and to a bounded buffer of the newest output with control sequences
// removed. Memory per session is bounded whatever the program prints.
//
// Sessions live in the server process: they survive between tool calls,
// not a restart of the server (their engine exec ends with it).
package terminal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/hinshun/vt10x"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"golang.org/x/term"
)

// Size limits of a session's screen.
const (
	DefaultCols, DefaultRows = 120, 40
	MaxCols, MaxRows         = 400, 200
)

// OutputCap bounds the new output kept between two reads: past it the
// oldest is dropped, and the next read says how much.
const OutputCap = 256 << 10

// Settle is how long output must pause before a read takes the screen as
// settled.
const Settle = 100 * time.Millisecond

// settleMax bounds how long a read waits past its wait for a program that
// never stops printing.
const settleMax = 2 * time.Second

// maxSend bounds the text of one send.
const maxSend = 64 << 10

// ErrEnded means the session's program has ended.
var ErrEnded = errors.New("the session's program has ended")

// CheckSize validates a screen size.
func CheckSize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > MaxCols || rows > MaxRows {
		return fmt.Errorf("size %dx%d: want 1 to %d columns and 1 to %d rows", cols, rows, MaxCols, MaxRows)
	}
	return nil
}

// Session is one program behind a pseudo-terminal.
type Session struct {
	ID      string
	Sandbox string
	Command string
	Started time.Time

	prog program
	ptmx *os.File
	vt   vt10x.Terminal

	wmu      sync.Mutex // one write to the program at a time, each with its own deadline
	resizeMu sync.Mutex

	mu      sync.Mutex
	cols    int
	rows    int
	fresh   []byte // new output, control sequences removed
	dropped int64  // bytes of new output dropped since the last read
	strip   stripper
	san     sanitizer     // what the emulator may see (pump only)
	broken  bool          // the emulator failed for good (pump only)
	reset   int           // times the emulator was started afresh after it failed
	partial []byte        // the start of a UTF-8 sequence the last read ended in
	changed chan struct{} // closed and replaced when output arrives
	lastOut time.Time

	replies chan []byte // the emulator's answers to the program's queries
	done    chan struct{}
	exit    int
	exitMsg string
	ended   time.Time
}

// Start runs p behind a new pseudo-terminal of cols x rows: an engine
// CLI's exec with a TTY (*proc.Cmd) runs on it; a stream to a terminal
// of the remote side's (proc.Terminal) is carried through it, its side
// of it raw, as a person's terminal is under `kubectl exec -it`.
func Start(id, sandbox, command string, p proc.Process, cols, rows int) (*Session, error) {
	if err := CheckSize(cols, rows); err != nil {
		return nil, err
	}
	s := &Session{ID: id, Sandbox: sandbox, Command: command, Started: time.Now(), cols: cols, rows: rows,
		changed: make(chan struct{}), replies: make(chan []byte, 16), done: make(chan struct{})}
	s.vt = vt10x.New(vt10x.WithSize(cols, rows), vt10x.WithWriter(replyWriter{s.replies}))
	var ptmx *os.File
	var err error
	switch p := p.(type) {
	case *proc.Cmd:
		ptmx, err = startCmd(p.Cmd(), cols, rows)
		s.prog = cmdProgram{p.Cmd()}
	case proc.Terminal:
		ptmx, err = startStream(p, cols, rows)
		s.prog = streamProgram{p}
	default:
		err = errors.New("the process has no terminal")
	}
	if err != nil {
		return nil, fmt.Errorf("start the terminal's program: %w", err)
	}
	s.ptmx = pollable(ptmx)
	go s.answer()
	go s.pump()
	return s, nil
}

// startCmd starts cmd on a new pseudo-terminal and returns its master.
func startCmd(cmd *exec.Cmd, cols, rows int) (*os.File, error) {
	if a := cmd.SysProcAttr; a != nil {
		// The program leads a session of its own (its process group is
		// that session's): a process group asked for besides would make
		// the start fail (setpgid after setsid is EPERM).
		a.Setpgid, a.Pgid, a.Foreground = false, 0, false
	}
	return pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
}

// startStream starts t with a new pseudo-terminal's raw side as its
// input and output, and returns the master: the remote terminal does
// the echoing and the line editing, this one passes bytes as they are.
func startStream(t proc.Terminal, cols, rows int) (*os.File, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, err
	}
	defer tty.Close() // the stream holds its own copy
	if err := makeRaw(tty); err != nil {
		ptmx.Close()
		return nil, err
	}
	_ = pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	t.Resize(cols, rows)
	if err := t.Start(tty, tty, nil); err != nil {
		ptmx.Close()
		return nil, err
	}
	return ptmx, nil
}

// program is what a session runs: hung up, killed, waited for.
type program interface {
	hangUp()
	kill()
	resize(cols, rows int)
	// wait waits for the end and says how it ended: the status as a
	// shell reports it (-1 when there is none), and why, when the status
	// does not say.
	wait() (int, string)
}

type cmdProgram struct{ cmd *exec.Cmd }

func (c cmdProgram) hangUp() {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(syscall.SIGHUP)
	}
}

func (c cmdProgram) kill() {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Kill()
	}
}

// resize: the CLI follows its pseudo-terminal's size.
func (c cmdProgram) resize(int, int) {}

func (c cmdProgram) wait() (int, string) {
	err := c.cmd.Wait()
	ps := c.cmd.ProcessState
	code := ExitStatus(ps)
	switch {
	case ps == nil:
		// Wait failed before the process was reaped: no status to read.
		if err != nil {
			return code, err.Error()
		}
	case ps.Sys() != nil:
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return code, "ended by signal " + ws.Signal().String()
		}
	}
	if err != nil && code < 0 {
		return code, err.Error()
	}
	return code, ""
}

type streamProgram struct{ t proc.Terminal }

// hangUp ends the stream: the remote side hangs its terminal up.
func (p streamProgram) hangUp()               { _ = p.t.Kill() }
func (p streamProgram) kill()                 { _ = p.t.Kill() }
func (p streamProgram) resize(cols, rows int) { p.t.Resize(cols, rows) }

func (p streamProgram) wait() (int, string) {
	err := p.t.Wait()
	var ee *proc.ExitError
	if err != nil && !errors.As(err, &ee) {
		return -1, err.Error()
	}
	return p.t.ExitCode(), ""
}

// replyWriter hands the emulator's replies (cursor position reports and
// the like) to the goroutine that types them: the emulator writes them
// while it parses, and must never wait for the program to read.
type replyWriter struct{ ch chan []byte }

func (w replyWriter) Write(p []byte) (int, error) {
	select {
	case w.ch <- bytes.Clone(p):
	default: // a program that floods queries loses some answers
	}
	return len(p), nil
}

// pollable returns f as a file whose reads and writes take deadlines
// (creack/pty hands out a blocking one on some systems, macOS among them),
// or f itself if that cannot be done.
func pollable(f *os.File) *os.File {
	sc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	var dup int
	var derr error
	if err := sc.Control(func(fd uintptr) { dup, derr = syscall.Dup(int(fd)) }); err != nil || derr != nil {
		return f
	}
	if err := syscall.SetNonblock(dup, true); err != nil {
		_ = syscall.Close(dup)
		return f
	}
	syscall.CloseOnExec(dup)
	nf := os.NewFile(uintptr(dup), f.Name())
	_ = f.Close()
	return nf
}

// write types p into the terminal, giving up after d.
func (s *Session) write(p []byte, d time.Duration) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.ptmx.SetWriteDeadline(time.Now().Add(d))
	_, err := s.ptmx.Write(p)
	return err
}

func (s *Session) answer() {
	for {
		select {
		case p := <-s.replies:
			_ = s.write(p, time.Second)
		case <-s.done:
			return
		}
	}
}

// pump reads what the program prints until it ends, then records how it
// ended.
func (s *Session) pump() {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.ptmx.Read(buf)
		if n > 0 {
			s.feed(buf[:n])
		}
		if err != nil {
			break // EIO once the program's side is closed
		}
	}
	code, msg := s.prog.wait()
	s.mu.Lock()
	s.exit, s.exitMsg = code, msg
	s.ended = time.Now()
	s.notifyLocked()
	s.mu.Unlock()
	close(s.done)
	_ = s.ptmx.Close()
}

// ExitStatus is a finished process's status as a shell reports it: its
// exit code, or 128+N when signal N ended it; -1 when it has neither.
func ExitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// feed takes one piece of output.
func (s *Session) feed(p []byte) {
	// The emulator parses whole UTF-8 sequences: a piece that ends
	// inside one keeps its start for the next.
	data := s.san.filter(s.partial, p)
	s.partial = nil
	if cut := incompleteTail(data); cut > 0 {
		s.partial = bytes.Clone(data[len(data)-cut:])
		data = data[:len(data)-cut]
	}
	s.emulate(data)
	s.mu.Lock()
	s.fresh = s.strip.strip(s.fresh, p)
	// Kept up to twice the cap, then cut to it: the copying is amortised
	// under a flood, and a read takes only the newest OutputCap.
	if over := len(s.fresh) - OutputCap; over > OutputCap {
		s.dropped += int64(over)
		s.fresh = append(s.fresh[:0], s.fresh[over:]...)
	}
	s.lastOut = time.Now()
	s.notifyLocked()
	s.mu.Unlock()
}

// emulate feeds the emulator. Should it fail on output the sanitizer let
// through, the session goes on with the screen reset (RIS) rather than
// taking the server down; if even that fails, the screen stays as it is.
func (s *Session) emulate(data []byte) {
	if s.broken {
		return
	}
	if !try(func() { _, _ = s.vt.Write(data) }) {
		s.mu.Lock()
		s.reset++
		s.mu.Unlock()
		s.broken = !try(func() { _, _ = s.vt.Write([]byte("\x1bc")) })
	}
}

// try runs f and reports whether it returned without a panic.
func try(f func()) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	f()
	return true
}

// incompleteTail is the length of an unfinished UTF-8 sequence at the end
// of p (0 if none).
func incompleteTail(p []byte) int {
	for i := 1; i <= 3 && i <= len(p); i++ {
		c := p[len(p)-i]
		if c < 0x80 {
			return 0
		}
		if c >= 0xc0 { // a lead byte: is its sequence whole?
			need := 2
			switch {
			case c >= 0xf0:
				need = 4
			case c >= 0xe0:
				need = 3
			}
			if i < need {
				return i
			}
			return 0
		}
	}
	return 0
}

func (s *Session) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Await waits up to timeout until ok holds for the screen's rows, looking
// again whenever output arrives, and reports whether it held. It leaves
// the new output for the next read.
func (s *Session) Await(timeout time.Duration, ok func(lines []string) bool) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if ok(s.lines()) {
			return true
		}
		select {
		case <-ch:
		case <-s.done:
			return ok(s.lines())
		case <-t.C:
			return false
		}
	}
}

// Done is closed when the program has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Ended reports whether the program has ended.
func (s *Session) Ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// appCursor reports whether the program asked for application cursor keys.
func (s *Session) appCursor() bool {
	s.vt.Lock()
	defer s.vt.Unlock()
	return s.vt.Mode()&vt10x.ModeAppCursor != 0
}

// Send types text and then the named keys.
func (s *Session) Send(text string, keyNames []string) error {
	if len(text) > maxSend {
		return fmt.Errorf("text of %d bytes: send at most %d at a time", len(text), maxSend)
	}
	var b strings.Builder
	b.WriteString(text)
	app := len(keyNames) > 0 && s.appCursor()
	for _, k := range keyNames {
		v, err := keyBytes(k, app)
		if err != nil {
			return err
		}
		b.WriteString(v)
	}
	if s.Ended() {
		return ErrEnded
	}
	if b.Len() == 0 {
		return nil
	}
	if err := s.write([]byte(b.String()), 5*time.Second); err != nil {
		if s.Ended() {
			return ErrEnded
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errors.New("the program is not reading what is typed (its input is full)")
		}
		return fmt.Errorf("type into the terminal: %w", err)
	}
	return nil
}

// Resize changes the screen's size; the program is told (SIGWINCH).
func (s *Session) Resize(cols, rows int) error {
	if err := CheckSize(cols, rows); err != nil {
		return err
	}
	if s.Ended() {
		return ErrEnded
	}
	s.resizeMu.Lock()
	defer s.resizeMu.Unlock()
	s.vt.Resize(cols, rows)
	s.mu.Lock()
	s.cols, s.rows = cols, rows
	s.mu.Unlock()
	if err := pty.Setsize(s.ptmx, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		return fmt.Errorf("resize the terminal: %w", err)
	}
	s.prog.resize(cols, rows)
	return nil
}

// Screen is what a read sees.
type Screen struct {
	ID   string `json:"id"`
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
	// Lines are the screen's rows as text, trailing blanks removed; blank
	// rows at the bottom are left out.
	Lines []string `json:"screen"`
	// CursorRow and CursorCol are the cursor's place, from 0 at the top left.
	CursorRow int `json:"cursor_row"`
	CursorCol int `json:"cursor_col"`
	// Output is what the program printed since the last read, control
	// sequences removed; OutputDropped counts the bytes of it dropped
	// for want of room (the newest are kept).
	Output        string `json:"output"`
	OutputDropped int64  `json:"output_dropped,omitempty"`
	Title         string `json:"title,omitempty"`
	// EmulatorResets counts the times the emulator failed on the
	// program's output and started afresh (its screen then blank).
	EmulatorResets int  `json:"emulator_resets,omitempty"`
	AltScreen      bool `json:"alt_screen,omitempty"`
	// Exited is set once the program has ended, with its exit status.
	Exited   bool   `json:"exited"`
	ExitCode *int   `json:"exit_code,omitempty"`
	ExitNote string `json:"exit_note,omitempty"`
}

// Read waits up to wait for new output (not at all if some is unread or
// the program has ended), then for the output to pause for Settle, and
// returns the screen and the output new since the last read.
func (s *Session) Read(wait time.Duration, cancel <-chan struct{}) Screen {
	start := time.Now()
	end := start.Add(wait)
	hardEnd := end.Add(settleMax)
	var seen time.Time // when this read first saw new output
	for {
		s.mu.Lock()
		ch := s.changed
		ended := s.Ended()
		fresh := len(s.fresh) > 0 || s.dropped > 0
		quiet := time.Since(s.lastOut)
		s.mu.Unlock()
		now := time.Now()
		if fresh && seen.IsZero() {
			seen = now
		}
		var sleep time.Duration
		switch {
		case ended, wait <= 0:
			return s.snapshot()
		case fresh && quiet >= Settle, !now.Before(hardEnd):
			return s.snapshot()
		case fresh && now.Sub(seen) >= settleMax:
			return s.snapshot() // output that never pauses
		case fresh:
			sleep = Settle - quiet
		case !now.Before(end):
			return s.snapshot()
		default:
			sleep = end.Sub(now)
		}
		t := time.NewTimer(sleep)
		select {
		case <-ch:
		case <-t.C:
		case <-s.done:
		case <-cancel:
			t.Stop()
			return s.snapshot()
		}
		t.Stop()
	}
}

// snapshot takes the screen and the new output.
func (s *Session) snapshot() Screen {
	s.mu.Lock()
	fresh, dropped := s.fresh, s.dropped
	if over := len(fresh) - OutputCap; over > 0 {
		dropped += int64(over)
		fresh = fresh[over:]
	}
	// Start at a whole character.
	for i := 0; i < 3 && len(fresh) > 0 && fresh[0]&0xc0 == 0x80 && dropped > 0; i++ {
		fresh, dropped = fresh[1:], dropped+1
	}
	out := Screen{ID: s.ID, Output: strings.ToValidUTF8(string(fresh), "\uFFFD"), OutputDropped: dropped, EmulatorResets: s.reset}
	s.fresh, s.dropped = s.fresh[:0], 0
	if cap(s.fresh) > 64<<10 {
		s.fresh = nil // a flood's buffer is not kept
	}
	if s.Ended() {
		out.Exited = true
		code := s.exit
		out.ExitCode = &code
		out.ExitNote = s.exitMsg
	}
	s.mu.Unlock()

	s.vt.Lock()
	cols, rows := s.vt.Size()
	cur := s.vt.Cursor()
	out.Cols, out.Rows, out.CursorRow, out.CursorCol = cols, rows, cur.Y, cur.X
	out.Title = s.vt.Title()
	out.AltScreen = s.vt.Mode()&vt10x.ModeAltScreen != 0
	out.Lines = s.linesLocked()
	s.vt.Unlock()
	return out
}

// lines is the screen's rows as text (see Screen.Lines).
func (s *Session) lines() []string {
	s.vt.Lock()
	defer s.vt.Unlock()
	return s.linesLocked()
}

func (s *Session) linesLocked() []string {
	cols, rows := s.vt.Size()
	lines := make([]string, rows)
	var b strings.Builder
	for y := range rows {
		b.Reset()
		for x := range cols {
			c := s.vt.Cell(x, y).Char
			if c == 0 {
				c = ' '
			}
			b.WriteRune(c)
		}
		lines[y] = strings.TrimRight(b.String(), " ")
	}
	n := len(lines)
	for n > 0 && lines[n-1] == "" {
		n--
	}
	return lines[:n]
}

// Close ends the program: its terminal is hung up, and it is killed if
// it has not ended within grace. It returns once the program has ended.
func (s *Session) Close(grace time.Duration) {
	s.prog.hangUp()
	select {
	case <-s.done:
		return
	case <-time.After(grace):
	}
	s.prog.kill()
	_ = s.ptmx.Close()
	select {
	case <-s.done:
	case <-time.After(grace):
		// The process is killed and its terminal closed; what is left
		// ends on its own, and no caller waits for it.
	}
}

// Info is one session as terminal_list shows it.
type Info struct {
	ID       string    `json:"id"`
	Sandbox  string    `json:"sandbox"`
	Command  string    `json:"command"`
	Cols     int       `json:"cols"`
	Rows     int       `json:"rows"`
	Started  time.Time `json:"started"`
	Exited   bool      `json:"exited"`
	ExitCode *int      `json:"exit_code,omitempty"`
}

// Info describes the session.
func (s *Session) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := Info{ID: s.ID, Sandbox: s.Sandbox, Command: s.Command, Cols: s.cols, Rows: s.rows, Started: s.Started}
	if s.Ended() {
		code := s.exit
		in.Exited, in.ExitCode = true, &code
	}
	return in
}

// makeRaw puts terminal f in raw mode, without the blocking mode that
// f.Fd would set.
func makeRaw(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var rerr error
	if err := sc.Control(func(fd uintptr) { _, rerr = term.MakeRaw(int(fd)) }); err != nil {
		return err
	}
	return rerr
}
