// Package gitwork keeps a sandbox's work as a branch of the user's
// repository on the host, sandbox/<name>: it starts the branch at a ref
// and packs it (a git bundle) for the sandbox's clone, takes the
// sandbox's commits back from a bundle the sandbox made, and reads and
// applies the branch for review.
//
// What comes from the sandbox is untrusted. A bundle from it moves that
// one branch only, whatever refs it names; its objects are checked
// (transfer.fsckObjects, which refuses a tree holding .git and other
// paths git will not check out) and its size is bounded; it is fetched
// with the repository's hooks off and never into the branch checked out.
// Git runs without a shell, with the server's GIT_* variables left out
// (they could point it at another repository), and reads and diffs run
// without external diff or textconv programs, which the branch's
// .gitattributes could otherwise choose among the user's configured ones.
// Only Apply changes the user's checked out branch, and only on a clean
// tree.
package gitwork

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BranchPrefix is the prefix of the branches sandboxes' work lands on.
const BranchPrefix = "sandbox/"

// Repo is a user's git repository with a work tree.
type Repo struct {
	// Dir is the top of its work tree; GitDir its git directory; CommonDir
	// the one that holds its objects and refs (GitDir, except in a linked
	// work tree).
	Dir, GitDir, CommonDir string
}

// ErrNotRepo is Open's answer for a directory outside any git work tree.
var ErrNotRepo = errors.New("not in a git repository")

// Open finds the repository whose work tree holds dir.
func Open(ctx context.Context, dir string) (*Repo, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, errors.New("git is not installed on this host")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	out, err := run(ctx, dir, nil, "rev-parse", "--path-format=absolute", "--show-toplevel", "--absolute-git-dir", "--git-common-dir")
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", dir, ctx.Err())
		}
		return nil, fmt.Errorf("%s: %w", dir, ErrNotRepo)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || !filepath.IsAbs(lines[0]) || !filepath.IsAbs(lines[1]) || !filepath.IsAbs(lines[2]) {
		return nil, fmt.Errorf("%s: %w (git said %q)", dir, ErrNotRepo, out)
	}
	return &Repo{Dir: lines[0], GitDir: lines[1], CommonDir: lines[2]}, nil
}

// WorkRef is the ref that records a sandbox's work in its clone: each
// record is a commit of its working tree on the last, made beside the
// sandbox's own HEAD and index, which stay the agent's.
const WorkRef = "refs/sandbox-mcp/work"

// Branch is the branch name of sandbox name's work, and its full ref.
func Branch(name string) (branch, ref string) {
	return BranchPrefix + name, "refs/heads/" + BranchPrefix + name
}

// checkName refuses a sandbox name that makes no valid branch name (git
// check-ref-format's rules: no "..", no component starting with '.' or
// ending in ".lock").
func checkName(ctx context.Context, name string) error {
	_, ref := Branch(name)
	if name == "" || strings.HasPrefix(name, "-") {
		return fmt.Errorf("sandbox name %q makes no branch name", name)
	}
	if _, err := run(ctx, "", nil, "check-ref-format", ref); err != nil {
		return fmt.Errorf("sandbox name %q makes no valid branch name (%s): git refuses \"..\", a leading '.' and a trailing \".lock\"", name, ref)
	}
	return nil
}

// Resolve is the commit rev names in r.
func (r *Repo) Resolve(ctx context.Context, rev string) (string, error) {
	if rev == "" || strings.HasPrefix(rev, "-") || strings.ContainsAny(rev, "\x00\n") {
		return "", fmt.Errorf("bad revision %q", rev)
	}
	out, err := r.git(ctx, nil, "rev-parse", "--verify", "--quiet", "--end-of-options", rev+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("%q names no commit in %s", rev, r.Dir)
	}
	return strings.TrimSpace(string(out)), nil
}

