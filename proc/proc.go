// Package proc is the one shape of a process started in a sandbox,
// whatever carries it: an engine CLI's `exec` running on the host
// (docker, podman, Apple's container), or a stream to a cluster's
// kubelet. Shells, sessions, transfers and the agent start their
// processes through it and do not know which.
package proc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Process is a process prepared to run in a sandbox: started once, then
// waited for once.
type Process interface {
	// Start starts the process. It reads stdin (nil: nothing) and writes
	// to stdout and stderr (nil: discarded). Writers that are not *os.File
	// are written from goroutines of the Process's own, which Wait waits
	// for.
	Start(stdin io.Reader, stdout, stderr io.Writer) error
	// Wait waits for the process to end and its output to be written. It
	// returns nil after exit status 0, an *ExitError for another status,
	// and other errors when the process could not be run or was lost.
	Wait() error
	// Kill ends the host's side of the process at once: the CLI, or the
	// stream. What the process started in the sandbox may outlive it
	// (callers end those by their run ID).
	Kill() error
	// ExitCode is the process's exit status once waited for; -1 when it
	// was killed, lost, or not waited for yet.
	ExitCode() int
}

// Terminal is a Process on a terminal of the remote side's (an exec
// stream with a TTY): what it reads and writes is that terminal's, and
// the host sets its size.
type Terminal interface {
	Process
	// Resize sets the terminal's size; before Start, its first size.
	Resize(cols, rows int)
}

// ExitError is a process that ended with a status other than 0.
type ExitError struct {
	Code int
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Cmd is a Process run by a program on the host: an engine CLI's `exec`.
type Cmd struct {
	cmd *exec.Cmd
	// hands: Start passes its streams on as descriptors 3, 4 and 5 (see
	// Handing).
	hands bool
	// copies copy, for a Handing command, the pipes in readEnds to the
	// writers Start was given that are not files.
	copies   sync.WaitGroup
	readEnds []*os.File
}

// waitCopies waits for a Handing command's copies, which end when every
// holder of their pipes' write ends (the sandbox's processes included)
// has closed them: past the command's WaitDelay, when set, the pipes are
// closed under them.
func (c *Cmd) waitCopies() {
	done := make(chan struct{})
	go func() {
		c.copies.Wait()
		close(done)
	}()
	if d := c.cmd.WaitDelay; d > 0 {
		select {
		case <-done:
		case <-time.After(d):
		}
	} else {
		<-done
	}
	closeAll(c.readEnds...)
	<-done
	c.readEnds = nil
}

// FromCmd wraps an unstarted command as a Process.
func FromCmd(cmd *exec.Cmd) *Cmd { return &Cmd{cmd: cmd} }

// Handing wraps an unstarted command that hands the descriptors it is
// started with past its own three to the process it runs in the sandbox
// (podman's `exec --preserve-fds 3`): Start gives it stdin, stdout and
// stderr as its descriptors 3, 4 and 5, and the process reads and writes
// them itself: no engine process relays its bytes. stdin must be a file
// (the end of a pipe); a stdout or stderr that is not one gets a pipe,
// copied to it. The command's own stdout and
// stderr go to stdout and stderr as well, for what it says before the
// process takes the handed descriptors (an engine's error, say); its own
// stdin is empty.
func Handing(cmd *exec.Cmd) *Cmd { return &Cmd{cmd: cmd, hands: true} }

// ErrNotFiles is Start's error on a Handing command given streams that
// are not files.
var ErrNotFiles = errors.New("a command that hands its streams on needs them as files")

// Cmd is the wrapped command, for those that must start it themselves
// (on a pseudo-terminal).
func (c *Cmd) Cmd() *exec.Cmd { return c.cmd }

// Start implements Process.
func (c *Cmd) Start(stdin io.Reader, stdout, stderr io.Writer) error {
	if c.hands {
		return c.startHanding(stdin, stdout, stderr)
	}
	if stdin != nil {
		c.cmd.Stdin = stdin
	}
	if stdout != nil {
		c.cmd.Stdout = stdout
	}
	if stderr != nil {
		c.cmd.Stderr = stderr
	}
	return c.cmd.Start()
}

// startHanding is Start for a Handing command. A stdout or stderr that is
// not a file gets a pipe, copied to it by a goroutine Wait waits for (as
// exec.Cmd does, for at most the command's WaitDelay past its exit when
// that is set).
func (c *Cmd) startHanding(stdin io.Reader, stdout, stderr io.Writer) error {
	in, ok := stdin.(*os.File)
	if !ok || in == nil {
		return ErrNotFiles
	}
	var files [2]*os.File
	var made []*os.File // the write ends of pipes made here
	undo := func() {
		closeAll(made...)
		c.copies.Wait()
		closeAll(c.readEnds...)
		c.readEnds = nil
	}
	for i, w := range []io.Writer{stdout, stderr} {
		if f, ok := w.(*os.File); ok && f != nil {
			files[i] = f
			continue
		}
		if w == nil {
			w = io.Discard
		}
		r, pw, err := os.Pipe()
		if err != nil {
			undo()
			return err
		}
		files[i], made, c.readEnds = pw, append(made, pw), append(c.readEnds, r)
		c.copies.Add(1)
		go func() {
			defer c.copies.Done()
			_, _ = io.Copy(w, r)
		}()
	}
	c.cmd.ExtraFiles = []*os.File{in, files[0], files[1]}
	c.cmd.Stdout, c.cmd.Stderr = files[0], files[1]
	if err := c.cmd.Start(); err != nil {
		undo()
		return err
	}
	closeAll(made...) // the command holds them now
	return nil
}

// Wait implements Process.
func (c *Cmd) Wait() error {
	err := c.cmd.Wait()
	if len(c.readEnds) > 0 {
		c.waitCopies()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return &ExitError{Code: ee.ExitCode()}
	}
	return err
}

// Kill implements Process.
func (c *Cmd) Kill() error {
	if c.cmd.Process == nil {
		return errors.New("not started")
	}
	return c.cmd.Process.Kill()
}

// ExitCode implements Process.
func (c *Cmd) ExitCode() int {
	if c.cmd.ProcessState == nil {
		return -1
	}
	return c.cmd.ProcessState.ExitCode()
}

// Piped starts p with a pipe on its stdin and one on its stdout, and
// errOut for its stderr. The caller writes stdin and closes it to end
// the process's input, reads stdout, and closes stdout once it no longer
// reads it: before Wait when it gives up early, so that nothing stays
// blocked writing to it.
func Piped(p Process, errOut io.Writer) (stdin io.WriteCloser, stdout io.ReadCloser, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, nil, err
	}
	if err := p.Start(inR, outW, errOut); err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, nil, err
	}
	closeAll(inR, outW)
	return inW, outR, nil
}

// Output starts p with no input, a pipe on its stdout and errOut for its
// stderr; see Piped.
func Output(p Process, errOut io.Writer) (stdout io.ReadCloser, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	if err := p.Start(nil, outW, errOut); err != nil {
		closeAll(outR, outW)
		return nil, err
	}
	closeAll(outW)
	return outR, nil
}

// Input starts p with a pipe on its stdin, stdout and stderr going to
// out and errOut; see Piped.
func Input(p Process, out, errOut io.Writer) (stdin io.WriteCloser, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	if err := p.Start(inR, out, errOut); err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	closeAll(inR)
	return inW, nil
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
