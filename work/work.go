// Package work ties a sandbox to a git repository on the host, so that
// what an agent does there comes back for review as a branch: Start puts
// a clone of the repository at a ref into the sandbox (from a bundle:
// none of the user's remotes, credentials or hooks go with it), and every
// Checkpoint commits the sandbox's changes, with the commands that made
// them in the message, and takes the commits onto the branch
// sandbox/<name> of the user's repository (gitwork: checked, that branch
// only). Log, Diff and Apply read and merge the branch on the host. The
// sandbox never gets write access to the host: its commits come back as a
// bundle the server reads out of it.
//
// It is the one API under the MCP tools and the human CLI.
package work

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/gitwork"
	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// Store keeps the ties (state.Store in production).
type Store interface {
	PutWork(w state.Work) error
	UpdateWork(w state.Work) (bool, error)
	Work(sandbox string) (state.Work, bool, error)
	DeleteWork(sandbox string) error
}

// DefaultMaxBundle bounds what one checkpoint takes from a sandbox.
const DefaultMaxBundle = 1 << 30

// DefaultMaxFile is the size past which a file is left out of a record:
// the size git hosts refuse a file at.
const DefaultMaxFile = 100 << 20

// DefaultMaxTaken is what the records of one sandbox made on their own
// may bring to the host in all, before they stop (checkpoints go on).
const DefaultMaxTaken = 4 << 30

// cleanTimeout bounds the removal of a bundle in the sandbox.
const cleanTimeout = 30 * time.Second

// takeTimeout bounds the host's work on one checkpoint's bundle.
const takeTimeout = 15 * time.Minute

// Service is the work of sandboxes as branches.
type Service struct {
	m     *sandbox.Manager
	store Store
	// MaxBundle bounds what one checkpoint takes from a sandbox (0:
	// DefaultMaxBundle).
	MaxBundle int64
	// MaxFile is the size past which a file of the clone is left out of
	// a record, keeping the version recorded last (0: DefaultMaxFile).
	MaxFile int64
	// MaxTaken bounds what the records of one sandbox made on their own
	// bring to the host in all (0: DefaultMaxTaken).
	MaxTaken int64
	// Quiet is how long a sandbox's commands must have ended before
	// Follow records its work (0: DefaultQuiet).
	Quiet time.Duration

	follow follower

	mu    sync.Mutex
	locks map[string]chan struct{}
}

// New returns the Service over m's sandboxes, keeping ties in store.
func New(m *sandbox.Manager, store Store) *Service {
	return &Service{m: m, store: store, locks: map[string]chan struct{}{}}
}

func (s *Service) maxTaken() int64 {
	if s.MaxTaken > 0 {
		return s.MaxTaken
	}
	return DefaultMaxTaken
}

func (s *Service) maxFile() int64 {
	if s.MaxFile > 0 {
		return s.MaxFile
	}
	return DefaultMaxFile
}

// lock orders the operations on one sandbox's work in this process; a
// wait for it ends with ctx.
func (s *Service) lock(ctx context.Context, name string) (func(), error) {
	s.mu.Lock()
	l := s.locks[name]
	if l == nil {
		l = make(chan struct{}, 1)
		s.locks[name] = l
	}
	s.mu.Unlock()
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("sandbox %q: waiting for the work under way on it (a record or checkpoint): %w", name, ctx.Err())
	}
}

// Started is what Start did.
type Started struct {
	Sandbox string `json:"sandbox"`
	Repo    string `json:"repo"`
	Branch  string `json:"branch"`
	Ref     string `json:"ref"`
	Base    string `json:"base"`
	Path    string `json:"path"`
}