// Head is the commit sandbox name's branch is at, or "" when there is no
// such branch.
func (r *Repo) Head(ctx context.Context, name string) (string, error) {
	if err := checkName(ctx, name); err != nil {
		return "", err
	}
	_, ref := Branch(name)
	return r.at(ctx, ref), nil
}

// at is the commit ref is at, or "" when there is no such ref; the
// callers have checked the name it comes from.
func (r *Repo) at(ctx context.Context, ref string) string {
	out, err := r.git(ctx, nil, "rev-parse", "--verify", "--quiet", ref)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Start makes sandbox name's branch at rev and returns its commit. An
// existing branch of that name (an earlier sandbox's work) is an error
// unless it is at that commit already: its work is the user's to keep or
// delete.
func (r *Repo) Start(ctx context.Context, name, rev string) (string, error) {
	if err := checkName(ctx, name); err != nil {
		return "", err
	}
	commit, err := r.Resolve(ctx, rev)
	if err != nil {
		return "", err
	}
	branch, ref := Branch(name)
	// On a file system that ignores case (macOS's), sandbox/Foo and
	// sandbox/foo are one ref file: one sandbox's work would move the
	// other's branch.
	if out, err := r.git(ctx, nil, "for-each-ref", "--format=%(refname)", "refs/heads/"+BranchPrefix); err == nil {
		for _, other := range strings.Fields(string(out)) {
			if other != ref && strings.EqualFold(other, ref) {
				return "", fmt.Errorf("branch %s exists in %s, which differs from %s only in case: name the sandbox otherwise", strings.TrimPrefix(other, "refs/heads/"), r.Dir, branch)
			}
		}
	}
	if at := r.at(ctx, ref); at != "" {
		if at == commit {
			return commit, nil
		}
		return "", fmt.Errorf("branch %s already exists in %s, at %.12s (an earlier sandbox's work): merge or delete it (git branch -D %s) first", branch, r.Dir, at, branch)
	}
	// The empty old value: made only if it is not there, whoever races.
	if _, err := r.git(ctx, nil, "update-ref", "-m", "sandbox-mcp: start "+branch, ref, commit, ""); err != nil {
		return "", fmt.Errorf("make branch %s: %w", branch, err)
	}
	return commit, nil
}

// Pack writes a bundle of sandbox name's branch, with its history, to w:
// what the sandbox clones.
func (r *Repo) Pack(ctx context.Context, name string, w io.Writer) error {
	if err := checkName(ctx, name); err != nil {
		return err
	}
	_, ref := Branch(name)
	cmd := r.command(ctx, "bundle", "create", "--quiet", "-", ref)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git bundle create: %w: %s", err, clip(stderr.String()))
	}
	return nil
}

// Taken is what Take did to a sandbox's branch.
type Taken struct {
	Branch string `json:"branch"`
	// From and To are the commits the branch was at before and after.
	From string `json:"from,omitempty"`
	To   string `json:"to"`
	// Rewritten says the sandbox's branch no longer contains From: its
	// history was rewritten there.
	Rewritten bool `json:"rewritten,omitempty"`
}

// ErrTooLarge is Take's answer for a bundle over its bound.
var ErrTooLarge = errors.New("the sandbox's commits are too large")

// Take reads a bundle the sandbox made from src, at most maxBytes of it,
// and moves the host's branch sandbox/<name> to the commit the bundle's
// ref from names: HEAD, or the branch's own name when from is "". Nothing
// else in the repository moves: of the bundle's refs only that one is
// read. Its objects are checked before any lands; a bundle that fails,
// or whose commits need objects the repository does not have, changes
// nothing.
func (r *Repo) Take(ctx context.Context, name string, src io.Reader, from string, maxBytes int64, have ...string) (Taken, error) {
	if err := checkName(ctx, name); err != nil {
		return Taken{}, err // before the bundle is spooled
	}
	file, cleanup, err := r.Spool(src, maxBytes)
	if err != nil {
		return Taken{}, err
	}
	defer cleanup()
	return r.takeFile(ctx, name, file, from, TakeOptions{}, have)
}

