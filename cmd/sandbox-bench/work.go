package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchWork: a change of 100 files in a sandbox tied to a host repository,
// from checkpoint to the host's branch, and work_diff of it; the median
// of five rounds each (the targets are absolute).
func (b *bench) benchWork() error {
	repo := filepath.Join(b.dir, "work-repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		return err
	}
	git := func(args ...string) error {
		out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
		return nil
	}
	for _, args := range [][]string{{"init", "--quiet"}, {"config", "user.name", "bench"}, {"config", "user.email", "bench@example.com"}, {"commit", "--quiet", "--allow-empty", "-m", "base"}} {
		if err := git(args...); err != nil {
			return err
		}
	}
	const box = "work"
	if r, _, err := b.call("workspace_from_repo", map[string]any{"local_repo": repo, "sandbox": box}); err != nil || r.IsError {
		return fmt.Errorf("workspace_from_repo: %v %s", err, resultText(r))
	}
	var takes, diffs []time.Duration
	for round := range 5 {
		cmd := fmt.Sprintf(`cd /workspace/work-repo && mkdir -p r%d && for i in $(seq 1 100); do echo "round %d file $i" > r%d/f$i.txt; done`, round, round, round)
		if r, _, err := b.call("exec", map[string]any{"command": cmd, "sandbox": box}); err != nil || r.IsError {
			return fmt.Errorf("exec: %v %s", err, resultText(r))
		}
		r, took, err := b.call("checkpoint", map[string]any{"sandbox": box, "message": fmt.Sprintf("round %d", round)})
		if err != nil || r.IsError || !strings.Contains(resultText(r), "100 files changed") {
			return fmt.Errorf("checkpoint: %v %s", err, resultText(r))
		}
		takes = append(takes, took)
		r, took, err = b.call("work_diff", map[string]any{"sandbox": box, "refresh": false})
		if err != nil || r.IsError {
			return fmt.Errorf("work_diff: %v %s", err, resultText(r))
		}
		diffs = append(diffs, took)
	}
	take, diff := median(takes), median(diffs)
	report("work: 100 changed files to the host branch", ms(take), "", 0, "<= 2 s", take <= 2*time.Second)
	report("work: work_diff of 100-500 changed files", ms(diff), "", 0, "<= 500 ms", diff <= 500*time.Millisecond)
	return nil
}

// resultText is r's text, "" for none.
func resultText(r *mcp.CallToolResult) string {
	if r == nil {
		return ""
	}
	return text(r)
}
