package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
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

// jobScale is how many jobs the jobs-at-scale figure lists.
const jobScale = 1000

// benchJobScale: jobScale jobs started through bg in a sandbox of their
// own (each ends at once), then jobs timed: the first call, which also
// saves every exit status, and the median of four more. The floor is one
// engine exec in the same sandbox.
func (b *bench) benchJobScale() error {
	const sandbox = "jobscale"
	start := time.Now()
	for i := range jobScale {
		if _, _, err := b.call("bg", map[string]any{"sandbox": sandbox, "name": fmt.Sprintf("j%04d", i), "command": "echo $$"}); err != nil {
			return fmt.Errorf("bg %d: %w", i, err)
		}
	}
	fmt.Printf("%-44s %d jobs started in %s\n", "", jobScale, time.Since(start).Round(time.Millisecond))
	list := func() (int, time.Duration, error) {
		res, took, err := b.call("jobs", map[string]any{"sandbox": sandbox})
		if err != nil {
			return 0, took, err
		}
		var out struct {
			Jobs []struct {
				State string `json:"state"`
			} `json:"jobs"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &out); err != nil {
			return 0, took, fmt.Errorf("jobs: structured result: %w", err)
		}
		exited := 0
		for _, j := range out.Jobs {
			if j.State == "exited" {
				exited++
			}
		}
		return exited, took, nil
	}
	exited, first, err := list()
	if err != nil {
		return err
	}
	var again []time.Duration
	for range 4 {
		_, took, err := list()
		if err != nil {
			return err
		}
		again = append(again, took)
	}
	var floors []time.Duration
	for range 5 {
		t0 := time.Now()
		if out, err := exec.Command(b.engine, "exec", b.launch.prefix+"-"+sandbox, "true").CombinedOutput(); err != nil {
			return fmt.Errorf("%s exec: %v: %s", b.engine, err, out)
		}
		floors = append(floors, time.Since(t0))
	}
	fl := median(floors)
	report(fmt.Sprintf("jobs over %d records, first call", jobScale), ms(first), ms(fl)+" (one "+b.engine+" exec)", ratio(first, fl),
		"<= 1s, all listed", first <= time.Second && exited == jobScale)
	m := median(again)
	report(fmt.Sprintf("jobs over %d records, median of 4 more", jobScale), ms(m), ms(fl)+" (one "+b.engine+" exec)", ratio(m, fl), "<= 1s", m <= time.Second)
	_, _, err = b.call("destroy", map[string]any{"sandbox": sandbox})
	return err
}