// Start clones the repository whose work tree holds repoDir, at ref
// (default HEAD), into the sandbox at dest (default the workspace's
// <repository name>), on the branch sandbox/<name>, which it makes in the
// user's repository at that commit. The user's working tree, remotes and
// credentials stay out of it. A sandbox holds the work of one repository.
func (s *Service) Start(ctx context.Context, name, repoDir, ref, dest string) (Started, error) {
	if err := sandbox.ValidateName(name); err != nil {
		return Started{}, err
	}
	unlock, err := s.lock(ctx, name)
	if err != nil {
		return Started{}, err
	}
	defer unlock()
	if w, ok, err := s.store.Work(name); err != nil {
		return Started{}, err
	} else if ok {
		return Started{}, &sandbox.ArgError{Err: fmt.Errorf("sandbox %q already holds the work of %s (branch %s, at %s in the sandbox): one repository per sandbox; use another sandbox",
			name, w.Repo, gitwork.BranchPrefix+name, w.Path)}
	}
	r, err := gitwork.Open(ctx, repoDir)
	if err != nil {
		return Started{}, &sandbox.ArgError{Err: err}
	}
	if ref == "" {
		ref = "HEAD"
	}
	if dest == "" {
		dest = path.Join(s.m.Workdir(), filepath.Base(r.Dir))
	} else if !path.IsAbs(dest) {
		dest = path.Join(s.m.Workdir(), dest)
	}
	dest = path.Clean(dest)
	if dest == "/" {
		return Started{}, &sandbox.ArgError{Err: errors.New("the clone cannot be the sandbox's /")}
	}
	branch, _ := gitwork.Branch(name)
	// The sandbox first: no branch is made for a sandbox that cannot
	// take the clone.
	if res, err := s.run(ctx, name, "check", `command -v git >/dev/null 2>&1 || exit 127
set -- "$1" $(git --version | sed -n 's/^git version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
[ "${2:-0}" -gt 2 ] || { [ "${2:-0}" -eq 2 ] && [ "${3:-0}" -ge 31 ]; } || exit 126
[ ! -e "$1" ] || [ -d "$1" ] && [ -z "$(ls -A "$1" | grep -v '^\.sandbox-mcp-clone-')" ] || exit 17`, nil, dest); err != nil {
		return Started{}, err
	} else if res.code == 127 {
		return Started{}, fmt.Errorf("sandbox %q has no git: install it (install tool, package git) and try again", name)
	} else if res.code == 126 {
		return Started{}, fmt.Errorf("sandbox %q has a git older than 2.31, which records need: install a newer one and try again", name)
	} else if res.code == 17 {
		return Started{}, &sandbox.ArgError{Err: fmt.Errorf("%s exists in sandbox %q and is not an empty directory: name another path", dest, name)}
	} else if res.code != 0 {
		return Started{}, res.failed("look at " + dest)
	}
	base, err := r.Start(ctx, name, ref)
	if err != nil {
		return Started{}, &sandbox.ArgError{Err: err}
	}
	bundle, release, err := r.PackFile(ctx, name)
	if err != nil {
		return Started{}, err
	}
	defer release()
	inBox := "/tmp/.sandbox-mcp-work-" + randomHex() + ".bundle"
	if err := s.upload(ctx, name, bundle, inBox); err != nil {
		return Started{}, err
	}
	// LFS pointers stay pointers: the sandbox has no LFS server to fetch
	// their objects from, and whatever smudge filter its git has must not
	// make something else of them. The clone is made apart and moved into
	// place, so a server killed midway leaves no half-made clone in the
	// way of the next try (and what it left goes at that try).
	script := `b=$1 p=$2 br=$3 who=$4
if [ -d "$p" ]; then
  # An empty directory, maybe a mount point: the clone is made inside it
  # and its entries moved up; what a killed start left there goes.
  rm -rf "$p"/.sandbox-mcp-clone-* 2>/dev/null
  tmp="$p/.sandbox-mcp-clone-$$"
else
  parent=$(dirname "$p")
  mkdir -p "$parent" || exit 1
  find "$parent" -maxdepth 1 -name '.sandbox-mcp-clone-*' -mmin +30 -exec rm -rf {} + 2>/dev/null
  tmp="$parent/.sandbox-mcp-clone-$$"
fi
trap 'rm -f "$b"; rm -rf "$tmp"' EXIT
git -c filter.lfs.smudge= -c filter.lfs.process= -c filter.lfs.required=false clone --quiet --no-hardlinks --branch "$br" -- "$b" "$tmp" || exit 1
cd "$tmp" && git remote remove origin && git config user.name "sandbox $who" && git config user.email "$who@sandbox.invalid" || exit 1
cd /
if [ -d "$p" ]; then
  for f in "$tmp"/* "$tmp"/.[!.]* "$tmp"/..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    mv "$f" "$p"/ || exit 1
  done
  rmdir "$tmp"
else
  mv "$tmp" "$p"
fi`
	if res, err := s.run(ctx, name, "clone", script, nil, inBox, dest, branch, name); err != nil {
		return Started{}, err
	} else if res.code != 0 {
		return Started{}, res.failed("clone the repository into " + dest)
	}
	w := state.Work{Sandbox: name, Repo: r.Dir, Path: dest, Ref: ref, Base: base, Taken: base, TakenAt: time.Now().UTC(), Created: time.Now().UTC()}
	if err := s.store.PutWork(w); err != nil {
		return Started{}, fmt.Errorf("record the tie of sandbox %q to %s: %w", name, r.Dir, err)
	}
	return Started{Sandbox: name, Repo: r.Dir, Branch: branch, Ref: ref, Base: base, Path: dest}, nil
}

