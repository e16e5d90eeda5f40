package gitwork

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sh runs git in dir as a test's set-up does (the user's or the
// sandbox's own git), failing the test on error.
func sh(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// userRepo is a user's repository with one commit on main.
func userRepo(t *testing.T) *Repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	sh(t, dir, "init", "--quiet", "--initial-branch=main")
	sh(t, dir, "config", "user.name", "User")
	sh(t, dir, "config", "user.email", "user@example.com")
	write(t, filepath.Join(dir, "a.txt"), "one\n")
	sh(t, dir, "add", "a.txt")
	sh(t, dir, "commit", "--quiet", "-m", "first")
	r, err := Open(context.Background(), filepath.Join(dir))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sandboxClone is what a sandbox does with Pack's bundle: a clone on
// sandbox/<name>, at the ref the branch starts at.
func sandboxClone(t *testing.T, r *Repo, name string) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.Pack(context.Background(), name, &b); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "in.bundle")
	if err := os.WriteFile(bundle, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ws")
	branch, _ := Branch(name)
	sh(t, filepath.Dir(dir), "clone", "--quiet", "--branch", branch, bundle, dir)
	return dir
}

// sandboxBundle is the bundle a sandbox makes of refs (since base, when
// set).
func sandboxBundle(t *testing.T, dir, base string, refs ...string) []byte {
	t.Helper()
	args := append([]string{"bundle", "create", "--quiet", "-"}, refs...)
	if base != "" {
		args = append(args, "^"+base)
	}
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bundle: %v: %s", err, stderr.String())
	}
	return out.Bytes()
}

// TestRoundTrip: a branch started at the user's HEAD is cloned by the
// sandbox, a change of 100 files made and committed there comes back onto
// sandbox/<name> (and nowhere else), reads back as a log and a diff, and
// a merge brings it into the user's branch.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	r := userRepo(t)
	base, err := r.Start(ctx, "work", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := r.Start(ctx, "work", "HEAD"); err != nil || again != base {
		t.Fatalf("a second start at the same commit: %v %v", again, err)
	}
	ws := sandboxClone(t, r, "work")
	for i := range 100 {
		write(t, filepath.Join(ws, "src", fmt.Sprintf("f%03d.txt", i)), fmt.Sprintf("file %d\n", i))
	}
	write(t, filepath.Join(ws, "a.txt"), "one\ntwo\n")
	sh(t, ws, "add", "-A")
	sh(t, ws, "commit", "--quiet", "-m", "add 100 files")
	mainBefore := sh(t, r.Dir, "rev-parse", "main")

	start := time.Now()
	got, err := r.Take(ctx, "work", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/work")), "", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("100 files onto the branch in %s", time.Since(start))
	want := sh(t, ws, "rev-parse", "HEAD")
	if got.From != base || got.To != want || got.Rewritten || got.Branch != "sandbox/work" {
		t.Fatalf("take: %+v, want from %s to %s", got, base, want)
	}
	if now := sh(t, r.Dir, "rev-parse", "main"); now != mainBefore {
		t.Fatal("taking the sandbox's commits moved main")
	}
	log, err := r.Log(ctx, "work", base, 0)
	if err != nil || len(log) != 1 || log[0].Subject != "add 100 files" || log[0].Hash != want || log[0].Date.IsZero() {
		t.Fatalf("log: %+v %v", log, err)
	}
	stat, cut, err := r.Diff(ctx, base, "sandbox/work", DiffOptions{Stat: true})
	if err != nil || cut || !strings.Contains(stat, "101 files changed") || !strings.Contains(stat, "src/f099.txt") {
		t.Fatalf("diff --stat: %v %v\n%s", cut, err, stat)
	}
	patch, _, err := r.Diff(ctx, "", "sandbox/work", DiffOptions{Paths: []string{"a.txt"}})
	if err != nil || !strings.Contains(patch, "+two") || strings.Contains(patch, "f001") {
		t.Fatalf("diff of a.txt against the merge base: %v\n%s", err, patch)
	}
	if small, cut, err := r.Diff(ctx, base, "sandbox/work", DiffOptions{MaxBytes: 100}); err != nil || !cut || len(small) > 100 {
		t.Fatalf("a bounded diff: %d bytes, cut %v, %v", len(small), cut, err)
	}
	a, err := r.Apply(ctx, "work", Merge, "")
	if err != nil {
		t.Fatal(err)
	}
	if a.Into != "main" || a.Before != mainBefore || a.After == mainBefore {
		t.Fatalf("apply: %+v", a)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Dir, "src", "f042.txt")); string(b) != "file 42\n" {
		t.Fatalf("after the merge, src/f042.txt is %q", b)
	}
	if parents := strings.Fields(sh(t, r.Dir, "rev-list", "--parents", "-n", "1", "HEAD")); len(parents) != 3 {
		t.Fatalf("the merge is not a merge commit: %v", parents)
	}
}

