package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// shellOpen times one shell open straight on the engine, the floor for
// the first command after a server restart: start `<engine> exec -i ctr sh`,
// write `true; echo x` to its stdin, and wait for the x.
func shellOpen(engine, ctr string) (time.Duration, error) {
	cmd := exec.Command(engine, "exec", "-i", ctr, "sh")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("%s exec -i %s sh: %w", engine, ctr, err)
	}
	_, werr := io.WriteString(stdin, "true; echo x\n")
	line, rerr := bufio.NewReader(stdout).ReadString('\n')
	took := time.Since(start)
	_ = stdin.Close()
	waitErr := cmd.Wait()
	switch {
	case werr != nil:
		return 0, fmt.Errorf("%s exec -i %s sh: write: %w", engine, ctr, werr)
	case rerr != nil:
		return 0, fmt.Errorf("%s exec -i %s sh: read: %w (exit: %v)", engine, ctr, rerr, waitErr)
	case line != "x\n":
		return 0, fmt.Errorf("%s exec -i %s sh: got %q, want \"x\\n\"", engine, ctr, line)
	}
	return took, nil
}

// shellOpenMedian is the median of n shellOpen timings.
func shellOpenMedian(engine, ctr string, n int) (time.Duration, error) {
	var ds []time.Duration
	for range n {
		d, err := shellOpen(engine, ctr)
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	return median(ds), nil
}

// startedAt is when the engine last started ctr; a change means the
// container was rebooted.
func startedAt(engine, ctr string) (string, error) {
	out, err := exec.Command(engine, "inspect", "--format", "{{.State.StartedAt}}", ctr).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s inspect %s: %w: %s", engine, ctr, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("%s inspect %s: %w", engine, ctr, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// openFDs counts the entries of /proc/<pid>/fd, or returns -1 where it
// cannot be read (not Linux, or not our process).
func openFDs(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}
