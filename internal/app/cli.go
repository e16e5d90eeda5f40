package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/children"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/terminal"
	"golang.org/x/term"
)

// Exit statuses of the command line for people. exec and shell pass the
// command's own status through and use ExitEngine for their own failures,
// as docker and podman do.
const (
	ExitOK       = 0
	ExitFailed   = 1   // the operation failed
	ExitUsage    = 2   // the command line is wrong
	ExitNotFound = 3   // no such sandbox, job or snapshot
	ExitEngine   = 125 // exec, shell: sandbox-mcp itself failed
)

// ExitError carries the exit status a command ends with.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// exitFor classifies an error of a Manager call.
func exitFor(err error) error {
	if err == nil {
		return nil
	}
	var arg *sandbox.ArgError
	switch {
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrJobNotFound), errors.Is(err, sandbox.ErrNoSnapshot):
		return &ExitError{Code: ExitNotFound, Err: err}
	case errors.As(err, &arg):
		return &ExitError{Code: ExitUsage, Err: err}
	}
	return &ExitError{Code: ExitFailed, Err: err}
}

// engineExit is exitFor for exec and shell, whose own failures are
// ExitEngine (their ExitFailed would read as the command's status 1).
func engineExit(err error) error {
	e := exitFor(err).(*ExitError)
	if e.Code == ExitFailed {
		e.Code = ExitEngine
	}
	return e
}

// openCLI opens an Env for one command of the command line: the same
// Manager a server builds, with the children keeper's lifecycle hook, so
// that a destroy there takes the sandbox's children as the tool does.
func openCLI(ctx context.Context, cfg Config) (*Env, error) {
	if cfg.LogLevel == "" || cfg.LogLevel == "info" {
		cfg.LogLevel = "warn" // a person reads the command's own output
	}
	env, err := Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	env.Children = children.New(children.Options{Sandboxes: env.Manager, Store: env.State, Policies: cfg.ChildPolicies,
		Locks: locks.Dir{Path: filepath.Join(cfg.StateDir, "locks")}, Log: env.Logger})
	env.Manager.SetControl(sandbox.Control{Wants: env.Children.Wants, Serve: env.Children.ServeConn, Child: env.Children.Child})
	env.Manager.OnLifecycle(func(name, event string) { env.Children.ParentChanged(name, event) })
	return env, nil
}

// openFor opens an Env for op (destroy, snapshot, restore) on sandbox
// name, refused, as the tools refuse it, for a child whose policy does
// not allow it.
func openFor(ctx context.Context, cfg Config, name, op string) (*Env, error) {
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := env.Children.Allowed(name, op); err != nil {
		env.Close()
		return nil, &ExitError{Code: ExitFailed, Err: err}
	}
	return env, nil
}