// TestTakeMovesOnlyItsBranch: a bundle that also carries main, another
// sandbox's branch and a tag moves only the branch of the sandbox that
// sent it.
func TestTakeMovesOnlyItsBranch(t *testing.T) {
	ctx := context.Background()
	r := userRepo(t)
	base, _ := r.Start(ctx, "x", "HEAD")
	if _, err := r.Start(ctx, "other", "HEAD"); err != nil {
		t.Fatal(err)
	}
	ws := sandboxClone(t, r, "x")
	write(t, filepath.Join(ws, "a.txt"), "forged\n")
	sh(t, ws, "commit", "--quiet", "-am", "forge")
	sh(t, ws, "branch", "-f", "main")
	sh(t, ws, "branch", "-f", "sandbox/other")
	sh(t, ws, "tag", "v1")
	mainBefore := sh(t, r.Dir, "rev-parse", "main")
	if _, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x", "refs/heads/main", "refs/heads/sandbox/other", "refs/tags/v1")), "", 1<<20); err != nil {
		t.Fatal(err)
	}
	if sh(t, r.Dir, "rev-parse", "main") != mainBefore || sh(t, r.Dir, "rev-parse", "sandbox/other") != base {
		t.Fatal("a sandbox's bundle moved another branch")
	}
	if tags := sh(t, r.Dir, "tag", "--list"); tags != "" {
		t.Fatalf("a sandbox's bundle made tags: %q", tags)
	}
	if sh(t, r.Dir, "rev-parse", "sandbox/x") != sh(t, ws, "rev-parse", "HEAD") {
		t.Fatal("the sandbox's own branch did not move")
	}
	// A bundle without the sandbox's branch moves nothing.
	if _, err := r.Take(ctx, "other", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/main")), "", 1<<20); err == nil ||
		sh(t, r.Dir, "rev-parse", "sandbox/other") != base {
		t.Fatalf("a bundle without the branch: %v", err)
	}
}

// TestTakeRefusesBadObjects: commits whose trees hold .git (which a
// checkout would write into the repository's own directory) or ".." are
// refused, and none of their objects lands in the user's repository.
func TestTakeRefusesBadObjects(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []string{".git", ".."} {
		t.Run(bad, func(t *testing.T) {
			r := userRepo(t)
			base, _ := r.Start(ctx, "x", "HEAD")
			ws := sandboxClone(t, r, "x")
			blob := sh(t, ws, "hash-object", "-w", filepath.Join(r.Dir, "a.txt"))
			inner := gitIn(t, ws, fmt.Sprintf("100644 blob %s\thooks-post-checkout\n", blob), "mktree")
			tree := gitIn(t, ws, fmt.Sprintf("040000 tree %s\t%s\n", inner, bad), "mktree")
			commit := sh(t, ws, "commit-tree", tree, "-p", "HEAD", "-m", "evil")
			sh(t, ws, "update-ref", "refs/heads/sandbox/x", commit)
			_, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), "", 1<<20)
			if err == nil {
				t.Fatal("a commit whose tree holds " + bad + " was taken")
			}
			t.Log(err)
			if sh(t, r.Dir, "rev-parse", "sandbox/x") != base {
				t.Fatal("the branch moved")
			}
			if exec.Command("git", "-C", r.Dir, "cat-file", "-e", commit).Run() == nil {
				t.Fatal("the refused commit's object is in the user's repository")
			}
		})
	}
}

