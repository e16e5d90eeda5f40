package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// JobStore keeps background job records where every server process sees
// them (state.Store in production).
type JobStore interface {
	PutJob(j state.Job) error
	Job(sandbox, name string) (state.Job, bool, error)
	Jobs(sandbox string) ([]state.Job, error)
	DeleteJobs(sandbox string, names ...string) error
	JobSandboxes() ([]string, error)
}

// ErrJobNotFound means no job of that name was started in the sandbox.
var ErrJobNotFound = errors.New("no such job")

// ErrJobRunning means a job of that name is still running.
var ErrJobRunning = errors.New("a job of that name is still running")

// jobOpTimeout bounds the housekeeping commands behind the job tools.
const jobOpTimeout = 15 * time.Second

// JobStatus is what a user needs to know of a job: its record (without
// the server's bookkeeping) and what the sandbox says of it now.
type JobStatus struct {
	Sandbox string `json:"sandbox"`
	Name    string `json:"name"`
	// Command is what was asked for, with secrets redacted.
	Command string `json:"command"`
	Workdir string `json:"workdir,omitempty"`
	// PID leads the job's process group inside the sandbox.
	PID     int        `json:"pid"`
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	// ExitCode is set once the job has ended (128+N: signal N).
	ExitCode *int `json:"exit_code,omitempty"`
	// State is running, exited, or lost (the sandbox was reset or
	// recreated since, or its files were removed).
	State string `json:"state"`
	// LogSize is the log's size in bytes.
	LogSize int64 `json:"log_size"`
}

// jobStatusOf is the user's view of a record in a given state.
func jobStatusOf(j state.Job, st string, logSize int64) JobStatus {
	return JobStatus{Sandbox: j.Sandbox, Name: j.Name, Command: j.Command, Workdir: j.Workdir, PID: j.PID,
		Started: j.Started, Ended: j.Ended, ExitCode: j.ExitCode, State: st, LogSize: logSize}
}