// Checkpointed is what Checkpoint did.
type Checkpointed struct {
	Sandbox string `json:"sandbox"`
	Repo    string `json:"repo"`
	Branch  string `json:"branch"`
	// Commit is the sandbox's last record, now the branch's; Committed
	// says this checkpoint recorded changes not recorded before.
	Commit    string `json:"commit"`
	Committed bool   `json:"committed"`
	// New says the branch moved; Rewritten that it moved to a commit that
	// does not descend from where it was (a restore took the sandbox's
	// work back, or the sandbox rewrote its record).
	New       bool `json:"new"`
	Rewritten bool `json:"rewritten,omitempty"`
	// Files is how many files the new commits change against the last
	// record taken.
	Files int `json:"files,omitempty"`
	// LeftOut lists files over the size a record takes (MaxFile): they
	// keep the version last recorded.
	LeftOut []string `json:"left_out,omitempty"`
}

// Checkpoint records the sandbox's clone as it is (message, and the
// commands run since the last record) and takes the record onto the
// branch sandbox/<name> in the user's repository.
func (s *Service) Checkpoint(ctx context.Context, name, message string) (Checkpointed, error) {
	return s.CheckpointWith(ctx, name, CheckpointRequest{Message: message})
}

// CheckpointRequest shapes CheckpointWith.
type CheckpointRequest struct {
	// Message is the commit's message.
	Message string
	// Include are paths of the clone that .gitignore leaves out (build
	// outputs, say) to record too; once recorded they stay in the records.
	Include []string
}

// maxInclude bounds CheckpointRequest.Include.
const maxInclude = 100

// CheckpointWith is Checkpoint with the paths of req.Include recorded
// even where .gitignore leaves them out.
func (s *Service) CheckpointWith(ctx context.Context, name string, req CheckpointRequest) (Checkpointed, error) {
	if len(req.Include) > maxInclude {
		return Checkpointed{}, &sandbox.ArgError{Err: fmt.Errorf("at most %d paths to include, not %d", maxInclude, len(req.Include))}
	}
	var include []string
	for _, p := range req.Include {
		c := path.Clean(p)
		if p == "" || len(p) > 4096 || path.IsAbs(p) || c == "." || c == ".." || strings.HasPrefix(c, "../") ||
			c == ".git" || strings.HasPrefix(c, ".git/") || strings.ContainsRune(p, 0) {
			return Checkpointed{}, &sandbox.ArgError{Err: fmt.Errorf("include %q: name a path inside the clone, relative to its top, outside .git", p)}
		}
		include = append(include, ":(literal)"+c)
	}
	w, r, _, unlock, err := s.open(ctx, name, false, true)
	if err != nil {
		return Checkpointed{}, err
	}
	defer unlock()
	return s.checkpoint(ctx, name, &w, r, req.Message, include...)
}

