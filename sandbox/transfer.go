package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
)

// This file is the Manager's side of moving files between the host and a
// sandbox: tar streams over the engine's own `exec -i`, one per transfer,
// with tar inside the sandbox. What happens on the host (which paths are
// allowed, how a stream is written there) is the caller's: see package
// transfer.

// transferTimeout bounds one upload or download.
const transferTimeout = time.Hour

// Landing says where an upload lands: the stream's top entry Top is
// extracted into the directory Dir, so the result is Path.
type Landing struct {
	Dir, Top, Path string
	// Replaced is set when Path existed before.
	Replaced bool
}

// ErrNoSuchPath marks a sandbox path that does not exist.
var ErrNoSuchPath = errors.New("no such path in the sandbox")

// probe resolves p in the sandbox's shell and says what is there.
func (m *Manager) probe(ctx context.Context, sb *Sandbox, p string) (kind, abs string, err error) {
	script, err := guest.ProbePathScript(p)
	if err != nil {
		return "", "", &ArgError{Err: err}
	}
	out, err := sb.housekeep(ctx, script, scriptTimeout)
	if err != nil {
		return "", "", err
	}
	kind, abs, err = guest.ParseProbe(string(out))
	if err != nil {
		return "", "", fmt.Errorf("sandbox %q: %w", sb.Name, err)
	}
	return kind, abs, nil // cleaned by ParseProbe
}

// UploadRequest is one upload.
type UploadRequest struct {
	// Dest is where it lands: into Dest when that is a directory (under
	// the name Base), else as Dest itself.
	Dest, Base string
	// Dir says that a directory is uploaded: it may not replace a file.
	Dir bool
	// Pack writes the tar archive whose top entry is named top.
	Pack func(w io.Writer, top string) error
}

// UploadStagePrefix starts the name of the directory an upload is
// extracted into, beside its target, before it is moved into place (see
// guest.UploadScript).
const UploadStagePrefix = ".sandbox-mcp-up-"

// uploadStageName is a fresh staging directory name for an upload.
func uploadStageName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return UploadStagePrefix + hex.EncodeToString(b[:])
}

// markedStream passes a tar stream on but for its last 1024 bytes, the
// end-of-archive blocks, so that finish can put an entry before them:
// the sandbox takes an upload only when that entry arrived, since tar
// takes a stream cut between two entries for a whole one.
type markedStream struct {
	w    io.Writer
	tail []byte
}

const tarEndBlocks = 1024

func (m *markedStream) Write(p []byte) (int, error) {
	if len(p) < tarEndBlocks {
		buf := append(m.tail, p...)
		if n := len(buf) - tarEndBlocks; n > 0 {
			if _, err := m.w.Write(buf[:n]); err != nil {
				return 0, err
			}
			buf = buf[n:]
		}
		m.tail = append(m.tail[:0], buf...)
		return len(p), nil
	}
	// A large write (the usual one) is passed on without a copy.
	if _, err := m.w.Write(m.tail); err != nil {
		return 0, err
	}
	if _, err := m.w.Write(p[:len(p)-tarEndBlocks]); err != nil {
		return 0, err
	}
	m.tail = append(m.tail[:0], p[len(p)-tarEndBlocks:]...)
	return len(p), nil
}

// finish writes an empty file named name, then the end-of-archive blocks.
func (m *markedStream) finish(name string) error {
	if !bytes.Equal(m.tail, make([]byte, tarEndBlocks)) {
		return errors.New("the archive did not end as a tar stream ends")
	}
	var hb bytes.Buffer
	tw := tar.NewWriter(&hb)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := m.w.Write(hb.Bytes()); err != nil {
		return err
	}
	_, err := m.w.Write(m.tail)
	return err
}

// Upload streams the archive req.Pack writes into the sandbox. Files land
// owned by the sandbox's default user with the archive's modes and mtimes,
// whole: the archive is extracted beside its target and moved into place
// once read to its end (guest.UploadScript).
func (m *Manager) Upload(ctx context.Context, name string, req UploadRequest) (Landing, error) {
	dest, base, pack := req.Dest, req.Base, req.Pack
	sb, _, err := m.Get(ctx, name)
	if err != nil {
		return Landing{}, err
	}
	defer sb.busy()()
	kind, abs, err := m.probe(ctx, sb, dest)
	if err != nil {
		return Landing{}, err
	}
	land := Landing{Dir: path.Dir(abs), Top: path.Base(abs), Path: abs, Replaced: kind != "none"}
	if kind == "dir" {
		land = Landing{Dir: abs, Top: base, Path: path.Join(abs, base)}
		if k, _, err := m.probe(ctx, sb, land.Path); err == nil && k != "none" {
			land.Replaced = true
		}
	}
	if req.Dir && kind == "file" {
		return Landing{}, &ArgError{Err: fmt.Errorf("%s is a file in sandbox %q: a directory cannot replace it; name a directory or a new path", abs, name)}
	}
	if land.Top == "/" || land.Top == "." || land.Top == ".." {
		return Landing{}, &ArgError{Err: fmt.Errorf("cannot upload onto %q: name a path below /", abs)}
	}
	ctx, cancel := context.WithTimeout(ctx, transferTimeout)
	defer cancel()
	stage := uploadStageName()
	end := stage + ".end"
	packErr, failed := m.execIn(ctx, sb, []string{"sh", "-c", guest.UploadScript, "sh", land.Dir, land.Top, stage, end},
		func(w io.Writer) error {
			ms := &markedStream{w: w}
			if err := pack(ms, land.Top); err != nil {
				return err
			}
			return ms.finish(end)
		})
	if failed != nil {
		return land, m.transferFailed(ctx, sb, "upload into", land.Path, failed,
			"the stream was extracted beside the target and checked whole before anything moved: a failure before that left the target as it was, "+
				"one while moving a directory onto an existing one leaves the files moved until then in place, each whole")
	}
	if packErr != nil {
		return land, fmt.Errorf("upload into sandbox %q at %s: %w", name, land.Path, packErr)
	}
	return land, nil
}

