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
}

// FromCmd wraps an unstarted command as a Process.
func FromCmd(cmd *exec.Cmd) *Cmd { return &Cmd{cmd: cmd} }

// Handing wraps an unstarted command that hands the descriptors it is
// started with past its own three to the process it runs in the sandbox
// (podman's `exec --preserve-fds 3`): Start gives it stdin, stdout and
// stderr, which must then be files (the ends of pipes), as its
// descriptors 3, 4 and 5, and the process reads and writes them itself:
// no engine process relays its bytes. The command's own stdout and
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
		in, ok1 := stdin.(*os.File)
		out, ok2 := stdout.(*os.File)
		errf, ok3 := stderr.(*os.File)
		if !ok1 || !ok2 || !ok3 || in == nil || out == nil || errf == nil {
			return ErrNotFiles
		}
		c.cmd.ExtraFiles = []*os.File{in, out, errf}
		c.cmd.Stdout, c.cmd.Stderr = out, errf
		return c.cmd.Start()
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

// Wait implements Process.
func (c *Cmd) Wait() error {
	err := c.cmd.Wait()
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