// TakeFile is Take of a bundle already in a file of Spool's.
//
// The bundle's commits may build only on what the sandbox was given: the
// branch as it is (its clone, or its own earlier work) and the commits in
// have. An object they need from elsewhere in the user's repository is
// refused, so that a bundle cannot learn whether the user holds an object
// by naming it without carrying it.
func (r *Repo) TakeFile(ctx context.Context, name, file, from string, have ...string) (Taken, error) {
	return r.TakeFileWith(ctx, name, file, from, TakeOptions{}, have...)
}

// TakeOptions bound a take further.
type TakeOptions struct {
	// Want, when set, is the commit the bundle must bring: a bundle
	// naming another is refused before anything is fetched.
	Want string
	// MaxBlob, when above 0, refuses a bundle that carries a file of
	// more bytes (ErrTooLarge).
	MaxBlob int64
}

// TakeFileWith is TakeFile bounded by opt.
func (r *Repo) TakeFileWith(ctx context.Context, name, file, from string, opt TakeOptions, have ...string) (Taken, error) {
	if err := checkName(ctx, name); err != nil {
		return Taken{}, err
	}
	return r.takeFile(ctx, name, file, from, opt, have)
}

// takeFile is TakeFileWith of a name already checked.
func (r *Repo) takeFile(ctx context.Context, name, file, from string, opt TakeOptions, have []string) (Taken, error) {
	branch, ref := Branch(name)
	switch from {
	case "":
		from = ref
	case "HEAD", WorkRef:
	default:
		return Taken{}, fmt.Errorf("take from %q: only HEAD, %s or the branch's own ref", from, WorkRef)
	}
	before := r.at(ctx, ref)
	t := Taken{Branch: branch, From: before}
	out, err := r.git(ctx, nil, "bundle", "list-heads", file)
	if err != nil {
		return t, fmt.Errorf("what the sandbox sent is not a git bundle: %w", err)
	}
	to := ""
	for _, line := range strings.Split(string(out), "\n") {
		sha, head, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && head == from && IsHash(sha) {
			to = sha
		}
	}
	if to == "" {
		return t, fmt.Errorf("the sandbox's bundle has no %s", from)
	}
	if opt.Want != "" && to != opt.Want {
		return t, fmt.Errorf("the sandbox's bundle brings %.12s, not %.12s as it said: nothing was taken", to, opt.Want)
	}
	// Git checks no object it takes from a bundle, so the bundle goes
	// into a quarantine repository first (its objects, and any the
	// bundle's commits build on from the user's, through alternates), and
	// the branch comes from there by a fetch that checks every object.
	// Forced: the branch is the sandbox's to rewrite. Fetch refuses the
	// branch checked out in a work tree (no --update-head-ok).
	q := strings.TrimSuffix(file, ".bundle") + ".git"
	defer os.RemoveAll(q)
	if _, err := run(ctx, "", nil, "init", "--quiet", "--bare", "--template=", q); err != nil {
		return t, err
	}
	if err := os.WriteFile(filepath.Join(q, "objects", "info", "alternates"), []byte(filepath.Join(r.CommonDir, "objects")+"\n"), 0o600); err != nil {
		return t, err
	}
	if _, err := run(ctx, q, nil, append(fetchArgs(false), file, "+"+from+":"+ref)...); err != nil {
		return t, fmt.Errorf("read the sandbox's bundle: %w", err)
	}
	if err := r.checkCarried(ctx, q, ref, opt.MaxBlob, append(have, before)); err != nil {
		return t, err
	}
	if _, err := r.git(ctx, nil, append(fetchArgs(true), q, "+"+ref+":"+ref)...); err != nil {
		return t, fmt.Errorf("take the sandbox's commits onto %s: %w", branch, err)
	}
	now := r.at(ctx, ref)
	t.To = now
	if before != "" && before != now {
		if _, err := r.git(ctx, nil, "merge-base", "--is-ancestor", before, now); err != nil {
			t.Rewritten = true
		}
	}
	return t, nil
}

