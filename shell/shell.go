// Package shell runs commands through a persistent POSIX shell with
// end-marker framing. It wraps any process that reads sh commands on stdin
// (a local `sh` in tests, `<cli> exec -i <container> sh` in real use), so a
// warm command costs a pipe round trip instead of a process start.
//
// The text written to the shell comes from package guest; this package
// writes it, reads the frames back, and keeps the shells alive.
//
// A Shell runs one command at a time; a Pool keeps several shells of one
// sandbox consistent (working directory and exported variables) so a long
// command does not block a short one.
package shell

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// Host starts shells and reaches into their machine out of band.
type Host interface {
	// Command returns an unstarted process running a POSIX sh that reads
	// commands on stdin. Its lifetime is bounded by ctx.
	Command(ctx context.Context) proc.Process
	// KillRun ends one command on the shell's machine, by a separate
	// process: the processes marked with runID and the descendants of the
	// shell pid, and the shell itself when self is true. See
	// guest.KillRunScript.
	KillRun(ctx context.Context, pid int, runID string, self bool) error
}

// Options configure the shells a Pool opens.
type Options struct {
	// Init is sh text run when a shell starts (output discarded): sourcing
	// an environment file, changing to the workspace.
	Init string
	// EachCommand is trusted sh text run before every command, after the
	// Pool restored shared state, as is: a call of a function that Init
	// defined, which keeps the shell in line with the sandbox's stores.
	EachCommand string
	// Store makes the Pool record in the sandbox's shell store (see
	// guest.StateWriteScript) what each command changed, so shells of other
	// servers and shells opened after a restart see it.
	Store bool
	// OpenTimeout bounds starting a shell; 0 means 30 s.
	OpenTimeout time.Duration
	// Gate, if set, is called after the shell process has started and
	// before anything is written to it; an error abandons the shell. It
	// lets a caller start a shell while it still checks that the machine
	// is the right one.
	Gate func(ctx context.Context) error
	// KillGrace is how long a timed-out command's shell gets to report after
	// its processes were killed before the shell itself is replaced; 0
	// means 1 s.
	KillGrace time.Duration
	// Outputs names the directory and stamp Result.Outputs tells of; zero
	// means guest's defaults.
	Outputs guest.Outputs
}

// Request is one command.
type Request struct {
	Command string
	// Stdin is the command's standard input; nil means /dev/null.
	Stdin []byte
	// Workdir, if set, is the directory for this command only.
	Workdir string
	// Trusted marks the server's own scripts: see guest.Command.
	Trusted bool
	// Timeout ends the command; 0 means no limit beyond ctx.
	Timeout time.Duration
	// QueueWait, when non-zero, bounds on its own the wait for a free shell
	// in a Pool, and Timeout then counts from the command's start; when
	// zero, Timeout counts from the call, the wait included.
	QueueWait      time.Duration
	Stdout, Stderr io.Writer
}

// Result is how a command ended.
type Result struct {
	// ExitCode is the command's status (124 when it timed out, 130 when it
	// was canceled), or the shell's when it exited.
	ExitCode int
	Duration time.Duration
	// TimedOut means the timeout ended the command; Canceled that ctx did.
	TimedOut bool
	Canceled bool
	// ShellLost means the shell itself ended (the command ran `exit`, killed
	// it, or it could not be stopped otherwise). State is restored in the
	// next shell.
	ShellLost bool
	// NotStarted means the shell was lost before the command began, so it
	// can safely be run again elsewhere.
	NotStarted bool
	// Queued is how long the command waited for a free shell.
	Queued time.Duration
	// LeftBehind means the command started background processes that may
	// still hold its stdout and stderr. Its shell is retired: what they
	// write from now on is discarded, never shown as another command's.
	LeftBehind bool
	// Stray counts bytes that processes left behind by earlier commands
	// wrote to this shell; they were discarded.
	Stray int64
	// StopTook is, for a command that timed out or was cancelled, how long
	// stopping it took after that moment: while the sandbox is slow to
	// answer (a loaded host) the command runs on for that long.
	StopTook time.Duration
	// Outputs means the sandbox's outputs directory changed, or held a PNG
	// file, since it was last looked at (guest.OutputsStamp): what the
	// command wrote there may come back as images.
	Outputs bool
}

// SlowStop is how long ending an interrupted command may take before it is
// worth telling: usually an idle shell stops it within milliseconds; on a
// loaded host an engine exec can take seconds, and the command runs on
// meanwhile.
const SlowStop = 250 * time.Millisecond

