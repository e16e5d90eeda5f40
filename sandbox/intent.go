package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// Operations a killed server could leave half done.
//
// A restore moves the sandbox's container aside, boots one from the
// snapshot's image, extracts the snapshot's workspace into a directory of
// its own in the workspace volume (guest.StageScript), ends the old
// container and swaps the directories' contents (guest.SwapScript). A
// clone makes its sandbox, then stages and swaps the same way into it. A
// reset moves the container aside, boots a new one and carries the env
// variables over. Before the first step the operation is recorded
// (state.Intent, phase "begun"), and again once the new workspace is
// whole ("staged"); the record goes once the operation is done.
//
// The next server to take the sandbox's lifecycle lock (a boot, or
// Reconcile at a server's start) finds the record of a dead server's
// operation and ends it:
//   - restore, begun: undone. The old container, if it was moved aside
//     and is still there, is put back in place of the new one; the staged
//     directory is removed. The workspace is as it was.
//   - restore or clone, staged: finished. The old container is removed
//     and the swap run to its end (it carries on from any step).
//   - restore from a volume snapshot (no tar: its record names the new
//     workspace volume the storage made from the snapshot, and the old
//     one), begun: undone, the old container put back and the new volume
//     removed; staged (the sandbox ran on the new volume): finished, the
//     old container and the old volume removed.
//   - clone, begun: its half-made sandbox is removed (as the clone's own
//     server does when the workspace fails to arrive).
//   - reset: finished, with the old container's env variables.
//   - destroy: finished, before anything boots under the name (at a
//     server's start, or by the next call on the name, which gets a new
//     sandbox).
//   - reset with wipe_workspace: finished before the next boot, with the
//     env variables of the old container if it is still there.
//
// Either way the next call on the sandbox is told what happened.

// IntentStore keeps the records of operations under way (state.Store in
// production).
type IntentStore interface {
	PutIntent(in state.Intent) error
	Intent(sandbox string) (state.Intent, bool, error)
	Intents() ([]state.Intent, error)
	DeleteIntent(sandbox string) error
}

const (
	intentBegun  = "begun"
	intentStaged = "staged"

	opDestroy = "destroy"
	opWipe    = "wipe" // a reset with wipe_workspace
)

// finishPending finishes what a dead server (or a failed destroy) left
// recorded on name that must be done before anything boots there: a
// destroy, or a reset with wipe_workspace. It returns what the next call
// is told and, for a wipe, the env variables to carry into the sandbox
// booted next. The caller holds name's lifecycle lock. Nothing recorded:
// "", nil. A destroy that still cannot finish is an error, so that
// nothing boots on the workspace it was to remove.
func (m *Manager) finishPending(ctx context.Context, name string) (said string, env []guest.EnvVar, err error) {
	in, ok, err := m.intentOf(name)
	if err != nil || !ok {
		return "", nil, nil
	}
	began := in.Began.Format(time.RFC3339)
	switch in.Op {
	case opDestroy:
		m.log.Info("found an interrupted destroy", "sandbox", name, "began", in.Began)
		if _, err := m.destroyLocked(ctx, name); err != nil {
			return "", nil, fmt.Errorf("sandbox %q: the destroy begun at %s has not finished: %w; destroy it again", name, began, err)
		}
		return "the destroy of this sandbox begun at " + began + " had not finished (its server exited or it failed); it was finished, and this is a new sandbox", nil, nil
	case opWipe:
		m.log.Info("found an interrupted reset with wipe_workspace", "sandbox", name, "began", in.Began)
		// The env variables live in the old container's rootfs: read
		// while it is there.
		if c, err := m.inspectOwned(ctx, name); err == nil && c.Running() {
			out, err := m.rt.Exec(ctx, idOr(c), ExecSpec{Argv: []string{"sh", "-c", guest.EnvListScript}})
			if err == nil && out.ExitCode == 0 {
				env = guest.ParseEnvList(out.Stdout)
			}
		}
		if _, err := m.remove(ctx, name, "", true); err != nil {
			return "", nil, fmt.Errorf("sandbox %q: the reset with wipe_workspace begun at %s has not finished: %w; reset it again", name, began, err)
		}
		m.endIntent(name)
		said = "the reset with wipe_workspace begun at " + began + " was interrupted (its server exited); it was finished: the workspace is empty"
		if len(env) > 0 {
			said += ", and the env variables were carried over"
		} else {
			said += "; env variables set before it, if any, went with the old container"
		}
		return said, env, nil
	}
	return "", nil, nil
}

