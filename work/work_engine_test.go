package work_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/gitwork"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
	"github.com/sandbox-mcp/sandbox-mcp/work"
)

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// userRepo is a user's repository with a commit on main.
func userRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed on this host")
	}
	dir := filepath.Join(t.TempDir(), "project")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "--quiet", "--initial-branch=main")
	git(t, dir, "config", "user.name", "User")
	git(t, dir, "config", "user.email", "user@example.com")
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", "a.txt")
	git(t, dir, "commit", "--quiet", "-m", "first")
	return dir
}

// exec runs a command in the sandbox as an agent would, failing the test
// when it fails.
func execIn(t *testing.T, m *sandbox.Manager, name, cmd string) string {
	t.Helper()
	var out, errs strings.Builder
	res, err := m.Exec(context.Background(), name, shell.Request{Command: cmd, Stdout: &out, Stderr: &errs})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %v %+v: %s", cmd, err, res, errs.String())
	}
	return out.String()
}

// TestWorkOnEngine: a sandbox tied to a repository gets a clone of it; a
// change of 100 files made there by commands comes back onto the branch
// sandbox/<name> of the user's repository with those commands in its
// message, reads back as a log and a diff, and merges into the user's
// branch; a sandbox that rewrites its history, fakes its bundle or
// commits more than a checkpoint takes moves nothing it should not.
func TestWorkOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			dir := t.TempDir()
			st, err := state.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
				Sandboxes: st, Intents: st, Jobs: st, LockDir: filepath.Join(dir, "locks")})
			t.Cleanup(m.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			w := work.New(m, st)
			repo := userRepo(t)
			const box = "worker"

			if _, err := w.Start(ctx, box, t.TempDir(), "HEAD", ""); !errors.Is(err, gitwork.ErrNotRepo) {
				t.Fatalf("a directory that is not a repository: %v", err)
			}
			started, err := w.Start(ctx, box, repo, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if started.Path != "/workspace/project" || started.Branch != "sandbox/"+box || started.Base != git(t, repo, "rev-parse", "HEAD") {
				t.Fatalf("start: %+v", started)
			}
			if got := execIn(t, m, box, "cd /workspace/project && cat a.txt && git branch --show-current && git remote | wc -l"); got != "one\nsandbox/"+box+"\n0\n" {
				t.Fatalf("the clone in the sandbox: %q", got)
			}
			if _, err := w.Start(ctx, box, repo, "", "/workspace/other"); err == nil {
				t.Fatal("a second repository in one sandbox")
			}

			execIn(t, m, box, `cd /workspace/project && mkdir src && for i in $(seq 1 100); do echo "file $i" > src/f$i.txt; done && echo two >> a.txt`)
			start := time.Now()
			cp, err := w.Checkpoint(ctx, box, "add 100 files")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("a change of 101 files reached the host's branch in %s", time.Since(start))
			if !cp.Committed || !cp.New || cp.Files != 101 || cp.Commit != git(t, repo, "rev-parse", "sandbox/"+box) {
				t.Fatalf("checkpoint: %+v", cp)
			}
			msg := git(t, repo, "log", "-1", "--format=%B", "sandbox/"+box)
			if !strings.HasPrefix(msg, "add 100 files") || !strings.Contains(msg, "for i in $(seq 1 100)") || strings.Contains(msg, "(work: ") {
				t.Fatalf("the commit's message: %q", msg)
			}
			if again, err := w.Checkpoint(ctx, box, ""); err != nil || again.New || again.Committed {
				t.Fatalf("a checkpoint with nothing new: %+v %v", again, err)
			}
			lg, err := w.Log(ctx, box, 0, true)
			if err != nil || len(lg.Commits) != 1 || lg.Commits[0].Subject != "add 100 files" {
				t.Fatalf("log: %+v %v", lg, err)
			}
			start = time.Now()
			d, err := w.Diff(ctx, box, work.DiffRequest{DiffOptions: gitwork.DiffOptions{Stat: true}})
			if err != nil || !strings.Contains(d.Text, "101 files changed") {
				t.Fatalf("diff: %+v %v", d, err)
			}
			t.Logf("work_diff --stat of it in %s", time.Since(start))

			// The sandbox rewrites its history: its branch follows, the
			// user's main does not.
			mainBefore := git(t, repo, "rev-parse", "main")
			execIn(t, m, box, `cd /workspace/project && git reset --quiet --hard HEAD~1 && echo rewritten > b.txt`)
			cp, err = w.Checkpoint(ctx, box, "rewritten")
			if err != nil || !cp.Rewritten || !cp.New {
				t.Fatalf("a rewritten history: %+v %v", cp, err)
			}
			if git(t, repo, "rev-parse", "main") != mainBefore {
				t.Fatal("the sandbox's checkpoint moved main")
			}

			// A git that hands over junk for its bundle: refused, the
			// branch stays.
			at := git(t, repo, "rev-parse", "sandbox/"+box)
			execIn(t, m, box, `mkdir -p /usr/local/bin && printf '#!/bin/sh\nfor a; do f=$a; done\ncase "$1" in bundle) for a; do case $a in /tmp/*) echo junk > "$a";; esac; done; exit 0;; esac\nexec /usr/bin/git "$@"\n' > /usr/local/bin/git && chmod +x /usr/local/bin/git && cd /workspace/project && echo more >> b.txt`)
			if _, err := w.Checkpoint(ctx, box, "junk"); err == nil {
				t.Fatal("a junk bundle was taken")
			}
			if git(t, repo, "rev-parse", "sandbox/"+box) != at {
				t.Fatal("a junk bundle moved the branch")
			}
			execIn(t, m, box, `rm /usr/local/bin/git`)

			// More than a checkpoint takes.
			w.MaxBundle = 1 << 20
			execIn(t, m, box, `cd /workspace/project && head -c 3000000 /dev/urandom > big.bin`)
			if _, err := w.Checkpoint(ctx, box, "big"); !errors.Is(err, gitwork.ErrTooLarge) {
				t.Fatalf("a checkpoint over the bound: %v", err)
			}
			if git(t, repo, "rev-parse", "sandbox/"+box) != at {
				t.Fatal("a checkpoint over the bound moved the branch")
			}
			w.MaxBundle = 0
			execIn(t, m, box, `cd /workspace/project && git reset --quiet --hard HEAD~1`)

			// Applied to the user's clean main.
			a, err := w.Apply(ctx, box, gitwork.Merge, true)
			if err != nil {
				t.Fatal(err)
			}
			if a.Into != "main" || a.After == a.Before {
				t.Fatalf("apply: %+v", a)
			}
			if b, err := os.ReadFile(filepath.Join(repo, "b.txt")); err != nil || string(b) != "rewritten\nmore\n" {
				t.Fatalf("after apply, b.txt: %q %v", b, err)
			}
		})
	}
}