// StoppedLate reports whether the command timed out or was cancelled and
// ending it took SlowStop or more, so that it ran on for that long.
func (r Result) StoppedLate() bool {
	return (r.TimedOut || r.Canceled) && r.StopTook >= SlowStop
}

// State is the shell state kept across commands and shells.
type State = guest.State

// ErrNULInCommand is returned for commands that contain a NUL byte, which
// no shell can carry.
var ErrNULInCommand = guest.ErrNULInCommand

// newMarker returns a fresh unguessable marker.
func newMarker() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("shell: crypto/rand failed: " + err.Error())
	}
	return "sbx" + hex.EncodeToString(b[:])
}

// ErrOpenTimeout is returned by Open when the shell did not greet within
// Options.OpenTimeout.
var ErrOpenTimeout = errors.New("shell open timed out")

// ErrShellDead is returned by Run on a shell that has ended.
var ErrShellDead = errors.New("shell has ended")

// Shell is one persistent shell process.
type Shell struct {
	host  Host
	opts  Options
	cmd   proc.Process
	stdin *os.File
	// readEnds are closed only in Close: closing them when the process
	// exits could drop output still in the pipes.
	readEnds []*os.File
	out      *frameReader
	errs     *frameReader
	pid      int
	// state is the shell state as commands see it; applied is what the
	// framing shell itself holds. They differ after an isolated command
	// changed its directory or exports: the next command restores state
	// first.
	state   State
	applied State
	// started is the state the last command started in (after the shell
	// loaded changes from the sandbox's stores).
	started State
	cancel  context.CancelFunc

	exited   chan struct{} // closed when the process has been waited for
	exitCode int
	waitErr  error // what waiting for the process returned; read once exited is closed

	mu   sync.Mutex
	dead bool

	version uint64 // pool state version this shell holds
}

// Open starts a shell and waits until it answers.
func Open(ctx context.Context, host Host, opts Options) (*Shell, error) {
	life, cancel := context.WithCancel(context.Background())
	cmd := host.Command(life)
	inR, inW, err := os.Pipe()
	if err != nil {
		cancel()
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		cancel()
		closeAll(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		cancel()
		closeAll(inR, inW, outR, outW)
		return nil, err
	}
	if err := cmd.Start(inR, outW, errW); err != nil {
		cancel()
		closeAll(inR, inW, outR, outW, errR, errW)
		return nil, fmt.Errorf("start shell: %w", err)
	}
	closeAll(inR, outW, errW)
	s := &Shell{
		host: host, opts: opts, cmd: cmd, stdin: inW,
		out: newFrameReader(outR), errs: newFrameReader(errR), readEnds: []*os.File{outR, errR},
		cancel: cancel, exited: make(chan struct{}), exitCode: -1,
	}
	go func() {
		s.waitErr = cmd.Wait()
		s.exitCode = cmd.ExitCode()
		close(s.exited)
	}()

	timeout := opts.OpenTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	opened := time.Now()
	octx, ocancel := context.WithTimeout(ctx, timeout)
	defer ocancel()
	if opts.Gate != nil {
		if err := opts.Gate(octx); err != nil {
			s.abandon()
			if ctx.Err() == nil && octx.Err() != nil {
				return nil, fmt.Errorf("%w: the check before the shell's first use did not end within %s: %w", ErrOpenTimeout, timeout, err)
			}
			return nil, err
		}
	}
	var pidText, stderrText bytes.Buffer
	marker := newMarker()
	ex := s.exchange(octx, guest.Frame{Script: guest.InitFrame(marker, opts.Init, opts.Outputs)}, marker, "", true, &pidText, &stderrText)
	err = ex.err
	if errors.Is(err, errInterrupted) {
		// Say which bound ended the wait: the caller's, or the open's own
		// (a machine too loaded to start a process in time, a stream
		// that never carried the greeting).
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("shell did not answer before the call ended: %w", cerr)
		} else {
			err = fmt.Errorf("%w: the shell did not answer within %s (waited %s)", ErrOpenTimeout, timeout, time.Since(opened).Round(time.Millisecond))
		}
	}
	if err == nil && ex.lost {
		why, code := strings.TrimSpace(stderrText.String()), -1
		select {
		case <-s.exited:
			code = s.exitCode
			// A shell whose engine exec failed to start says nothing on
			// stderr; the exec's own error says why (a node that cannot
			// be reached, say).
			if why == "" && s.waitErr != nil {
				why = s.waitErr.Error()
			}
		default:
		}
		err = fmt.Errorf("shell exited at start (status %d): %s", code, why)
	}
	if err != nil {
		s.abandon()
		return nil, err
	}
	s.pid, err = strconv.Atoi(strings.TrimSpace(pidText.String()))
	if err != nil {
		s.abandon()
		return nil, fmt.Errorf("shell answered an unexpected greeting %q", pidText.String())
	}
	s.state, s.applied = ex.state, ex.state
	return s, nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// PID is the shell's process ID on its machine.
func (s *Shell) PID() int { return s.pid }

// State is the shell's state after its last command.
func (s *Shell) State() State { return s.state }

// Dead reports whether the shell has ended.
func (s *Shell) Dead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dead {
		select {
		case <-s.exited:
			s.dead = true
		default:
		}
	}
	return s.dead
}

