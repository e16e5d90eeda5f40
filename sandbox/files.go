package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// This file is the file tools' part of the Manager: writes that are
// verified where they land, and reads that refuse what is not a file.

// WriteRequest is one file to write.
type WriteRequest struct {
	Path string
	Data []byte
	// Append adds Data at the end of the file instead of replacing it.
	Append bool
	// SHA256, when set (64 hex digits), is checked: without Append it is
	// the hash of Data, compared before anything is written, and of the
	// file after; with Append it is the hash of the whole file after the
	// append (the last chunk of a chunked upload checks the result).
	SHA256 string
}

// Written is a write that landed whole: Bytes were written and the file's
// size (and hash, when asked) says so.
type Written struct {
	Path  string
	Bytes int64
	// Size is the file's size after the write; -1 for a kernel file
	// (/proc, /sys), whose size says nothing of what was written.
	Size int64
	// SHA256 is the file's hash, checked against the one asked for.
	SHA256 string
}

// Causes of a failed write beyond the sandbox's own error messages (see
// guest.FileErrorCause for those).
const (
	// CauseShortInput: every step in the sandbox succeeded but fewer bytes
	// reached it than were sent.
	CauseShortInput = "input cut short"
	// CauseSizeMismatch: the file grew by more than was written (another
	// process writes it too).
	CauseSizeMismatch = "size mismatch"
	// CauseHashMismatch: the file's sha256 is not the one asked for.
	CauseHashMismatch = "sha256 mismatch"
	// CauseHashUnavailable: the file was written, but its sha256 could
	// not be computed in the sandbox.
	CauseHashUnavailable = "sha256 not computed"
)

// WriteError is a write that did not land whole. It says why, and how many
// of the bytes sent are in the file.
type WriteError struct {
	Path string
	// Cause is a guest.Cause* or Cause* text, or "" when the sandbox's
	// message was not recognised (Detail has it).
	Cause string
	// Detail is the sandbox's own message (e.g. "cat: write error: No
	// space left on device"), shortened.
	Detail   string
	ExitCode int
	Append   bool
	// Sent is the number of bytes sent; Landed how many of them are in
	// the file (the growth of the file when appending); -1: unknown, as
	// when the file could not be created.
	Sent, Landed int64
	// Size is the file's size after the attempt; -1: unknown.
	Size int64
	// Kernel is set for a kernel file (/proc, /sys), whose size says
	// nothing; Landed and Size are then -1.
	Kernel bool
	// WantSHA and GotSHA are set for CauseHashMismatch.
	WantSHA, GotSHA string
	// Kept says the write replaced nothing: the file holds what it held
	// before (Size bytes).
	Kept bool
}

func (e *WriteError) Error() string {
	var b strings.Builder
	b.WriteString(e.Path + ": ")
	if e.Cause != "" {
		b.WriteString(e.Cause + ": ")
	} else {
		fmt.Fprintf(&b, "failed (exit %d): ", e.ExitCode)
	}
	switch e.Cause {
	case CauseShortInput:
		b.WriteString("no step in the sandbox failed, so the input was cut short on its way in; ")
	case CauseSizeMismatch:
		fmt.Fprintf(&b, "the file grew by %d bytes, not the %d written: another process may be writing it; ", e.Landed, e.Sent)
	case CauseHashMismatch:
		fmt.Fprintf(&b, "the file's sha256 is %s, not %s; ", e.GotSHA, e.WantSHA)
	case CauseHashUnavailable:
		fmt.Fprintf(&b, "all %d bytes landed (size checked), but the file's sha256 could not be computed in the sandbox (is sha256sum installed?)", e.Sent)
	}
	if e.Cause != CauseHashUnavailable {
		b.WriteString(e.landed())
	}
	if e.Detail != "" && !strings.EqualFold(e.Detail, e.Cause) {
		b.WriteString(" (sandbox said: " + e.Detail + ")")
	}
	if h := writeHint(e.Cause); h != "" {
		b.WriteString("; " + h)
	}
	return b.String()
}