// gitIn runs git in dir with stdin.
func gitIn(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestTakeRefusesJunk: what is not a bundle, and a bundle over the bound,
// change nothing and leave nothing in the git directory.
func TestTakeRefusesJunk(t *testing.T) {
	ctx := context.Background()
	r := userRepo(t)
	base, _ := r.Start(ctx, "x", "HEAD")
	ws := sandboxClone(t, r, "x")
	big := make([]byte, 2<<20)
	_, _ = rand.Read(big)
	write(t, filepath.Join(ws, "big.bin"), string(big))
	sh(t, ws, "add", "big.bin")
	sh(t, ws, "commit", "--quiet", "-m", "big")
	for name, in := range map[string][]byte{
		"junk":      []byte("# v2 git bundle\nnot really\n"),
		"empty":     nil,
		"too large": sandboxBundle(t, ws, base, "refs/heads/sandbox/x"),
	} {
		_, err := r.Take(ctx, "x", bytes.NewReader(in), "", 1<<20)
		if err == nil {
			t.Errorf("%s: taken", name)
		}
		if name == "too large" && !errors.Is(err, ErrTooLarge) {
			t.Errorf("too large: %v", err)
		}
		if sh(t, r.Dir, "rev-parse", "sandbox/x") != base {
			t.Errorf("%s: the branch moved", name)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(r.GitDir, "sandbox-mcp")); len(left) != 0 {
		t.Errorf("left in the git directory: %v", left)
	}
}

// TestTakeBounds: a bundle whose commit is not the one the sandbox
// said, or that carries a file over MaxBlob, is refused and moves
// nothing; within the bounds it is taken.
func TestTakeBounds(t *testing.T) {
	ctx := context.Background()
	r := userRepo(t)
	base, _ := r.Start(ctx, "x", "HEAD")
	ws := sandboxClone(t, r, "x")
	write(t, filepath.Join(ws, "mid.bin"), strings.Repeat("x", 5000))
	sh(t, ws, "add", "mid.bin")
	sh(t, ws, "commit", "--quiet", "-m", "mid")
	head := sh(t, ws, "rev-parse", "HEAD")
	spool := func() string {
		t.Helper()
		file, cleanup, err := r.Spool(bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cleanup)
		return file
	}
	if _, err := r.TakeFileWith(ctx, "x", spool(), "", TakeOptions{Want: base}); err == nil || !strings.Contains(err.Error(), "not "+base[:12]) {
		t.Errorf("a bundle of another commit than said: %v", err)
	}
	if _, err := r.TakeFileWith(ctx, "x", spool(), "", TakeOptions{MaxBlob: 4999}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a file over the bound: %v", err)
	}
	if sh(t, r.Dir, "rev-parse", "sandbox/x") != base {
		t.Fatal("a refused bundle moved the branch")
	}
	if got, err := r.TakeFileWith(ctx, "x", spool(), "", TakeOptions{Want: head, MaxBlob: 5000}); err != nil || got.To != head {
		t.Fatalf("within the bounds: %+v %v", got, err)
	}
}

// TestTakeRewrittenAndCheckedOut: a sandbox that rewrote its history
// moves its branch all the same, and says so; a branch the user has
// checked out is not moved under them.
func TestTakeRewrittenAndCheckedOut(t *testing.T) {
	ctx := context.Background()
	r := userRepo(t)
	base, _ := r.Start(ctx, "x", "HEAD")
	ws := sandboxClone(t, r, "x")
	write(t, filepath.Join(ws, "b.txt"), "b\n")
	sh(t, ws, "add", "b.txt")
	sh(t, ws, "commit", "--quiet", "-m", "b")
	if _, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "HEAD")), "HEAD", 1<<20); err != nil {
		t.Fatal(err)
	}
	sh(t, ws, "reset", "--quiet", "--hard", base)
	write(t, filepath.Join(ws, "c.txt"), "c\n")
	sh(t, ws, "add", "c.txt")
	sh(t, ws, "commit", "--quiet", "-m", "c")
	got, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), "", 1<<20)
	if err != nil || !got.Rewritten || got.To != sh(t, ws, "rev-parse", "HEAD") {
		t.Fatalf("a rewritten history: %+v %v", got, err)
	}
	sh(t, r.Dir, "checkout", "--quiet", "sandbox/x")
	write(t, filepath.Join(ws, "d.txt"), "d\n")
	sh(t, ws, "add", "d.txt")
	sh(t, ws, "commit", "--quiet", "-m", "d")
	if _, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), "", 1<<20); err == nil {
		t.Fatal("the branch the user has checked out was moved")
	}
	if sh(t, r.Dir, "rev-parse", "HEAD") != got.To {
		t.Fatal("the user's HEAD moved")
	}
}

