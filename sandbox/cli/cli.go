// Package cli is the one place where sandbox-mcp runs a container engine's
// command-line program. It takes argv slices only (never a shell string),
// applies the caller's deadline, logs argv at debug level, keeps the child
// out of the server's process group, and turns a failed run into a
// *sandbox.EngineError classified by the dialect.
package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Classifier maps a failed run's exit code and stderr to one of the sandbox
// sentinel errors and a hint for the user. It returns nil, "" when the
// failure has no special meaning.
type Classifier func(exitCode int, stderr string) (kind error, hint string)

// maxStderr bounds the stderr text kept in an error.
const maxStderr = 2048

// waitDelay bounds how long Wait waits for a killed CLI's pipes to close.
const waitDelay = 2 * time.Second

// DefaultTimeout bounds a run of the CLI whose context has no deadline, so
// a stuck engine (a lock held by another client, a hung daemon) gives an
// error instead of a tool call that never answers.
const DefaultTimeout = 2 * time.Minute

// Runner runs one CLI binary.
type Runner struct {
	Binary   string
	Env      []string // extra KEY=VALUE entries on top of the server's environment
	Logger   *slog.Logger
	Classify Classifier
	// MissingHint is shown when the binary cannot be found.
	MissingHint string
	// Timeout replaces DefaultTimeout for Run and Output when non-zero.
	Timeout time.Duration
}

// Command prepares argv for the runner's binary with process hygiene set:
// its own process group, SIGKILL of that group on context end, and a
// bounded Wait.
func (r *Runner) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.Binary, args...)
	if len(r.Env) > 0 {
		cmd.Env = append(cmd.Environ(), r.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithServer(cmd.SysProcAttr)
	// The CLI leads its own group: ending it ends whatever it started too
	// (Apple's CLI and podman's conmon helpers among them).
	cmd.Cancel = func() error {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = waitDelay
	if r.Logger != nil && r.Logger.Enabled(ctx, slog.LevelDebug) {
		r.Logger.Debug("engine command", "argv", cmd.Args)
	}
	return cmd
}

// Output runs the CLI with optional stdin and returns its stdout. A non-zero
// exit becomes a classified *sandbox.EngineError.
func (r *Runner) Output(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	out, _, err := r.Run(ctx, stdin, args...)
	return out, err
}

// Run runs the CLI and returns stdout and stderr. A non-zero exit becomes a
// classified *sandbox.EngineError.
func (r *Runner) Run(ctx context.Context, stdin io.Reader, args ...string) (stdout, stderr []byte, err error) {
	if _, ok := ctx.Deadline(); !ok {
		timeout := r.Timeout
		if timeout == 0 {
			timeout = DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := r.Command(ctx, args...)
	var so, se bytes.Buffer
	cmd.Stdin = stdin
	cmd.Stdout = &so
	cmd.Stderr = &se
	start := time.Now()
	err = cmd.Run()
	if r.Logger != nil {
		r.Logger.Debug("engine command done", "argv0", args[:min(len(args), 2)], "took", time.Since(start), "err", err)
	}
	if err != nil {
		return so.Bytes(), se.Bytes(), r.Failure(ctx, cmd.Args, err, se.Bytes())
	}
	return so.Bytes(), se.Bytes(), nil
}

// Failure turns the error of a finished command into a *sandbox.EngineError.
func (r *Runner) Failure(ctx context.Context, argv []string, err error, stderr []byte) error {
	ee := &sandbox.EngineError{Argv: argv, ExitCode: -1, Stderr: trimStderr(stderr)}
	var exitErr *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, syscall.ENOENT):
		ee.Kind = sandbox.ErrEngineMissing
		ee.Hint = r.MissingHint
		ee.Err = err
		return ee
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		ee.Err = fmt.Errorf("the engine did not answer in time: %w", ctx.Err())
		ee.Hint = "check that the engine responds (`sandbox-mcp doctor`); another client may hold a lock"
		return ee
	case ctx.Err() != nil:
		ee.Err = ctx.Err()
		return ee
	case errors.As(err, &exitErr):
		ee.ExitCode = exitErr.ExitCode()
	default:
		ee.Err = err
		return ee
	}
	if r.Classify != nil {
		ee.Kind, ee.Hint = r.Classify(ee.ExitCode, ee.Stderr)
	}
	return ee
}

func trimStderr(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > maxStderr {
		s = s[:maxStderr] + "…"
	}
	return strings.ToValidUTF8(s, "�")
}

// Exec runs cmd (built by Command) to completion with stdin, for a process
// inside a container. The process's own non-zero exit is a result, not an
// error; engineFailed tells, from the exit code and stderr, when the CLI
// itself failed (no such container, not running, …), which becomes a
// classified *sandbox.EngineError.
func (r *Runner) Exec(ctx context.Context, cmd *exec.Cmd, stdin io.Reader, engineFailed func(code int, stderr string) bool) (sandbox.ExecOutput, error) {
	var so, se bytes.Buffer
	cmd.Stdin = stdin
	cmd.Stdout = &so
	cmd.Stderr = &se
	err := cmd.Run()
	res := sandbox.ExecOutput{Stdout: so.Bytes(), Stderr: se.Bytes()}
	if err == nil {
		return res, nil
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && ctx.Err() == nil && !engineFailed(exitErr.ExitCode(), se.String()) {
		res.ExitCode = exitErr.ExitCode()
		return res, nil
	}
	return res, r.Failure(ctx, cmd.Args, err, se.Bytes())
}
