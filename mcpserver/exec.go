package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

const (
	defaultTimeout   = 30
	maxTimeout       = 3600
	defaultMaxOutput = 16 << 10
	maxMaxOutput     = 256 << 10
	progressEvery    = time.Second
	progressBytes    = 400
	// queueNoted is the wait for a free shell that a result mentions.
	queueNoted = 50 * time.Millisecond
)

// ExecOutput is the structured result of exec, python and install.
type ExecOutput struct {
	Sandbox      string `json:"sandbox"`
	ExitCode     int    `json:"exit_code"`
	DurationMS   int64  `json:"duration_ms"`
	Stdout       string `json:"stdout"`
	Stderr       string `json:"stderr"`
	Encoding     string `json:"encoding"` // "text" or "base64"
	StdoutBytes  int64  `json:"stdout_bytes"`
	StderrBytes  int64  `json:"stderr_bytes"`
	Truncated    bool   `json:"truncated"`
	OutputID     string `json:"output_id,omitempty"` // for the output tool, when truncated
	TimedOut     bool   `json:"timed_out,omitempty"`
	ShellRestart bool   `json:"shell_restarted,omitempty"`
	// QueuedMS is how long the command waited for a free shell.
	QueuedMS int64 `json:"queued_ms,omitempty"`
	// Background means the command left processes running that may still
	// hold its stdout and stderr; what they print from now on is discarded.
	Background bool   `json:"background_left,omitempty"`
	Booted     string `json:"booted,omitempty"` // created, created from a warm spare, started, adopted, recovered
	Notice     string `json:"notice,omitempty"` // e.g. the disk watcher stopped the command
	// StopTookMS is how long ending a timed-out or cancelled command took;
	// the command ran on meanwhile (set when that was noticeable).
	StopTookMS int64 `json:"stop_took_ms,omitempty"`
}

func (s *Server) execTool() tool {
	return tool{group: "core", handler: s.handleExec, def: newTool[ExecOutput]("exec", "Run a command",
		"Run a shell command (sh) in a sandbox: exit code, stdout, stderr. Creates the sandbox on first use; "+
			"cwd and exported variables persist between calls. Output past max_output: the rest via `output`. "+
			"PNGs written to "+guest.OutputsDir+" come back as images. "+
			"A timeout ends the command and all it started: "+s.mention("jobs", "run servers and long work with bg.", "start servers and long work with `cmd >log 2>&1 &`."),
		openWorld(mutating(false)),
		mcp.WithString("command", mcp.Required(), mcp.Description("Shell command line.")),
		sandboxParam(),
		timeoutParam(),
		mcp.WithString("workdir", mcp.Description("Directory for this command only.")),
		mcp.WithString("stdin", mcp.Description("Text for the command's stdin (default: none).")),
		mcp.WithString("stdin_base64", mcp.Description("Binary stdin, base64-encoded.")),
		maxOutputParam(),
		encodingParam("base64 returns stdout/stderr bytes exactly."),
	)}
}

func timeoutParam() mcp.ToolOption {
	return mcp.WithNumber("timeout", mcp.Description("Seconds before the command is stopped."),
		mcp.DefaultNumber(defaultTimeout), mcp.Min(1), mcp.Max(maxTimeout))
}

func maxOutputParam() mcp.ToolOption {
	return mcp.WithInteger("max_output", mcp.Description("Bytes kept per stream (head and tail)."),
		mcp.DefaultNumber(defaultMaxOutput), mcp.Min(1024), mcp.Max(maxMaxOutput))
}

func encodingParam(desc string) mcp.ToolOption {
	return mcp.WithString("encoding", mcp.Description(desc), mcp.Enum("text", "base64"), mcp.DefaultString("text"))
}

func (s *Server) handleExec(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	command, err := req.RequireString("command")
	if err != nil {
		return argError("exec: `command` is required"), nil
	}
	stdin, errRes := stdinArg(req)
	if errRes != nil {
		return errRes, nil
	}
	workdir := req.GetString("workdir", "")
	return s.runCommand(ctx, req, "exec", defaultTimeout, false, func(ctx context.Context, name string, r shell.Request) (sandbox.ExecResult, error) {
		r.Command, r.Stdin, r.Workdir = command, stdin, workdir
		return s.m.Exec(ctx, name, r)
	})
}

func stdinArg(req mcp.CallToolRequest) ([]byte, *mcp.CallToolResult) {
	text, b64 := req.GetString("stdin", ""), req.GetString("stdin_base64", "")
	switch {
	case text != "" && b64 != "":
		return nil, argError("give either stdin or stdin_base64, not both")
	case b64 != "":
		data, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, argError("stdin_base64 is not valid base64: %v", err)
		}
		return data, nil
	case text != "":
		return []byte(text), nil
	}
	return nil, nil
}

