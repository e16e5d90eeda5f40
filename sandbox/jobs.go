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
	// PutJobs stores several records at once (one write).
	PutJobs(jobs ...state.Job) error
	Job(sandbox, name string) (state.Job, bool, error)
	Jobs(sandbox string) ([]state.Job, error)
	DeleteJobs(sandbox string, names ...string) error
	JobSandboxes() ([]string, error)
}

// ErrJobNotFound means no job of that name was started in the sandbox.
var ErrJobNotFound = errors.New("no such job")

// ErrJobRunning means a job of that name is still running.
var ErrJobRunning = errors.New("a job of that name is still running")

// ErrInvalidJobName means a job name failed validation.
var ErrInvalidJobName = errors.New("invalid job name")

// jobOpTimeout bounds the housekeeping commands behind the job tools.
const jobOpTimeout = 15 * time.Second

// DefaultKillGrace is how long kill gives a job to end after TERM (or INT,
// HUP, QUIT) before it reports the processes that are still running.
const DefaultKillGrace = 2 * time.Second

// DefaultJobRetention is how long an ended job is kept by default.
const DefaultJobRetention = 7 * 24 * time.Hour

// killConfirm bounds how long kill with KILL waits for every process of
// the job to be gone (a process in uninterruptible sleep dies late).
const killConfirm = 10 * time.Second

// Why a job is lost, as JobStatus.Reason says it.
const (
	lostStopped = "the sandbox's container is stopped, which ended every process in it"
	lostRemoved = "the sandbox's container was removed"
	lostNoExit  = "its process is gone without an exit status (the sandbox's container was stopped or restarted since it started, or its waiter was killed)"
	lostGone    = "its files are gone: the sandbox was reset or recreated since it started"
)

// JobStatus is what a user needs to know of a job: its record (without
// the server's bookkeeping) and what the sandbox says of it now.
type JobStatus struct {
	Sandbox string `json:"sandbox"`
	Name    string `json:"name"`
	// ID is the job's id; each of its processes has SANDBOX_MCP_JOB=<id>
	// in its environment.
	ID string `json:"id"`
	// Command is what was asked for, with secrets redacted.
	Command string `json:"command"`
	Workdir string `json:"workdir,omitempty"`
	// PID leads the job's session and process group inside the sandbox.
	PID     int        `json:"pid"`
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	// ExitCode is set once the job has ended (128+N: signal N).
	ExitCode *int `json:"exit_code,omitempty"`
	// State is running, exited (with ExitCode), or lost (no exit status
	// can be known: Reason says why).
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// LogSize is the log's size in bytes.
	LogSize int64 `json:"log_size"`
	// Processes counts the job's processes alive now: its own and those
	// it started, including any that outlived it.
	Processes int `json:"processes"`
}

// jobStatusOf is the user's view of a record in a given state.
func jobStatusOf(j state.Job, st string, logSize int64) JobStatus {
	return JobStatus{Sandbox: j.Sandbox, Name: j.Name, ID: j.ID, Command: j.Command, Workdir: j.Workdir, PID: j.PID,
		Started: j.Started, Ended: j.Ended, ExitCode: j.ExitCode, State: st, LogSize: logSize}
}

// unreachable is the status of a job whose sandbox cannot be asked (its
// container is stopped or gone): exited if its exit status was seen
// before, else lost.
func unreachable(j state.Job, why string) JobStatus {
	if j.ExitCode != nil {
		return jobStatusOf(j, "exited", 0)
	}
	st := jobStatusOf(j, "lost", 0)
	st.Reason = why
	return st
}

// ValidateJobName checks a job name: the rules of sandbox names, with
// errors that say job name.
func ValidateJobName(name string) error {
	if err := ValidateName(name); err != nil {
		why := strings.TrimPrefix(err.Error(), ErrInvalidName.Error()+": ")
		return fmt.Errorf("%w: %s", ErrInvalidJobName, why)
	}
	return nil
}