// newIntent starts the record of an operation on name, with fresh names
// for its directories in the workspace.
func newIntent(name, op, snap string) state.Intent {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	return state.Intent{Sandbox: name, Op: op, Snapshot: snap, Phase: intentBegun,
		Stage: guest.WorkspaceStagePrefix + id, Old: guest.WorkspaceOldPrefix + id, Began: time.Now().UTC()}
}

// putIntent records in (nothing without an IntentStore). A restore from a
// volume snapshot recorded on the name before, which a server killed or
// a removal that failed left, is ended first (settleVolumeRestore): its
// record names a workspace nothing else would remove.
func (m *Manager) putIntent(in state.Intent) error {
	if m.cfg.Intents == nil {
		return nil
	}
	if prev, ok, err := m.cfg.Intents.Intent(in.Sandbox); err == nil && ok && prev.Volume != "" && prev.Stage != in.Stage {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		_, serr := m.settleVolumeRestore(ctx, in.Sandbox, prev) // volsnap.go
		cancel()
		if serr != nil {
			m.log.Warn("end an earlier restore before the "+in.Op+"; its workspaces are left", "sandbox", in.Sandbox,
				"volume", prev.Volume, "old_volume", prev.OldVolume, "err", serr)
		}
	}
	if err := m.cfg.Intents.PutIntent(in); err != nil {
		return fmt.Errorf("record the %s of sandbox %q: %w", in.Op, in.Sandbox, err)
	}
	return nil
}

// endIntent removes name's record once its operation is over.
func (m *Manager) endIntent(name string) {
	if m.cfg.Intents == nil {
		return
	}
	if err := m.cfg.Intents.DeleteIntent(name); err != nil {
		m.log.Warn("forget a finished operation", "sandbox", name, "err", err)
	}
}

// describeIntent names an operation for the agent.
func describeIntent(in state.Intent) string {
	what := "the restore of snapshot " + fmt.Sprintf("%q", in.Snapshot)
	if in.Op == "clone" {
		what = "the clone of sandbox " + fmt.Sprintf("%q", in.Snapshot) + " into this one"
	}
	return what + " begun at " + in.Began.Format(time.RFC3339) + " was interrupted (its server exited)"
}

// resumption is an interrupted operation found before a boot, and what
// is left to do in the booted sandbox.
type resumption struct {
	in   state.Intent
	said string
	// gone: the operation's sandbox was removed (an interrupted clone's);
	// nothing is left to do in it.
	gone bool
	// left: what is left was tried and failed; the record stays for the
	// next boot.
	left bool
}