// runFunc runs one command of an exec-like tool; req carries the timeout
// and output writers.
type runFunc func(ctx context.Context, name string, req shell.Request) (sandbox.ExecResult, error)

// commandArgs reads the arguments every command tool takes: the
// sandbox, the timeout in seconds and max_output. A bad one gives the
// tool's error result.
func commandArgs(req mcp.CallToolRequest, what string, defTimeout float64) (name string, timeout float64, limit int, bad *mcp.CallToolResult) {
	name, err := sandboxArg(req)
	if err != nil {
		return "", 0, 0, argError("%s: %v", what, err)
	}
	timeout, err = numberArg(req, "timeout", defTimeout, 1, maxTimeout, "seconds")
	if err != nil {
		return "", 0, 0, argError("%s: %v", what, err)
	}
	limit64, err := intArg(req, "max_output", defaultMaxOutput, 1024, maxMaxOutput)
	if err != nil {
		return "", 0, 0, argError("%s: %v", what, err)
	}
	return name, timeout, int(limit64), nil
}

// runCommand runs a command tool (exec, install) and shapes its result.
// With redraws, progress lines rewritten in place keep only their last
// state (see redrawWriter).
func (s *Server) runCommand(ctx context.Context, req mcp.CallToolRequest, what string, defTimeout float64, redraws bool, run runFunc) (*mcp.CallToolResult, error) {
	name, timeout, limit, bad := commandArgs(req, what, defTimeout)
	if bad != nil {
		return bad, nil
	}
	encoding := req.GetString("encoding", "text")
	if encoding != "text" && encoding != "base64" {
		return argError("%s: encoding must be text or base64", what), nil
	}

	call := s.outputs.newCall()
	stdout := newSpillStream(call, "stdout", limit)
	stderr := newSpillStream(call, "stderr", limit)
	stop := s.startProgress(ctx, req, stdout.c, stderr.c)
	var so, se io.Writer = stdout, stderr
	if redraws {
		so, se = newRedrawWriter(stdout), newRedrawWriter(stderr)
	}
	began := time.Now()
	res, err := run(ctx, name, shell.Request{
		Timeout: time.Duration(timeout * float64(time.Second)),
		Stdout:  so,
		Stderr:  se,
	})
	if redraws { // the last lines, held back for a redraw
		_ = so.(*redrawWriter).Close()
		_ = se.(*redrawWriter).Close()
	}
	stop()
	stdout.close()
	stderr.close()
	retrievable := err == nil && (stdout.retrievable() || stderr.retrievable())
	call.finish(retrievable)
	if err != nil {
		return failure(ctx, fmt.Sprintf("%s in sandbox %q", what, name), err), nil
	}
	out := ExecOutput{
		Sandbox:      name,
		ExitCode:     res.ExitCode,
		DurationMS:   res.Duration.Milliseconds(),
		Encoding:     encoding,
		StdoutBytes:  stdout.c.Total(),
		StderrBytes:  stderr.c.Total(),
		Truncated:    stdout.c.Truncated() || stderr.c.Truncated(),
		TimedOut:     res.TimedOut,
		ShellRestart: res.ShellLost,
		QueuedMS:     res.Queued.Milliseconds(),
		Background:   res.LeftBehind,
		Booted:       bootWord(res.Boot),
		Notice:       res.Notice,
	}
	if res.StoppedLate() {
		out.StopTookMS = res.StopTook.Milliseconds()
	}
	if retrievable {
		out.OutputID = call.id
	}
	var text strings.Builder
	fmt.Fprintf(&text, "exit %d · %s", res.ExitCode, fmtDuration(res.Duration))
	if res.Queued >= queueNoted {
		fmt.Fprintf(&text, " · waited %s for a free shell", fmtDuration(res.Queued))
	}
	if out.Booted != "" {
		fmt.Fprintf(&text, " · sandbox %q %s", name, out.Booted)
		if r := res.Boot.Recovered; r != "" {
			if strings.HasPrefix(r, "was ") || strings.HasPrefix(r, "is ") {
				r = "it " + r
			}
			fmt.Fprintf(&text, " (%s)", r)
		}
	}
	text.WriteByte('\n')
	var stdoutBinary, stderrBinary bool
	out.Stdout, stdoutBinary = render(stdout, encoding, out.OutputID)
	out.Stderr, stderrBinary = render(stderr, encoding, out.OutputID)
	text.WriteString(out.Stdout)
	if out.Stderr != "" {
		if out.Stdout != "" && !strings.HasSuffix(out.Stdout, "\n") {
			text.WriteByte('\n')
		}
		text.WriteString("--- stderr ---\n")
		text.WriteString(out.Stderr)
	}
	if stdoutBinary || stderrBinary {
		text.WriteString("\n[output is not valid UTF-8; invalid bytes shown as \uFFFD; use encoding=base64 for exact bytes]")
	}
	switch {
	case res.TimedOut && res.NotStarted && !res.ShellLost:
		fmt.Fprintf(&text, "\n[timed out after %gs waiting for a free shell: every shell of the sandbox was busy, and the command did not run]", timeout)
	case res.TimedOut && res.NotStarted:
		fmt.Fprintf(&text, "\n[timed out after %gs before the shell started the command: it did not run; the shell was replaced and its cwd and exports restored]", timeout)
	case res.TimedOut && res.StoppedLate():
		fmt.Fprintf(&text, "\n[timed out after %gs, but the sandbox was slow to answer: stopping the command took %s more, and what it did meanwhile ran; then it and every process it started were ended", timeout, fmtDuration(res.StopTook))
		if res.ShellLost {
			text.WriteString("; the shell was replaced and its cwd and exports restored")
		}
		text.WriteString("]")
	case res.TimedOut:
		fmt.Fprintf(&text, "\n[timed out after %gs: the command and every process it started were ended, and nothing after that point ran", timeout)
		if res.ShellLost {
			text.WriteString("; the shell was replaced and its cwd and exports restored")
		}
		if s.offers("jobs") {
			text.WriteString(". Start long-running work with bg and read it with logs.]")
		} else {
			text.WriteString(". Start long-running work in the background (`cmd >log 2>&1 &`) and read its log later.]")
		}
	case res.Canceled && res.NotStarted:
		text.WriteString("\n[canceled before the shell started the command: it did not run; the shell was replaced and its cwd and exports restored]")
	case res.Canceled && res.StoppedLate():
		fmt.Fprintf(&text, "\n[canceled, but the sandbox was slow to answer: stopping the command took %s, and what it did meanwhile ran; then it and every process it started were ended]", fmtDuration(res.StopTook))
	case res.Canceled:
		text.WriteString("\n[canceled: the command and every process it started were ended]")
	case res.ShellLost:
		text.WriteString("\n[the shell exited (exit, exec or a signal); a new one with the same cwd and exports serves the next call]")
	}
	if res.LeftBehind {
		text.WriteString("\n[the command left background processes running; what they print to its stdout or stderr from now on is discarded: redirect their output to a file")
		if s.offers("jobs") {
			text.WriteString(", or use bg")
		}
		text.WriteString("]")
	}
	if res.Stray > 0 {
		fmt.Fprintf(&text, "\n[%d bytes printed between commands by background processes of earlier commands were discarded]", res.Stray)
	}
	if res.Notice != "" {
		fmt.Fprintf(&text, "\n[%s]", res.Notice)
	}
	var images []mcp.Content
	// The frame says whether the outputs directory changed; a command cut
	// short left no frame to say it, and is asked about anyway.
	if (res.Outputs || res.ShellLost || res.TimedOut) && what == "exec" && ctx.Err() == nil {
		var names, notes []string
		images, names, notes = s.outputImages(ctx, name, began)
		for _, n := range notes {
			fmt.Fprintf(&text, "\n[%s]", n)
		}
		if len(names) > 0 {
			fmt.Fprintf(&text, "\n[attached as images: %s]", strings.Join(names, ", "))
		}
	}
	result := mcp.NewToolResultStructured(out, text.String())
	for _, img := range images {
		result.Content = append(result.Content, img)
	}
	result.IsError = res.ExitCode != 0 || res.TimedOut || res.Canceled
	return result, nil
}