// landed says what the failed write left in the file.
func (e *WriteError) landed() string {
	switch {
	case e.Kernel:
		return "a kernel file (/proc, /sys): its size says nothing of what it took"
	case e.Kept:
		return fmt.Sprintf("nothing was written: the file was left as it was (%d bytes)", e.Size)
	case e.Landed < 0 && e.Size < 0:
		return "nothing was written"
	case e.Landed < 0:
		return fmt.Sprintf("the file holds %d bytes", e.Size)
	case e.Landed == e.Sent:
		return fmt.Sprintf("all %d bytes landed; the file holds %d", e.Sent, e.Size)
	case e.Append:
		return fmt.Sprintf("the file grew by %d of %d bytes (now %d) and is incomplete", e.Landed, e.Sent, e.Size)
	case e.Landed == 0:
		return fmt.Sprintf("0 of %d bytes landed: the file is empty", e.Sent)
	}
	return fmt.Sprintf("%d of %d bytes landed and the file is incomplete", e.Landed, e.Sent)
}

func writeHint(cause string) string {
	switch cause {
	case guest.CauseNoSpace:
		return "free space in the sandbox (see `df -h`) or write to another filesystem"
	case guest.CauseQuota:
		return "free space under the quota or write elsewhere"
	case guest.CauseReadOnly:
		return "that filesystem is mounted read-only: write under the workspace or /tmp"
	case guest.CausePermission:
		return "the sandbox's user may not write there"
	case guest.CauseNotDir:
		return "a part of the path is a file, not a directory"
	case guest.CauseIsDir:
		return "the path is a directory: name a file in it"
	case guest.CauseNotRegular:
		return "write_file writes regular files only; for a device or fifo use exec"
	case guest.CauseTooLarge:
		return "a file size limit refused it (the filesystem's, or `ulimit -f`)"
	}
	return ""
}

// WriteTempPrefix starts the name of the file a replacing write fills
// beside its target before renaming it into place. The write removes it
// when it fails, also when the server dies part way (the content then
// arrives cut short); only a sandbox killed in the middle of a write
// leaves one, named so.
const WriteTempPrefix = ".sandbox-mcp-w"

// writeTempName is a fresh temporary name for a replacing write.
func writeTempName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return WriteTempPrefix + hex.EncodeToString(b[:])
}

// WriteFile writes one file in the sandbox, creating parent directories,
// and checks that it landed: the file's size grew by exactly the bytes
// sent (and its sha256 is the one asked for). Anything else is a
// *WriteError naming the cause; an argument refused before anything ran is
// an *ArgError.
func (m *Manager) WriteFile(ctx context.Context, name string, req WriteRequest) (Written, error) {
	want := strings.ToLower(req.SHA256)
	if want != "" {
		if len(want) != 64 || strings.Trim(want, "0123456789abcdef") != "" {
			return Written{}, &ArgError{Err: errors.New("sha256 must be 64 hex digits")}
		}
		if !req.Append {
			if got := sha256.Sum256(req.Data); hex.EncodeToString(got[:]) != want {
				return Written{}, &ArgError{Err: fmt.Errorf("sha256 %s is not the content's (%x); nothing was written", want, got)}
			}
		}
	}
	sent := int64(len(req.Data))
	script, err := guest.WriteFileScript(req.Path, req.Append, sent, want != "", writeTempName())
	if err != nil {
		return Written{}, &ArgError{Err: err}
	}
	op := "write_file " + req.Path
	out, stderr, res, err := m.runFileScript(ctx, name, op, script, req.Data, 4096)
	if err != nil {
		return Written{}, err
	}
	return checkWrite(req, want, op, out, stderr, res)
}