// StartJob starts command in the background in sandbox name (booting it if
// needed) and records it under jobName ("" picks one). A job of the same
// name that has ended is replaced; one still running is an error.
func (m *Manager) StartJob(ctx context.Context, name, jobName, command, workdir string) (JobStatus, error) {
	if err := ValidateName(name); err != nil {
		return JobStatus{}, err
	}
	id := newJobID()
	if jobName == "" {
		jobName = "job-" + id[:6]
	}
	if err := ValidateName(jobName); err != nil {
		return JobStatus{}, fmt.Errorf("job name: %w", err)
	}
	if old, ok, err := m.jobs.Job(name, jobName); err != nil {
		return JobStatus{}, err
	} else if ok {
		st, err := m.jobStatus(ctx, old)
		if err != nil {
			return JobStatus{}, err
		}
		if st.State == "running" {
			return st, fmt.Errorf("%w: %q in sandbox %q (pid %d); kill it or pick another name", ErrJobRunning, jobName, name, old.PID)
		}
	}
	script, err := guest.JobStartScript(id, workdir, command)
	if err != nil {
		return JobStatus{}, err
	}
	var out, errb bytes.Buffer
	res, err := m.ExecAs(ctx, name, "bg "+jobName+": "+command, shell.Request{
		Command: script, Timeout: jobOpTimeout, Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		return JobStatus{}, err
	}
	if res.ExitCode != 0 || res.TimedOut {
		return JobStatus{}, fmt.Errorf("start job %q in sandbox %q: %s (exit %d)", jobName, name, strings.TrimSpace(errb.String()), res.ExitCode)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		return JobStatus{}, fmt.Errorf("start job %q: unexpected answer %q", jobName, out.String())
	}
	j := state.Job{
		Sandbox: name, Name: jobName, ID: id, Command: m.history.Redact(command), Workdir: workdir,
		PID: pid, Dir: guest.JobDir(id), Container: m.ContainerFor(name), Started: time.Now().UTC(),
	}
	if err := m.jobs.PutJob(j); err != nil {
		return jobStatusOf(j, "running", 0), fmt.Errorf("job %q started (pid %d) but its record was not saved: %w", jobName, pid, err)
	}
	return jobStatusOf(j, "running", 0), nil
}

func newJobID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// job returns a job's record, or an error naming the jobs there are.
func (m *Manager) job(name, jobName string) (state.Job, error) {
	if err := ValidateName(name); err != nil {
		return state.Job{}, err
	}
	j, ok, err := m.jobs.Job(name, jobName)
	if err != nil {
		return j, err
	}
	if !ok {
		all, _ := m.jobs.Jobs(name)
		names := make([]string, 0, len(all))
		for _, j := range all {
			names = append(names, j.Name)
		}
		have := "it has none"
		if len(names) > 0 {
			have = "it has: " + strings.Join(names, ", ")
		}
		return j, fmt.Errorf("%w %q in sandbox %q (%s)", ErrJobNotFound, jobName, name, have)
	}
	return j, nil
}

// LogOptions select part of a job's log.
type LogOptions struct {
	// Since is a byte offset from a previous call's NextOffset; -1 reads
	// the last Tail lines instead.
	Since int64
	Tail  int
	// Max bounds the bytes returned.
	Max int
}

// JobLog is part of a job's log and the job's status.
type JobLog struct {
	JobStatus
	Data []byte `json:"-"`
	// NextOffset is where the next call with Since continues.
	NextOffset int64 `json:"next_offset"`
	// More means the log has more bytes after Data than Max allowed.
	More bool `json:"more"`
}

// JobLogs reads a job's status and part of its log.
func (m *Manager) JobLogs(ctx context.Context, name, jobName string, opt LogOptions) (JobLog, error) {
	j, err := m.job(name, jobName)
	if err != nil {
		return JobLog{}, err
	}
	script, err := guest.JobLogsScript(j.ID, opt.Since, opt.Tail, opt.Max)
	if err != nil {
		return JobLog{}, err
	}
	if up, err := m.jobsReachable(ctx, name); err != nil || !up {
		return JobLog{JobStatus: jobStatusOf(j, "lost", 0), NextOffset: max(opt.Since, 0)}, err
	}
	out, err := m.runScript(ctx, name, "", script, nil, 4<<20)
	if err != nil {
		return JobLog{}, fmt.Errorf("read logs of job %q: %w", jobName, err)
	}
	h, data, err := guest.ParseJobLogs(out)
	if err != nil {
		return JobLog{}, err
	}
	l := JobLog{JobStatus: m.settle(j, h), Data: data}
	if opt.Since >= 0 {
		l.NextOffset = opt.Since + int64(len(data))
	} else {
		l.NextOffset = h.Size
	}
	l.More = l.NextOffset < h.Size
	return l, nil
}

// settle turns a record and a status header into a JobStatus, saving the
// exit status the first time it is seen.
func (m *Manager) settle(j state.Job, h guest.JobLogsHeader) JobStatus {
	switch h.State {
	case "running":
		return jobStatusOf(j, "running", h.Size)
	case "exited":
		if j.ExitCode == nil {
			code, now := h.ExitCode, time.Now().UTC()
			j.ExitCode, j.Ended = &code, &now
			if err := m.jobs.PutJob(j); err != nil {
				m.log.Warn("save job exit status", "sandbox", j.Sandbox, "job", j.Name, "err", err)
			}
		}
		return jobStatusOf(j, "exited", h.Size)
	}
	return jobStatusOf(j, "lost", h.Size)
}

// jobStatus asks the sandbox about one job.
func (m *Manager) jobStatus(ctx context.Context, j state.Job) (JobStatus, error) {
	script, err := guest.JobLogsScript(j.ID, 0, 0, 1)
	if err != nil {
		return JobStatus{}, err
	}
	out, err := m.runScript(ctx, j.Sandbox, "", script, nil, 4<<20)
	if err != nil {
		return JobStatus{}, err
	}
	h, _, err := guest.ParseJobLogs(out)
	if err != nil {
		return JobStatus{}, err
	}
	return m.settle(j, h), nil
}

// Jobs lists a sandbox's jobs with their current state. A sandbox that
// does not run is not booted for it: its jobs are reported lost.
func (m *Manager) Jobs(ctx context.Context, name string) ([]JobStatus, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	recs, err := m.jobs.Jobs(name)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	out := make([]JobStatus, 0, len(recs))
	if up, err := m.jobsReachable(ctx, name); err != nil || !up {
		for _, j := range recs {
			out = append(out, jobStatusOf(j, "lost", 0))
		}
		return out, err
	}
	for _, j := range recs {
		st, err := m.jobStatus(ctx, j)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Started.Before(out[k].Started) })
	return out, nil
}