// outputsWait bounds fetching a command's images.
const outputsWait = 15 * time.Second

// outputImages returns the PNG files of sandbox name's outputs directory
// new or changed since they were last looked at (the command began at
// began), as image content, with their names and notes on those left out
// (one too large comes as a link to the file). Each version of a file is
// sent once. The files come from the sandbox: only what starts as a PNG
// does is attached, and names are shown with what is not printable
// replaced.
func (s *Server) outputImages(ctx context.Context, name string, began time.Time) (content []mcp.Content, names, notes []string) {
	ctx, cancel := context.WithTimeout(ctx, outputsWait)
	defer cancel()
	files, omitted, err := s.m.Outputs(ctx, name, began)
	switch {
	case errors.Is(err, sandbox.ErrNoAgent):
		return nil, nil, nil // nothing to tell on each call: status says why
	case err != nil && len(files) == 0:
		return nil, nil, []string{"images written to " + guest.OutputsDir + " could not be fetched: " + printable(err.Error(), 300)}
	}
	for _, f := range files {
		if !s.attached.first(name, f.Name, f.Ino, f.Size, f.ModNs) {
			continue // sent with an earlier call, unchanged since
		}
		label := printable(f.Name, 200)
		switch {
		case f.Data == nil:
			notes = append(notes, fmt.Sprintf("%s/%s (%s) was not attached: %s; it is linked", guest.OutputsDir, label, units.Human(f.Size), printable(f.Skipped, 200)))
			content = append(content, fileLink(name, guest.OutputsDir+"/"+f.Name, "image/png", f.Size))
		case !bytes.HasPrefix(f.Data, pngSignature):
			notes = append(notes, fmt.Sprintf("%s/%s is not a PNG and was not attached", guest.OutputsDir, label))
		default:
			content = append(content, mcp.NewImageContent(base64.StdEncoding.EncodeToString(f.Data), "image/png"))
			names = append(names, label)
		}
	}
	if omitted > 0 {
		notes = append(notes, fmt.Sprintf("%d more PNG files in %s were not attached (at most %d a call)", omitted, guest.OutputsDir, agent.MaxOutputs))
	}
	return content, names, notes
}