// Run runs one command. prelude, if not empty, is sh text run first with its
// output discarded (the Pool uses it to restore state). A command error
// (non-zero status, timeout, lost shell) is reported in Result; err is for
// requests that could not be run at all.
//
// A timeout or a cancel ends the whole command, everything it started
// included (see guest.KillRunScript): the result's exit code is then 124
// after a timeout and 130 after a cancel.
func (s *Shell) Run(ctx context.Context, req Request, prelude string) (Result, error) {
	return s.run(ctx, req, nil, prelude)
}

// run runs one command in state target (the shell's own state when nil),
// with extra trusted sh text run before it as is.
func (s *Shell) run(ctx context.Context, req Request, target *State, extra string) (Result, error) {
	if s.Dead() {
		return Result{}, ErrShellDead
	}
	want := s.state
	if target != nil {
		want = *target
	}
	prelude := ""
	if want != s.applied {
		prelude = guest.Restore(want, guest.ExportNames(s.applied.Exports))
	}
	marker := newMarker()
	runID := newMarker()[3:]
	frame, err := guest.CommandFrame(marker, guest.Command{Command: req.Command, Stdin: req.Stdin, Workdir: req.Workdir, RunID: runID, Each: extra, Trusted: req.Trusted}, prelude)
	if err != nil {
		return Result{}, err
	}
	stdout, stderr := req.Stdout, req.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	start := time.Now()
	rctx := ctx
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	ex := s.exchange(rctx, frame, marker, runID, !frame.Isolated, stdout, stderr)
	res := Result{ExitCode: ex.code, Duration: time.Since(start), ShellLost: ex.lost,
		NotStarted: ex.lost && !ex.started && !ex.killFailed, LeftBehind: ex.bg, Stray: ex.stray, StopTook: ex.stopped, Outputs: ex.outputs}
	err = ex.err
	if errors.Is(err, errInterrupted) {
		err = nil
		// The status the kill left (137, 143) says nothing of the
		// command: the result says why it ended, as timeout(1) does.
		if ctx.Err() != nil {
			res.Canceled = true
			res.ExitCode = 130
		} else {
			res.TimedOut = true
			res.ExitCode = 124
		}
	}
	if err != nil {
		return res, err
	}
	s.started = want
	if ex.pre != nil {
		s.started = *ex.pre
		want = *ex.pre
	}
	switch {
	case !frame.Isolated && ex.stateOK:
		s.state, s.applied = ex.state, ex.state
	case !frame.Isolated:
		// A command that cannot have changed the state reports none.
		s.state, s.applied = want, want
	case frame.Isolated:
		// The subshell's changes reach the framing shell with the next
		// command; without a report, they are lost with the subshell.
		s.applied = want
		s.state = want
		if ex.stateOK {
			s.state = ex.state
		}
	}
	return res, nil
}

// lostWait bounds each wait for a shell that is being killed.
const lostWait = 5 * time.Second

// syncWriteMax is the largest frame written without a goroutine: well
// inside a pipe's buffer.
const syncWriteMax = 16 << 10

// killRecheck is how long a command's frame is waited for after a kill
// before another kill: the command may have started since the last one.
const killRecheck = 50 * time.Millisecond

// killWait bounds ending a command's processes (thousands of them in a
// fork bomb) from outside.
const killWait = 30 * time.Second

// errInterrupted reports that ctx ended the exchange.
var errInterrupted = errors.New("interrupted")

