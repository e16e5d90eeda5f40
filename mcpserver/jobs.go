package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

const (
	defaultLogTail  = 100
	defaultLogBytes = 16 << 10
	maxLogBytes     = 256 << 10
	maxLogTail      = 1_000_000
)

func jobNameParam(desc string, required bool) mcp.ToolOption {
	opts := []mcp.PropertyOption{mcp.Description(desc), mcp.Pattern(sandboxPattern), mcp.MaxLength(sandbox.MaxNameLen)}
	if required {
		opts = append(opts, mcp.Required())
	}
	return mcp.WithString("name", opts...)
}

func (s *Server) bgTool() tool {
	return tool{group: "jobs", handler: s.handleBg, def: newTool[sandbox.JobStatus]("bg", "Start a background job",
		"Start a long-running command (server, watcher, build) in the background; read its output with logs, stop it with kill.",
		openWorld(mutating(false)), sandboxParam(),
		mcp.WithString("command", mcp.Required(), mcp.Description("Shell command.")),
		jobNameParam(`Job name for logs and kill (default job-<id>); an ended job's name may be reused.`, false),
		mcp.WithString("workdir", mcp.Description("Directory to start in (default: the shell's current one).")))}
}

func (s *Server) logsTool() tool {
	return tool{group: "jobs", handler: s.handleLogs, def: newTool[JobLogResult]("logs", "Read a job's log",
		"A background job's output, and whether it runs or its exit code. Poll with since=next_offset.",
		readOnly(), sandboxParam(),
		jobNameParam("Job name, as given or returned by bg.", true),
		mcp.WithInteger("tail", mcp.Description("Last N lines (default 100); ignored with since."), mcp.Min(1), mcp.Max(maxLogTail)),
		mcp.WithInteger("since", mcp.Description("Byte offset to read from: the next_offset of a previous call."), mcp.Min(0), mcp.Max(maxOffset)),
		mcp.WithInteger("max_bytes", mcp.Description("At most this many bytes (default 16384)."), mcp.Min(1), mcp.Max(maxLogBytes)))}
}

func (s *Server) killTool() tool {
	return tool{group: "jobs", handler: s.handleKill, def: newTool[sandbox.KillResult]("kill", "Stop a job",
		"End a job and all it started, in any session: TERM, then KILL after 2 s.",
		destructive(true), sandboxParam(),
		jobNameParam("Job name.", true),
		mcp.WithString("signal", mcp.Description("Send just this signal."), mcp.Enum(guest.Signals...)))}
}

func (s *Server) jobsTool() tool {
	return tool{group: "jobs", handler: s.handleJobs, def: newTool[JobList]("jobs", "List jobs",
		"A sandbox's background jobs: name, command, pid, running, exit code or lost. Never starts the sandbox.",
		readOnly(), sandboxParam())}
}

func jobFailure(ctx context.Context, what string, err error) *mcp.CallToolResult {
	if errors.Is(err, sandbox.ErrJobNotFound) || errors.Is(err, sandbox.ErrJobRunning) || errors.Is(err, sandbox.ErrInvalidName) ||
		errors.Is(err, sandbox.ErrInvalidJobName) {
		return argError("%s: %v", what, err)
	}
	return failure(ctx, what, err)
}

func (s *Server) handleBg(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("bg: %v", err), nil
	}
	command := req.GetString("command", "")
	if strings.TrimSpace(command) == "" {
		return argError("bg: command is required"), nil
	}
	st, err := s.m.StartJob(ctx, name, req.GetString("name", ""), command, req.GetString("workdir", ""))
	if err != nil {
		return jobFailure(ctx, "bg", err), nil
	}
	return mcp.NewToolResultStructured(st, fmt.Sprintf("started job %q (pid %d) in sandbox %q; read its output with logs(name=%q)", st.Name, st.PID, name, st.Name)), nil
}

// JobLogResult is the structured result of logs.
type JobLogResult struct {
	sandbox.JobLog
	Output    string `json:"output"`
	Truncated bool   `json:"truncated"`
}

func (s *Server) handleLogs(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("logs: %v", err), nil
	}
	job := req.GetString("name", "")
	if job == "" {
		return argError("logs: name is required (see jobs)"), nil
	}
	tail, err := intArg(req, "tail", defaultLogTail, 1, maxLogTail)
	if err != nil {
		return argError("logs: %v", err), nil
	}
	maxBytes, err := intArg(req, "max_bytes", defaultLogBytes, 1, maxLogBytes)
	if err != nil {
		return argError("logs: %v", err), nil
	}
	opt := sandbox.LogOptions{Since: -1, Tail: int(tail), Max: int(maxBytes)}
	since, given, err := offsetArg(req, "since")
	if err != nil {
		return argError("logs: %v", err), nil
	}
	if given {
		opt.Since = since
	}
	l, err := s.m.JobLogs(ctx, name, job, opt)
	if err != nil {
		return jobFailure(ctx, "logs", err), nil
	}
	out := JobLogResult{JobLog: l, Output: encodeBytes(l.Data, ""), Truncated: l.More}
	var b strings.Builder
	fmt.Fprintf(&b, "job %q: %s", job, jobState(l.JobStatus))
	fmt.Fprintf(&b, "; log %d bytes, next_offset %d", l.LogSize, l.NextOffset)
	if l.More {
		b.WriteString(" (more: call again with since=next_offset)")
	}
	b.WriteString("\n")
	b.WriteString(out.Output)
	return mcp.NewToolResultStructured(out, b.String()), nil
}