// checkCarried refuses the commits at ref in the quarantine q when they
// need an object that is neither in the bundle (q's own objects) nor
// reachable from the commits in have, or that carry a file over maxBlob
// bytes (when above 0).
func (r *Repo) checkCarried(ctx context.Context, q, ref string, maxBlob int64, have []string) error {
	args := []string{"rev-list", "--objects", ref, "--not"}
	for _, h := range have {
		if IsHash(h) {
			args = append(args, h)
		}
	}
	out, err := run(ctx, q, nil, append(args, "--")...)
	if err != nil {
		return fmt.Errorf("the sandbox's commits: %w", err)
	}
	var need strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		if sha, _, _ := strings.Cut(line, " "); IsHash(sha) {
			need.WriteString(sha + "\n")
		}
	}
	if need.Len() == 0 {
		return nil
	}
	alt := filepath.Join(q, "objects", "info", "alternates")
	if err := os.Rename(alt, alt+".off"); err != nil {
		return err
	}
	defer os.Rename(alt+".off", alt)
	got, err := run(ctx, q, strings.NewReader(need.String()), "cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)")
	if err != nil {
		return fmt.Errorf("the sandbox's commits: %w", err)
	}
	for _, line := range strings.Split(string(got), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[1] == "missing" {
			return fmt.Errorf("the sandbox's commits name object %s without carrying it (a bundle builds only on what the sandbox was given): nothing was taken", f[0])
		}
		if len(f) == 3 && f[1] == "blob" && maxBlob > 0 {
			if n, err := strconv.ParseInt(f[2], 10, 64); err == nil && n > maxBlob {
				return fmt.Errorf("%w: the sandbox's commits carry a file of %d bytes (blob %.12s), over the %d a record takes: nothing was taken", ErrTooLarge, n, f[0], maxBlob)
			}
		}
	}
	return nil
}