// TestTakeRunsNoHook: the user's hooks (in the repository and through
// core.hooksPath) do not run when a sandbox's commits are taken.
func TestTakeRunsNoHook(t *testing.T) {
	ctx := context.Background()
	r := userRepo(t)
	base, _ := r.Start(ctx, "x", "HEAD")
	ws := sandboxClone(t, r, "x")
	marker := filepath.Join(t.TempDir(), "ran")
	hooks := filepath.Join(t.TempDir(), "hooks")
	for _, dir := range []string{filepath.Join(r.GitDir, "hooks"), hooks} {
		for _, h := range []string{"reference-transaction", "post-checkout", "post-merge", "pre-auto-gc"} {
			write(t, filepath.Join(dir, h), "#!/bin/sh\necho "+h+" >>"+marker+"\n")
			if err := os.Chmod(filepath.Join(dir, h), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(t, filepath.Join(ws, "b.txt"), "b\n")
	sh(t, ws, "add", "b.txt")
	sh(t, ws, "commit", "--quiet", "-m", "b")
	for _, hooksPath := range []string{"", hooks} {
		if hooksPath != "" {
			sh(t, r.Dir, "config", "core.hooksPath", hooksPath)
		}
		if _, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), "", 1<<20); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(marker); err == nil {
			t.Fatalf("hooks ran (core.hooksPath %q): %s", hooksPath, b)
		}
	}
}

// TestApplyRefusals: a tree with uncommitted changes is refused and left
// as it was; a conflict is undone and named; a detached HEAD and a
// branch that does not exist are refused.
func TestApplyRefusals(t *testing.T) {
	ctx := context.Background()
	r := userRepo(t)
	base, _ := r.Start(ctx, "x", "HEAD")
	ws := sandboxClone(t, r, "x")
	write(t, filepath.Join(ws, "a.txt"), "sandbox\n")
	sh(t, ws, "commit", "--quiet", "-am", "sandbox edit")
	if _, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), "", 1<<20); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(r.Dir, "a.txt"), "uncommitted\n")
	if _, err := r.Apply(ctx, "x", Merge, ""); !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), "a.txt") {
		t.Fatalf("apply on a dirty tree: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(r.Dir, "a.txt")); string(b) != "uncommitted\n" {
		t.Fatalf("the user's uncommitted change is now %q", b)
	}
	sh(t, r.Dir, "commit", "--quiet", "-am", "user edit")
	head := sh(t, r.Dir, "rev-parse", "HEAD")
	for _, how := range []string{Merge, Squash, CherryPick} {
		_, err := r.Apply(ctx, "x", how, "")
		if err == nil || !strings.Contains(err.Error(), "conflicts in a.txt") {
			t.Fatalf("%s with a conflict: %v", how, err)
		}
		if sh(t, r.Dir, "rev-parse", "HEAD") != head || sh(t, r.Dir, "status", "--porcelain") != "" {
			t.Fatalf("%s with a conflict left the repository changed: %s", how, sh(t, r.Dir, "status", "--porcelain"))
		}
	}
	if _, err := r.Apply(ctx, "x", "rebase", ""); err == nil {
		t.Fatal("an unknown way to apply was taken")
	}
	if _, err := r.Apply(ctx, "nope", Merge, ""); err == nil || !strings.Contains(err.Error(), "no branch sandbox/nope") {
		t.Fatalf("a branch that does not exist: %v", err)
	}
	sh(t, r.Dir, "checkout", "--quiet", "--detach")
	if _, err := r.Apply(ctx, "x", Merge, ""); err == nil || !strings.Contains(err.Error(), "detached") {
		t.Fatalf("a detached HEAD: %v", err)
	}
}