// exchanged is what one exchange with the shell returned.
type exchanged struct {
	code    int
	state   State
	stateOK bool   // the frame reported the shell's state
	pre     *State // the state the command started in, when the shell reported it
	bg      bool   // the command started background processes
	outputs bool   // the outputs directory holds PNG files
	lost    bool   // the shell ended; code is then its exit status
	started bool   // the start beacon arrived
	// killFailed: a kill of the interrupted command failed, so the shell
	// may yet run it in its machine.
	killFailed bool
	stray      int64
	stopped    time.Duration // how long ending an interrupted command took
	err        error
}

// exitDrain is how long a command's frame is read past its shell's exit.
const exitDrain = 200 * time.Millisecond

// tailWriter counts what is written to it and keeps the last tailKeep
// bytes.
type tailWriter struct {
	n    int64
	tail []byte
}

// tailKeep bounds what a tailWriter keeps.
const tailKeep = 4 << 10

func (t *tailWriter) Write(p []byte) (int, error) {
	t.n += int64(len(p))
	if len(p) >= tailKeep {
		t.tail = append(t.tail[:0], p[len(p)-tailKeep:]...)
	} else {
		t.tail = append(t.tail, p...)
		if n := len(t.tail) - tailKeep; n > 0 {
			t.tail = t.tail[:copy(t.tail, t.tail[n:])]
		}
	}
	return len(p), nil
}