// fetchArgs are the arguments of a fetch that runs no hook, writes no
// FETCH_HEAD and takes no tags, and with check, refuses any object that
// fails git's checks, including paths git would refuse to check out.
func fetchArgs(check bool) []string {
	args := []string{"-c", "core.hooksPath=" + os.DevNull, "-c", "fetch.writeCommitGraph=false", "-c", "gc.auto=0"}
	if check {
		args = append(args, "-c", "fetch.fsckObjects=true")
		for _, id := range []string{"hasDotgit", "hasDotdot", "fullPathname", "emptyName", "badFilemode", "nulInCommit"} {
			args = append(args, "-c", "fetch.fsck."+id+"=error")
		}
	}
	return append(args, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-auto-gc", "--no-recurse-submodules")
}

// Spool copies src, at most maxBytes, to a file of its own in the git
// directory and returns its path, and cleanup, which removes it.
func (r *Repo) Spool(src io.Reader, maxBytes int64) (string, func(), error) {
	path, f, err := r.scratchFile("take-")
	if err != nil {
		return "", nil, err
	}
	// f stays open, and locked, until cleanup: a later Scratch knows by
	// the lock that the take is alive.
	cleanup := func() { os.Remove(path); f.Close() }
	n, err := io.Copy(f, io.LimitReader(src, maxBytes+1))
	if err == nil && n > maxBytes {
		err = fmt.Errorf("%w: over %d bytes", ErrTooLarge, maxBytes)
	}
	if err != nil {
		cleanup()
		return "", nil, err
	}
	return path, cleanup, nil
}

// PackFile writes the bundle of sandbox name's branch (Pack) to a file of
// the scratch directory; release removes it.
func (r *Repo) PackFile(ctx context.Context, name string) (string, func(), error) {
	path, f, err := r.scratchFile("pack-")
	if err != nil {
		return "", nil, err
	}
	release := func() { os.Remove(path); f.Close() }
	if err := r.Pack(ctx, name, f); err != nil {
		release()
		return "", nil, err
	}
	return path, release, nil
}

// scratchFile makes a new file prefix<random>.bundle in the scratch
// directory, holding an exclusive lock on it for as long as it is open.
func (r *Repo) scratchFile(prefix string) (string, *os.File, error) {
	dir, err := r.Scratch()
	if err != nil {
		return "", nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	path := filepath.Join(dir, prefix+hex.EncodeToString(b[:])+".bundle")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return "", nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(path)
		return "", nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return path, f, nil
}

// scratchAge is how old a file in the scratch directory must be to be
// taken for one a killed process left whatever its lock says: far past
// the longest take. scratchGrace is the age past which a bundle whose
// lock is free is taken for a dead process's (a live one locks its file
// as it makes it).
const (
	scratchAge   = 6 * time.Hour
	scratchGrace = time.Minute
)

// Scratch is the directory in the git directory that holds the bundles
// and quarantines of takes and packs under way, private to the user. What
// killed processes left there is removed: a bundle nobody holds locked
// (with its quarantine), a quarantine without its bundle, and anything
// older than scratchAge.
func (r *Repo) Scratch() (string, error) {
	dir := filepath.Join(r.GitDir, "sandbox-mcp")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "take-") && !strings.HasPrefix(name, "pack-") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		p := filepath.Join(dir, name)
		age := time.Since(fi.ModTime())
		switch {
		case age > scratchAge:
			os.RemoveAll(p)
		case age < scratchGrace:
		case strings.HasSuffix(name, ".bundle"):
			if f, err := os.Open(p); err == nil {
				if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
					os.RemoveAll(strings.TrimSuffix(p, ".bundle") + ".git")
					os.Remove(p)
				}
				f.Close()
			}
		case strings.HasSuffix(name, ".git"):
			if _, err := os.Lstat(strings.TrimSuffix(p, ".git") + ".bundle"); os.IsNotExist(err) {
				os.RemoveAll(p)
			}
		}
	}
	return dir, nil
}

// Commit is one commit of a sandbox's branch.
type Commit struct {
	Hash    string    `json:"hash"`
	Author  string    `json:"author"`
	Date    time.Time `json:"date"`
	Subject string    `json:"subject"`
}

// Log lists the commits of sandbox name's branch that base lacks, newest
// first, at most n (0: 100).
func (r *Repo) Log(ctx context.Context, name, base string, n int) ([]Commit, error) {
	if err := checkName(ctx, name); err != nil {
		return nil, err
	}
	if n <= 0 {
		n = 100
	}
	branch, ref := Branch(name)
	if r.at(ctx, ref) == "" {
		return nil, fmt.Errorf("there is no branch %s in %s", branch, r.Dir)
	}
	rng := ref
	if base != "" {
		b, err := r.Resolve(ctx, base)
		if err != nil {
			return nil, err
		}
		rng = b + ".." + ref
	}
	out, err := r.git(ctx, nil, "log", "--no-color", "--format=%H%x00%an%x00%aI%x00%s%x00", "-n", strconv.Itoa(n), "--end-of-options", rng, "--")
	if err != nil {
		return nil, err
	}
	var cs []Commit
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+4 <= len(fields); i += 4 {
		c := Commit{Hash: strings.TrimSpace(fields[i]), Author: fields[i+1], Subject: fields[i+3]}
		c.Date, _ = time.Parse(time.RFC3339, fields[i+2])
		if IsHash(c.Hash) {
			cs = append(cs, c)
		}
	}
	return cs, nil
}

