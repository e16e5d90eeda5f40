package work_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// A file the repository keeps in LFS, as its pointer.
	if err := os.WriteFile(filepath.Join(dir, ".gitattributes"), []byte("*.psd filter=lfs diff=lfs merge=lfs -text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "art.psd"), []byte(lfsPointer), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", ".")
	git(t, dir, "commit", "--quiet", "-m", "first")
	return dir
}

const lfsPointer = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n"

// workServer is a Manager on tg's engine with a state store of its own
// (sandboxes, intents, jobs, snapshots), closed at the test's end.
func workServer(t *testing.T, tg enginetest.Target) (*sandbox.Manager, *state.Store) {
	t.Helper()
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	dir := t.TempDir()
	st, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
		Sandboxes: st, Intents: st, Jobs: st, LockDir: filepath.Join(dir, "locks"),
		Snapshots: st, SnapshotDir: filepath.Join(dir, "snapshots")})
	t.Cleanup(m.Close)
	return m, st
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
			m, st := workServer(t, tg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			w := work.New(m, st)
			repo := userRepo(t)
			const box = "worker"

			if _, err := w.Start(ctx, box, t.TempDir(), "HEAD", ""); !errors.Is(err, gitwork.ErrNotRepo) {
				t.Fatalf("a directory that is not a repository: %v", err)
			}
			// The sandbox's git has a smudge filter for LFS files, as one
			// with git-lfs installed has: the pointer stays a pointer.
			execIn(t, m, box, `git config --system filter.lfs.smudge "sed s/^/EXPANDED/" && git config --system filter.lfs.required true`)
			started, err := w.Start(ctx, box, repo, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if got := execIn(t, m, box, "cat /workspace/project/art.psd && git config --system --unset filter.lfs.required"); got != lfsPointer {
				t.Fatalf("the LFS pointer in the clone: %q", got)
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

			base := started.Base
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
			// The agent's own git is left as it was: its HEAD, its index,
			// its uncommitted changes.
			if got := execIn(t, m, box, "cd /workspace/project && git rev-parse HEAD && git status --porcelain | wc -l"); got != base+"\n2\n" {
				t.Fatalf("the sandbox's own git after a checkpoint: %q", got)
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

			// The agent commits, then rewrites its history: its commits
			// are named in the next record's message, and the branch only
			// grows: the user's main does not move.
			mainBefore := git(t, repo, "rev-parse", "main")
			execIn(t, m, box, `cd /workspace/project && git add -A && git commit --quiet -m "agent: the files" && echo three >> a.txt`)
			cp, err = w.Checkpoint(ctx, box, "")
			if err != nil || !cp.New || cp.Rewritten || cp.Files != 1 {
				t.Fatalf("a checkpoint after the agent's commit: %+v %v", cp, err)
			}
			if msg := git(t, repo, "log", "-1", "--format=%B", "sandbox/"+box); !strings.Contains(msg, "Commits made in the sandbox:") || !strings.Contains(msg, "agent: the files") {
				t.Fatalf("the record's message names not the agent's commit: %q", msg)
			}
			grown := cp.Commit
			execIn(t, m, box, `cd /workspace/project && git reset --quiet --hard HEAD~1 && git clean -qfd && echo rewritten > b.txt`)
			cp, err = w.Checkpoint(ctx, box, "rewritten")
			if err != nil || cp.Rewritten || !cp.New {
				t.Fatalf("a rewritten history: %+v %v", cp, err)
			}
			git(t, repo, "merge-base", "--is-ancestor", grown, "sandbox/"+box)
			// A sandbox that forges its record: the branch follows it
			// (it is the sandbox's to write) and says so; main stays.
			execIn(t, m, box, `cd /workspace/project && git update-ref refs/sandbox-mcp/work HEAD && echo forged >> b.txt`)
			cp, err = w.Checkpoint(ctx, box, "forged")
			if err != nil || !cp.Rewritten || !cp.New {
				t.Fatalf("a forged record: %+v %v", cp, err)
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
			// A 2 GB file is left out of the record (it keeps the version
			// recorded last: none) and said; the rest is recorded. It is
			// sparse: git never reads it.
			// So is a file over a lower bound whose name holds a newline.
			w.MaxFile = 4096
			execIn(t, m, box, `cd /workspace/project && rm big.bin && truncate -s 2G huge.bin && echo small > small.txt && head -c 5000 /dev/zero > "$(printf 'odd\nname')"`)
			cp, err = w.Checkpoint(ctx, box, "with a huge file")
			if err != nil || !cp.New || len(cp.LeftOut) != 2 || !slices.Contains(cp.LeftOut, "huge.bin") || !slices.Contains(cp.LeftOut, `"odd\nname"`) {
				t.Fatalf("a checkpoint beside a 2 GB file: %+v %v", cp, err)
			}
			if files := git(t, repo, "ls-tree", "-z", "--name-only", "sandbox/"+box); strings.Contains(files, "huge.bin") || strings.Contains(files, "odd") || !strings.Contains(files, "small.txt") {
				t.Fatalf("the branch's files: %q", files)
			}
			w.MaxFile = 0

			// Hooks the sandbox writes (in its .git, through
			// core.hooksPath, and as files of its work) run nowhere on the
			// host: nothing of .git travels, and the host's merge uses the
			// user's own configuration.
			marker := filepath.Join(t.TempDir(), "hook-ran")
			hook := "#!/bin/sh\ntouch " + marker + "\n"
			execIn(t, m, box, `cd /workspace/project && for h in post-merge post-checkout pre-commit post-commit reference-transaction; do printf '`+hook+`' > .git/hooks/$h && chmod +x .git/hooks/$h; done && mkdir -p .githooks && cp .git/hooks/post-merge .githooks/ && git config core.hooksPath .githooks && git config core.fsmonitor "touch `+marker+`"`)
			if _, err := w.Checkpoint(ctx, box, "hooks"); err != nil {
				t.Fatal(err)
			}

			// Files .gitignore leaves out stay out, unless asked for; once
			// asked for, they stay in.
			execIn(t, m, box, `cd /workspace/project && mkdir -p build && echo out > build/out.txt && echo cache > build/cache.txt && printf 'build/\n' > .git/info/exclude`)
			if _, err := w.Checkpoint(ctx, box, "build ignored"); err != nil {
				t.Fatal(err)
			}
			if files := git(t, repo, "ls-tree", "-r", "--name-only", "sandbox/"+box); strings.Contains(files, "build/") {
				t.Fatalf("ignored files were recorded: %q", files)
			}
			for _, bad := range []string{"../x", "/etc/passwd", ".git/config", ""} {
				if _, err := w.CheckpointWith(ctx, box, work.CheckpointRequest{Include: []string{bad}}); !errors.As(err, new(*sandbox.ArgError)) {
					t.Errorf("include %q: %v", bad, err)
				}
			}
			if _, err := w.CheckpointWith(ctx, box, work.CheckpointRequest{Include: []string{"build/nosuch"}}); err == nil {
				t.Error("include of a path the clone lacks")
			}
			if _, err := w.CheckpointWith(ctx, box, work.CheckpointRequest{Message: "with the build", Include: []string{"build/out.txt"}}); err != nil {
				t.Fatal(err)
			}
			execIn(t, m, box, `cd /workspace/project && echo out2 > build/out.txt`)
			if _, err := w.Checkpoint(ctx, box, "build again"); err != nil {
				t.Fatal(err)
			}
			if files := git(t, repo, "ls-tree", "-r", "--name-only", "sandbox/"+box); !strings.Contains(files, "build/out.txt") || strings.Contains(files, "build/cache.txt") {
				t.Fatalf("the included file, then ignored ones: %q", files)
			}
			if got := git(t, repo, "show", "sandbox/"+box+":build/out.txt"); got != "out2" {
				t.Fatalf("the included file's later version: %q", got)
			}

			// Applied to the user's clean main.
			a, err := w.Apply(ctx, box, work.ApplyRequest{How: gitwork.Merge, Refresh: true})
			if err != nil {
				t.Fatal(err)
			}
			if a.Into != "main" || a.After == a.Before {
				t.Fatalf("apply: %+v", a)
			}
			if b, err := os.ReadFile(filepath.Join(repo, "b.txt")); err != nil || string(b) != "rewritten\nforged\nmore\n" {
				t.Fatalf("after apply, b.txt: %q %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(repo, "huge.bin")); !os.IsNotExist(err) {
				t.Fatalf("the 2 GB file reached the user's tree: %v", err)
			}
			if got := git(t, repo, "show", "sandbox/"+box+":art.psd") + "\n"; got != lfsPointer {
				t.Fatalf("the LFS pointer on the branch: %q", got)
			}
			if _, err := os.Stat(marker); !os.IsNotExist(err) {
				t.Fatal("a hook the sandbox wrote ran on the host")
			}
			if out, _ := exec.Command("git", "-C", repo, "config", "core.hooksPath").Output(); len(out) != 0 {
				t.Fatalf("the user's repository took the sandbox's hooksPath: %q", out)
			}
		})
	}
}

// TestWorkFollowsOnEngine: with Follow, two sandboxes tied to one
// repository have their commands' work land on their own branches with
// no checkpoint asked for; a snapshot records first, and a restore takes
// the branch back to what the snapshot held (the later work kept in the
// branch's reflog); both branches merge into the user's main.
func TestWorkFollowsOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			m, st := workServer(t, tg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			w := work.New(m, st)
			w.Quiet = 100 * time.Millisecond
			w.Follow(nil)
			t.Cleanup(w.Close)
			repo := userRepo(t)

			// branchHas waits for the branch of box to hold file, as its
			// records land on their own.
			branchHas := func(box, file string) string {
				t.Helper()
				deadline := time.Now().Add(2 * time.Minute) // a hang, not a speed
				for {
					out, err := exec.Command("git", "-C", repo, "ls-tree", "--name-only", "sandbox/"+box).Output()
					if err == nil && strings.Contains("\n"+string(out), "\n"+file+"\n") {
						return git(t, repo, "rev-parse", "sandbox/"+box)
					}
					if time.Now().After(deadline) {
						wk, _, _ := st.Work(box)
						t.Fatalf("sandbox/%s never held %s: %q (tie %+v)", box, file, out, wk)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			for _, box := range []string{"one", "two"} {
				if _, err := w.Start(ctx, box, repo, "", ""); err != nil {
					t.Fatal(err)
				}
			}
			// A clone onto the workspace's own mount point, empty but for
			// what the volume's filesystem keeps there.
			if out := execIn(t, m, "three", "ls -A /workspace | grep -v '^lost+found$' | wc -l"); strings.TrimSpace(out) != "0" {
				t.Fatalf("a new sandbox's workspace is not empty: %q", out)
			}
			execIn(t, m, "three", "rmdir /workspace/lost+found 2>/dev/null; true")
			if st, err := w.Start(ctx, "three", repo, "", "/workspace"); err != nil || st.Path != "/workspace" {
				t.Fatalf("a clone onto the workspace's mount point: %+v %v", st, err)
			}
			if got := execIn(t, m, "three", "cd /workspace && git status --porcelain | wc -l && (ls -A | grep -c sandbox-mcp-clone || true)"); got != "0\n0\n" {
				t.Fatalf("the clone on the mount point: %q", got)
			}
			execIn(t, m, "one", "cd /workspace/project && echo from-one > one.txt")
			execIn(t, m, "two", "cd /workspace/project && echo from-two > two.txt")
			branchHas("one", "one.txt")
			branchHas("two", "two.txt")
			if msg := git(t, repo, "log", "-1", "--format=%B", "sandbox/one"); !strings.HasPrefix(msg, "$ cd /workspace/project && echo from-one > one.txt\n") ||
				!strings.Contains(msg, "$ cd /workspace/project && echo from-one > one.txt  # exit 0") {
				t.Fatalf("a record's message names not its command: %q", msg)
			}
			if files := git(t, repo, "ls-tree", "--name-only", "sandbox/two"); strings.Contains(files, "one.txt") {
				t.Fatal("one sandbox's work is on the other's branch")
			}

			// A snapshot records first (no quiet comes before it); a
			// restore takes the branch back.
			w.Quiet = time.Hour
			execIn(t, m, "one", "cd /workspace/project && echo saved > saved.txt")
			const snap = "saved"
			if _, err := m.Snapshot(ctx, "one", sandbox.SnapshotRequest{Name: snap, IncludeWorkspace: true}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = m.DeleteSnapshot(context.Background(), snap) })
			saved := git(t, repo, "rev-parse", "sandbox/one")
			if files := git(t, repo, "ls-tree", "--name-only", saved); !strings.Contains(files, "saved.txt") {
				t.Fatalf("the snapshot did not record first: the branch holds %q", files)
			}
			w.Quiet = 100 * time.Millisecond
			execIn(t, m, "one", "cd /workspace/project && echo later > later.txt")
			later := branchHas("one", "later.txt")
			// Before the restore returns: no quiet spell is waited for.
			w.Quiet = time.Hour
			if _, _, err := m.Restore(ctx, snap, "one"); err != nil {
				t.Fatal(err)
			}
			if got := git(t, repo, "rev-parse", "sandbox/one"); got != saved {
				t.Fatalf("the restore did not take the branch back to %s: it is at %s", saved, got)
			}
			if !strings.Contains(git(t, repo, "reflog", "--format=%H", "sandbox/one"), later) {
				t.Fatal("the work after the snapshot is not in the branch's reflog")
			}

			// Both merge into main: two as its diff showed it, without the
			// record that landed after the review.
			d, err := w.Diff(ctx, "two", work.DiffRequest{})
			if err != nil || !gitwork.IsHash(d.ToCommit) || !strings.Contains(d.Text, "+from-two") {
				t.Fatalf("diff of two: %+v %v", d, err)
			}
			w.Quiet = 100 * time.Millisecond
			execIn(t, m, "two", "cd /workspace/project && echo unreviewed > unreviewed.txt")
			branchHas("two", "unreviewed.txt")
			if _, err := w.Apply(ctx, "one", work.ApplyRequest{How: gitwork.Merge}); err != nil {
				t.Fatalf("apply one: %v", err)
			}
			if a, err := w.Apply(ctx, "two", work.ApplyRequest{How: gitwork.Merge, At: d.ToCommit}); err != nil || a.At != d.ToCommit {
				t.Fatalf("apply two at its reviewed commit: %+v %v", a, err)
			}
			if _, err := os.Stat(filepath.Join(repo, "unreviewed.txt")); !os.IsNotExist(err) {
				t.Fatalf("a record made after the review was merged: %v", err)
			}
			if _, err := w.Apply(ctx, "two", work.ApplyRequest{At: git(t, repo, "rev-parse", "main")}); err == nil || !strings.Contains(err.Error(), "not on sandbox/two") {
				t.Fatalf("apply at a commit not on the branch: %v", err)
			}
			for f, want := range map[string]string{"one.txt": "from-one\n", "two.txt": "from-two\n", "saved.txt": "saved\n"} {
				if b, err := os.ReadFile(filepath.Join(repo, f)); err != nil || string(b) != want {
					t.Fatalf("after both applied, %s: %q %v", f, b, err)
				}
			}
			if _, err := os.Stat(filepath.Join(repo, "later.txt")); !os.IsNotExist(err) {
				t.Fatalf("work undone by the restore reached main: %v", err)
			}
		})
	}
}