// recordScript commits the clone's working tree ($1) as it is, ignored
// files left out, onto the work ref (gitwork.WorkRef; the base $2 when
// there is none yet), through an index of its own: the clone's HEAD,
// index and branches stay the agent's. Files over $3 bytes keep the
// version last recorded; the pathspecs after $4 are added even where
// .gitignore leaves them out. The message comes on stdin, and the commits
// the agent made since the last record are added to it. The clone's hooks
// do not run. It prints "made" or "same" and the record's commit, each on
// a line, then the files left out as NUL-separated exclude pathspecs. A
// record moves the work ref only from the value it read.
const recordScript = `cd "$1" 2>/dev/null || exit 3
base=$2 max=$3 who=$4
g=$(git rev-parse --absolute-git-dir) || exit 5
` + noHooks + `
idx="$g/sandbox-mcp-index"
# An index (and pathspec file) per run, the index moved into place once
# written: nothing is shared with a run a killed server left going, and
# what such runs left goes.
find "$g" -maxdepth 1 -name 'sandbox-mcp-*.[0-9]*' -mmin +10 -exec rm -f {} + 2>/dev/null
find "$g/refs/sandbox-mcp" -name '*.lock' -mmin +10 -exec rm -f {} + 2>/dev/null
export GIT_INDEX_FILE="$idx.$$"
ps="$g/sandbox-mcp-pathspec.$$"
trap 'rm -f "$GIT_INDEX_FILE" "$GIT_INDEX_FILE.lock" "$ps"' EXIT
[ ! -f "$idx" ] || cp "$idx" "$GIT_INDEX_FILE" 2>/dev/null
export GIT_AUTHOR_NAME="sandbox $who" GIT_AUTHOR_EMAIL="$who@sandbox.invalid"
export GIT_COMMITTER_NAME="sandbox $who" GIT_COMMITTER_EMAIL="$who@sandbox.invalid"
ref=refs/sandbox-mcp/work
cur=$(git rev-parse -q --verify "$ref")
prev=$(git rev-parse -q --verify "$ref^{commit}") || prev=$base
git cat-file -e "$prev^{commit}" 2>/dev/null || exit 6
[ -f "$GIT_INDEX_FILE" ] || git read-tree "$prev" || exit 1
{ printf '.\0'; find . -path ./.git -prune -o -type f -size +"$max"c -exec printf ':(exclude,literal)%s\0' {} + 2>/dev/null || :; } > "$ps" || exit 1
add() { git add -A --pathspec-from-file="$ps" --pathspec-file-nul; }
add 2>/dev/null || { rm -f "$GIT_INDEX_FILE" && git read-tree "$prev" && add; } || exit 1
shift 4
[ $# -eq 0 ] || git add -f -- "$@" || exit 7
tree=$(git write-tree) || exit 1
mv -f "$GIT_INDEX_FILE" "$idx" || exit 1
c=$prev
if [ "$tree" = "$(git rev-parse "$prev^{tree}")" ]; then echo same; else
  head=$(git rev-parse -q --verify HEAD)
  seen=$(git rev-parse -q --verify refs/sandbox-mcp/head) || seen=$base
  c=$({ cat
    if [ -n "$head" ] && [ "$head" != "$seen" ]; then
      l=$(git log --format='%h %s' -n 20 "$seen..$head" -- 2>/dev/null)
      [ -z "$l" ] || printf '\nCommits made in the sandbox:\n%s\n' "$l"
    fi; } | git commit-tree "$tree" -p "$prev") || exit 1
  [ -z "$head" ] || git update-ref refs/sandbox-mcp/head "$head"
  echo made
fi
[ "$c" = "$cur" ] || git update-ref -m "sandbox-mcp: record" "$ref" "$c" "$cur" || exit 1
echo "$c"
tail -c +3 "$ps"`

// noHooks keeps the clone's hooks and fsmonitor from running in a
// script's git commands, and LFS's clean filter: a record keeps a file's
// content, not a pointer to an object that would exist only in the
// sandbox.
const noHooks = `export GIT_CONFIG_COUNT=5 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/dev/null GIT_CONFIG_KEY_1=core.fsmonitor GIT_CONFIG_VALUE_1=false
export GIT_CONFIG_KEY_2=filter.lfs.clean GIT_CONFIG_VALUE_2= GIT_CONFIG_KEY_3=filter.lfs.process GIT_CONFIG_VALUE_3= GIT_CONFIG_KEY_4=filter.lfs.required GIT_CONFIG_VALUE_4=false`

// undoScript takes back a record ($2) of the clone ($1) that the host
// refused: the work ref returns to the last commit taken ($3), or goes
// where the clone lacks it, and the record's index goes, so that the next
// record is made afresh from there and carries nothing of the refused one.
const undoScript = `cd "$1" 2>/dev/null || exit 3
g=$(git rev-parse --absolute-git-dir) || exit 5
` + noHooks + `
if git cat-file -e "$3^{commit}" 2>/dev/null; then git update-ref refs/sandbox-mcp/work "$3" "$2"; else git update-ref -d refs/sandbox-mcp/work "$2"; fi || exit 1
git update-ref -d refs/sandbox-mcp/head 2>/dev/null
rm -f "$g/sandbox-mcp-index"`