// DiffOptions shape Diff's answer.
type DiffOptions struct {
	// Stat gives the files changed and their line counts, not the patch;
	// NameOnly their names only.
	Stat, NameOnly bool
	// Paths limits the diff to these paths of the repository.
	Paths []string
	// MaxBytes bounds the answer (0: 1 MiB); Diff says when it cut.
	MaxBytes int
}

// Diff is the difference between two revisions (from empty: the merge
// base of to and the branch checked out).
func (r *Repo) Diff(ctx context.Context, from, to string, opt DiffOptions) (text string, cut bool, err error) {
	t, err := r.Resolve(ctx, to)
	if err != nil {
		return "", false, err
	}
	var f string
	if from == "" {
		head, err := r.Resolve(ctx, "HEAD")
		if err != nil {
			return "", false, err
		}
		out, err := r.git(ctx, nil, "merge-base", head, t)
		if err != nil {
			return "", false, fmt.Errorf("%.12s and HEAD have no common history", t)
		}
		f = strings.TrimSpace(string(out))
	} else if f, err = r.Resolve(ctx, from); err != nil {
		return "", false, err
	}
	args := []string{"diff", "--no-color", "--no-ext-diff", "--no-textconv"}
	switch {
	case opt.NameOnly:
		args = append(args, "--name-only", "-z", "--no-renames")
	case opt.Stat:
		args = append(args, "--find-renames", "--stat=200", "--summary")
	default:
		args = append(args, "--find-renames")
	}
	args = append(args, f, t, "--")
	for _, p := range opt.Paths {
		if p == "" || strings.ContainsRune(p, 0) {
			return "", false, fmt.Errorf("bad path %q", p)
		}
		args = append(args, ":(literal)"+p)
	}
	max := opt.MaxBytes
	if max <= 0 {
		max = 1 << 20
	}
	cmd := r.command(ctx, args...)
	var stderr bytes.Buffer
	lw := &limitWriter{max: max}
	cmd.Stdout, cmd.Stderr = lw, &stderr
	if err := cmd.Run(); err != nil && !lw.full {
		return "", false, fmt.Errorf("git diff: %w: %s", err, clip(stderr.String()))
	}
	return lw.buf.String(), lw.full, nil
}

// limitWriter keeps the first max bytes and then fails, which ends the
// writer (git) early.
type limitWriter struct {
	buf  bytes.Buffer
	max  int
	full bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); len(p) > room {
		l.buf.Write(p[:max(room, 0)])
		l.full = true
		return 0, errors.New("output bound reached")
	}
	return l.buf.Write(p)
}

// How Apply brings the branch's work in.
const (
	Merge      = "merge"       // a merge commit (--no-ff)
	Squash     = "squash"      // one commit with all of it
	CherryPick = "cherry-pick" // the branch's commits that base lacks, one by one
)

// Applied is what Apply did.
type Applied struct {
	How    string `json:"how"`
	At     string `json:"at,omitempty"` // the commit of the branch applied, when one was named
	Into   string `json:"into"`         // the branch checked out
	Before string `json:"before"`       // its commit before
	After  string `json:"after"`        // and after
}

// ErrDirty is Apply's answer for a work tree with uncommitted changes.
var ErrDirty = errors.New("the repository has uncommitted changes")

// Apply brings sandbox name's work into the branch checked out in r: a
// merge, a squashed commit, or the branch's commits since base picked
// one by one. A tree with uncommitted changes to tracked files is
// refused; a conflict undoes the attempt and names the files.
func (r *Repo) Apply(ctx context.Context, name, how, base string) (Applied, error) {
	return r.ApplyAt(ctx, name, how, base, "")
}

