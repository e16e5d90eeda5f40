package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// This file is what live sync (package syncer) needs of the Manager: the
// sandbox's presence without booting it, a listing of a directory, and
// changes applied to it.

// Presence says whether name's container exists and runs, without booting,
// starting or adopting it.
func (m *Manager) Presence(ctx context.Context, name string) (exists, running bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, false, err
	}
	c, err := m.inspectOwned(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	return true, c.Running(), nil
}

// Boot boots, starts or adopts the named sandbox if it is not ready.
func (m *Manager) Boot(ctx context.Context, name string) (BootInfo, error) {
	_, info, err := m.Get(ctx, name)
	return info, err
}

// maxSyncList bounds the listing a sandbox may send back.
const maxSyncList = 64 << 20

// SyncList lists the paths under dir in the sandbox ("./rel"), leaving out
// entries named in ignore and all under them, and the workspace volume's
// lost+found when dir is the workspace (so a mirror never removes it; see
// package guest). The names come from the
// sandbox: the caller uses them only to name paths inside it.
func (m *Manager) SyncList(ctx context.Context, name, dir string, ignore []string) ([]string, error) {
	script, err := guest.SyncListScript(dir, ignore, m.isWorkspace(dir))
	if err != nil {
		return nil, &ArgError{Err: err}
	}
	sb, _, err := m.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer sb.busy()()
	var out bytes.Buffer
	res, err := sb.pool.Run(ctx, shell.Request{Command: script, Trusted: true, Timeout: time.Minute,
		Stdout: &limitWriter{w: &out, n: maxSyncList + 1}})
	switch {
	case err != nil:
		return nil, err
	case res.TimedOut || res.ShellLost || res.ExitCode != 0:
		return nil, fmt.Errorf("sandbox %q: list %s: exit %d", name, dir, res.ExitCode)
	case out.Len() > maxSyncList:
		return nil, fmt.Errorf("sandbox %q: the listing of %s is over %d bytes", name, dir, maxSyncList)
	}
	var paths []string
	for p := range strings.SplitSeq(out.String(), "\x00") {
		if strings.HasPrefix(p, "./") {
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// smallSync is the largest tar a sync sends through the sandbox's shell;
// larger ones stream over an exec of their own.
const smallSync = 4 << 20

// SyncApply brings changes into dir in the sandbox: it removes the paths
// in remove ("./rel") and then lands the tar stream that pack writes (nil:
// none), whose entries are "./rel": it is extracted beside what it
// replaces and, once it arrived whole, each file is renamed into place
// (guest.SyncStageScript), so a server killed part way leaves each file
// old or new, never torn. In the workspace, its volume's lost+found is
// neither removed nor extracted over. size is the stream's expected size:
// small ones go through the sandbox's shell (about a pipe round trip),
// large ones stream over the engine's exec.
func (m *Manager) SyncApply(ctx context.Context, name, dir string, remove []string, size int64, pack func(w io.Writer) error) error {
	sb, _, err := m.Get(ctx, name)
	if err != nil {
		return err
	}
	defer sb.busy()()
	if len(remove) > 0 {
		script, err := guest.SyncApplyScript(dir, remove, false, m.isWorkspace(dir))
		if err != nil {
			return &ArgError{Err: err}
		}
		if err := sb.viaShell(ctx, "apply changes in "+dir+" of", script, nil); err != nil {
			return err
		}
	}
	if pack == nil {
		return nil
	}
	stage := uploadStageName()
	end := stage + ".end"
	marked := func(w io.Writer) error {
		ms := &markedStream{w: w}
		if err := pack(ms); err != nil {
			return err
		}
		return ms.finish(end)
	}
	if size <= smallSync {
		var b bytes.Buffer
		if err := marked(&b); err != nil {
			return err
		}
		cmd, err := guest.SyncStageCommand(dir, stage, end, m.isWorkspace(dir))
		if err != nil {
			return &ArgError{Err: err}
		}
		return sb.viaShell(ctx, "apply changes in "+dir+" of", cmd, b.Bytes())
	}
	skip := ""
	if m.isWorkspace(dir) {
		skip = guest.SkipLostFound
	}
	perr, failed := m.execIn(ctx, sb, []string{"sh", "-c", guest.SyncStageScript, "sh", dir, stage, end, skip}, marked)
	if failed != nil {
		return m.transferFailed(ctx, sb, "sync into", dir, failed, "each file is either as it was or as sent; the next change or a restart of the sync sends it again")
	}
	return perr
}
