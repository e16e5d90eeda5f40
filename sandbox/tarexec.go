package sandbox

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// This file holds the two ways a tar stream crosses into or out of a
// sandbox, shared by upload, download, sync, snapshot and restore: over an
// engine exec of its own (any size, streamed), and through the sandbox's
// persistent shell (small streams: a pipe round trip instead of a process
// start).

// streamBuffer is the buffer between a tar stream and the engine's pipe.
const streamBuffer = 1 << 20

// streamFailure is a process in the sandbox that failed, with what it
// said on stderr.
type streamFailure struct {
	err    error
	stderr *shell.Capture
}

// execIn runs argv in the sandbox over an exec of its own and feeds its
// stdin with what write writes. It returns write's error and, apart, the
// process's failure (nil when it exited 0).
func (m *Manager) execIn(ctx context.Context, sb *Sandbox, argv []string, write func(w io.Writer) error) (writeErr error, failed *streamFailure) {
	runID := streamRunID()
	cmd := m.rt.ExecCommand(ctx, sb.own.target(), ExecSpec{Argv: argv, Interactive: true, Env: map[string]string{guest.RunVar: runID}})
	stderr := &shell.Capture{Limit: 4096}
	stdin, err := proc.Input(cmd, io.Discard, stderr)
	if err != nil {
		return fmt.Errorf("sandbox %q: start %s: %w", sb.Name, argv[0], err), nil
	}
	bw := bufio.NewWriterSize(stdin, streamBuffer)
	writeErr = write(bw)
	if writeErr == nil {
		writeErr = bw.Flush()
	}
	stdin.Close() // on a write error too: the process sees a cut stream
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			m.endStream(sb, runID)
		}
		return writeErr, &streamFailure{err, stderr}
	}
	return writeErr, nil
}

// streamRunID marks the processes of one stream exec (guest.RunVar), so
// that they can be ended in the sandbox: an engine does not end an exec's
// processes when its client is killed.
func streamRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// endStream ends, in the sandbox, the processes of a stream exec the host
// gave up on (a tar that writes without end, one that stalls), in the
// background: the engine's own session would otherwise drain it on the
// host for as long as it runs.
func (m *Manager) endStream(sb *Sandbox, runID string) {
	target := sb.own.target()
	m.spawn(func() {
		kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := (containerHost{rt: m.rt, name: target}).KillRun(kctx, noShell, runID, false); err != nil {
			m.log.Debug("end a stream's processes", "sandbox", sb.Name, "err", err)
		}
	})
}

// execOut runs argv in the sandbox over an exec of its own and hands its
// stdout to read, with wait, which ends the stream and returns the
// process's failure (nil when it exited 0): read calls it once it has
// read what it needs and before it keeps anything, or leaves it to
// execOut. When read fails the process is stopped, never left blocked on a
// pipe nobody reads.
func (m *Manager) execOut(ctx context.Context, sb *Sandbox, argv []string, read func(r io.Reader, wait func() *streamFailure) error) (readErr error, failed *streamFailure) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runID := streamRunID()
	cmd := m.rt.ExecCommand(ctx, sb.own.target(), ExecSpec{Argv: argv, Env: map[string]string{guest.RunVar: runID}})
	stderr := &shell.Capture{Limit: 4096}
	stdout, err := proc.Output(cmd, stderr)
	if err != nil {
		return fmt.Errorf("sandbox %q: start %s: %w", sb.Name, argv[0], err), nil
	}
	waited := false
	wait := func() *streamFailure {
		if !waited {
			waited = true
			// tar pads its archive past the end marker: drain it. More
			// than that is a process that does not stop: stop it.
			if n, _ := io.Copy(io.Discard, io.LimitReader(stdout, 1<<20)); n == 1<<20 {
				cancel()
				m.endStream(sb, runID)
			}
			stdout.Close()
			if err := cmd.Wait(); err != nil {
				failed = &streamFailure{err, stderr}
			}
		}
		return failed
	}
	readErr = read(bufio.NewReaderSize(stdout, streamBuffer), wait)
	if readErr != nil && !waited {
		cancel() // the host gave up on the stream: stop the process
		stdout.Close()
		_ = cmd.Wait()
		m.endStream(sb, runID)
		return readErr, nil
	}
	return readErr, wait()
}

// viaShell runs a trusted script in the sandbox's persistent shell with
// stdin as its input and returns an error that says what failed, with
// the head of its stderr.
func (sb *Sandbox) viaShell(ctx context.Context, what, script string, stdin []byte) error {
	errb := &shell.Capture{Limit: 2048}
	res, err := sb.pool.Run(ctx, shell.Request{Command: script, Trusted: true, Stdin: stdin, Timeout: 5 * time.Minute, Stderr: errb})
	if err != nil {
		return err
	}
	if res.TimedOut || res.ShellLost || res.ExitCode != 0 {
		head, _, _ := errb.Parts()
		return fmt.Errorf("%s sandbox %q: exit %d: %s", what, sb.Name, res.ExitCode, textcut.Shorten(strings.TrimSpace(string(head)), 400))
	}
	return nil
}