// checkWrite reads a write script's outcome: what landed, or a
// *WriteError (a *ScriptError for a write stopped part way) naming why
// not.
func checkWrite(req WriteRequest, want, op string, out []byte, stderr string, res ExecResult) (Written, error) {
	sent := int64(len(req.Data))
	if res.TimedOut || res.Canceled {
		// What landed is unknown: the write was stopped part way.
		return Written{}, &ScriptError{Op: op, ExitCode: res.ExitCode, Stderr: textcut.Shorten(stderr, 300), TimedOut: res.TimedOut}
	}
	we := &WriteError{Path: req.Path, Append: req.Append, Sent: sent, Landed: -1, Size: -1,
		ExitCode: res.ExitCode, Detail: textcut.Shorten(stderr, 300)}
	st, ok := guest.ParseWriteStatus(out)
	if !ok {
		// The script stopped before writing (a directory, a device, a
		// parent it could not make) or died.
		if res.ExitCode == 0 {
			we.ExitCode = -1
			if we.Detail == "" {
				we.Detail = "no status from the write script"
			}
		}
		we.Cause = guest.FileErrorCause(stderr)
		return Written{}, we
	}
	we.ExitCode = st.Code
	kernel := guest.PseudoFS(st.FSType)
	if st.After >= 0 && !kernel {
		we.Size = st.After
		we.Landed = st.After - st.Before
	}
	if st.Code != 0 {
		we.Cause, we.Kernel, we.Kept = guest.FileErrorCause(stderr), kernel, st.Kept
		return Written{}, we
	}
	done := Written{Path: req.Path, Bytes: sent, Size: st.After, SHA256: st.SHA256}
	switch {
	case kernel:
		// The kernel took every byte (the write succeeded); the size of a
		// /proc or /sys file is not the bytes written to it, nor is its
		// content.
		done.Size, done.SHA256 = -1, ""
		return done, nil
	case st.After < 0:
		we.Detail = "the file could not be measured after writing"
		return Written{}, we
	case we.Landed < sent:
		we.Cause = CauseShortInput
		return Written{}, we
	case we.Landed > sent:
		we.Cause = CauseSizeMismatch
		return Written{}, we
	case want != "" && st.SHA256 == "":
		we.Cause = CauseHashUnavailable
		return Written{}, we
	case want != "" && st.SHA256 != want:
		we.Cause, we.WantSHA, we.GotSHA = CauseHashMismatch, want, st.SHA256
		return Written{}, we
	}
	return done, nil
}

// ErrNotAttempted marks a file of WriteFiles that was not tried because an
// earlier one met a failure outside the sandbox (the sandbox went away,
// the call was canceled).
var ErrNotAttempted = errors.New("not attempted")

// ErrBatchUndone marks a file of WriteFiles that was written in full but
// not put in place, because another file of the batch failed: a batch
// lands whole or not at all.
var ErrBatchUndone = errors.New("not written: another file of the batch failed, and a batch is written whole or not at all")

// WriteOutcome is what happened to one file of WriteFiles: Err is nil when
// it landed whole (Written says how), else why not.
type WriteOutcome struct {
	Written
	Err error
}