// countWriter counts what it discards.
type countWriter struct{ n atomic.Int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// exchange writes frame and reads one frame from both streams (the frame
// is described in package guest). If ctx ends first it ends the command
// (runID), and the shell too when inShell is set (the command runs in the
// shell itself, so ending only its children would let the rest of it run
// on) or when the frame's start beacon has not arrived (the shell may not
// have started the command yet); if the shell does not then finish its
// frame within KillGrace it is killed. With an empty runID (the init
// frame) nothing is killed but the shell.
func (s *Shell) exchange(ctx context.Context, frame guest.Frame, marker, runID string, inShell bool, stdout, stderr io.Writer) (ex exchanged) {
	outDone := make(chan error, 1)
	errDone := make(chan error, 1)
	var stateBuf, statusBuf bytes.Buffer
	var stray countWriter
	var beaconSeen atomic.Bool
	var preBuf bytes.Buffer
	go func() {
		outDone <- s.readStdout(marker, &stray, stdout, &stateBuf, &statusBuf, &ex.stateOK, &preBuf)
	}()
	go func() {
		errDone <- s.readStderr(marker, &stray, stderr, &beaconSeen)
	}()
	writeDone := make(chan error, 1)
	if frame.Tail == "" && len(frame.Script) <= syncWriteMax {
		// The shell is idle and its stdin pipe mostly empty, so a small
		// frame fits in the pipe at once: no goroutine needed. The wait
		// is bounded by ctx all the same: where the shell holds the
		// server's own pipe, the sandbox can reopen it for writing
		// (/proc/PID/fd/0), shrink it and fill it, and stop the shell.
		// A write that ctx ended shows as the interrupt below.
		fired := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			_ = s.stdin.SetWriteDeadline(time.Now())
			close(fired)
		})
		_, err := io.WriteString(s.stdin, frame.Script)
		if !stop() {
			<-fired
			_ = s.stdin.SetWriteDeadline(time.Time{})
		}
		writeDone <- err
	} else {
		go func() {
			_, err := frame.WriteTo(s.stdin)
			writeDone <- err
		}()
	}

	var outErr, errErr error
	gotOut, gotErr := false, false
	// wait collects both readers until they finish or stop fires. Once
	// the shell's process has ended, what is already in its pipes is
	// read for exitDrain more, not until every holder of their write ends
	// closes them: where the shell holds the server's own pipes, the
	// processes it left behind hold them too, and an end of file would
	// wait for those.
	exited := s.exited
	wait := func(stop <-chan struct{}, timer <-chan time.Time) bool {
		for !(gotOut && gotErr) {
			select {
			case outErr = <-outDone:
				gotOut = true
			case errErr = <-errDone:
				gotErr = true
			case <-exited:
				exited = nil
				drained := time.Now().Add(exitDrain)
				for _, f := range s.readEnds {
					_ = f.SetReadDeadline(drained)
				}
			case <-stop:
				return false
			case <-timer:
				return false
			}
		}
		return true
	}
	interrupted, killFailed := false, false
	var stopped time.Duration
	if !wait(ctx.Done(), nil) {
		interrupted = true
		t0 := time.Now()
		grace := s.opts.KillGrace
		if grace <= 0 {
			grace = time.Second
		}
		var ended bool
		if runID == "" {
			s.kill()
			stopped = time.Since(t0)
			ended = wait(nil, time.After(grace))
		} else {
			// Before the start beacon the shell may not have got to
			// the command yet, and a kill of the command's processes
			// would find none, the shell starting it after the kill:
			// the shell goes too, so the command never runs (one the
			// shell started meanwhile goes with it). After the beacon
			// the command's process exists (an isolated command's
			// subshell sends it), and the kill finds it. All the same,
			// while the shell lives on and the frame has not ended,
			// each kill is followed by another: what one missed is
			// ended soon after. A kill that ended the shell is not
			// repeated: nothing is left to start anything, and the
			// shell's end may take the engine a while to report (a
			// repeat would count in StopTook as the command's).
			self := inShell || !beaconSeen.Load()
			killFailed = s.killRun(runID, self)
			stopped = time.Since(t0)
			graceEnd := time.Now().Add(grace)
			// Each wait is killRecheck at least, however long the kill
			// took: a frame already read is then always taken (a timer
			// that has fired may win wait's select against it).
			for !self {
				ended = wait(nil, time.After(killRecheck))
				if ended || !time.Now().Before(graceEnd) || s.hasExited() {
					break
				}
				killFailed = s.killRun(runID, self) || killFailed
				stopped = time.Since(t0)
			}
			if !ended {
				ended = wait(nil, time.After(max(time.Until(graceEnd), killRecheck)))
			}
		}
		if !ended {
			s.kill()
			if !wait(nil, time.After(lostWait)) {
				return exchanged{code: -1, lost: true, started: beaconSeen.Load(), stray: stray.n.Load(), stopped: stopped, killFailed: killFailed,
					err: fmt.Errorf("shell did not end after being killed")}
			}
		}
	}
	select {
	case <-writeDone:
	case <-time.After(lostWait):
		s.kill()
	}
	ex.started = beaconSeen.Load()
	ex.stray = stray.n.Load()
	ex.stopped = stopped
	ex.killFailed = killFailed
	if outErr != nil || errErr != nil {
		s.markDead()
		ex.code, ex.lost, ex.stateOK = -1, true, false
		select {
		case <-s.exited:
			ex.code = s.exitCode
		case <-time.After(lostWait):
			s.kill()
		}
		if interrupted {
			ex.err = errInterrupted
		}
		return ex
	}
	status, ok := guest.ParseStatus(statusBuf.String())
	if !ok {
		s.kill()
		return exchanged{code: -1, lost: true, started: true, stray: ex.stray, err: fmt.Errorf("shell sent a malformed frame trailer")}
	}
	ex.code, ex.bg, ex.outputs = status.Code, status.BG, status.Outputs
	if preBuf.Len() > 0 {
		cwd, exports, found := strings.Cut(preBuf.String(), "\n")
		if found {
			ex.pre = &State{Cwd: cwd, Exports: exports}
		}
	}
	if ex.stateOK {
		var subBG bool
		ex.state, subBG, ex.stateOK = guest.ParseState(stateBuf.String())
		ex.bg = ex.bg || subBG
	}
	if interrupted {
		ex.err = errInterrupted
	}
	return ex
}

// readStdout reads one frame of the shell's stdout: stray bytes up to the
// start beacon, the command's output, the optional state block and the
// status.
func (s *Shell) readStdout(marker string, stray *countWriter, stdout, state, status io.Writer, stateOK *bool, pre *bytes.Buffer) error {
	// Up to the beacon: stray bytes, then the state the command starts in
	// when the shell just loaded changes from the sandbox's stores.
	var head bytes.Buffer
	if err := s.out.until([]byte(marker+">\n"), &head); err != nil {
		return err
	}
	h := head.Bytes()
	if i := bytes.Index(h, []byte(marker+"}")); i >= 0 {
		pre.Write(h[i+len(marker)+1:])
		h = h[:i]
	}
	_, _ = stray.Write(h)
	if err := s.out.until([]byte("\n"+marker), stdout); err != nil {
		return err
	}
	c, err := s.out.next()
	if err != nil {
		return err
	}
	switch c {
	case '=':
		*stateOK = true
		if err := s.out.until([]byte("\n"+marker+" "), state); err != nil {
			return err
		}
	case ' ':
	default:
		return fmt.Errorf("shell sent a malformed frame")
	}
	return s.out.until([]byte("\n"+marker+".\n"), status)
}