// Download streams the sandbox path src (a file, a directory with all
// under it, or a symlink as a link) as a tar archive to unpack, whose top
// entry is src's base name; the workspace itself comes without its
// volume's lost+found. unpack must call finish once it has read the
// whole archive and before it keeps anything: finish reports tar's
// failure in the sandbox (an unreadable file, a vanished path). cap is the
// most the sandbox could hold, which unpack must not write past.
func (m *Manager) Download(ctx context.Context, name, src string, unpack func(r io.Reader, top string, cap HostCap, finish func() error) error) (string, error) {
	sb, _, err := m.Get(ctx, name)
	if err != nil {
		return "", err
	}
	defer sb.busy()()
	kind, abs, err := m.probe(ctx, sb, src)
	if err != nil {
		return "", err
	}
	if kind == "none" {
		return abs, fmt.Errorf("%w: %s (in sandbox %q)", ErrNoSuchPath, abs, name)
	}
	if abs == "/" {
		return abs, &ArgError{Err: errors.New("cannot download / as a whole: name a directory below it")}
	}
	ctx, cancel := context.WithTimeout(ctx, transferTimeout)
	defer cancel()
	argv := []string{"sh", "-c", guest.TarScript, "sh", path.Dir(abs), path.Base(abs)}
	if m.isWorkspace(abs) {
		// The workspace as a whole: without its volume's lost+found.
		argv = append(argv, guest.SkipLostFound)
	}
	err, failed := m.execOut(ctx, sb, argv,
		func(r io.Reader, wait func() *streamFailure) error {
			return unpack(r, path.Base(abs), m.hostCap(ctx, sb, false), func() error {
				if f := wait(); f != nil {
					return m.transferFailed(ctx, sb, "download from", abs, f, "nothing was written on the host")
				}
				return nil
			})
		})
	if err == nil && failed != nil {
		err = m.transferFailed(ctx, sb, "download from", abs, failed, "nothing was written on the host")
	}
	return abs, err
}

// isWorkspace reports whether the sandbox path p is the workspace itself,
// the volume's mount point, whose volume's lost+found the transfers leave
// alone (see package guest).
func (m *Manager) isWorkspace(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == path.Clean(m.cfg.Workdir)
}

// transferFailed describes a tar in the sandbox that failed.
func (m *Manager) transferFailed(ctx context.Context, sb *Sandbox, what, p string, f *streamFailure, after string) error {
	err := f.err
	head, _, _ := f.stderr.Parts()
	msg := strings.TrimSpace(string(head))
	if ctx.Err() != nil {
		return fmt.Errorf("%s sandbox %q at %s: stopped (%v); %s", what, sb.Name, p, context.Cause(ctx), after)
	}
	code := -1
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	if code == 127 || strings.Contains(msg, "tar: not found") || strings.Contains(msg, "tar: command not found") {
		return fmt.Errorf("%s sandbox %q: the sandbox has no tar; install it (install tool, package tar) and try again", what, sb.Name)
	}
	if msg == "" {
		msg = err.Error()
	}
	cause := ""
	switch {
	case strings.Contains(msg, "No space left") || strings.Contains(msg, "Wrote only"):
		cause = "no space left on the sandbox's disk (see `df -h`); "
	case strings.Contains(msg, "Read-only file system"):
		cause = "that filesystem is read-only; "
	case strings.Contains(msg, "Permission denied"):
		cause = "permission denied; "
	}
	return fmt.Errorf("%s sandbox %q at %s failed (tar exit %d): %s%s; %s", what, sb.Name, p, code, cause, textcut.Shorten(msg, 600), after)
}

// busy marks the sandbox in use until the returned func runs, so the idle
// watchdog leaves it alone during a long transfer.
func (s *Sandbox) busy() func() {
	s.lastUsed.Store(time.Now().UnixNano())
	s.inflight.Add(1)
	return func() {
		s.lastUsed.Store(time.Now().UnixNano())
		s.inflight.Add(-1)
	}
}
