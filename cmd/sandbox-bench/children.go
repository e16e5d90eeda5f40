package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// benchChildren: `sandbox-ctl exec CHILD -- true` timed from inside the
// parent (what code there sees: the sandbox-ctl process, the socket, the
// agent channel, the child's warm shell), and `sandbox-ctl run -- true`
// (spawn, exec, destroy) against a cold boot, one exec and a removal
// straight on the engine.
func (b *bench) benchChildren() error {
	if _, err := b.main.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	// Timed by python3 around each run: a shell's $(date) around the
	// command would add a process start of its own to every sample.
	execs, err := b.timesInside(`sandbox-ctl spawn --name default-kid >/dev/null || exit 1
sandbox-ctl exec default-kid -- true || exit 2
python3 -c '
import subprocess, time
for i in range(80):
    s = time.perf_counter_ns()
    if subprocess.run(["sandbox-ctl", "exec", "default-kid", "--", "true"]).returncode: raise SystemExit(3)
    if i >= 20: print(time.perf_counter_ns() - s)  # the first 20 warm up
' || exit 3
sandbox-ctl destroy default-kid >/dev/null`)
	if err != nil {
		return fmt.Errorf("sandbox-ctl exec: %w", err)
	}
	p := execs[len(execs)/2]
	report("sandbox-ctl exec CHILD -- true in the parent, p50 of 60", ms3(p), "", 0, "<= 5 ms", p <= 5*time.Millisecond)

	runs, err := b.timesInside(`for i in 1 2 3 4 5; do s=$(date +%s%N); sandbox-ctl run -- true >/dev/null || exit 1; e=$(date +%s%N); echo $((e-s)); done`)
	if err != nil {
		return fmt.Errorf("sandbox-ctl run: %w", err)
	}
	var floors []time.Duration
	for i := range 5 {
		name := fmt.Sprintf("%s-kidfloor%d", b.launch.prefix, i)
		start := time.Now()
		engineFirst(b.engine, b.launch.image, name) // removes it too
		floors = append(floors, time.Since(start))
	}
	run, floor := runs[len(runs)/2], median(floors)
	report("sandbox-ctl run -- true (spawn, exec, destroy), median of 5", ms(run),
		ms(floor)+" run -d + exec + rm -f", ratio(run, floor), "<= 1.3x", ratio(run, floor) <= 1.3)
	return nil
}

// timesInside runs script in the default sandbox and returns the
// durations (nanoseconds, one per line) it prints, sorted.
func (b *bench) timesInside(script string) ([]time.Duration, error) {
	res, _, err := b.call("exec", map[string]any{"command": script, "timeout": 900})
	if err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	if out.ExitCode != 0 {
		return nil, fmt.Errorf("exit %d: %s", out.ExitCode, strings.TrimSpace(out.Stderr))
	}
	var ds []time.Duration
	for _, f := range strings.Fields(out.Stdout) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("a time that is not a number: %q", f)
		}
		ds = append(ds, time.Duration(n))
	}
	if len(ds) == 0 {
		return nil, fmt.Errorf("no times")
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds, nil
}