// TestApplySquashAndPick: a squash makes one commit of the branch's work
// on the user's branch; a cherry-pick takes the branch's commits one by
// one.
func TestApplySquashAndPick(t *testing.T) {
	ctx := context.Background()
	for _, how := range []string{Squash, CherryPick} {
		t.Run(how, func(t *testing.T) {
			r := userRepo(t)
			base, _ := r.Start(ctx, "x", "HEAD")
			ws := sandboxClone(t, r, "x")
			for _, f := range []string{"b", "c"} {
				write(t, filepath.Join(ws, f+".txt"), f+"\n")
				sh(t, ws, "add", f+".txt")
				sh(t, ws, "commit", "--quiet", "-m", "add "+f)
			}
			if _, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), "", 1<<20); err != nil {
				t.Fatal(err)
			}
			a, err := r.Apply(ctx, "x", how, "")
			if err != nil {
				t.Fatal(err)
			}
			n := strings.Count(sh(t, r.Dir, "log", "--format=%H", a.Before+"..HEAD"), "\n") + 1
			if want := map[string]int{Squash: 1, CherryPick: 2}[how]; n != want {
				t.Fatalf("%s made %d commits, want %d", how, n, want)
			}
			for _, f := range []string{"b", "c"} {
				if _, err := os.Stat(filepath.Join(r.Dir, f+".txt")); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestSymlinkOutOfTheRepository: a symlink the sandbox commits pointing
// out of the repository arrives as a symlink: the apply writes nothing
// where it points.
func TestSymlinkOutOfTheRepository(t *testing.T) {
	ctx := context.Background()
	r := userRepo(t)
	base, _ := r.Start(ctx, "x", "HEAD")
	outside := t.TempDir()
	ws := sandboxClone(t, r, "x")
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	sh(t, ws, "add", "out")
	sh(t, ws, "commit", "--quiet", "-m", "link")
	// Then the link becomes a directory with a file: the file must land
	// in the repository, not through the link.
	if err := os.Remove(filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(ws, "out", "f"), "x\n")
	sh(t, ws, "add", "-A")
	sh(t, ws, "commit", "--quiet", "-m", "dir")
	if _, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), "", 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Apply(ctx, "x", CherryPick, ""); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("written outside the repository: %v", ents)
	}
	if fi, err := os.Lstat(filepath.Join(r.Dir, "out")); err != nil || !fi.IsDir() {
		t.Fatalf("out: %v %v", fi, err)
	}
}

// TestNamesAndRepos: a directory that is not in a repository, sandbox
// names git refuses as branch names, a start at a revision that does not
// exist and a start over an earlier sandbox's branch are refused; two
// sandboxes of one repository get a branch each.
func TestNamesAndRepos(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, t.TempDir()); !errors.Is(err, ErrNotRepo) {
		t.Fatalf("a directory outside any repository: %v", err)
	}
	r := userRepo(t)
	for _, name := range []string{"a..b", "x.lock", ".hidden", "-n"} {
		if _, err := r.Start(ctx, name, "HEAD"); err == nil {
			t.Errorf("sandbox name %q made a branch", name)
		}
	}
	if _, err := r.Start(ctx, "x", "no-such-ref"); err == nil {
		t.Error("a start at a revision that does not exist")
	}
	if _, err := r.Start(ctx, "x", "--output=/tmp/x"); err == nil {
		t.Error("a revision that is an option")
	}
	a, err := r.Start(ctx, "one", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start(ctx, "ONE", "HEAD"); err == nil || !strings.Contains(err.Error(), "only in case") {
		t.Fatalf("a name that differs from another sandbox's only in case: %v", err)
	}
	if _, err := r.Start(ctx, "two", "HEAD"); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(r.Dir, "a.txt"), "moved on\n")
	sh(t, r.Dir, "commit", "--quiet", "-am", "moved on")
	if _, err := r.Start(ctx, "one", "HEAD"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a start over an earlier sandbox's branch at another commit: %v", err)
	}
	if sh(t, r.Dir, "rev-parse", "sandbox/one") != a || sh(t, r.Dir, "rev-parse", "sandbox/two") != a {
		t.Fatal("the branches moved")
	}
}