// resumeIntent ends, as far as the engine goes, an operation a dead
// server left on name: it puts the old container back (begun) or removes
// it (staged). What is left in the workspace is done by finishResumed
// once the sandbox is booted. The caller holds name's lifecycle lock, so
// the operation's own server is gone.
func (m *Manager) resumeIntent(ctx context.Context, name string) *resumption {
	if m.cfg.Intents == nil {
		return nil
	}
	in, ok, err := m.cfg.Intents.Intent(name)
	if err != nil {
		m.log.Warn("read the record of an operation under way", "sandbox", name, "err", err)
		return nil
	}
	if !ok {
		return nil
	}
	r := &resumption{in: in}
	switch {
	case in.Op == "reset":
		// A reset is only ever finished: the new container gets the env
		// variables of the old one, which then goes (finishResumed).
		r.said = "the reset begun at " + in.Began.Format(time.RFC3339) + " was interrupted (its server exited); it was finished"
	case in.Op != "restore" && in.Op != "clone":
		// A destroy or a wipe is finished before this (finishPending); an operation
		// of a later server is not this one's to undo.
		m.log.Warn("an operation under way that this server does not know; left alone", "sandbox", name, "op", in.Op, "phase", in.Phase)
		return nil
	case in.Op == "restore" && in.Volume != "" && (in.Phase == intentBegun || in.Phase == intentStaged):
		// From a volume snapshot: nothing is left in the workspace.
		r.said, r.left = m.resumeVolumeRestore(ctx, name, in) // volsnap.go
	case in.Phase == intentStaged:
		if in.Trash != "" {
			m.removeRetired(in.Trash)
		}
		r.said = describeIntent(in) + " after the new workspace had arrived whole; it was finished"
	case in.Phase == intentBegun:
		if in.Op == "clone" {
			// The sandbox is the clone's own, half made: it goes, as if
			// the clone had never begun.
			if err := m.dropHalfClone(ctx, name, "removed: "+describeIntent(in)); err != nil {
				m.log.Warn("remove the sandbox of an interrupted clone", "sandbox", name, "err", err)
				r.said = describeIntent(in) + " before its workspace had arrived whole, and its half-made sandbox could not be removed (" + err.Error() + "); destroy it and clone again"
				break
			}
			r.said = describeIntent(in) + " before its workspace had arrived whole; the half-made sandbox was removed (clone again to make it)"
			r.gone = true
			break
		}
		r.said = describeIntent(in) + " before the new workspace had arrived whole"
		if in.Trash != "" {
			if back, why := m.putBack(ctx, name, in.Trash); back {
				r.said += "; it was undone: the sandbox is as it was before it (its commands and jobs had ended)"
				break
			} else if why != "" {
				r.said += "; its old container could not be put back (" + why + ")"
			}
		}
		// A container under the name made after the restore began is the
		// snapshot's: the old one was removed (an engine that cannot
		// rename removes it first).
		if c, err := m.rt.Inspect(ctx, m.ContainerFor(name)); err == nil && !c.Created.IsZero() && c.Created.After(in.Began) {
			runs := "the snapshot's image"
			if rec, ok, _ := m.snapshotOf(in.Snapshot); ok && rec.WorkspaceOnly {
				runs = "its base image booted afresh (the snapshot kept no root filesystem)"
			}
			r.said += "; the sandbox runs from " + runs + ", with its workspace as it was"
		} else {
			r.said += "; it was undone: the sandbox is as it was before it"
		}
	default:
		m.log.Warn("an operation under way in a phase this server does not know; left alone", "sandbox", name, "op", in.Op, "phase", in.Phase)
		return nil
	}
	m.log.Info("found an interrupted operation", "sandbox", name, "op", in.Op, "phase", in.Phase, "began", in.Began)
	return r
}

// dropHalfClone removes name, the half-made sandbox of a clone that did
// not finish, with its job records, ending its commands with why. The
// caller holds name's lifecycle lock, and forgets the clone's record once
// this succeeded.
func (m *Manager) dropHalfClone(ctx context.Context, name, why string) error {
	if sb := m.detach(name); sb != nil {
		sb.end(why)
	}
	// The engine's Remove waits out a removal its own cleanup refuses at
	// first (podman: "device or resource busy").
	if _, err := m.remove(ctx, name, "", true); err != nil {
		return err
	}
	m.forgetJobs(name)
	return nil
}