// StartJob starts command in the background in sandbox name (booting it if
// needed) and records it under jobName ("" picks one). A job of the same
// name that has ended, with nothing of it left running, is replaced; one
// still running is an error.
func (m *Manager) StartJob(ctx context.Context, name, jobName, command, workdir string) (JobStatus, error) {
	if err := ValidateName(name); err != nil {
		return JobStatus{}, err
	}
	id := newJobID()
	if jobName == "" {
		jobName = "job-" + id[:6]
	}
	if err := ValidateJobName(jobName); err != nil {
		return JobStatus{}, err
	}
	if old, ok, err := m.jobs.Job(name, jobName); err != nil {
		return JobStatus{}, err
	} else if ok {
		st, _, err := m.jobStatus(ctx, old)
		if err != nil {
			return JobStatus{}, err
		}
		if st.State == "running" {
			return st, fmt.Errorf("%w: %q in sandbox %q (pid %d); kill it or pick another name", ErrJobRunning, jobName, name, old.PID)
		}
		if st.Processes > 0 {
			return st, fmt.Errorf("%w: %q in sandbox %q has ended, but %s it started still run; kill it or pick another name",
				ErrJobRunning, jobName, name, processes(st.Processes))
		}
	}
	script, err := guest.JobStartScript(id, workdir, command)
	if err != nil {
		return JobStatus{}, err
	}
	// A chore shell open before the job runs (see openChores); a sandbox
	// this call boots (or boots again) gets its own as the job starts.
	known, ok := m.Lookup(name)
	if ok {
		known.openChores(ctx)
	}
	var out, errb bytes.Buffer
	res, err := m.ExecAs(ctx, name, "bg "+jobName+": "+command, shell.Request{
		Command: script, Trusted: true, Timeout: jobOpTimeout, Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		return JobStatus{}, err
	}
	if sb, ok := m.Lookup(name); ok && sb != known {
		sb.openChores(ctx)
	}
	if res.ExitCode != 0 || res.TimedOut {
		return JobStatus{}, fmt.Errorf("start job %q in sandbox %q: %s (exit %d)", jobName, name, strings.TrimSpace(errb.String()), res.ExitCode)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		return JobStatus{}, fmt.Errorf("start job %q: unexpected answer %q", jobName, out.String())
	}
	j := state.Job{
		Sandbox: name, Name: jobName, ID: id, Command: m.history.Redact(name, command), Workdir: workdir,
		PID: pid, Dir: guest.JobDir(id), Container: m.ContainerFor(name), Started: time.Now().UTC(),
	}
	st := jobStatusOf(j, "running", 0)
	st.Processes = 1
	if err := m.jobs.PutJob(j); err != nil {
		return st, fmt.Errorf("job %q started (pid %d) but its record was not saved: %w", jobName, pid, err)
	}
	return st, nil
}

// processes is "1 process" or "N processes".
func processes(n int) string {
	if n == 1 {
		return "1 process"
	}
	return strconv.Itoa(n) + " processes"
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
	if err := ValidateJobName(jobName); err != nil {
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

// jobScript runs one of the job scripts in sandbox name without booting or
// starting it: on this server's shells when it has them, else, when the
// container runs, on shells it opens in it (adopting it), or with a
// one-off engine exec if that fails. When the container is stopped or gone
// it runs nothing and returns why the sandbox's jobs are lost.
func (m *Manager) jobScript(ctx context.Context, name, script string) (out []byte, lost string, err error) {
	if sb, ok := m.Lookup(name); ok {
		if out, ok, err := jobOnShells(ctx, sb, script); ok {
			return out, "", err
		}
		// The shells may have ended with the container: ask the engine.
	}
	sb, lost, err := m.adoptForJobs(ctx, name)
	if err != nil || lost != "" {
		return nil, lost, err
	}
	if sb != nil {
		if out, ok, err := jobOnShells(ctx, sb, script); ok {
			return out, "", err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, jobOpTimeout)
	defer cancel()
	res, err := m.rt.Exec(ctx, m.ContainerFor(name), ExecSpec{Argv: []string{"sh", "-c", script}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %.200s", res.ExitCode, bytes.TrimSpace(res.Stderr)) // the sandbox's words: bounded
	}
	if err != nil {
		return nil, "", fmt.Errorf("sandbox %q: job script: %w", name, err)
	}
	return res.Stdout, "", nil
}

// jobOnShells runs a job script on sb's shells. ok is false when their
// failure leaves an engine exec worth trying (the shells may have ended
// with the container); a sandbox that is only busy is not one: another
// exec would only add to its load.
func jobOnShells(ctx context.Context, sb *Sandbox, script string) (out []byte, ok bool, err error) {
	// Reading a job's logs, listing or signalling jobs is use: an agent
	// that polls a long build must not see its sandbox stopped for idle.
	done := sb.busy()
	out, err = sb.housekeep(ctx, script, jobOpTimeout)
	done()
	switch {
	case err == nil:
		return out, true, nil
	case ctx.Err() != nil:
		return nil, true, ctx.Err()
	case errors.Is(err, errHousekeepSlow):
		return nil, true, fmt.Errorf("job script: %w", err)
	}
	return nil, false, nil
}

// jobAdoption is one server's look at a sandbox it has no shells in, for
// job scripts: shared by the calls that come while it runs.
type jobAdoption struct {
	done chan struct{}
	sb   *Sandbox // nil: adopting failed; the caller uses an engine exec
	lost string
	err  error
}

// adoptForJobs finds sandbox name for job scripts without booting or
// starting it: gone or stopped, it says how its jobs were lost; running,
// it is adopted (shells opened in it, nothing started), so that this call
// and the next are pipe round trips. One inspect and one adoption per
// name run at a time, and the calls that come meanwhile share them: a
// hundred logs calls at once on a server new to the sandbox cost the
// engine one inspect, not a hundred.
func (m *Manager) adoptForJobs(ctx context.Context, name string) (*Sandbox, string, error) {
	m.mu.Lock()
	a := m.jobAdopts[name]
	if a == nil {
		if m.jobAdopts == nil {
			m.jobAdopts = map[string]*jobAdoption{}
		}
		a = &jobAdoption{done: make(chan struct{})}
		m.jobAdopts[name] = a
		// The look outlives the caller that began it (the others share
		// it): it is the server's work, bounded on its own.
		m.spawn(func() { m.lookForJobs(m.life, name, a) })
	}
	m.mu.Unlock()
	select {
	case <-a.done:
		return a.sb, a.lost, a.err
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

// lookForJobs does adoptForJobs' look for a, then lets its callers have it.
func (m *Manager) lookForJobs(ctx context.Context, name string, a *jobAdoption) {
	defer func() {
		m.mu.Lock()
		delete(m.jobAdopts, name)
		m.mu.Unlock()
		close(a.done)
	}()
	ictx, cancel := context.WithTimeout(ctx, jobOpTimeout)
	c, err := m.inspectOwned(ictx, name)
	cancel()
	switch {
	case errors.Is(err, ErrNotFound):
		a.lost = lostRemoved
	case err != nil:
		a.err = err
	case c.State == StatePaused:
		a.err = m.pausedError(name, c.Name)
	case !c.Running():
		a.lost = lostStopped
	default:
		// The wait for the name's lock counts too: a boot holding it ends
		// within BootTimeout.
		gctx, cancel := context.WithTimeout(ctx, m.cfg.BootTimeout+jobOpTimeout)
		defer cancel()
		if sb, _, err := m.Get(gctx, name); err == nil {
			a.sb = sb
		}
	}
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

// JobLogs reads a job's status and part of its log. It never boots or
// starts the sandbox: when its container is stopped or gone, the job is
// reported as it was last seen (exited) or lost, without log data.
func (m *Manager) JobLogs(ctx context.Context, name, jobName string, opt LogOptions) (JobLog, error) {
	j, err := m.job(name, jobName)
	if err != nil {
		return JobLog{}, err
	}
	script, err := guest.JobLogsScript(j.ID, opt.Since, opt.Tail, opt.Max)
	if err != nil {
		return JobLog{}, err
	}
	out, lost, err := m.jobScript(ctx, name, script)
	if err != nil {
		return JobLog{}, fmt.Errorf("read logs of job %q: %w", jobName, err)
	}
	if lost != "" {
		return JobLog{JobStatus: unreachable(j, lost), NextOffset: max(opt.Since, 0)}, nil
	}
	h, data, err := guest.ParseJobLogs(out)
	if err != nil {
		return JobLog{}, err
	}
	l := JobLog{JobStatus: m.settle(j, h), Data: data}
	if opt.Since >= 0 {
		l.NextOffset = opt.Since + int64(len(data))
		if len(data) == 0 && opt.Since > h.Size {
			l.NextOffset = h.Size // an offset past the end answers with the real end
		}
	} else {
		l.NextOffset = h.Size
	}
	l.More = l.NextOffset < h.Size
	return l, nil
}

// settle turns a record and a status header into a JobStatus, saving the
// exit status the first time it is seen.
func (m *Manager) settle(j state.Job, h guest.JobLogsHeader) JobStatus {
	var st JobStatus
	switch h.State {
	case "running":
		st = jobStatusOf(j, "running", h.Size)
	case "exited":
		st = jobStatusOf(m.saveExit(j, h.ExitCode), "exited", h.Size)
	case "gone":
		st = jobStatusOf(j, "lost", h.Size)
		st.Reason = lostGone
	default:
		st = jobStatusOf(j, "lost", h.Size)
		st.Reason = lostNoExit
	}
	st.Processes = h.Processes
	return st
}

// saveExit records a job's exit status the first time it is seen.
func (m *Manager) saveExit(j state.Job, code int) state.Job {
	if j.ExitCode != nil {
		return j
	}
	now := time.Now().UTC()
	j.ExitCode, j.Ended = &code, &now
	if err := m.jobs.PutJob(j); err != nil {
		m.log.Warn("save job exit status", "sandbox", j.Sandbox, "job", j.Name, "err", err)
	}
	return j
}

// jobStatus asks the sandbox about one job, without booting it; lost is
// set when the sandbox's container is stopped or gone.
func (m *Manager) jobStatus(ctx context.Context, j state.Job) (st JobStatus, lost string, err error) {
	script, err := guest.JobLogsScript(j.ID, 0, 0, 1)
	if err != nil {
		return JobStatus{}, "", err
	}
	out, lost, err := m.jobScript(ctx, j.Sandbox, script)
	if err != nil || lost != "" {
		return unreachable(j, lost), lost, err
	}
	h, _, err := guest.ParseJobLogs(out)
	if err != nil {
		return JobStatus{}, "", err
	}
	return m.settle(j, h), "", nil
}

// Jobs lists a sandbox's jobs with their current state, in one round trip
// to the sandbox however many there are. A sandbox that does not run is
// not booted or started for it: its jobs are reported as last seen
// (exited) or lost. A record that cannot be read is listed as lost with
// the reason, never failing the list. Ended jobs older than the retention
// (Config.JobRetention) are forgotten, and their files in the sandbox
// removed, as the list is made.
func (m *Manager) Jobs(ctx context.Context, name string) ([]JobStatus, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	recs, err := m.jobs.Jobs(name)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	out := make([]JobStatus, 0, len(recs))
	listing, lost, err := m.jobScript(ctx, name, guest.JobsListScript())
	var list guest.JobsList
	if err == nil && lost == "" {
		list, err = guest.ParseJobsList(listing)
	}
	if err != nil {
		return nil, fmt.Errorf("list jobs of sandbox %q: %w", name, err)
	}
	if lost == "" && awaiting(recs, list) {
		// A leader gone without a status in the boot that started it: its
		// waiter is about to write the status. One second for all of them,
		// then one more look (see jobAwaitRC).
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		if again, why, err := m.jobScript(ctx, name, guest.JobsListScript()); err == nil && why == "" {
			if l2, err := guest.ParseJobsList(again); err == nil {
				list = l2
			}
		}
	}
	var changed []state.Job
	for _, j := range recs {
		var st JobStatus
		switch {
		case j.Damaged != "":
			st = jobStatusOf(j, "lost", 0)
			st.Reason = "its record in the state file cannot be read (" + j.Damaged + ")"
		case lost != "":
			st = unreachable(j, lost)
		default:
			var rec *state.Job
			if st, rec = m.listed(j, list); rec != nil {
				changed = append(changed, *rec)
			}
		}
		out = append(out, st)
	}
	if len(changed) > 0 {
		if err := m.jobs.PutJobs(changed...); err != nil {
			m.log.Warn("save jobs' exit statuses", "sandbox", name, "err", err)
		}
	}
	out = m.pruneJobs(ctx, name, out, lost == "")
	sort.Slice(out, func(i, k int) bool { return out[i].Started.Before(out[k].Started) })
	return out, nil
}

// awaiting reports whether a job not yet seen ended has its leader gone
// without an exit status in the boot that started it: its waiter may be
// about to write the status.
func awaiting(recs []state.Job, l guest.JobsList) bool {
	for _, j := range recs {
		files, ok := l.Jobs[j.ID]
		if !ok || j.Ended != nil || files.ExitCode >= 0 || files.Boot != l.Boot {
			continue
		}
		if _, alive := l.Processes(j.ID); !alive {
			return true
		}
	}
	return false
}

// listed is one job's status from a listing; rec is the record to save
// when the job is seen to have ended for the first time (its end time,
// and exit status if it has one).
func (m *Manager) listed(j state.Job, l guest.JobsList) (st JobStatus, rec *state.Job) {
	files, ok := l.Jobs[j.ID]
	n, alive := l.Processes(j.ID)
	ended := func(code *int) *state.Job {
		if j.Ended != nil && (code == nil || j.ExitCode != nil) {
			return nil
		}
		now := time.Now().UTC()
		j.Ended, j.ExitCode = &now, code
		return &j
	}
	switch {
	case !ok:
		rec = ended(nil)
		st = jobStatusOf(j, "lost", 0)
		st.Reason = lostGone
	case files.ExitCode >= 0:
		code := files.ExitCode
		rec = ended(&code)
		st = jobStatusOf(j, "exited", files.Size)
	case alive:
		st = jobStatusOf(j, "running", files.Size)
	default:
		rec = ended(nil)
		st = jobStatusOf(j, "lost", files.Size)
		st.Reason = lostNoExit
	}
	st.Processes = n
	return st, rec
}

// pruneJobs forgets the ended jobs (exited or lost, with nothing of them
// still running) that ended longer ago than the retention, and removes
// their directories in the sandbox when it can be reached. It returns the
// statuses of the jobs kept.
func (m *Manager) pruneJobs(ctx context.Context, name string, sts []JobStatus, reachable bool) []JobStatus {
	keepFor := m.cfg.JobRetention
	if keepFor == 0 {
		keepFor = DefaultJobRetention
	}
	if keepFor < 0 {
		return sts
	}
	cutoff := time.Now().Add(-keepFor)
	keep := sts[:0]
	var names, ids []string
	for _, st := range sts {
		if st.State != "running" && st.Processes == 0 && st.Ended != nil && st.Ended.Before(cutoff) {
			names = append(names, st.Name)
			if st.ID != "" {
				ids = append(ids, st.ID)
			}
			continue
		}
		keep = append(keep, st)
	}
	if len(names) == 0 {
		return sts
	}
	if reachable && len(ids) > 0 {
		if script, err := guest.JobsRemoveScript(ids); err == nil {
			if _, _, err := m.jobScript(ctx, name, script); err != nil {
				m.log.Warn("remove pruned jobs' files", "sandbox", name, "err", err)
			}
		}
	}
	if err := m.jobs.DeleteJobs(name, names...); err != nil {
		m.log.Warn("forget pruned jobs", "sandbox", name, "err", err)
		return sts
	}
	return keep
}

// KillOptions say how to kill a job.
type KillOptions struct {
	// Signal is TERM (default), KILL, INT, HUP, QUIT, USR1, USR2, STOP or CONT.
	Signal string
	// Grace is how long TERM, INT, HUP or QUIT has to end the job before
	// the processes still running are reported (or killed, with
	// Escalate); default DefaultKillGrace.
	Grace time.Duration
	// Escalate sends KILL to what still runs after the grace, as docker
	// stop does, so that the call ends the job.
	Escalate bool
}

// KillResult says what kill did.
type KillResult struct {
	// JobStatus is the job after the signal; Processes counts those of
	// its processes that still run.
	JobStatus
	Signal string `json:"signal"`
	// AlreadyEnded means nothing of the job was left to signal.
	AlreadyEnded bool `json:"already_ended"`
	// Signalled counts the processes the signal was sent to, and
	// ProcessesEnded those of them that are gone now.
	Signalled      int `json:"signalled"`
	ProcessesEnded int `json:"processes_ended"`
	// Ended means nothing of the job runs any more.
	Ended bool `json:"ended"`
	// Killed counts the processes that outlived the grace and were sent
	// KILL (KillOptions.Escalate).
	Killed int `json:"killed,omitempty"`
}

// KillJob sends sig (default TERM) to every process of a job; see
// KillJobWith.
func (m *Manager) KillJob(ctx context.Context, name, jobName, sig string) (KillResult, error) {
	return m.KillJobWith(ctx, name, jobName, KillOptions{Signal: sig})
}

// KillJobWith sends a signal to every process of a job: its process
// group, whatever it started in other sessions, and what outlived it (a
// job that has ended with processes left is not "already ended": they get
// the signal). The processes are stopped first, so none forks meanwhile.
// After TERM, INT, HUP or QUIT it waits up to the grace for them to end
// (then, with Escalate, sends KILL to what is left); after KILL, until
// none is left. It never boots or starts the sandbox.
func (m *Manager) KillJobWith(ctx context.Context, name, jobName string, opt KillOptions) (KillResult, error) {
	j, err := m.job(name, jobName)
	if err != nil {
		return KillResult{}, err
	}
	sig, err := guest.NormalizeSignal(opt.Signal)
	if err != nil {
		return KillResult{}, err
	}
	grace := opt.Grace
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	sw, lost, err := m.sweepJob(ctx, j, sig)
	if err != nil {
		return KillResult{}, fmt.Errorf("kill job %q: %w", jobName, err)
	}
	if lost != "" {
		return KillResult{JobStatus: unreachable(j, lost), Signal: sig, AlreadyEnded: true, Ended: true}, nil
	}
	r := KillResult{Signal: sig, Signalled: sw.Processes, AlreadyEnded: sw.Processes == 0}
	switch {
	case sw.Processes == 0:
	case sig == "KILL":
		// Sweep again until nothing is left: a process stopped in the
		// middle of a fork leaves a child the sweep may have passed.
		sw, err = m.pollSweep(ctx, j, "KILL", killConfirm)
	case sig == "TERM" || sig == "INT" || sig == "HUP" || sig == "QUIT":
		sw, err = m.pollSweep(ctx, j, "", grace)
		if err == nil && opt.Escalate && sw.Processes > 0 {
			r.Killed = sw.Processes
			sw, err = m.pollSweep(ctx, j, "KILL", killConfirm)
		}
	default:
		sw, _, err = m.sweepJob(ctx, j, "")
	}
	if err != nil {
		return KillResult{}, fmt.Errorf("kill job %q: %w", jobName, err)
	}
	// The job's status with its log size, now that the sandbox has
	// processes to spare again; the sweep's answer if that fails.
	r.JobStatus = m.settleSweep(j, sw)
	if st, lost, err := m.jobStatus(ctx, j); err == nil && lost == "" {
		r.JobStatus = st
	}
	r.ProcessesEnded = max(r.Signalled-r.Processes, 0)
	r.Ended = r.Processes == 0
	return r, nil
}

// sweepJob runs JobSignalScript (sig "" counts only).
func (m *Manager) sweepJob(ctx context.Context, j state.Job, sig string) (guest.JobSweep, string, error) {
	script, err := guest.JobSignalScript(j.ID, sig)
	if err != nil {
		return guest.JobSweep{}, "", err
	}
	out, lost, err := m.jobScript(ctx, j.Sandbox, script)
	if err != nil || lost != "" {
		return guest.JobSweep{}, lost, err
	}
	sw, err := guest.ParseJobSweep(out)
	return sw, "", err
}

// pollSweep repeats a sweep (sending sig, or only counting) until none of
// the job's processes is left or d has passed, and returns the last.
func (m *Manager) pollSweep(ctx context.Context, j state.Job, sig string, d time.Duration) (guest.JobSweep, error) {
	deadline := time.Now().Add(d)
	for {
		sw, lost, err := m.sweepJob(ctx, j, sig)
		if err != nil || lost != "" || sw.Processes == 0 || time.Now().After(deadline) {
			return sw, err
		}
		select {
		case <-ctx.Done():
			return sw, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// settleSweep is settle for a sweep's answer.
func (m *Manager) settleSweep(j state.Job, sw guest.JobSweep) JobStatus {
	h := guest.JobLogsHeader{State: "lost", Processes: sw.Processes}
	switch {
	case sw.Exited:
		h.State, h.ExitCode = "exited", sw.ExitCode
	case sw.Leader:
		h.State = "running"
	case sw.Gone:
		h.State = "gone"
	}
	return m.settle(j, h) // without the log's size: a sweep does not read it
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

func (s *memJobs) PutJobs(jobs ...state.Job) error {
	for _, j := range jobs {
		_ = s.PutJob(j)
	}
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