// WriteFiles writes several files, all or none: each is written in full
// beside its target and checked as WriteFile checks it
// (guest.HoldFileScript), and only once every one is whole are they all
// moved into place, in the given order, by one script in the sandbox
// (guest.CommitBatchScript). A failure leaves every target as it was and
// reports, for each file, why it failed or that it was not written for
// another's failure. A file that fails in the sandbox does not stop the
// others being tried (so every failure is named); a failure outside it
// (the engine, a cancel) does, and is returned as well.
//
// Files that can only be written in place (a kernel file, a file with
// other hard links) are written after the others are in place, each as
// WriteFile writes it: they are outside the all or none.
//
// A server killed before the commit leaves the held files, listed in the
// batch's manifest in the sandbox; the next server removes them with the
// killed server's commands (guest.SweepScript).
func (m *Manager) WriteFiles(ctx context.Context, name string, reqs []WriteRequest) ([]WriteOutcome, error) {
	// Counted until no held file is left: a shutdown meanwhile, or after
	// a removal that failed, sweeps the sandbox (Manager.quiet). Counted
	// before any hold: a hold after Shutdown began fails in Get, which
	// refuses a closed Manager, so Shutdown either sees the count or
	// nothing is held.
	m.batches.Add(1)
	litter := false
	defer func() {
		if !litter {
			m.batches.Add(-1)
		}
	}()
	outs := make([]WriteOutcome, len(reqs))
	var b [8]byte
	_, _ = rand.Read(b[:])
	manifest := guest.BatchManifest(m.serverID, hex.EncodeToString(b[:]))
	var stop error
	failed, held := false, false
	var inPlace []int
	for i, r := range reqs {
		outs[i].Path = r.Path
		if stop != nil {
			outs[i].Err = ErrNotAttempted
			continue
		}
		w, err := m.holdFile(ctx, name, r, manifest)
		outs[i].Written, outs[i].Err = w, err
		outs[i].Path = r.Path
		var we *WriteError
		var se *ScriptError
		var ae *ArgError
		switch {
		case err == nil:
			held = true
		case errors.As(err, &we) && we.ExitCode == guest.ExitInPlaceOnly:
			inPlace = append(inPlace, i)
			outs[i].Err = nil
		case !errors.As(err, &we) && !errors.As(err, &ae) && !(errors.As(err, &se) && ctx.Err() == nil):
			stop, failed = err, true
		default:
			failed = true
		}
	}
	if failed {
		// A hold cut short from outside (the engine, a cancel) may have
		// left its file half written, and the manifest names it.
		litter = stop != nil
		if held || litter {
			if err := m.batchScript(context.WithoutCancel(ctx), name, "drop the files of a failed batch", guest.DropBatchScript, manifest); err != nil {
				m.log.Warn("remove the held files of a failed batch", "sandbox", name, "err", err)
				litter = true
			} else {
				litter = false
			}
		}
		for i := range outs {
			if outs[i].Err == nil {
				outs[i].Written, outs[i].Err = Written{Path: outs[i].Path}, ErrBatchUndone
			}
		}
		return outs, stop
	}
	if held {
		if err := m.batchScript(ctx, name, "put the batch's files in place", guest.CommitBatchScript, manifest); err != nil {
			// What was not moved goes; the script said whether anything was.
			if derr := m.batchScript(context.WithoutCancel(ctx), name, "drop the files of a failed batch", guest.DropBatchScript, manifest); derr != nil {
				m.log.Warn("remove the held files of a failed batch", "sandbox", name, "err", derr)
				litter = true
			}
			for i := range outs {
				outs[i].Written, outs[i].Err = Written{Path: outs[i].Path}, err
			}
			return outs, err
		}
	}
	for _, i := range inPlace {
		w, err := m.WriteFile(ctx, name, reqs[i])
		outs[i].Written, outs[i].Err = w, err
		outs[i].Path = reqs[i].Path
	}
	return outs, nil
}

// holdFile writes one file of a batch beside its target (see WriteFiles).
func (m *Manager) holdFile(ctx context.Context, name string, req WriteRequest, manifest string) (Written, error) {
	if req.Append {
		return Written{}, &ArgError{Err: errors.New("a batch replaces files; it does not append")}
	}
	want := strings.ToLower(req.SHA256)
	script, err := guest.HoldFileScript(req.Path, int64(len(req.Data)), want != "", writeTempName(), manifest)
	if err != nil {
		return Written{}, &ArgError{Err: err}
	}
	op := "batch_write " + req.Path
	out, stderr, res, err := m.runFileScript(ctx, name, op, script, req.Data, 4096)
	if err != nil {
		return Written{}, err
	}
	if res.ExitCode == guest.ExitInPlaceOnly {
		return Written{}, &WriteError{Path: req.Path, ExitCode: res.ExitCode, Detail: textcut.Shorten(stderr, 300), Landed: -1, Size: -1}
	}
	w, err := checkWrite(req, want, op, out, stderr, res)
	if err == nil {
		w.Path = req.Path
	}
	return w, err
}

// batchScript runs a batch's commit or drop script on its manifest.
func (m *Manager) batchScript(ctx context.Context, name, what, script, manifest string) error {
	var errb bytes.Buffer
	res, err := m.ExecAs(ctx, name, "batch_write: "+what, shell.Request{
		Command: "(set -- '" + manifest + "'\n" + script + "\n)", Trusted: true, Timeout: scriptTimeout, Stdout: io.Discard, Stderr: &errb,
	})
	if err == nil && (res.ExitCode != 0 || res.TimedOut) {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, textcut.Shorten(errb.String(), 300))
	}
	if err != nil {
		return fmt.Errorf("batch_write in sandbox %q: %s: %w", name, what, err)
	}
	return nil
}

