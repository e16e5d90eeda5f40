package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// jobFanout is how many processes the killed job starts; every fourth
// calls setsid, so the job spans many sessions.
const jobFanout = 200

// jobFigures are the structured fields of logs and kill this bench reads.
type jobFigures struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Processes int    `json:"processes"`
	Signalled int    `json:"signalled"`
	Ended     bool   `json:"ended"`
}

// jobCall runs a job tool and decodes its structured result.
func (b *bench) jobCall(tool string, args map[string]any) (jobFigures, time.Duration, error) {
	res, took, err := b.call(tool, args)
	if err != nil {
		return jobFigures{}, took, err
	}
	var f jobFigures
	raw, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(raw, &f)
	}
	if err != nil {
		return jobFigures{}, took, fmt.Errorf("%s: structured result: %w", tool, err)
	}
	return f, took, nil
}

// benchJobKill: kill signal=KILL of a job of jobFanout sleeps (a quarter
// of them in sessions of their own) plus its shell, timed through MCP;
// then a command of its own counts the processes still carrying the
// job's marker.
func (b *bench) benchJobKill() error {
	const sandbox = "default"
	cmd := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do if [ $((i %% 4)) = 0 ]; then setsid sleep 1000 & else sleep 1000 & fi; i=$((i+1)); done; wait`, jobFanout)
	if _, _, err := b.call("bg", map[string]any{"sandbox": sandbox, "name": "fanout", "command": cmd}); err != nil {
		return err
	}
	var st jobFigures
	for deadline := time.Now().Add(time.Minute); st.Processes < jobFanout+1; time.Sleep(50 * time.Millisecond) {
		var err error
		if st, _, err = b.jobCall("logs", map[string]any{"sandbox": sandbox, "name": "fanout"}); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job kill: the job has %d processes after a minute, want %d", st.Processes, jobFanout+1)
		}
	}
	k, took, err := b.jobCall("kill", map[string]any{"sandbox": sandbox, "name": "fanout", "signal": "KILL"})
	if err != nil {
		return err
	}
	res, _, err := b.call("exec", map[string]any{"sandbox": sandbox,
		"command": "grep -l 'SANDBOX_MCP_JOB=" + st.ID + "' /proc/[0-9]*/environ 2>/dev/null | wc -l"})
	if err != nil {
		return err
	}
	var out struct {
		Stdout string `json:"stdout"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &out)
	left := strings.TrimSpace(out.Stdout)
	report(fmt.Sprintf("kill a %d-process job (KILL)", jobFanout+1), ms(took),
		fmt.Sprintf("%d signalled, %s left", k.Signalled, left), 0, "none left, < 2s",
		left == "0" && k.Ended && took < 2*time.Second)
	return nil
}
