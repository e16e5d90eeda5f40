package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// ExecResult is the outcome of Exec.
type ExecResult struct {
	shell.Result
	Boot BootInfo
	// Notice is a message about the sandbox the caller should see, such as
	// the disk watcher having stopped a command.
	Notice string
}

// ErrCutShort marks a command that a destroy or reset of its sandbox (in
// this server or another) ended or kept from starting.
var ErrCutShort = errors.New("cut short by a lifecycle change")

// CutShortError says which lifecycle change cut a command short.
type CutShortError struct {
	Sandbox string
	// Why is how the sandbox changed: "was reset", "was destroyed by
	// another server (pid 12)", …
	Why string
	// Started means the command had begun and may have done part of its work.
	Started bool
	// Destroyed means the sandbox was destroyed, not reset.
	Destroyed bool
}

func (e *CutShortError) Error() string {
	if e.Started {
		return fmt.Sprintf("the command was cut short: sandbox %q %s while it ran", e.Sandbox, e.Why)
	}
	return fmt.Sprintf("the command did not run: sandbox %q %s before it started", e.Sandbox, e.Why)
}

// Is makes errors.Is(err, ErrCutShort) true.
func (e *CutShortError) Is(target error) bool { return target == ErrCutShort }

// Exec runs a command in the named sandbox, booting it on first use. If the
// sandbox's container was stopped or removed behind the server's back, it is
// brought back once and the command retried.
func (m *Manager) Exec(ctx context.Context, name string, req shell.Request) (ExecResult, error) {
	return m.ExecAs(ctx, name, req.Command, req)
}

// ExecAs is Exec that records label in the history instead of the command
// text (tools that build their own commands record what the user asked);
// an empty label records nothing.
//
// A command cut short by a destroy or reset returns a *CutShortError. One
// that a reset kept from starting runs on the new sandbox instead; one
// that a destroy kept from starting does not run (it would bring back the
// sandbox the user just removed).
func (m *Manager) ExecAs(ctx context.Context, name, label string, req shell.Request) (ExecResult, error) {
	res, ran, err := m.execOnce(ctx, name, req)
	var cut *CutShortError
	if errors.As(err, &cut) && !cut.Started && !cut.Destroyed {
		boot := res.Boot
		res, ran, err = m.execOnce(ctx, name, req)
		res.Boot = mergeBoot(boot, res.Boot)
	}
	if ran {
		m.history.Add(name, label, res.Result, err)
		m.ran(name, label)
	}
	if sb, ok := m.Lookup(name); ok {
		res.Notice = sb.takeNotice() // limits.go: the disk watcher's message
		if res.TimedOut && err == nil {
			// A command that ran to its timeout in a container paused
			// meanwhile was frozen, not slow.
			if c, ierr := m.rt.Inspect(ctx, sb.Container); ierr == nil && c.State == StatePaused {
				res.Notice = joinNotes(res.Notice, m.pausedError(name, c.Name).Error()+" (the command was frozen, not slow)")
			}
		}
	}
	return res, err
}

func mergeBoot(a, b BootInfo) BootInfo {
	if b.Created || b.Started || b.Adopted || b.Recovered != "" {
		b.Took += a.Took
		return b
	}
	return a
}