// putBack moves the container a restore moved aside back in place of the
// restore's own; why says what failed when it was there but could not be.
func (m *Manager) putBack(ctx context.Context, name, trash string) (back bool, why string) {
	ren, ok := RenamerOf(m.rt)
	if !ok {
		return false, ""
	}
	if _, err := m.rt.Inspect(ctx, trash); err != nil {
		return false, "" // never moved aside, or removed since
	}
	if err := m.rt.Remove(ctx, m.ContainerFor(name)); err != nil && !errors.Is(err, ErrNotFound) {
		m.log.Warn("remove the container of an interrupted restore", "sandbox", name, "err", err)
	}
	if err := ren.Rename(ctx, trash, m.ContainerFor(name)); err != nil {
		m.log.Warn("put back the container of an interrupted restore", "sandbox", name, "container", trash, "err", err)
		return false, err.Error()
	}
	return true, ""
}

// finishResumed does in the booted sandbox what is left of r: the swap
// (staged) or the removal of the staged directory (begun), then forgets
// the record. It returns what the agent is told.
func (m *Manager) finishResumed(ctx context.Context, sb *Sandbox, r *resumption) string {
	switch {
	case r.left:
		return r.said
	case r.gone, r.in.Volume != "":
		m.endIntent(sb.Name)
		return r.said
	}
	var err error
	switch {
	case r.in.Op == "reset":
		err = m.finishReset(ctx, sb, r.in.Trash)
	case r.in.Phase == intentStaged:
		err = m.swapWorkspace(ctx, sb, r.in)
	default:
		err = m.dropStage(ctx, sb, r.in)
	}
	if err != nil {
		m.log.Warn("finish an interrupted operation", "sandbox", sb.Name, "err", err)
		return r.said + "; but what was left in the workspace could not be done (" + err.Error() + "); the next boot tries again"
	}
	m.endIntent(sb.Name)
	return r.said
}

// finishReset carries the env variables of a reset's old container, if it
// is still there, into sb's and removes it.
func (m *Manager) finishReset(ctx context.Context, sb *Sandbox, trash string) error {
	if trash == "" {
		return nil
	}
	if _, err := m.rt.Inspect(ctx, trash); err != nil {
		return nil // removed already: nothing to carry over
	}
	out, err := m.rt.Exec(ctx, trash, ExecSpec{Argv: []string{"sh", "-c", guest.EnvListScript}})
	if err == nil && out.ExitCode == 0 {
		if vars := guest.ParseEnvList(out.Stdout); len(vars) > 0 {
			m.writeEnvStore(ctx, sb.Name, vars)
		}
	}
	m.removeRetired(trash)
	return nil
}

// resumeIntents finishes or undoes, at a server's start, the operations
// dead servers left: each such sandbox is booted, which resumes it, and
// its next call is told.
func (m *Manager) resumeIntents(ctx context.Context) {
	if m.cfg.Intents == nil {
		return
	}
	ins, err := m.cfg.Intents.Intents()
	if err != nil {
		m.log.Warn("read the records of operations under way", "err", err)
		return
	}
	for _, in := range ins {
		if ValidateName(in.Sandbox) != nil {
			continue
		}
		h, err := m.locks.TryLock(m.lockKey(in.Sandbox), "look for interrupted operations")
		if err != nil {
			continue // under way in a live server
		}
		if in.Op == opDestroy {
			// Finished without booting: nothing of it is to run again.
			if said, _, err := m.finishPending(ctx, in.Sandbox); err != nil {
				m.log.Warn("finish an interrupted destroy", "sandbox", in.Sandbox, "err", err)
			} else {
				m.note(in.Sandbox, said)
			}
			h.Release()
			continue
		}
		if in.Op == "clone" && in.Phase == intentBegun {
			// Undone without booting what is removed anyway.
			if r := m.resumeIntent(ctx, in.Sandbox); r != nil && r.gone {
				m.endIntent(in.Sandbox)
				m.note(in.Sandbox, r.said)
			}
			h.Release()
			continue
		}
		h.Release()
		_, info, err := m.Get(ctx, in.Sandbox)
		switch {
		case err != nil:
			m.log.Warn("resume an interrupted operation", "sandbox", in.Sandbox, "err", err)
		case info.Recovered != "":
			m.note(in.Sandbox, info.Recovered)
		}
	}
}

