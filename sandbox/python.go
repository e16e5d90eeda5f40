package sandbox

import (
	"context"
	"errors"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/pysession"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// PythonResult is what a call in a Python session did.
type PythonResult struct {
	pysession.Result
	// Session is the session's name; Version its Python's.
	Session string
	Version string
	// Ended says why the session's interpreter before this one is gone,
	// when it ended by itself (Count is 1 on a new interpreter).
	Ended string
	Boot  BootInfo
}

// DefaultPythonSession is the session a python call runs in unless it
// names one.
const DefaultPythonSession = "default"

// pythonSet is the Python sessions of a sandbox, made on first use.
func (s *Sandbox) pythonSet() *pysession.Set {
	s.pyOnce.Do(func() {
		s.py = pysession.NewSet()
		closeOnEnd := func(ctx context.Context) {
			<-ctx.Done()
			why := "the sandbox ended"
			if w := s.why.Load(); w != nil {
				why = "the sandbox " + *w
			}
			s.py.Close(why)
		}
		if !s.Go(closeOnEnd) {
			closeOnEnd(s.life) // it has ended already
			return
		}
		s.Go(func(ctx context.Context) {
			t := time.NewTicker(time.Minute)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					s.py.CloseIdle(pysession.IdleTimeout)
				}
			}
		})
	})
	return s.py
}

// RunPython runs code in Python session session (made on first use) of
// sandbox name (booted if need be): variables and imports stay from one
// call to the next. Past req.Timeout the code is interrupted
// (KeyboardInterrupt); code that does not stop then ends its session
// (*pysession.StopError). The history records the code.
func (m *Manager) RunPython(ctx context.Context, name, session string, req pysession.Request) (PythonResult, error) {
	out := PythonResult{Session: session}
	if err := pysession.ValidateName(session); err != nil {
		return out, &ArgError{Err: err}
	}
	sb, boot, err := m.Get(ctx, name)
	out.Boot = boot
	if err != nil {
		return out, err
	}
	awaitControl(ctx, sb)
	sess, ended, err := sb.pythonSet().Get(ctx, session, m.pythonStarter(sb, session))
	if errors.Is(err, pysession.ErrEnded) && ctx.Err() == nil {
		// Its container may have stopped behind the server's back (the
		// idle watchdog, another server): boot it again, once.
		nsb, boot2, rerr := m.recoverLost(ctx, sb)
		if rerr == nil && nsb != sb {
			sb, out.Boot = nsb, mergeBoot(out.Boot, boot2)
			sess, ended, err = sb.pythonSet().Get(ctx, session, m.pythonStarter(sb, session))
			if ended == "" && boot2.Recovered != "" {
				ended = "the sandbox " + boot2.Recovered
			}
		}
	}
	if err != nil {
		return out, err
	}
	release := sb.busy()
	defer release()
	out.Version, out.Ended = sess.Version, ended
	start := time.Now()
	out.Result, err = sess.Run(ctx, req)
	rec := shell.Result{Duration: time.Since(start), TimedOut: out.InterruptedBy != "" && ctx.Err() == nil, Canceled: ctx.Err() != nil}
	if out.Error != nil {
		rec.ExitCode = 1
	}
	var stop *pysession.StopError
	if errors.As(err, &stop) {
		rec.TimedOut = true
	}
	m.history.Add(name, "python["+session+"]: "+req.Code, rec, err)
	m.ran(name, "python["+session+"]")
	return out, err
}

// ResetPython ends Python session session of sandbox name; it reports
// whether one ran. It boots nothing.
func (m *Manager) ResetPython(name, session string) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	if err := pysession.ValidateName(session); err != nil {
		return false, &ArgError{Err: err}
	}
	sb, ok := m.Lookup(name)
	if !ok {
		return false, nil
	}
	return sb.pythonSet().Reset(session), nil
}

// pythonStarter prepares the engine exec of a session's driver in sb: in
// the directory its shells are in, with the env tool's variables, its
// processes marked with a run ID. Its end ends the driver and its
// descendants (those that dropped the run ID too), and what carries the
// run ID; the next server ends the latter if this one is killed first.
func (m *Manager) pythonStarter(sb *Sandbox, session string) pysession.Starter {
	return func() (proc.Process, func(pid int), error) {
		wd, runID := m.sessionStart(sb)
		m.trackRun(sb.Name, runID, "python session "+session)
		target := sb.own.target()
		spec := ExecSpec{Argv: []string{"sh", "-c", terminalPrelude + guest.PythonSessionScript, "sh", guest.PythonDriver},
			Interactive: true, Workdir: wd, Env: map[string]string{guest.RunVar: runID}}
		// On the server's own pipes where the engine hands them over,
		// as the shells are; the driver is ended by its run ID either way.
		cmd := handedExec(context.Background(), m.rt, target, spec)
		end := func(pid int) {
			// The pid comes from the sandbox: a lie can only end
			// processes of its own (never its PID 1, which would stop it).
			if pid <= 1 || pid >= noShell {
				pid = noShell
			}
			<-m.endSession(sb.Name, target, "a Python session", pid, runID)
		}
		return cmd, end, nil
	}
}