// execOnce boots or finds the sandbox and runs req once, recovering a
// container that was stopped or removed behind the server's back. ran
// reports whether the command reached a shell.
func (m *Manager) execOnce(ctx context.Context, name string, req shell.Request) (out ExecResult, ran bool, err error) {
	sb, boot, err := m.Get(ctx, name)
	out.Boot = boot
	if err != nil {
		return out, false, err
	}
	out.Result, err = m.runOn(ctx, sb, req)
	if cut := m.cutShort(sb, out.Result, err); cut != nil {
		return out, true, cut
	}
	if err == nil && out.NotStarted && !out.TimedOut {
		// (A timeout too can end a command before it started, waiting
		// for a shell or by the kill of the shell it was on: the
		// command's time is up, and it is not tried again.)
		err = errShellGone // the container may have gone: check below
	}
	if err == nil || errors.Is(err, shell.ErrNULInCommand) || ctx.Err() != nil {
		return out, true, err
	}
	if errors.Is(err, ErrForeign) {
		// A stranger holds the name: nothing ran, and recovery must not
		// touch it.
		return out, false, err
	}
	// The shell could not be opened: is the container gone or stopped?
	sb2, boot2, rerr := m.recoverLost(ctx, sb)
	if rerr != nil {
		return out, true, rerr
	}
	if sb2 == sb && !errors.Is(err, errShellGone) {
		return out, true, err
	}
	out.Boot = mergeBoot(boot, boot2)
	out.Result, err = m.runOn(ctx, sb2, req)
	if cut := m.cutShort(sb2, out.Result, err); cut != nil {
		return out, true, cut
	}
	return out, true, err
}

// runOn runs req on sb's shells, marking the sandbox in use meanwhile.
func (m *Manager) runOn(ctx context.Context, sb *Sandbox, req shell.Request) (shell.Result, error) {
	sb.lastUsed.Store(time.Now().UnixNano())
	sb.inflight.Add(1)
	defer sb.inflight.Add(-1)
	awaitControl(ctx, sb) // children.go: the proxy served before the command runs
	res, err := sb.pool.Run(ctx, req)
	if err == nil && !res.ShellLost {
		m.noteSecrets(ctx, sb)
	}
	return res, err
}

// cutShort returns the error for a command on sb that a destroy or reset
// (or this server's shutdown) ended or kept from starting, or nil if none
// did. A command it ended was killed: its shell died, or it ended by a
// signal.
func (m *Manager) cutShort(sb *Sandbox, res shell.Result, err error) error {
	if err == nil && !res.ShellLost && res.ExitCode >= 0 && res.ExitCode < 128 {
		return nil
	}
	cut := &CutShortError{Sandbox: sb.Name, Why: sb.Ended(), Started: err == nil && !res.NotStarted}
	if cut.Why == "" {
		// Not ended here: did another server destroy or reset it?
		g, ok := m.changedElsewhere(sb)
		if !ok {
			return m.lostWhileRunning(sb, res, err)
		}
		cut.Why = g.describe()
		cut.Destroyed = g.What == "destroyed"
	}
	cut.Destroyed = cut.Destroyed || cut.Why == endedByDestroy
	return cut
}

// volumeGone reports whether the engine says workspace volume vol is gone
// (false when it cannot tell).
func (m *Manager) volumeGone(ctx context.Context, vol string) bool {
	vl, ok := m.rt.(VolumeLister)
	if !ok {
		return false
	}
	names, err := vl.VolumeNames(ctx)
	if err != nil {
		return false
	}
	return !slices.Contains(names, vol)
}

// lostWhileRunning returns the error for a command whose shell died with
// its container, removed or stopped outside sandbox-mcp while it ran, or
// nil when the container is still there (the command ended its shell). A
// command whose shell was gone before it started gets nil too: execOnce
// then brings the sandbox back and runs it there (a pool can hold more
// than one shell that died with the container, and another try on it
// could meet the next).
func (m *Manager) lostWhileRunning(sb *Sandbox, res shell.Result, err error) error {
	if err != nil || !res.ShellLost || res.NotStarted {
		return nil
	}
	ctx, cancel := context.WithTimeout(m.life, 30*time.Second)
	defer cancel()
	why, lost, perr := m.lostContainer(ctx, sb)
	switch {
	case perr != nil:
		return perr
	case !lost:
		return nil
	}
	return &CutShortError{Sandbox: sb.Name, Why: why + " (its container, outside sandbox-mcp)", Started: !res.NotStarted}
}

// forgetJobs drops the job records of a sandbox being destroyed or reset.
func (m *Manager) forgetJobs(name string) {
	if err := m.jobs.DeleteJobs(name); err != nil {
		m.log.Warn("forget jobs", "sandbox", name, "err", err)
	}
}