// printable is s from the sandbox for a result's text: cut to n bytes,
// with invalid UTF-8, line breaks, escapes and other characters that are
// not printable replaced by '?', so that it cannot pass for a line of the
// server's own.
func printable(s string, n int) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(textcut.Shorten(s, n), "?"))
}

// render returns a stream's text for the result: exact bytes or base64,
// with the omitted middle marked, where to fetch it (id, when kept) and
// where its saved copy stops if it was cut.
func render(s *spillStream, encoding, id string) (string, bool) {
	head, tail, omitted := s.c.Parts()
	enc := func(b []byte) string {
		if encoding == "base64" {
			return base64.StdEncoding.EncodeToString(b)
		}
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	binary := encoding == "text" && !(utf8.Valid(head) && utf8.Valid(tail))
	if omitted == 0 {
		return enc(head), binary
	}
	note := fmt.Sprintf("\n[… %d bytes of %s omitted", omitted, s.stream)
	retrievable, saved, cut := s.savedCopy()
	if id != "" && retrievable {
		note += fmt.Sprintf("; fetch them with output(id=%q, stream=%q, offset=%d)", id, s.stream, len(head))
		if cut != "" {
			note += fmt.Sprintf("; the full output was cut at %d bytes (%s)", saved, cut)
		}
	} else if cut != "" {
		note += fmt.Sprintf("; not saved: %s", cut)
	}
	return enc(head) + note + " …]\n" + enc(tail), binary
}

func bootWord(b sandbox.BootInfo) string {
	switch {
	case b.Recovered != "":
		return "recovered"
	case b.Spare:
		return "created from a warm spare"
	case b.Created:
		return "created"
	case b.Started:
		return "started"
	case b.Adopted:
		return "adopted"
	}
	return ""
}

func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// startProgress sends a progress notification with the newest output every
// second while a command runs, if the client asked for progress.
func (s *Server) startProgress(ctx context.Context, req mcp.CallToolRequest, stdout, stderr *shell.Capture) func() {
	return s.reportProgress(ctx, req, func(running time.Duration) string {
		msg := fmt.Sprintf("running %s; %d bytes of output", running.Round(time.Second), stdout.Total()+stderr.Total())
		if newest := stdout.Newest(progressBytes); len(newest) > 0 {
			msg += "; newest: " + strings.ToValidUTF8(string(newest), "\uFFFD")
		}
		return msg
	})
}

// reportProgress sends, when the call asked for progress, a notification
// every progressEvery with status's message until the returned func runs.
func (s *Server) reportProgress(ctx context.Context, req mcp.CallToolRequest, status func(running time.Duration) string) func() {
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return func() {}
	}
	token := req.Params.Meta.ProgressToken
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		start := time.Now()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_ = s.ms.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
				"progressToken": token,
				"progress":      float64(n),
				"message":       status(time.Since(start)),
			})
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// sentImages remembers the versions of files in the outputs directory
// already sent as images, per sandbox, so that each is sent once: a look
// sends again what changed just before the one before it (its stamp is a
// little early for the file clock), and a python call sends what it saw.
type sentImages struct {
	mu   sync.Mutex
	sent map[string]map[sentImage]bool
}

type sentImage struct {
	name  string
	ino   uint64
	size  int64
	modNs int64
}

// maxSentImages bounds what is remembered per sandbox: past it, it starts
// over (a look sends only what changed lately, so old files are not sent
// again).
const maxSentImages = 256

// first reports whether this version of file (name, inode, size,
// modification time) was not yet sent for sandbox box, and notes it as
// sent.
func (s *sentImages) first(box, name string, ino uint64, size, modNs int64) bool {
	k := sentImage{name, ino, size, modNs}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent == nil {
		s.sent = map[string]map[sentImage]bool{}
	}
	m := s.sent[box]
	if m[k] {
		return false
	}
	if m == nil || len(m) >= maxSentImages {
		m = map[sentImage]bool{}
		s.sent[box] = m
	}
	m[k] = true
	return true
}