// intentTrash is the set of containers that records of operations under
// way name as moved aside: not orphans, since their operation may yet be
// undone.
func (m *Manager) intentTrash() map[string]bool {
	out := map[string]bool{}
	if m.cfg.Intents == nil {
		return out
	}
	ins, _ := m.cfg.Intents.Intents()
	for _, in := range ins {
		if in.Trash != "" {
			out[in.Trash] = true
		}
	}
	return out
}

// note keeps what the next call on name must be told.
func (m *Manager) note(name, msg string) {
	if msg == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.notes == nil {
		m.notes = map[string]string{}
	}
	if _, ok := m.notes[name]; !ok {
		m.pendingNotes.Add(1)
	}
	m.notes[name] = joinNotes(m.notes[name], msg)
}

// takeNote returns and forgets what name's next call must be told.
func (m *Manager) takeNote(name string) string {
	if m.pendingNotes.Load() == 0 {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	msg, ok := m.notes[name]
	if ok {
		delete(m.notes, name)
		m.pendingNotes.Add(-1)
	}
	return msg
}

func joinNotes(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// stageWorkspace extracts the workspace tar file (in the snapshot
// directory) into in.Stage beside the sandbox's workspace, kept only when
// it arrived whole (guest.StageScript).
func (m *Manager) stageWorkspace(ctx context.Context, sb *Sandbox, file string, in state.Intent) error {
	f, err := os.Open(filepath.Join(m.cfg.SnapshotDir, file))
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, transferTimeout)
	defer cancel()
	end := in.Stage + ".end"
	werr, failed := m.execIn(ctx, sb, []string{"sh", "-c", guest.StageScript, "sh", m.cfg.Workdir, in.Stage, end, guest.SkipLostFound, guest.Exact},
		func(w io.Writer) error {
			ms := &markedStream{w: w}
			if _, err := io.Copy(ms, f); err != nil {
				return err
			}
			return ms.finish(end)
		})
	if failed != nil {
		return m.transferFailed(ctx, sb, "load the workspace into", m.cfg.Workdir, failed, "the workspace was left as it was")
	}
	return werr
}

// swapWorkspace makes the staged workspace the sandbox's (guest.SwapScript).
func (m *Manager) swapWorkspace(ctx context.Context, sb *Sandbox, in state.Intent) error {
	return m.workspaceScript(ctx, sb, "swap in the new workspace", guest.SwapScript, in.Stage, in.Old, guest.SkipLostFound)
}

// dropStage removes what an undone operation left in the workspace.
func (m *Manager) dropStage(ctx context.Context, sb *Sandbox, in state.Intent) error {
	return m.workspaceScript(ctx, sb, "remove the staged workspace", `cd -- "$1" && command rm -rf -- "$2" "$3"`, in.Stage, in.Old)
}

func (m *Manager) workspaceScript(ctx context.Context, sb *Sandbox, what, script string, args ...string) error {
	for _, a := range args {
		if !strings.HasPrefix(a, guest.WorkspaceStagePrefix) && !strings.HasPrefix(a, guest.WorkspaceOldPrefix) && a != guest.SkipLostFound ||
			strings.ContainsAny(a, "/\x00") {
			return fmt.Errorf("%s: bad directory name %q", what, a)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, transferTimeout)
	defer cancel()
	res, err := m.rt.Exec(ctx, sb.own.target(), ExecSpec{Argv: append([]string{"sh", "-c", script, "sh", m.cfg.Workdir}, args...)})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %.300s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		return fmt.Errorf("sandbox %q: %s: %w", sb.Name, what, err)
	}
	return nil
}

// intentOf reads name's record, if any.
func (m *Manager) intentOf(name string) (state.Intent, bool, error) {
	if m.cfg.Intents == nil {
		return state.Intent{}, false, nil
	}
	return m.cfg.Intents.Intent(name)
}