// readStderr reads one frame of the shell's stderr: stray bytes up to the
// start beacon (started is set then), and the command's output. An
// isolated command's frame opens with M( from the framing shell before
// its subshell sends the beacon (see guest's frame streams); one that ends
// without the beacon is a command the shell could not start, and what the
// shell wrote after M( is its error, which goes to stderr.
func (s *Shell) readStderr(marker string, stray *countWriter, stderr io.Writer, started *atomic.Bool) error {
	if err := s.errs.until([]byte(marker), stray); err != nil {
		return err
	}
	c, err := s.nextPair()
	if err != nil {
		return err
	}
	if c == '(' {
		// Up to the subshell's beacon, or the frame's end without it.
		// The shell's own error (or its end: dash and busybox exit when
		// a fork fails) is what came since M(. A marker followed by
		// anything else is no token of the frame's (bash's notice of a
		// subshell killed before its beacon quotes the subshell's text).
		var between tailWriter
		notStarted := func(err error) error {
			stray.n.Add(between.n - int64(len(between.tail)))
			if _, werr := stderr.Write(bytes.TrimSuffix(between.tail, []byte("\n"))); err == nil {
				err = werr
			}
			return err
		}
		for {
			if err := s.errs.until([]byte(marker), &between); err != nil {
				return notStarted(err)
			}
			c, err := s.errs.next()
			if err != nil {
				return notStarted(err)
			}
			text := marker
			switch {
			case c == '\n' && bytes.HasSuffix(between.tail, []byte("\n")):
				return notStarted(nil)
			case c == '<':
				nl, err := s.errs.next()
				if err != nil {
					return notStarted(err)
				}
				if nl == '\n' {
					stray.n.Add(between.n)
					started.Store(true)
					return s.errs.until([]byte("\n"+marker+"\n"), stderr)
				}
				s.errs.unread(nl)
				text += "<"
			default:
				// The byte may open the next marker.
				s.errs.unread(c)
			}
			_, _ = between.Write([]byte(text))
		}
	} else if c != '<' {
		return errMalformedStderr
	}
	started.Store(true)
	return s.errs.until([]byte("\n"+marker+"\n"), stderr)
}

// nextPair reads the two bytes after a marker on stderr, the second of
// which must be a newline, and returns the first.
func (s *Shell) nextPair() (byte, error) {
	c, err := s.errs.next()
	if err != nil {
		return 0, err
	}
	nl, err := s.errs.next()
	if err != nil {
		return 0, err
	}
	if nl != '\n' {
		return 0, errMalformedStderr
	}
	return c, nil
}

var errMalformedStderr = errors.New("shell sent a malformed frame on stderr")

// killRun ends, from outside, the command marked runID, and the shell
// itself when self is set. It reports whether the kill failed: the
// command's processes, and the shell, may then live on in the machine
// (a paused container) however the shell's process here ends.
func (s *Shell) killRun(runID string, self bool) (failed bool) {
	if s.pid == 0 {
		s.kill()
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	if err := s.host.KillRun(ctx, s.pid, runID, self); err != nil {
		if self {
			s.kill()
		}
		return true
	}
	return false
}

// kill ends the shell and everything it runs.
func (s *Shell) kill() {
	s.markDead()
	if s.pid != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), killWait)
		_ = s.host.KillRun(ctx, s.pid, "", true)
		cancel()
	}
	s.cancel()
	_ = s.stdin.Close()
}

// abandon kills a shell that never became usable and releases its pipes.
func (s *Shell) abandon() {
	s.kill()
	select {
	case <-s.exited:
	case <-time.After(lostWait):
	}
	closeAll(s.readEnds...)
}

// hasExited reports whether the shell's process has ended.
func (s *Shell) hasExited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

func (s *Shell) markDead() {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
}

// Close ends the shell: it closes its input so an idle shell exits by
// itself, and kills it if it has not within a second.
func (s *Shell) Close() {
	s.markDead()
	_ = s.stdin.Close()
	select {
	case <-s.exited:
	case <-time.After(time.Second):
		s.kill()
		<-s.exited
	}
	s.cancel()
	closeAll(s.readEnds...)
}
