package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/pysession"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// fake is a Sandboxes whose behaviour each test sets through function
// fields; an unset field answers with a plausible success.
type fake struct {
	downloadCap sandbox.HostCap

	exec   func(name string, req shell.Request) (sandbox.ExecResult, error)
	calls  []string
	env    []sandbox.EnvVar
	errAll error // returned by every method that can fail, when set
	files  map[string][]byte
	// outputs, if set, answers Outputs (else the sandbox has no agent).
	outputs func(name string) ([]agent.OutputFile, int, error)
	write   func(req sandbox.WriteRequest) (sandbox.Written, error) // WriteFile's answer, when set
	history []sandbox.HistoryEntry
	// uploaded is the last upload's tar stream; download is the stream a
	// download serves, under the top entry downloadTop.
	uploaded    []byte
	download    []byte
	downloadTop string
	// cloneFor makes GitClone report progress and take that long.
	cloneFor time.Duration
	// agent is AgentStatus's answer, when set.
	agent sandbox.AgentState
}

func (f *fake) note(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

// TerminalCommand runs the command on the host (sh -c): terminal tools
// are tested without an engine here, and end to end in e2e.
func (f *fake) TerminalCommand(_ context.Context, name, command string, _, _ int) (proc.Process, func(), error) {
	f.note("terminal %s %q", name, command)
	if f.errAll != nil {
		return nil, nil, f.errAll
	}
	if command == "" {
		command = "exec sh"
	}
	return proc.FromCmd(exec.Command("sh", "-c", command)), func() {}, nil
}

func (f *fake) run(name string, req shell.Request) (sandbox.ExecResult, error) {
	if f.errAll != nil {
		return sandbox.ExecResult{}, f.errAll
	}
	if f.exec != nil {
		return f.exec(name, req)
	}
	fmt.Fprint(req.Stdout, "ok\n")
	return sandbox.ExecResult{Result: shell.Result{Duration: 3 * time.Millisecond}}, nil
}

func (f *fake) Exec(_ context.Context, name string, req shell.Request) (sandbox.ExecResult, error) {
	f.note("exec %s %q", name, req.Command)
	return f.run(name, req)
}

func (f *fake) RunPython(_ context.Context, name, session string, req pysession.Request) (sandbox.PythonResult, error) {
	f.note("python %s %s %q", name, session, req.Code)
	if f.errAll != nil {
		return sandbox.PythonResult{}, f.errAll
	}
	v := "42"
	return sandbox.PythonResult{Session: session, Version: "3.11.2",
		Result: pysession.Result{Count: 1, Stdout: pysession.Stream{Head: "ok\n", Total: 3}, Value: &v}}, nil
}

func (f *fake) ResetPython(name, session string) (bool, error) {
	f.note("python_reset %s %s", name, session)
	return true, nil
}

func (f *fake) Install(_ context.Context, name string, pkgs []string, req shell.Request) (sandbox.ExecResult, error) {
	f.note("install %s %v", name, pkgs)
	return f.run(name, req)
}

func (f *fake) WriteFile(_ context.Context, name string, req sandbox.WriteRequest) (sandbox.Written, error) {
	f.note("write %s %s %d %v %s", name, req.Path, len(req.Data), req.Append, req.SHA256)
	if f.errAll != nil {
		return sandbox.Written{}, f.errAll
	}
	if f.write != nil {
		return f.write(req)
	}
	return sandbox.Written{Path: req.Path, Bytes: int64(len(req.Data)), Size: int64(len(req.Data)), SHA256: req.SHA256}, nil
}

func (f *fake) WriteFiles(ctx context.Context, name string, reqs []sandbox.WriteRequest) ([]sandbox.WriteOutcome, error) {
	f.note("writes %s %d", name, len(reqs))
	outs := make([]sandbox.WriteOutcome, len(reqs))
	var stop error
	for i, r := range reqs {
		outs[i].Path = r.Path
		if stop != nil {
			outs[i].Err = sandbox.ErrNotAttempted
			continue
		}
		w, err := f.WriteFile(ctx, name, r)
		outs[i].Written, outs[i].Err = w, err
		outs[i].Path = r.Path
		var we *sandbox.WriteError
		if err != nil && !errors.As(err, &we) {
			stop = err
		}
	}
	// All or none, as the Manager's.
	failed := false
	for _, o := range outs {
		failed = failed || o.Err != nil
	}
	for i := range outs {
		if failed && outs[i].Err == nil {
			outs[i].Written, outs[i].Err = sandbox.Written{Path: outs[i].Path}, sandbox.ErrBatchUndone
		}
	}
	return outs, stop
}

func (f *fake) ReadFile(_ context.Context, name, path string, offset, length int64) ([]byte, error) {
	f.note("read %s %s %d %d", name, path, offset, length)
	if f.errAll != nil {
		return nil, f.errAll
	}
	return f.files[path], nil
}

func (f *fake) ReadLines(_ context.Context, name, path string, first, count int64) ([]byte, error) {
	f.note("readlines %s %s %d %d", name, path, first, count)
	return f.files[path], f.errAll
}

func (f *fake) Snapshot(_ context.Context, name string, req sandbox.SnapshotRequest) (state.Snapshot, error) {
	f.note("snapshot %s %s", name, req.Name)
	return state.Snapshot{Name: req.Name, Sandbox: name}, f.errAll
}

func (f *fake) Restore(_ context.Context, snap, name string) (sandbox.BootInfo, state.Snapshot, error) {
	f.note("restore %s %s", snap, name)
	return sandbox.BootInfo{}, state.Snapshot{Name: snap}, f.errAll
}

func (f *fake) Snapshots() ([]state.Snapshot, error) { return nil, f.errAll }

func (f *fake) SnapshotElsewhere(state.Snapshot) string { return "" }

func (f *fake) DeleteSnapshot(_ context.Context, snap string) (state.Snapshot, error) {
	f.note("delete_snapshot %s", snap)
	return state.Snapshot{Name: snap}, f.errAll
}

func (f *fake) CloneSandbox(_ context.Context, source, target string, _ *sandbox.Profile) (sandbox.BootInfo, error) {
	f.note("clone %s %s", source, target)
	return sandbox.BootInfo{}, f.errAll
}

func (f *fake) NamedProfile(string) (sandbox.Profile, []string, bool) {
	return sandbox.Profile{}, nil, false
}

func (f *fake) Spares(context.Context) ([]sandbox.Info, error) { return nil, nil }

func (f *fake) BuildImage(_ context.Context, tag, _, _ string, log io.Writer) error {
	f.note("build %s", tag)
	fmt.Fprintln(log, "STEP 1/1")
	return f.errAll
}

func (f *fake) Images(context.Context) ([]sandbox.ImageEntry, error) { return nil, f.errAll }

func (f *fake) Boot(_ context.Context, name string) (sandbox.BootInfo, error) {
	f.note("boot %s", name)
	return sandbox.BootInfo{}, f.errAll
}

func (f *fake) AgentProblem(string) string { return "" }

func (f *fake) AgentStatus(context.Context, sandbox.Info) sandbox.AgentState {
	if f.agent.State != "" {
		return f.agent
	}
	return sandbox.AgentState{State: sandbox.AgentRunning, Platform: "linux/arm64", Source: "embedded in the server"}
}

func (f *fake) NetworkInfo(context.Context, string) (sandbox.NetworkReport, error) {
	return sandbox.NetworkReport{}, errors.New("the fake has no network")
}

func (f *fake) SetEgressSecret(context.Context, string, string, string, []string) (string, error) {
	return "", errors.New("the fake has no egress")
}

func (f *fake) EgressSecretHosts(string) map[string][]string { return nil }

func (f *fake) NetworkState(context.Context, string) (sandbox.NetState, error) {
	return sandbox.NetState{}, errors.New("the fake has no network")
}

func (f *fake) NetworkLog(context.Context, string, int, bool) ([]egress.Event, error) {
	return nil, errors.New("the fake has no network")
}

func (f *fake) Outputs(_ context.Context, name string, _ time.Time) ([]agent.OutputFile, int, error) {
	f.note("outputs %s", name)
	if f.outputs == nil {
		return nil, 0, sandbox.ErrNoAgent
	}
	return f.outputs(name)
}

func (f *fake) Dial(_ context.Context, name string, port int) (net.Conn, error) {
	f.note("dial %s %d", name, port)
	return nil, fmt.Errorf("port %d in the sandbox: connection refused: %w", port, sandbox.ErrPortClosed)
}

func (f *fake) Upload(_ context.Context, name string, req sandbox.UploadRequest) (sandbox.Landing, error) {
	f.note("upload %s %s %s", name, req.Dest, req.Base)
	if f.errAll != nil {
		return sandbox.Landing{}, f.errAll
	}
	var b bytes.Buffer
	err := req.Pack(&b, req.Base)
	f.uploaded = b.Bytes()
	return sandbox.Landing{Dir: req.Dest, Top: req.Base, Path: req.Dest + "/" + req.Base}, err
}

func (f *fake) TrackStaging(string) error { return nil }

func (f *fake) Download(_ context.Context, name, src string, unpack func(io.Reader, string, sandbox.HostCap, func() error) error) (string, error) {
	f.note("download %s %s", name, src)
	if f.errAll != nil {
		return "", f.errAll
	}
	return src, unpack(bytes.NewReader(f.download), f.downloadTop, f.downloadCap, func() error { return nil })
}

func (f *fake) GitClone(_ context.Context, name string, req sandbox.CloneRequest) (sandbox.Cloned, error) {
	f.note("git_clone %s %s", name, req.Repo)
	if f.cloneFor > 0 && req.Progress != nil {
		io.WriteString(req.Progress, "Receiving objects:  50% (5/10)")
		time.Sleep(f.cloneFor)
	}
	return sandbox.Cloned{Repo: req.Repo, Path: req.Path}, f.errAll
}

func (f *fake) Env(context.Context, string) ([]sandbox.EnvVar, error) { return f.env, f.errAll }

func (f *fake) SetEnv(_ context.Context, name, key, value string, secret bool) error {
	f.note("setenv %s %s %v", name, key, secret)
	return f.errAll
}

func (f *fake) UnsetEnv(_ context.Context, name, key string) error {
	f.note("unsetenv %s %s", name, key)
	return f.errAll
}

func (f *fake) StartJob(_ context.Context, name, jobName, command, workdir string) (sandbox.JobStatus, error) {
	f.note("bg %s %s %q", name, jobName, command)
	return sandbox.JobStatus{Sandbox: name, Name: jobName, Command: command, PID: 42, State: "running", Started: time.Now()}, f.errAll
}

func (f *fake) JobLogs(_ context.Context, name, jobName string, opt sandbox.LogOptions) (sandbox.JobLog, error) {
	f.note("logs %s %s %+v", name, jobName, opt)
	code := 0
	return sandbox.JobLog{JobStatus: sandbox.JobStatus{Sandbox: name, Name: jobName, State: "exited", ExitCode: &code, LogSize: 3},
		Data: []byte("hi\n"), NextOffset: 3}, f.errAll
}

func (f *fake) KillJobWith(_ context.Context, name, jobName string, opt sandbox.KillOptions) (sandbox.KillResult, error) {
	sig := opt.Signal
	if opt.Escalate {
		sig += "+KILL"
	}
	f.note("kill %s %s %s", name, jobName, sig)
	code := 143
	return sandbox.KillResult{JobStatus: sandbox.JobStatus{Sandbox: name, Name: jobName, State: "exited", ExitCode: &code},
		Signal: "TERM", Signalled: 1, ProcessesEnded: 1, Ended: true}, f.errAll
}

func (f *fake) Jobs(_ context.Context, name string) ([]sandbox.JobStatus, error) {
	return nil, f.errAll
}

func (f *fake) Status(_ context.Context, name string) (sandbox.Info, error) {
	if f.errAll != nil {
		return sandbox.Info{}, f.errAll
	}
	return sandbox.Info{Name: name, Container: "sandbox-mcp-" + name, State: sandbox.StateRunning, Image: "mcp-dev"}, nil
}

func (f *fake) List(context.Context) ([]sandbox.Info, error) { return nil, f.errAll }

func (f *fake) Stats(_ context.Context, name string) (sandbox.SandboxStats, error) {
	return sandbox.SandboxStats{Workdir: "/workspace", CPUPercent: 1.5, CPUs: 2, MemoryBytes: 1 << 20, Pids: 3}, f.errAll
}

func (f *fake) Health(context.Context) sandbox.Health {
	return sandbox.Health{Runtime: "podman", EngineVersion: "4.3.1", DefaultImage: "mcp-dev", ImagePresent: true, Sandboxes: map[string]string{"default": sandbox.HealthResponding}}
}

func (f *fake) CommandHistory(name string, n int) ([]sandbox.HistoryEntry, error) {
	return f.history, f.errAll
}

func (f *fake) Destroy(_ context.Context, name string) (bool, error) {
	f.note("destroy %s", name)
	return name != "gone", f.errAll
}

func (f *fake) Reset(_ context.Context, name string, wipe bool) (sandbox.BootInfo, error) {
	f.note("reset %s %v", name, wipe)
	return sandbox.BootInfo{Created: true}, f.errAll
}

var errEngine = errors.New("podman run …: engine fell over (try: run podman info)")