// KillResult says what kill did.
type KillResult struct {
	JobStatus
	Signal string `json:"signal"`
	// AlreadyEnded means the job had ended before the signal.
	AlreadyEnded bool `json:"already_ended"`
	// Ended means the job ended within about two seconds of the signal.
	Ended bool `json:"ended"`
}

// KillJob sends sig (default TERM) to a job's whole process group.
func (m *Manager) KillJob(ctx context.Context, name, jobName, sig string) (KillResult, error) {
	j, err := m.job(name, jobName)
	if err != nil {
		return KillResult{}, err
	}
	sig, err = guest.NormalizeSignal(sig)
	if err != nil {
		return KillResult{}, err
	}
	script, err := guest.JobKillScript(j.ID, sig)
	if err != nil {
		return KillResult{}, err
	}
	if up, err := m.jobsReachable(ctx, name); err != nil || !up {
		return KillResult{JobStatus: jobStatusOf(j, "lost", 0), Signal: sig}, err
	}
	out, err := m.runScript(ctx, name, "", script, nil, 4<<20)
	if err != nil {
		return KillResult{}, fmt.Errorf("kill job %q: %w", jobName, err)
	}
	verb, rc, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	r := KillResult{Signal: sig}
	h := guest.JobLogsHeader{State: "exited"}
	switch verb {
	case "ended", "signalled":
		r.AlreadyEnded = verb == "ended"
		code, err := strconv.Atoi(rc)
		if err != nil {
			h.State = "running" // signalled but still running (e.g. STOP, or TERM ignored)
		} else {
			h.ExitCode = code
			r.Ended = !r.AlreadyEnded
		}
	case "gone":
		h.State = "gone"
	default:
		return KillResult{}, fmt.Errorf("kill job %q: unexpected answer %q", jobName, out)
	}
	r.JobStatus = m.settle(j, h)
	return r, nil
}

// jobsReachable reports whether a sandbox's jobs can be asked about
// without booting it: it runs. A stopped sandbox (reaped when idle, or
// stopped by hand) has no running jobs; one whose container is gone has
// none at all, and its job records are forgotten.
func (m *Manager) jobsReachable(ctx context.Context, name string) (bool, error) {
	if _, connected := m.Lookup(name); connected {
		return true, nil
	}
	c, err := m.inspectOwned(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		m.forgetJobs(name)
		return false, nil
	case err != nil:
		return false, err
	}
	return c.Running(), nil
}

// memJobs is the JobStore of a Manager without a state file.
type memJobs struct {
	mu   sync.Mutex
	jobs map[string]map[string]state.Job
}

func (s *memJobs) PutJob(j state.Job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs == nil {
		s.jobs = map[string]map[string]state.Job{}
	}
	if s.jobs[j.Sandbox] == nil {
		s.jobs[j.Sandbox] = map[string]state.Job{}
	}
	s.jobs[j.Sandbox][j.Name] = j
	return nil
}

func (s *memJobs) Job(sandbox, name string) (state.Job, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[sandbox][name]
	return j, ok, nil
}

func (s *memJobs) Jobs(sandbox string) ([]state.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []state.Job
	for _, j := range s.jobs[sandbox] {
		out = append(out, j)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, nil
}

func (s *memJobs) JobSandboxes() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, jobs := range s.jobs {
		if len(jobs) > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (s *memJobs) DeleteJobs(sandbox string, names ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(names) == 0 {
		delete(s.jobs, sandbox)
	}
	for _, n := range names {
		delete(s.jobs[sandbox], n)
	}
	return nil
}