// ApplyAt is Apply of the branch as it was at commit at (a commit of
// it, such as the one a review read), or as it is when at is "": work
// the branch took on since is left out.
func (r *Repo) ApplyAt(ctx context.Context, name, how, base, at string) (Applied, error) {
	a := Applied{How: how}
	if err := checkName(ctx, name); err != nil {
		return a, err
	}
	branch, ref := Branch(name)
	tip := r.at(ctx, ref)
	if tip == "" {
		return a, fmt.Errorf("there is no branch %s in %s", branch, r.Dir)
	}
	if at != "" {
		c, err := r.Resolve(ctx, at+"^{commit}")
		if err != nil || !IsHash(c) {
			return a, fmt.Errorf("%q is not a commit of %s", at, r.Dir)
		}
		if _, err := r.git(ctx, nil, "merge-base", "--is-ancestor", c, tip); err != nil {
			return a, fmt.Errorf("commit %.12s is not on %s (its work since may have been rewritten): read work_log again", c, branch)
		}
		ref, a.At = c, c
	}
	out, err := r.git(ctx, nil, "symbolic-ref", "--quiet", "--short", "HEAD")
	if err != nil {
		return a, fmt.Errorf("%s has no branch checked out (a detached HEAD): check one out first", r.Dir)
	}
	a.Into = strings.TrimSpace(string(out))
	if a.Into == branch {
		return a, fmt.Errorf("%s is the branch checked out: check out the branch to apply it to", branch)
	}
	if st, err := r.git(ctx, nil, "status", "--porcelain=v1", "--untracked-files=no", "--ignore-submodules=none"); err != nil {
		return a, err
	} else if len(bytes.TrimSpace(st)) > 0 {
		return a, fmt.Errorf("%w in %s: commit or stash them first:\n%s", ErrDirty, r.Dir, clip(string(st)))
	}
	if a.Before, err = r.Resolve(ctx, "HEAD"); err != nil {
		return a, err
	}
	if err := r.checkIncoming(ctx, branch, ref); err != nil {
		return a, err
	}
	var undo []string
	switch how {
	case Merge, "":
		a.How = Merge
		_, err = r.git(ctx, nil, "merge", "--no-ff", "--no-edit", "-m", "Merge "+branch, "--end-of-options", ref)
		undo = []string{"merge", "--abort"}
	case Squash:
		_, err = r.git(ctx, nil, "merge", "--squash", "--end-of-options", ref)
		if err == nil {
			_, err = r.git(ctx, nil, "commit", "--quiet", "-m", "Work of "+branch+" (squashed)")
		}
		undo = []string{"reset", "--merge"}
	case CherryPick:
		b := base
		if b == "" {
			mb, merr := r.git(ctx, nil, "merge-base", "HEAD", ref)
			if merr != nil {
				return a, fmt.Errorf("%s and %s have no common history", a.Into, branch)
			}
			b = strings.TrimSpace(string(mb))
		}
		if b, err = r.Resolve(ctx, b); err != nil {
			return a, err
		}
		_, err = r.git(ctx, nil, "cherry-pick", "--allow-empty", "--end-of-options", b+".."+ref)
		undo = []string{"cherry-pick", "--abort"}
	default:
		return a, fmt.Errorf("how must be %s, %s or %s; got %q", Merge, Squash, CherryPick, how)
	}
	if err != nil {
		conflicts, _ := r.git(ctx, nil, "diff", "--name-only", "--diff-filter=U")
		_, _ = r.git(ctx, nil, undo...)
		if files := strings.Fields(string(conflicts)); len(files) > 0 {
			return a, fmt.Errorf("applying %s to %s conflicts in %s; nothing was changed: merge it by hand (git merge %s)", branch, a.Into, strings.Join(files, ", "), branch)
		}
		return a, fmt.Errorf("apply %s to %s: %w; nothing was changed", branch, a.Into, err)
	}
	a.After, err = r.Resolve(ctx, "HEAD")
	return a, err
}

// MaxApplyBytes bounds the size of the files a sandbox's work brings into
// the user's work tree through Apply: a bundle of a few megabytes can
// hold gigabytes of compressible data.
var MaxApplyBytes int64 = 512 << 20