// TestLinkedWorkTree: a repository opened through a linked work tree
// (git worktree add), whose objects live in the main one's git
// directory, takes a sandbox's commits and applies them there.
func TestLinkedWorkTree(t *testing.T) {
	ctx := context.Background()
	main := userRepo(t)
	wt := filepath.Join(t.TempDir(), "wt")
	sh(t, main.Dir, "worktree", "add", "--quiet", "-b", "side", wt)
	r, err := Open(ctx, wt)
	if err != nil {
		t.Fatal(err)
	}
	if r.CommonDir != main.GitDir || r.GitDir == main.GitDir {
		t.Fatalf("opened %+v", r)
	}
	base, _ := r.Start(ctx, "x", "HEAD")
	ws := sandboxClone(t, r, "x")
	write(t, filepath.Join(ws, "b.txt"), "b\n")
	sh(t, ws, "add", "b.txt")
	sh(t, ws, "commit", "--quiet", "-m", "b")
	if _, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), "", 1<<20); err != nil {
		t.Fatal(err)
	}
	if a, err := r.Apply(ctx, "x", Merge, ""); err != nil || a.Into != "side" {
		t.Fatalf("apply in the linked work tree: %+v %v", a, err)
	}
	if _, err := os.Stat(filepath.Join(wt, "b.txt")); err != nil {
		t.Fatal(err)
	}
}

// TestApplyRefusesSteeringAndBulk: work that changes .gitattributes,
// .gitmodules or .lfsconfig (which pick the user's filter and merge
// programs a checkout runs) or that brings more bytes than Apply takes is
// refused, whichever way, with nothing changed and no filter run.
func TestApplyRefusesSteeringAndBulk(t *testing.T) {
	ctx := context.Background()
	for _, file := range []string{".gitattributes", "sub/.gitattributes", ".gitmodules", ".LFSConfig", "big.bin"} {
		t.Run(file, func(t *testing.T) {
			r := userRepo(t)
			marker := filepath.Join(t.TempDir(), "ran")
			sh(t, r.Dir, "config", "filter.evil.smudge", "sh -c 'echo ran >>"+marker+"; cat'")
			sh(t, r.Dir, "config", "filter.evil.clean", "cat")
			base, _ := r.Start(ctx, "x", "HEAD")
			ws := sandboxClone(t, r, "x")
			content := "* filter=evil\n"
			if file == "big.bin" {
				content = strings.Repeat("a", 2<<20)
			}
			write(t, filepath.Join(ws, file), content)
			write(t, filepath.Join(ws, "data.txt"), "data\n")
			sh(t, ws, "add", "-A")
			sh(t, ws, "commit", "--quiet", "-m", "steer")
			if _, err := r.Take(ctx, "x", bytes.NewReader(sandboxBundle(t, ws, base, "refs/heads/sandbox/x")), "", 8<<20); err != nil {
				t.Fatal(err)
			}
			old := MaxApplyBytes
			MaxApplyBytes = 1 << 20
			defer func() { MaxApplyBytes = old }()
			head := sh(t, r.Dir, "rev-parse", "HEAD")
			for _, how := range []string{Merge, Squash, CherryPick} {
				_, err := r.Apply(ctx, "x", how, "")
				if err == nil || !strings.Contains(err.Error(), "nothing was changed") {
					t.Fatalf("%s of work with %s: %v", how, file, err)
				}
			}
			if sh(t, r.Dir, "rev-parse", "HEAD") != head || sh(t, r.Dir, "status", "--porcelain") != "" {
				t.Fatal("the refused work changed the repository")
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("a filter the sandbox chose ran")
			}
		})
	}
}