// bundleScript writes to $1 the bundle of the clone's ($2) work ref
// without what the host has: the last commit taken ($3), else the base
// ($4), else all of it (a record rewritten, by a restore or by the
// sandbox, may hold neither). Bundles a killed server left go.
const bundleScript = `f=$1; cd "$2" || exit 3
find /tmp -maxdepth 1 -name '.sandbox-mcp-work-*.bundle' -mmin +30 -exec rm -f {} + 2>/dev/null
for x in "$3" "$4" ""; do
  if [ -n "$x" ]; then git cat-file -e "$x^{commit}" 2>/dev/null || continue; set -- "^$x"; else set --; fi
  git bundle create --quiet "$f" refs/sandbox-mcp/work "$@" 2>/dev/null && exit 0
done
exit 4`

// checkpoint is Checkpoint of name, tied as w to r, under its lock; it
// records the commit taken in w.
func (s *Service) checkpoint(ctx context.Context, name string, w *state.Work, r *gitwork.Repo, message string, include ...string) (Checkpointed, error) {
	branch, _ := gitwork.Branch(name)
	out := Checkpointed{Sandbox: name, Repo: w.Repo, Branch: branch}
	started := time.Now().UTC()
	msg := s.message(name, message, w.TakenAt, auto(ctx))
	res, err := s.run(ctx, name, "record", recordScript, []byte(msg), append([]string{w.Path, w.Base, fmt.Sprint(s.maxFile()), name}, include...)...)
	if err != nil {
		return out, err
	}
	switch res.code {
	case 3:
		return out, fmt.Errorf("the clone at %s in sandbox %q is gone (workspace_from_repo made it): its work since the last checkpoint is lost", w.Path, name)
	case 5:
		return out, fmt.Errorf("%s in sandbox %q is no longer a git clone: its work since the last checkpoint cannot be recorded", w.Path, name)
	case 6:
		return out, fmt.Errorf("the clone at %s in sandbox %q no longer has its base commit %.12s: its work cannot be recorded on it", w.Path, name, w.Base)
	case 7:
		return out, &sandbox.ArgError{Err: res.failed("include paths in the record of " + w.Path)}
	}
	lines := strings.SplitN(res.stdout, "\n", 3)
	if res.code != 0 || len(lines) != 3 || (lines[0] != "made" && lines[0] != "same") || !gitwork.IsHash(lines[1]) {
		return out, res.failed("record the work in " + w.Path)
	}
	out.Committed, out.Commit = lines[0] == "made", lines[1]
	for _, f := range strings.Split(lines[2], "\x00") {
		f, ok := strings.CutPrefix(f, ":(exclude,literal)./")
		if !ok {
			continue
		}
		if len(out.LeftOut) == 20 {
			out.LeftOut = append(out.LeftOut, "…")
			break
		}
		if strings.ContainsFunc(f, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			f = strconv.Quote(f)
		}
		out.LeftOut = append(out.LeftOut, textcut.Shorten(f, 300))
	}
	if out.Commit == w.Taken {
		if w.FollowError != "" {
			w.FollowError = ""
			_, _ = s.store.UpdateWork(*w)
		}
		return out, nil
	}
	if auto(ctx) && w.TakenBytes >= s.maxTaken() {
		return out, fmt.Errorf("%w: the records of sandbox %q have brought %d bytes to the host, its budget for records made on their own: they stop here; checkpoint takes the work on", gitwork.ErrTooLarge, name, w.TakenBytes)
	}
	file := "/tmp/.sandbox-mcp-work-" + randomHex() + ".bundle"
	res, err = s.run(ctx, name, "bundle", bundleScript, nil, file, w.Path, w.Taken, w.Base)
	if err != nil {
		return out, err
	}
	defer func() {
		// Bounded apart: the sandbox's rm must not hold the lock.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanTimeout)
		defer cancel()
		_, _ = s.run(cctx, name, "clean", `rm -f "$1"`, nil, file)
	}()
	if res.code != 0 {
		return out, res.failed("bundle the sandbox's work")
	}
	taken, size, err := s.take(ctx, r, name, file, w.Base, out.Commit)
	if err != nil {
		if !errors.Is(err, errNotHeld) && ctx.Err() == nil {
			// A refused record must not ride along in every later one.
			_, _ = s.run(ctx, name, "undo", undoScript, nil, w.Path, out.Commit, w.Taken)
		}
		return out, err
	}
	out.New, out.Rewritten = taken.From != taken.To, taken.Rewritten
	if names, _, err := r.Diff(ctx, w.Taken, taken.To, gitwork.DiffOptions{NameOnly: true}); err == nil {
		out.Files = strings.Count(names, "\x00")
	}
	w.Taken, w.TakenAt, w.FollowError = taken.To, started, ""
	w.TakenBytes += size
	if ok, err := s.store.UpdateWork(*w); err != nil {
		return out, fmt.Errorf("record the checkpoint of sandbox %q: %w", name, err)
	} else if !ok {
		return out, fmt.Errorf("sandbox %q was untied from %s (destroyed?) while its work was taken: the branch %s holds it", name, w.Repo, branch)
	}
	return out, nil
}