// List writes the sandboxes of this prefix, as a table or JSON.
func List(ctx context.Context, cfg Config, asJSON bool, w io.Writer) error {
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	infos, err := env.Manager.List(ctx)
	if err != nil {
		return exitFor(err)
	}
	spares, _ := env.Manager.Spares(ctx)
	if asJSON {
		if infos == nil {
			infos = []sandbox.Info{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(infos)
	}
	if len(infos)+len(spares) == 0 {
		fmt.Fprintln(w, "no sandboxes")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tIMAGE\tIP\tCREATED")
	for _, in := range infos {
		created := "-"
		if !in.Created.IsZero() {
			created = in.Created.Local().Format("2006-01-02 15:04")
		}
		ip := in.IP
		if ip == "" {
			ip = "-"
		}
		state := string(in.State)
		if in.Pending != "" {
			if f := strings.Fields(in.Pending); len(f) > 1 {
				state += " (unfinished " + f[1] + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", in.Name, state, in.Image, ip, created)
	}
	for _, in := range spares {
		// A warm spare: the next new name takes it (--spares), or
		// the name of the profile it was booted for.
		label := "(spare " + in.Container + ")"
		if in.SpareFor != "" {
			label = "(spare for " + in.SpareFor + ": " + in.Container + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t-\t%s\n", label, in.State, in.Image, in.Created.Local().Format("2006-01-02 15:04"))
	}
	return tw.Flush()
}

// Status writes one sandbox, without booting it, and its agent: whether
// port forwards and the control socket go through it, or why they use the
// exec fallback.
func Status(ctx context.Context, cfg Config, name string, asJSON bool, w io.Writer) error {
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	in, err := env.Manager.Status(ctx, name)
	if err != nil {
		return exitFor(err)
	}
	return writeStatus(w, in, env.Manager.AgentStatus(ctx, in), asJSON)
}

// Net prints sandbox name's egress: its mode and policy, the hosts
// refused lately, bytes per host and the last entries of its network log.
func Net(ctx context.Context, cfg Config, name string, last int, refusedOnly, asJSON bool, w io.Writer) error {
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	st, err := env.Manager.NetworkState(ctx, name)
	if err != nil {
		return exitFor(err)
	}
	evs, err := env.Manager.NetworkLog(ctx, name, max(last, 0), refusedOnly)
	if err != nil {
		return exitFor(err)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			sandbox.NetState
			Log []egress.Event `json:"log"`
		}{st, evs})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	mode := st.Mode
	if st.Wanted != "" {
		mode += " (its policy now says " + st.Wanted + ": reset it to apply)"
	}
	fmt.Fprintf(tw, "egress:\t%s\n", mode)
	for _, p := range st.Policy {
		fmt.Fprintf(tw, "policy:\t%s\n", p)
	}
	if st.Proxy != "" {
		fmt.Fprintf(tw, "proxy:\t%s\n", st.Proxy)
		fmt.Fprintf(tw, "carried by:\t%s\n", st.Transport)
	}
	for _, r := range st.Refused {
		fmt.Fprintf(tw, "refused:\t%s, %d times, last %s: %s\n", r.Host, r.Times, r.Last.Local().Format("2006-01-02 15:04:05"), r.Reason)
	}
	for _, h := range st.Bytes {
		fmt.Fprintf(tw, "traffic:\t%s: %d connections, %d bytes in, %d out\n", h.Host, h.Connections, h.Down, h.Up)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, ev := range evs {
		what := "allowed (" + ev.Rule + ")"
		switch {
		case !ev.Allowed:
			what = "REFUSED: " + ev.Reason
		case ev.Ended && ev.Reason != "":
			what = "failed: " + ev.Reason
		case ev.Ended:
			what = fmt.Sprintf("ended: %d bytes in, %d out", ev.Down, ev.Up)
		}
		fmt.Fprintf(w, "%s  %s:%d  %s  %s\n", ev.Time.Local().Format("15:04:05"), ev.Host, ev.Port, ev.Via, what)
	}
	return nil
}

// writeStatus writes Status's report of in and its agent.
func writeStatus(w io.Writer, in sandbox.Info, ag sandbox.AgentState, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			sandbox.Info
			Agent sandbox.AgentState `json:"agent"`
		}{in, ag})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	state := string(in.State)
	if in.State == sandbox.StateRunning && !in.Started.IsZero() {
		state += ", up " + time.Since(in.Started).Round(time.Second).String()
	}
	rows := [][2]string{{"name", in.Name}, {"state", state}, {"image", in.Image}, {"container", in.Container}}
	if in.ChildOf != "" {
		rows = append(rows, [2]string{"child of", in.ChildOf})
	}
	if in.IP != "" {
		rows = append(rows, [2]string{"ip", in.IP})
	}
	if !in.Created.IsZero() {
		rows = append(rows, [2]string{"created", in.Created.Local().Format("2006-01-02 15:04")})
	}
	rows = append(rows, [2]string{"limits", in.Limits.String()}, [2]string{"agent", strings.TrimPrefix(ag.String(), "agent: ")})
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

// commandLine turns exec's arguments into one shell command: a single
// argument is a command line as is (pipes and all), several are words,
// each quoted.
func commandLine(argv []string) string {
	if len(argv) == 1 {
		return argv[0]
	}
	return shellJoin(argv)
}

// mustExist fails with ExitNotFound when sandbox name does not exist: a
// person's exec or shell does not create one by a typo (an agent's first
// command does).
func mustExist(ctx context.Context, m *sandbox.Manager, name string) error {
	exists, _, err := m.Presence(ctx, name)
	switch {
	case err != nil:
		return engineExit(err)
	case !exists:
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no sandbox %q (sandbox-mcp ls lists them; an agent's first command in a name creates it)", name)}
	}
	return nil
}

// Exec runs a command in sandbox name through its shells (the same
// working directory and variables an agent's commands see), streaming
// its output, and returns an *ExitError with the command's status when it
// is not 0.
func Exec(ctx context.Context, cfg Config, name string, argv []string, timeout time.Duration, stdout, stderr io.Writer) error {
	if len(argv) == 0 {
		return &ExitError{Code: ExitUsage, Err: errors.New("exec: no command (sandbox-mcp exec NAME -- CMD...)")}
	}
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return &ExitError{Code: ExitEngine, Err: err}
	}
	defer env.Close()
	if err := mustExist(ctx, env.Manager, name); err != nil {
		return err
	}
	console := cfg.Console
	if console == nil {
		console = new(Console)
	}
	res, err := env.Manager.Exec(ctx, name, shell.Request{Command: commandLine(argv), Timeout: timeout,
		Stdout: console.Output(stdout), Stderr: console.Output(stderr)})
	switch {
	case err != nil:
		return engineExit(err)
	case res.TimedOut:
		return &ExitError{Code: 124, Err: fmt.Errorf("timed out after %s", timeout)}
	case res.ShellLost:
		return &ExitError{Code: ExitEngine, Err: fmt.Errorf("the sandbox's shell was lost while the command ran (exit %d)", res.ExitCode)}
	case res.ExitCode < 0 || res.ExitCode > 255:
		return &ExitError{Code: ExitEngine, Err: fmt.Errorf("the command ended without an exit status (%d)", res.ExitCode)}
	case res.ExitCode != 0:
		return &ExitError{Code: res.ExitCode}
	}
	return nil
}

// statusOf is the exit status to pass on for a finished engine CLI: its
// own, or 128+N when a signal N ended it.
func statusOf(ee *exec.ExitError) int {
	if c := terminal.ExitStatus(ee.ProcessState); c >= 0 {
		return c
	}
	return ExitEngine
}

// Shell runs an interactive shell (or command) in sandbox name on this
// terminal (tty: stdin is one); the engine's CLI follows its size.
func Shell(ctx context.Context, cfg Config, name, command string, tty bool, stdin, stdout, stderr *os.File) error {
	if !tty {
		return &ExitError{Code: ExitUsage, Err: errors.New("shell needs a terminal on stdin; for a command without one, use: sandbox-mcp exec " + name + " -- CMD")}
	}
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return &ExitError{Code: ExitEngine, Err: err}
	}
	defer env.Close()
	if err := mustExist(ctx, env.Manager, name); err != nil {
		return err
	}
	// The engine's CLI sizes the terminal from the person's own.
	p, done, err := env.Manager.TerminalCommand(ctx, name, command, 0, 0)
	if err != nil {
		return engineExit(err)
	}
	defer done()
	c, ok := p.(*proc.Cmd)
	if !ok {
		t, ok := p.(proc.Terminal)
		if !ok {
			return &ExitError{Code: ExitEngine, Err: fmt.Errorf("the %s runtime gave the shell no terminal", env.Runtime.Kind())}
		}
		return streamShell(t, stdin, stdout)
	}
	cmd := c.Cmd()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return &ExitError{Code: statusOf(ee)}
	case err != nil:
		return &ExitError{Code: ExitEngine, Err: err}
	}
	return nil
}

// Logs writes a background job's log; with follow it keeps writing what
// the job adds until the job ends (or ctx does).
func Logs(ctx context.Context, cfg Config, name, job string, follow bool, w io.Writer) error {
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	var off int64
	for {
		l, err := env.Manager.JobLogs(ctx, name, job, sandbox.LogOptions{Since: off, Max: 1 << 20})
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted while following, as at the wait below
			}
			return exitFor(err)
		}
		if _, err := w.Write(l.Data); err != nil {
			return err
		}
		off = l.NextOffset
		if l.More {
			continue
		}
		if l.State == "lost" {
			return &ExitError{Code: ExitFailed, Err: fmt.Errorf("job %q of sandbox %q is lost: %s", job, name, l.Reason)}
		}
		if !follow || l.State != "running" {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Destroy destroys sandbox name (and its children).
func Destroy(ctx context.Context, cfg Config, name string, w io.Writer) error {
	env, err := openFor(ctx, cfg, name, "destroy")
	if err != nil {
		return err
	}
	defer env.Close()
	existed, err := env.Manager.Destroy(ctx, name)
	if err != nil {
		return exitFor(err)
	}
	if !existed {
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("no sandbox %q", name)}
	}
	fmt.Fprintf(w, "destroyed %s\n", name)
	return nil
}

// Snapshot saves sandbox name as snapshot snap.
func Snapshot(ctx context.Context, cfg Config, name, snap string, workspace bool, w io.Writer) error {
	env, err := openFor(ctx, cfg, name, "snapshot")
	if err != nil {
		return err
	}
	defer env.Close()
	rec, err := env.Manager.Snapshot(ctx, name, sandbox.SnapshotRequest{Name: snap, IncludeWorkspace: workspace})
	if err != nil {
		return exitFor(err)
	}
	if rec.WorkspaceOnly {
		fmt.Fprintf(w, "saved %s's workspace as snapshot %s (this runtime keeps no root filesystem: a restore boots %s afresh)\n", name, rec.Name, rec.BaseImage)
		return nil
	}
	fmt.Fprintf(w, "saved %s as snapshot %s (image %s)\n", name, rec.Name, rec.Image)
	return nil
}

// Restore replaces sandbox name with snapshot snap.
func Restore(ctx context.Context, cfg Config, name, snap string, w io.Writer) error {
	env, err := openFor(ctx, cfg, name, "restore")
	if err != nil {
		return err
	}
	defer env.Close()
	info, _, err := env.Manager.Restore(ctx, snap, name)
	if err != nil {
		return exitFor(err)
	}
	if info.FreshBase != "" {
		fmt.Fprintf(w, "restored %s's workspace from snapshot %s, on %s booted afresh\n", name, snap, info.FreshBase)
		return nil
	}
	fmt.Fprintf(w, "restored %s from snapshot %s\n", name, snap)
	return nil
}

// DeleteSnapshot deletes snapshot snap, as the delete_snapshot tool does;
// forget drops only the record (and workspace tar) of a snapshot made on
// an engine or namespace this server does not reach.
func DeleteSnapshot(ctx context.Context, cfg Config, snap string, forget bool, w io.Writer) error {
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	if forget {
		rec, err := env.Manager.ForgetSnapshot(ctx, snap)
		if err != nil {
			return exitFor(err)
		}
		left := rec.Image
		if rec.VolumeSnapshot != "" {
			left = "volume snapshot " + rec.VolumeSnapshot
		}
		fmt.Fprintf(w, "forgot snapshot %s; %s stays on %s\n", snap, left, rec.Engine)
		return nil
	}
	if _, err := env.Manager.DeleteSnapshot(ctx, snap); err != nil {
		return exitFor(err)
	}
	fmt.Fprintf(w, "deleted snapshot %s\n", snap)
	return nil
}

// streamShell runs t, a stream to a terminal in the sandbox, on this
// terminal: raw while it runs (the sandbox's terminal echoes and edits),
// its size followed.
func streamShell(t proc.Terminal, stdin, stdout *os.File) error {
	fd := int(stdin.Fd())
	old, err := term.MakeRaw(fd)
	if err != nil {
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("shell: this terminal: %w", err)}
	}
	defer func() { _ = term.Restore(fd, old) }()
	size := func() {
		if w, h, err := term.GetSize(fd); err == nil {
			t.Resize(w, h)
		}
	}
	size()
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	go func() {
		for range winch {
			size()
		}
	}()
	if err := t.Start(stdin, stdout, nil); err != nil {
		return &ExitError{Code: ExitEngine, Err: err}
	}
	err = t.Wait()
	var ee *proc.ExitError
	switch {
	case errors.As(err, &ee):
		return &ExitError{Code: ee.Code}
	case err != nil:
		return &ExitError{Code: ExitEngine, Err: err}
	}
	return nil
}