// errShellGone marks a shell that died before its command started.
var errShellGone = errors.New("the sandbox's shell ended before the command started")

// recoverLost checks, under the lifecycle lock, whether sb's container was
// stopped or removed behind the server's back, and if so boots its name
// again. It returns the sandbox to run on: sb itself when nothing was lost.
func (m *Manager) recoverLost(ctx context.Context, sb *Sandbox) (*Sandbox, BootInfo, error) {
	release, err := m.lockName(ctx, sb.Name, "recover")
	if err != nil {
		return nil, BootInfo{}, err
	}
	defer release()
	if cur, ok := m.Lookup(sb.Name); ok && cur != sb {
		return cur, BootInfo{}, nil // replaced meanwhile
	}
	if why := sb.Ended(); why != "" {
		return nil, BootInfo{}, &CutShortError{Sandbox: sb.Name, Why: why}
	}
	why, lost, err := m.lostContainer(ctx, sb)
	if err != nil {
		return nil, BootInfo{}, err
	}
	if !lost {
		return sb, BootInfo{}, nil
	}
	if why == "was removed" && m.volumeGone(ctx, sb.volume) {
		why = "was removed, with its workspace volume: the workspace is empty, what it held is lost"
	}
	m.detach(sb.Name)
	sb.end(why)
	nsb, boot, err := m.bootLocked(ctx, sb.Name, bootFind)
	if err != nil {
		return nil, boot, fmt.Errorf("sandbox %q %s and could not be brought back: %w", sb.Name, why, err)
	}
	boot.Recovered = why
	return nsb, boot, nil
}

// lostContainer reports whether sb's container is no longer running; a
// paused one is not lost but an error (ErrPaused): nothing can run in it,
// and starting it again would fail.
func (m *Manager) lostContainer(ctx context.Context, sb *Sandbox) (string, bool, error) {
	c, err := m.rt.Inspect(ctx, sb.Container)
	switch {
	case errors.Is(err, ErrNotFound):
		return "was removed", true, nil
	case err != nil:
		return "", false, nil
	case c.State == StatePaused:
		return "", false, m.pausedError(sb.Name, c.Name)
	case !c.Running():
		return "was stopped", true, nil
	}
	return "", false, nil
}

// containerHost adapts a Runtime and container to shell.Host.
type containerHost struct {
	rt   Runtime
	name string
}

func (h containerHost) Command(ctx context.Context) proc.Process {
	return h.rt.ExecCommand(ctx, h.name, ExecSpec{Argv: []string{"sh"}, Interactive: true})
}

// KillRun runs guest.KillRunScript in a process of its own. In a sandbox
// whose process slots are all taken (a fork bomb) starting it can fail
// while the bomb holds every slot, so it is tried a few times: the script
// itself forks nothing, and stopping the bomb's processes frees no slot
// but keeps them from taking the next one.
//
// Nothing is started in a paused container: its processes cannot end
// anyway, and docker's exec into a frozen container blocks the engine's
// hold on it (an unpause then waits for ever).
func (h containerHost) KillRun(ctx context.Context, pid int, runID string, self bool) error {
	if c, err := h.rt.Inspect(ctx, h.name); err == nil && c.State == StatePaused {
		return fmt.Errorf("end the command's processes: the container is %w", ErrPaused)
	}
	s := "0"
	if self {
		s = "1"
	}
	spec := ExecSpec{Argv: []string{"sh", "-c", guest.KillRunScript, "sh", strconv.Itoa(pid), runID, s}}
	var err error
	for attempt := range killAttempts {
		if _, err = h.rt.Exec(ctx, h.name, spec); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * 50 * time.Millisecond):
		}
	}
	return fmt.Errorf("end the command's processes: %w", err)
}

// killAttempts bounds the tries of KillRun.
const killAttempts = 8