// FilesCount is n files, in words: "1 file", "3 files".
func FilesCount(n int) string {
	if n == 1 {
		return "1 file"
	}
	return strconv.Itoa(n) + " files"
}

// message is a record's commit message: the caller's, and the commands
// run in the sandbox since the last record (since). Without one, a
// checkpoint's subject says so, and a record made on its own (auto) is
// named after the last of those commands, as git log --oneline shows it.
func (s *Service) message(name, message string, since time.Time, auto bool) string {
	message = strings.TrimSpace(message)
	var cmds []string
	if hist, err := s.m.CommandHistory(name, 100); err == nil {
		for _, h := range hist {
			if !h.Time.After(since) || strings.HasPrefix(h.Command, labelPrefix) {
				continue
			}
			cmd := textcut.Shorten(strings.Join(strings.Fields(h.Command), " "), 200)
			cmds = append(cmds, fmt.Sprintf("$ %s  # exit %d\n", cmd, h.ExitCode))
		}
	}
	if message == "" {
		switch {
		case !auto:
			message = "Checkpoint of sandbox " + name
		case len(cmds) == 0:
			message = "Work of sandbox " + name
		default:
			last, _, _ := strings.Cut(cmds[len(cmds)-1], "  # exit")
			message = textcut.Shorten(last, 72)
			if len(cmds) > 1 {
				message += fmt.Sprintf(" (and %d more)", len(cmds)-1)
			}
		}
	}
	if len(cmds) == 0 {
		return message + "\n"
	}
	var b strings.Builder
	for i, c := range cmds {
		if i == 50 || b.Len() > 8<<10 {
			b.WriteString("…\n")
			break
		}
		b.WriteString(c)
	}
	return message + "\n\nCommands run in the sandbox since the last record:\n" + b.String()
}