// jobState says what became of a job, and what of it still runs.
func jobState(st sandbox.JobStatus) string {
	s := jobOutcome(st)
	if st.State != "running" && st.Processes > 0 {
		s += fmt.Sprintf("; %s it started still run (kill ends them)", processes(st.Processes))
	}
	return s
}

// jobOutcome is jobState without what still runs.
func jobOutcome(st sandbox.JobStatus) string {
	switch {
	case st.State == "running":
		procs := ""
		if st.Processes > 1 {
			procs = ", " + processes(st.Processes)
		}
		return fmt.Sprintf("running (pid %d%s, for %s)", st.PID, procs, time.Since(st.Started).Round(time.Second))
	case st.State == "exited" && st.ExitCode != nil:
		code := *st.ExitCode
		if code > 128 {
			return fmt.Sprintf("ended by signal %d (exit %d)", code-128, code)
		}
		return fmt.Sprintf("exited with code %d", code)
	case st.Reason != "":
		return "lost: " + st.Reason
	default:
		return "lost: its exit status cannot be known"
	}
}

// processes is "1 process" or "N processes".
func processes(n int) string {
	if n == 1 {
		return "1 process"
	}
	return fmt.Sprintf("%d processes", n)
}

func (s *Server) handleKill(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("kill: %v", err), nil
	}
	job := req.GetString("name", "")
	if job == "" {
		return argError("kill: name is required (see jobs)"), nil
	}
	opt := sandbox.KillOptions{Signal: req.GetString("signal", "")}
	if opt.Signal == "" {
		opt.Signal, opt.Escalate = "TERM", true
	}
	r, err := s.m.KillJobWith(ctx, name, job, opt)
	if err != nil {
		return jobFailure(ctx, "kill", err), nil
	}
	return mcp.NewToolResultStructured(r, killText(job, r)), nil
}

// killText says what kill did: to how many processes, what became of the
// job, and what still runs.
func killText(job string, r sandbox.KillResult) string {
	if r.AlreadyEnded {
		return fmt.Sprintf("job %q had already ended, nothing of it was left to signal: %s", job, jobState(r.JobStatus))
	}
	procs := processes(r.Signalled)
	switch r.Signal {
	case "STOP":
		return fmt.Sprintf("stopped %s of job %q; resume them with signal CONT", procs, job)
	case "CONT":
		return fmt.Sprintf("resumed %s of job %q: %s", procs, job, jobState(r.JobStatus))
	case "USR1", "USR2":
		return fmt.Sprintf("sent SIG%s to %s of job %q: %s", r.Signal, procs, job, jobState(r.JobStatus))
	}
	text := fmt.Sprintf("sent SIG%s to %s of job %q: %s", r.Signal, procs, job, jobOutcome(r.JobStatus))
	switch {
	case r.Ended && r.Killed > 0:
		return text + fmt.Sprintf("; %s ignored it for %s and were killed; none of them is left", processes(r.Killed), sandbox.DefaultKillGrace)
	case r.Ended:
		return text + "; none of them is left"
	case r.Signal == "KILL" || r.Killed > 0:
		return text + fmt.Sprintf("; %s still present (in uninterruptible sleep?): call kill again", processes(r.Processes))
	default:
		return text + fmt.Sprintf("; %s ignored %s and still run: kill with signal KILL", processes(r.Processes), r.Signal)
	}
}

// jobListShown is how many ended jobs the text of jobs names, the most
// recent; every running job is named, and the structured result has all.
const jobListShown = 20

// jobLines is the text of jobs: one line per running job and per recent
// ended one, in start order, then how many older ended jobs it left out.
func jobLines(list []sandbox.JobStatus) string {
	ended := 0
	for _, j := range list {
		if j.State != "running" {
			ended++
		}
	}
	skip := max(ended-jobListShown, 0)
	lines := make([]string, 0, min(len(list), jobListShown)+1)
	for _, j := range list {
		if j.State != "running" && skip > 0 {
			skip--
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %s: %s", j.Name, jobState(j), j.Command))
	}
	if n := ended - jobListShown; n > 0 {
		lines = append(lines, fmt.Sprintf("(and %d older ended jobs, in the structured result; ended jobs are forgotten after the server's --job-retention)", n))
	}
	return strings.Join(lines, "\n")
}

// JobList is the structured result of jobs.
type JobList struct {
	Sandbox string              `json:"sandbox"`
	Jobs    []sandbox.JobStatus `json:"jobs"`
}

func (s *Server) handleJobs(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("jobs: %v", err), nil
	}
	list, err := s.m.Jobs(ctx, name)
	if err != nil {
		return jobFailure(ctx, "jobs", err), nil
	}
	if len(list) == 0 {
		return mcp.NewToolResultStructured(JobList{Sandbox: name, Jobs: []sandbox.JobStatus{}}, fmt.Sprintf("no background jobs in sandbox %q (start one with bg)", name)), nil
	}
	return mcp.NewToolResultStructured(JobList{Sandbox: name, Jobs: list}, jobLines(list)), nil
}
