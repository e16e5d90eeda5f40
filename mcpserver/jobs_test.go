package mcpserver

import (
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestJobTexts: what jobs, logs and kill say of a job, in the words a
// user checks: the state, the exit status, what still runs and what to do.
func TestJobTexts(t *testing.T) {
	code := func(c int) *int { return &c }
	running := sandbox.JobStatus{Name: "srv", State: "running", PID: 7, Processes: 3, Started: time.Now()}
	termed := sandbox.JobStatus{Name: "srv", State: "exited", ExitCode: code(143)}
	lost := sandbox.JobStatus{Name: "srv", State: "lost", Reason: "the sandbox's container is stopped, which ended every process in it"}
	for _, c := range []struct {
		name string
		got  string
		want []string
		not  []string
	}{
		{"running", jobState(running), []string{"running (pid 7, 3 processes, for 0s)"}, nil},
		{"lost", jobState(lost), []string{"lost: the sandbox's container is stopped"}, []string{"running"}},
		{"exited with leftovers", jobState(sandbox.JobStatus{State: "exited", ExitCode: code(0), Processes: 2}),
			[]string{"exited with code 0; 2 processes it started still run (kill ends them)"}, nil},
		{"TERM all ended", killText("srv", sandbox.KillResult{JobStatus: termed, Signal: "TERM", Signalled: 3, ProcessesEnded: 3, Ended: true}),
			[]string{`sent SIGTERM to 3 processes of job "srv": ended by signal 15 (exit 143); none of them is left`}, nil},
		{"TERM ignored", killText("srv", sandbox.KillResult{JobStatus: withProcs(termed, 2), Signal: "TERM", Signalled: 4, ProcessesEnded: 2}),
			[]string{"ended by signal 15 (exit 143); 2 processes ignored TERM and still run: kill with signal KILL"}, []string{"(kill ends them)"}},
		{"second KILL", killText("srv", sandbox.KillResult{JobStatus: termed, Signal: "KILL", Signalled: 2, ProcessesEnded: 2, Ended: true}),
			[]string{`sent SIGKILL to 2 processes of job "srv"`, "none of them is left"}, []string{"already"}},
		{"already ended", killText("srv", sandbox.KillResult{JobStatus: termed, Signal: "KILL", AlreadyEnded: true, Ended: true}),
			[]string{`job "srv" had already ended`, "ended by signal 15"}, nil},
		{"lost", killText("srv", sandbox.KillResult{JobStatus: lost, Signal: "TERM", AlreadyEnded: true, Ended: true}),
			[]string{"nothing of it was left to signal: lost: the sandbox's container is stopped"}, nil},
		{"STOP", killText("srv", sandbox.KillResult{JobStatus: running, Signal: "STOP", Signalled: 3}),
			[]string{"stopped 3 processes", "signal CONT"}, nil},
		{"USR1", killText("srv", sandbox.KillResult{JobStatus: running, Signal: "USR1", Signalled: 1}),
			[]string{"sent SIGUSR1 to 1 process", "running"}, []string{"ignored"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.got, w) {
				t.Errorf("%s: %q lacks %q", c.name, c.got, w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(c.got, n) {
				t.Errorf("%s: %q has %q", c.name, c.got, n)
			}
		}
	}
}

func withProcs(st sandbox.JobStatus, n int) sandbox.JobStatus {
	st.Processes = n
	return st
}