// take reads the bundle file in the sandbox and takes its HEAD onto the
// sandbox's branch.
func (s *Service) take(ctx context.Context, r *gitwork.Repo, name, file, base, want string) (gitwork.Taken, int64, error) {
	max := s.MaxBundle
	if max <= 0 {
		max = DefaultMaxBundle
	}
	if auto(ctx) {
		if sb, ok := s.m.Lookup(name); !ok || sb.Ended() != "" {
			return gitwork.Taken{}, 0, errNotHeld // stopped meanwhile: not brought back for this
		}
	}
	var taken gitwork.Taken
	var size int64
	_, err := s.m.Download(ctx, name, file, func(rd io.Reader, top string, _ sandbox.HostCap, finish func() error) error {
		tr := tar.NewReader(rd)
		hdr, err := tr.Next()
		if err != nil {
			return fmt.Errorf("read the sandbox's bundle: %w", err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Name != top {
			return fmt.Errorf("the sandbox sent %q (type %c) for its bundle, not a file", hdr.Name, hdr.Typeflag)
		}
		size = hdr.Size
		if hdr.Size > max {
			return fmt.Errorf("%w: %d bytes, over the %d a checkpoint takes: commit less (large files belong in LFS or out of the repository)", gitwork.ErrTooLarge, hdr.Size, max)
		}
		spool, cleanup, err := r.Spool(tr, max)
		if err != nil {
			return err
		}
		defer cleanup()
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return err
		}
		if err := finish(); err != nil {
			return err
		}
		// Bounded on the host too: a small bundle can take git long to
		// unpack and check.
		tctx, cancel := context.WithTimeout(ctx, takeTimeout)
		defer cancel()
		taken, err = r.TakeFileWith(tctx, name, spool, gitwork.WorkRef, gitwork.TakeOptions{Want: want, MaxBlob: s.maxFile()}, base)
		return err
	})
	return taken, size, err
}

// Log is a sandbox's work: its tie and its branch's commits since the
// base, newest first.
type Log struct {
	Sandbox string           `json:"sandbox"`
	Repo    string           `json:"repo"`
	Branch  string           `json:"branch"`
	Base    string           `json:"base"`
	Commits []gitwork.Commit `json:"commits"`
	// Checkpoint is the checkpoint made first, when asked for.
	Checkpoint *Checkpointed `json:"checkpoint,omitempty"`
	// FollowError is why the last record made on its own failed, until
	// a record succeeds.
	FollowError string `json:"follow_error,omitempty"`
}

// Log lists the commits of the sandbox's branch since its base (at most
// n; 0: 100), after a checkpoint when refresh is set.
func (s *Service) Log(ctx context.Context, name string, n int, refresh bool) (Log, error) {
	w, r, cp, unlock, err := s.open(ctx, name, refresh, false)
	if err != nil {
		return Log{}, err
	}
	defer unlock()
	branch, _ := gitwork.Branch(name)
	cs, err := r.Log(ctx, name, w.Base, n)
	return Log{Sandbox: name, Repo: w.Repo, Branch: branch, Base: w.Base, Commits: cs, Checkpoint: cp, FollowError: w.FollowError}, err
}

// DiffRequest shapes Diff.
type DiffRequest struct {
	// From and To are revisions of the user's repository; From defaults
	// to the base, To to the sandbox's branch.
	From, To string
	gitwork.DiffOptions
	// Refresh makes a checkpoint first.
	Refresh bool
}

// Diff is a sandbox's work as a diff.
type Diff struct {
	Sandbox string `json:"sandbox"`
	Repo    string `json:"repo"`
	From    string `json:"from"`
	To      string `json:"to"`
	// ToCommit is the commit To was: work_apply's commit, to merge what
	// was read and no record made since.
	ToCommit   string        `json:"to_commit,omitempty"`
	Text       string        `json:"diff"`
	Cut        bool          `json:"cut,omitempty"`
	Checkpoint *Checkpointed `json:"checkpoint,omitempty"`
}

// Diff is the difference the sandbox's work makes: from its base (or
// req.From) to its branch (or req.To).
func (s *Service) Diff(ctx context.Context, name string, req DiffRequest) (Diff, error) {
	w, r, cp, unlock, err := s.open(ctx, name, req.Refresh, false)
	if err != nil {
		return Diff{}, err
	}
	defer unlock()
	branch, _ := gitwork.Branch(name)
	from, to := req.From, req.To
	if from == "" {
		from = w.Base
	}
	if to == "" {
		to = branch
	}
	// The commit first: a record landing meanwhile shows in neither.
	toCommit, err := r.Resolve(ctx, to+"^{commit}")
	if err != nil {
		return Diff{}, &sandbox.ArgError{Err: fmt.Errorf("%q is not a commit of %s", to, w.Repo)}
	}
	text, cut, err := r.Diff(ctx, from, toCommit, req.DiffOptions)
	if err != nil {
		return Diff{}, &sandbox.ArgError{Err: err}
	}
	return Diff{Sandbox: name, Repo: w.Repo, From: from, To: to, ToCommit: toCommit, Text: text, Cut: cut, Checkpoint: cp}, nil
}

// Applied is what Apply did.
type Applied struct {
	Sandbox string `json:"sandbox"`
	Repo    string `json:"repo"`
	Branch  string `json:"branch"`
	gitwork.Applied
	Checkpoint *Checkpointed `json:"checkpoint,omitempty"`
}

// ApplyRequest shapes Apply.
type ApplyRequest struct {
	// How is merge (default), squash or cherry-pick.
	How string
	// At, when set, is the commit of the branch to apply (the one a
	// review read, e.g. Diff's ToCommit): records made since stay out.
	At string
	// Refresh makes a checkpoint first.
	Refresh bool
}

// Apply brings the sandbox's work into the branch checked out in the
// user's repository (gitwork.Repo.Apply: merge, squash or cherry-pick; a
// dirty tree is refused, a conflict undone), after a checkpoint when
// refresh is set.
func (s *Service) Apply(ctx context.Context, name string, req ApplyRequest) (Applied, error) {
	w, r, cp, unlock, err := s.open(ctx, name, req.Refresh, true)
	if err != nil {
		return Applied{}, err
	}
	defer unlock()
	branch, _ := gitwork.Branch(name)
	a, err := r.ApplyAt(ctx, name, req.How, w.Base, req.At)
	out := Applied{Sandbox: name, Repo: w.Repo, Branch: branch, Applied: a, Checkpoint: cp}
	if err != nil {
		return out, &sandbox.ArgError{Err: err}
	}
	return out, nil
}

// Forget drops the tie of a sandbox (destroyed): its branch stays in the
// user's repository, the user's to merge or delete.
func (s *Service) Forget(name string) error {
	s.unfollow(name)
	return s.store.DeleteWork(name)
}

// open checks name, takes its lock (with refresh or locked), reads its
// tie and, with refresh, makes a checkpoint first (cp); unlock releases
// the lock.
func (s *Service) open(ctx context.Context, name string, refresh, locked bool) (w state.Work, r *gitwork.Repo, cp *Checkpointed, unlock func(), err error) {
	if err := sandbox.ValidateName(name); err != nil {
		return w, nil, nil, nil, err
	}
	// Reads of the host's branch need no lock: a take moves it whole.
	unlock = func() {}
	if refresh || locked {
		if unlock, err = s.lock(ctx, name); err != nil {
			return w, nil, nil, nil, err
		}
	}
	w, r, err = s.tie(ctx, name)
	if err == nil && refresh {
		var c Checkpointed
		if c, err = s.checkpoint(ctx, name, &w, r, ""); err == nil {
			cp = &c
		}
	}
	if err != nil {
		unlock()
		return w, nil, nil, nil, err
	}
	return w, r, cp, unlock, nil
}

// tie is sandbox name's tie and its repository.
func (s *Service) tie(ctx context.Context, name string) (state.Work, *gitwork.Repo, error) {
	w, ok, err := s.store.Work(name)
	if err != nil {
		return w, nil, err
	}
	if !ok {
		return w, nil, &sandbox.ArgError{Err: fmt.Errorf("sandbox %q holds no repository's work: start it with workspace_from_repo", name)}
	}
	r, err := gitwork.Open(ctx, w.Repo)
	if err != nil {
		return w, nil, fmt.Errorf("the repository of sandbox %q: %w", name, err)
	}
	return w, r, nil
}

// labelPrefix starts the history labels of this package's commands, which
// a checkpoint's message leaves out.
const labelPrefix = "(work: "

// ran is how a command in the sandbox ended.
type ran struct {
	what   string
	code   int
	stdout string
	stderr string
}

func (r ran) failed(what string) error {
	msg := strings.TrimSpace(r.stderr)
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	if msg == "" {
		msg = strings.TrimSpace(r.stdout)
	}
	return fmt.Errorf("%s: exit %d: %s", what, r.code, msg)
}

// run runs script (sh -c, args as $1…) in the sandbox, recorded in its
// history as this package's label.
func (s *Service) run(ctx context.Context, name, what, script string, stdin []byte, args ...string) (ran, error) {
	var stdout, stderr strings.Builder
	res, err := s.exec(ctx, name, labelPrefix+what+")", shell.Request{Command: guest.ShellLine(script, args...), Stdin: stdin, Stdout: &limited{b: &stdout}, Stderr: &limited{b: &stderr}, Timeout: 10 * time.Minute})
	if err != nil {
		return ran{}, err
	}
	return ran{what: what, code: res.ExitCode, stdout: stdout.String(), stderr: stderr.String()}, nil
}

// limited keeps the first 64 KiB written to it.
type limited struct{ b *strings.Builder }

func (l *limited) Write(p []byte) (int, error) {
	if room := 64<<10 - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// upload puts the host file src at dst in the sandbox.
func (s *Service) upload(ctx context.Context, name, src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	_, err = s.m.Upload(ctx, name, sandbox.UploadRequest{Dest: dst, Base: path.Base(dst), Pack: func(w io.Writer, top string) error {
		tw := tar.NewWriter(w)
		if err := tw.WriteHeader(&tar.Header{Name: top, Typeflag: tar.TypeReg, Mode: 0o600, Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, f); err != nil {
			return err
		}
		return tw.Close()
	}})
	if err != nil {
		return fmt.Errorf("put the repository's bundle into sandbox %q: %w", name, err)
	}
	return nil
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