// TestTakeRefusesBorrowedObjects: a bundle whose commit names a blob it
// does not carry, which the user's repository holds (unreachable from
// anything the sandbox was given), is refused: whether the take worked
// would tell the sandbox that the user has that content.
func TestTakeRefusesBorrowedObjects(t *testing.T) {
	ctx := context.Background()
	r := userRepo(t)
	base, _ := r.Start(ctx, "x", "HEAD")
	secret := gitIn(t, r.Dir, "AWS_SECRET=hunter2\n", "hash-object", "-w", "--stdin")
	ws := sandboxClone(t, r, "x")
	tree := gitIn(t, ws, fmt.Sprintf("100644 blob %s\tguess\n", secret), "mktree", "--missing")
	commit := sh(t, ws, "commit-tree", tree, "-p", base, "-m", "guess")
	pack := exec.Command("git", "-C", ws, "pack-objects", "--stdout")
	pack.Stdin = strings.NewReader(commit + "\n" + tree + "\n")
	data, err := pack.Output()
	if err != nil {
		t.Fatal(err)
	}
	bundle := append([]byte("# v2 git bundle\n-"+base+" base\n"+commit+" refs/heads/sandbox/x\n\n"), data...)
	if _, err := r.Take(ctx, "x", bytes.NewReader(bundle), "", 1<<20); err == nil || !strings.Contains(err.Error(), "without carrying it") {
		t.Fatalf("a bundle borrowing the user's object: %v", err)
	}
	if sh(t, r.Dir, "rev-parse", "sandbox/x") != base {
		t.Fatal("the branch moved")
	}
	// The same commit carrying the blob is taken.
	blob := gitIn(t, ws, "AWS_SECRET=hunter2\n", "hash-object", "-w", "--stdin")
	pack = exec.Command("git", "-C", ws, "pack-objects", "--stdout")
	pack.Stdin = strings.NewReader(commit + "\n" + tree + "\n" + blob + "\n")
	if data, err = pack.Output(); err != nil {
		t.Fatal(err)
	}
	bundle = append([]byte("# v2 git bundle\n-"+base+" base\n"+commit+" refs/heads/sandbox/x\n\n"), data...)
	if _, err := r.Take(ctx, "x", bytes.NewReader(bundle), "", 1<<20); err != nil {
		t.Fatalf("a bundle that carries what it names: %v", err)
	}
}

// TestScratchSweep: what a killed take or pack left in the scratch
// directory long ago is removed by the next one; what is recent stays.
func TestScratchSweep(t *testing.T) {
	r := userRepo(t)
	dir, err := r.Scratch()
	if err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-24 * time.Hour)
	for _, name := range []string{"take-old.bundle", "take-old.git", "pack-old.bundle", "take-new.bundle", "other"} {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, ".git") {
			if err := os.MkdirAll(filepath.Join(p, "objects"), 0o700); err != nil {
				t.Fatal(err)
			}
		} else {
			write(t, p, "x")
		}
		if strings.Contains(name, "old") || name == "other" {
			if err := os.Chtimes(p, long, long); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := r.Scratch(); err != nil {
		t.Fatal(err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if strings.Join(left, " ") != "other take-new.bundle" {
		t.Fatalf("left: %v", left)
	}

	// Minutes old: a bundle whose take is alive (it holds the file's
	// lock) stays; one whose process died (no lock) goes with its
	// quarantine, and so does a quarantine without its bundle.
	os.Remove(filepath.Join(dir, "take-new.bundle"))
	live, release, err := r.Spool(strings.NewReader("live"), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	minutes := time.Now().Add(-5 * time.Minute)
	for _, name := range []string{"take-dead.bundle", "take-dead.git", "take-lone.git", filepath.Base(live)} {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, ".git") {
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
		} else if name != filepath.Base(live) {
			write(t, p, "x")
		}
		if err := os.Chtimes(p, minutes, minutes); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Scratch(); err != nil {
		t.Fatal(err)
	}
	left = nil
	ents, _ = os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if strings.Join(left, " ") != "other "+filepath.Base(live) {
		t.Fatalf("left after a sweep of minutes-old files: %v", left)
	}
}