// ReadFile reads length bytes of path from offset (length 0: to the end),
// at most MaxReadFile; more is an error wrapping ErrTooLarge. Only regular
// files are read: a device, fifo or socket is refused at once (reading one
// may never end). Kernel files (/proc, /sys) are regular files of size 0
// and are read like any other, up to the same bound.
func (m *Manager) ReadFile(ctx context.Context, name, path string, offset, length int64) ([]byte, error) {
	if length > MaxReadFile {
		return nil, &ArgError{Err: fmt.Errorf("length is at most %d", MaxReadFile)}
	}
	limit := length
	if limit == 0 {
		limit = MaxReadFile + 1 // one more tells "exactly the cap" from "over it"
	}
	script, err := guest.ReadFileScript(path, offset, limit)
	if err != nil {
		return nil, &ArgError{Err: err}
	}
	return m.runRead(ctx, name, path, script, limit, length == 0, "offset and length")
}

// ReadLines reads count lines of path from line first (1-based; count 0:
// to the end), at most MaxReadFile bytes; more is an error wrapping
// ErrTooLarge. It refuses what ReadFile refuses.
func (m *Manager) ReadLines(ctx context.Context, name, path string, first, count int64) ([]byte, error) {
	script, err := guest.ReadLinesScript(path, first, count, MaxReadFile+1)
	if err != nil {
		return nil, &ArgError{Err: err}
	}
	return m.runRead(ctx, name, path, script, MaxReadFile+1, true, "fewer lines")
}

// runRead runs a read script that prints at most limit bytes; with
// capped, limit is one past MaxReadFile and reaching it is ErrTooLarge.
func (m *Manager) runRead(ctx context.Context, name, path, script string, limit int64, capped bool, how string) ([]byte, error) {
	op := "read_file " + path
	data, stderr, res, err := m.runFileScript(ctx, name, op, script, nil, int(limit))
	if err != nil {
		return nil, err
	}
	failed := strings.Contains(stderr, guest.ReadFailedMark) && int64(len(data)) < limit
	if res.TimedOut || res.ExitCode != 0 || failed {
		msg := strings.TrimSpace(strings.ReplaceAll(stderr, guest.ReadFailedMark, ""))
		se := &ScriptError{Op: op, ExitCode: res.ExitCode, Stderr: textcut.Shorten(msg, 300), TimedOut: res.TimedOut}
		if res.ExitCode == guest.ExitNotRegular && !res.TimedOut {
			return nil, fmt.Errorf("%w; read_file reads regular files only: for a device or fifo use exec with a bound, e.g. `head -c 64 /dev/urandom | base64`", se)
		}
		return nil, se
	}
	if capped && len(data) > MaxReadFile {
		return nil, fmt.Errorf("%s: %w: more than %d bytes; read it in parts with %s", op, ErrTooLarge, MaxReadFile, how)
	}
	return data, nil
}

// runFileScript runs a file script and returns its stdout (at most limit
// bytes), its stderr (trimmed, at most 4 KiB) and its result, whatever its
// exit status; err is a failure to run it at all.
func (m *Manager) runFileScript(ctx context.Context, name, label, script string, stdin []byte, limit int) ([]byte, string, ExecResult, error) {
	var out bytes.Buffer
	errb := &shell.Capture{Limit: 4096}
	res, err := m.ExecAs(ctx, name, label, shell.Request{
		Command: script, Trusted: true, Stdin: stdin, Timeout: scriptTimeout, Stdout: &limitWriter{w: &out, n: limit}, Stderr: errb,
	})
	if err != nil {
		return nil, "", res, err
	}
	head, _, _ := errb.Parts()
	return out.Bytes(), strings.TrimSpace(string(head)), res, nil
}