// steering are the files whose change in the sandbox's work Apply
// refuses: they choose which of the user's configured programs a checkout
// runs, and where to (filters, merge drivers, encodings, LFS servers,
// submodule URLs), over content the sandbox wrote.
var steering = map[string]bool{".gitattributes": true, ".gitmodules": true, ".lfsconfig": true}

// checkIncoming refuses the sandbox's work (ref, against its merge base
// with HEAD) when it changes a steering file or brings more than
// MaxApplyBytes of files.
func (r *Repo) checkIncoming(ctx context.Context, branch, ref string) error {
	mb, err := r.git(ctx, nil, "merge-base", "HEAD", ref)
	if err != nil {
		return fmt.Errorf("%s and the branch checked out have no common history", branch)
	}
	base := strings.TrimSpace(string(mb))
	out, err := r.git(ctx, nil, "diff", "--raw", "-z", "--no-abbrev", "--no-renames", "--no-ext-diff", base, ref, "--")
	if err != nil {
		return err
	}
	var blobs []string
	fields := strings.Split(string(out), "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		meta, name := strings.Fields(fields[i]), fields[i+1]
		if steering[strings.ToLower(filepath.Base(name))] {
			return fmt.Errorf("the work of %s changes %s, which chooses the programs of your git config a checkout runs (filters, merge drivers) and where to: "+
				"nothing was changed; review it and merge by hand (git merge %s)", branch, name, branch)
		}
		if len(meta) >= 4 && IsHash(meta[3]) && strings.Trim(meta[3], "0") != "" && meta[1] != "160000" {
			blobs = append(blobs, meta[3])
		}
	}
	if len(blobs) == 0 {
		return nil
	}
	sizes, err := r.git(ctx, strings.NewReader(strings.Join(blobs, "\n")+"\n"), "cat-file", "--batch-check=%(objectsize)")
	if err != nil {
		return err
	}
	var total int64
	for _, f := range strings.Fields(string(sizes)) {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return fmt.Errorf("the size of the work's files: %q", f)
		}
		if total += n; total > MaxApplyBytes {
			return fmt.Errorf("the work of %s brings over %d MiB of files into the work tree: nothing was changed; look at it (work_diff with stat) and merge by hand (git merge %s)",
				branch, MaxApplyBytes>>20, branch)
		}
	}
	return nil
}

// git runs git in r with stdin and returns its output.
func (r *Repo) git(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	return run(ctx, r.Dir, stdin, args...)
}

func (r *Repo) command(ctx context.Context, args ...string) *exec.Cmd {
	return command(ctx, r.Dir, args...)
}

func command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = gitEnv()
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func run(ctx context.Context, dir string, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := command(ctx, dir, args...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := clip(stderr.String()); msg != "" {
			return stdout.Bytes(), fmt.Errorf("git %s: %s", subcommand(args), msg)
		}
		return stdout.Bytes(), fmt.Errorf("git %s: %w", subcommand(args), err)
	}
	return stdout.Bytes(), nil
}

// subcommand is the git command args run, past the -c settings.
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		if args[i] == "-c" {
			i++
			continue
		}
		return args[i]
	}
	return ""
}

// gitEnv is the server's environment without the variables that point
// git at another repository, index or object store, with prompts off and
// messages in one language.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "LC_ALL=") || strings.HasPrefix(kv, "LANGUAGE=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
}

// clip bounds git's message for an error.
func clip(s string) string {
	s = strings.TrimSpace(s)
	sc := bufio.NewScanner(strings.NewReader(s))
	var lines []string
	for sc.Scan() && len(lines) < 12 {
		lines = append(lines, sc.Text())
	}
	s = strings.Join(lines, "\n")
	if len(s) > 2000 {
		s = s[:2000] + "…"
	}
	return s
}

// IsHash reports whether s is a full object name (SHA-1 or SHA-256, lower
// case hex).
func IsHash(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}
