package syncer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sandbox-mcp/sandbox-mcp/state"
	"github.com/sandbox-mcp/sandbox-mcp/transfer"
)

// job is one running sync in this process.
type job struct {
	m    *Manager
	root *os.Root

	mu  sync.Mutex
	rec state.Sync

	stopOnce sync.Once
	stopped  chan struct{}
	// fresh is set when the caller has just mirrored with ws already
	// watching: run goes on from there.
	fresh bool
	ws    *watchSet
}

func (m *Manager) newJob(rec state.Sync) (*job, error) {
	fi, err := os.Stat(rec.LocalDir)
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("local directory %s: not a directory (%v)", rec.LocalDir, err)
	}
	root, err := os.OpenRoot(rec.LocalDir)
	if err != nil {
		return nil, err
	}
	return &job{m: m, root: root, rec: rec, stopped: make(chan struct{})}, nil
}

func (j *job) stop() { j.stopOnce.Do(func() { close(j.stopped) }) }

func (j *job) close() {
	if j.ws != nil {
		j.ws.w.Close()
	}
	j.root.Close()
}

func (j *job) status() Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Status{Sync: j.rec, Here: true}
}

func (j *job) ignored(name string) bool { return slices.Contains(j.rec.Ignore, name) }

// ignoredPath reports whether any component of rel is ignored.
func (j *job) ignoredPath(rel string) bool {
	for part := range strings.SplitSeq(rel, "/") {
		if j.ignored(part) {
			return true
		}
	}
	return false
}

// update changes the job's status here and in its record. It returns
// errStopped when the record is gone (sync_stop, perhaps from another
// server).
func (j *job) update(fn func(*state.Sync)) error {
	j.mu.Lock()
	fn(&j.rec)
	j.mu.Unlock()
	err := j.m.opt.Store.UpdateSync(j.rec.ID, fn)
	if errors.Is(err, state.ErrNoSync) {
		return errStopped
	}
	return err
}

// run keeps the sandbox in step until the job is stopped, ctx ends or the
// job cannot go on (host directory gone, sandbox destroyed).
func (j *job) run(ctx context.Context) {
	defer j.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-j.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	for ctx.Err() == nil {
		// Watches are set before the copy, so no change slips between.
		ws := j.ws
		j.ws = nil
		if ws == nil {
			var err error
			if ws, err = j.startWatch(); err != nil {
				if j.fail(ctx, err) {
					return
				}
				continue
			}
		}
		if !j.fresh { // copy everything first: changes may have been missed
			if _, err := j.mirror(ctx); err != nil {
				ws.w.Close()
				if j.fail(ctx, err) {
					return
				}
				continue
			}
		}
		j.fresh = false
		err := j.watch(ctx, ws)
		ws.w.Close()
		if err != nil && j.fail(ctx, err) {
			return
		}
	}
}

// watchSet is a job's watcher with the directories it polls instead.
type watchSet struct {
	w *fsnotify.Watcher
	p *poller
}

// startWatch watches the host directory's tree.
func (j *job) startWatch() (*watchSet, error) {
	if err := j.checkHost(); err != nil {
		return nil, err
	}
	w, err := fsnotify.NewBufferedWatcher(4096)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", j.rec.LocalDir, err)
	}
	p := &poller{snap: map[string]fileSig{}}
	j.addTree(w, p, ".")
	j.setPolled(len(p.dirs))
	return &watchSet{w: w, p: p}, nil
}

// errGone ends a job for good.
type errGone struct{ why string }

func (e errGone) Error() string { return e.why }

// fail handles an error of the job: it reports whether the job ends. A
// stopped sandbox makes it wait; anything else is retried after a pause.
func (j *job) fail(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, errStopped) {
		return true
	}
	var gone errGone
	if errors.As(err, &gone) {
		_ = j.update(func(s *state.Sync) { s.State, s.LastError = StateStopped, gone.why })
		j.m.log.Warn("sync job stopped", "id", j.rec.ID, "why", gone.why)
		return true
	}
	exists, running, perr := j.m.opt.Remote.Presence(ctx, j.rec.Sandbox)
	st := StateRunning
	switch {
	case perr == nil && !exists:
		_ = j.update(func(s *state.Sync) {
			s.State, s.LastError = StateStopped, fmt.Sprintf("sandbox %q was destroyed", j.rec.Sandbox)
		})
		return true
	case perr == nil && !running:
		st = StateWaiting
		err = fmt.Errorf("sandbox %q is stopped: changes are sent when it runs again", j.rec.Sandbox)
	}
	if uerr := j.update(func(s *state.Sync) { s.State, s.LastError = st, err.Error() }); errors.Is(uerr, errStopped) {
		return true
	}
	select {
	case <-ctx.Done():
		return true
	case <-time.After(2 * time.Second):
	}
	return false
}

// checkPresence returns an error unless the sandbox runs (it never boots it).
func (j *job) checkPresence(ctx context.Context) error {
	exists, running, err := j.m.opt.Remote.Presence(ctx, j.rec.Sandbox)
	switch {
	case err != nil:
		return err
	case !exists:
		return errGone{fmt.Sprintf("sandbox %q was destroyed", j.rec.Sandbox)}
	case !running:
		return fmt.Errorf("sandbox %q is stopped", j.rec.Sandbox)
	}
	return nil
}

// checkHost returns errGone when the host directory was removed.
func (j *job) checkHost() error {
	fi, err := os.Stat(j.rec.LocalDir)
	if err != nil || !fi.IsDir() {
		return errGone{fmt.Sprintf("local directory %s is gone; the sandbox's copy was left as it was", j.rec.LocalDir)}
	}
	if _, err := j.root.Stat("."); err != nil {
		return errGone{fmt.Sprintf("local directory %s was replaced; start a new sync for it", j.rec.LocalDir)}
	}
	return nil
}

// mirror copies the whole host directory into the sandbox directory and
// removes what the host does not have there (except ignored names).
func (j *job) mirror(ctx context.Context) (MirrorResult, error) {
	start := time.Now()
	if err := j.checkHost(); err != nil {
		return MirrorResult{}, err
	}
	if err := j.checkPresence(ctx); err != nil {
		return MirrorResult{}, err
	}
	host, size, err := j.hostPaths()
	if err != nil {
		return MirrorResult{}, err
	}
	remote, err := j.m.opt.Remote.SyncList(ctx, j.rec.Sandbox, j.rec.SandboxDir, j.rec.Ignore)
	if err != nil {
		return MirrorResult{}, err
	}
	remove := extras(remote, host)
	var counts transfer.Counts
	err = j.m.opt.Remote.SyncApply(ctx, j.rec.Sandbox, j.rec.SandboxDir, remove, size, func(w io.Writer) error {
		var perr error
		counts, perr = transfer.Pack(j.root, ".", ".", w, transfer.PackOptions{Ignore: j.ignored})
		return perr
	})
	if err != nil {
		return MirrorResult{}, err
	}
	mr := MirrorResult{Files: counts.Files, Bytes: counts.Bytes, Removed: len(remove), Took: time.Since(start)}
	mr.Seconds = mr.Took.Seconds()
	starting := j.rec.State == StateStarting // not recorded yet
	uerr := j.update(func(s *state.Sync) {
		s.State, s.LastError, s.LastSync = StateRunning, "", time.Now().UTC()
		s.Files += counts.Files
		s.Bytes += counts.Bytes
		s.Removed += int64(len(remove))
	})
	if errors.Is(uerr, errStopped) && !starting {
		return mr, errStopped
	}
	return mr, nil
}

// hostPaths lists the host directory as "./rel" paths (ignored names left
// out) and sums its regular files' sizes.
func (j *job) hostPaths() (map[string]bool, int64, error) {
	out := map[string]bool{}
	var size int64
	err := fs.WalkDir(j.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			return nil
		}
		if p == "." {
			return nil
		}
		if j.ignored(d.Name()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		out["./"+p] = true
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	return out, size, err
}

// extras are the remote paths the host does not have, without those under
// another one removed already.
func extras(remote []string, host map[string]bool) []string {
	sort.Strings(remote)
	var out []string
	for _, p := range remote {
		if host[p] {
			continue
		}
		if n := len(out); n > 0 && strings.HasPrefix(p, out[n-1]+"/") {
			continue
		}
		out = append(out, p)
	}
	return out
}

// watch sends changes as they come until an error or the end of ctx.
func (j *job) watch(ctx context.Context, ws *watchSet) error {
	w, p := ws.w, ws.p

	pending := map[string]bool{}
	var first time.Time
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	pollT := time.NewTicker(j.m.opt.Poll)
	defer pollT.Stop()
	check := time.NewTicker(2 * time.Second)
	defer check.Stop()
	note := func(rel string) {
		if rel == "" || j.ignoredPath(rel) {
			return
		}
		if len(pending) == 0 {
			first = time.Now()
		}
		pending[rel] = true
		wait := j.m.opt.Quiet
		if time.Since(first) > 8*j.m.opt.Quiet {
			wait = 0
		}
		quiet.Reset(wait)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("the watcher ended")
			}
			rel, err := filepath.Rel(j.rec.LocalDir, ev.Name)
			if err != nil || rel == "." {
				if err := j.checkHost(); err != nil {
					return err
				}
				continue
			}
			rel = filepath.ToSlash(rel)
			if ev.Has(fsnotify.Create) {
				if fi, err := j.root.Lstat(rel); err == nil && fi.IsDir() && !j.ignoredPath(rel) {
					j.addTree(w, p, rel)
					j.setPolled(len(p.dirs))
				}
			}
			note(rel)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("the watcher ended")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				return errors.New("too many changes at once for the watcher: copying everything again")
			}
			j.m.log.Warn("sync watcher", "id", j.rec.ID, "err", err)
		case <-pollT.C:
			for _, rel := range p.scan(j) {
				if fi, err := j.root.Lstat(rel); err == nil && fi.IsDir() && !slices.Contains(p.dirs, rel) {
					j.addTree(w, p, rel) // a new directory in a polled one
					j.setPolled(len(p.dirs))
				}
				note(rel)
			}
		case <-check.C:
			if err := j.checkHost(); err != nil {
				return err
			}
			if !j.recorded() {
				return errStopped
			}
		case <-quiet.C:
			if err := j.flush(ctx, pending); err != nil {
				return err
			}
			clear(pending)
		}
	}
}

// recorded reports whether the job's record still exists.
func (j *job) recorded() bool {
	recs, err := j.m.opt.Store.Syncs()
	if err != nil {
		return true
	}
	for _, r := range recs {
		if r.ID == j.rec.ID {
			return true
		}
	}
	return false
}

func (j *job) setPolled(n int) {
	j.mu.Lock()
	changed := j.rec.Polled != n
	j.mu.Unlock()
	if changed {
		_ = j.update(func(s *state.Sync) { s.Polled = n })
	}
}

// addTree watches rel and the directories under it; those inotify cannot
// take (its limit, or MaxWatches) are polled instead.
func (j *job) addTree(w *fsnotify.Watcher, p *poller, rel string) {
	_ = fs.WalkDir(j.root.FS(), rel, func(sub string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if sub != rel && j.ignored(d.Name()) {
			return fs.SkipDir
		}
		abs := filepath.Join(j.rec.LocalDir, filepath.FromSlash(sub))
		max := j.m.opt.MaxWatches
		if max > 0 && len(w.WatchList()) >= max {
			p.add(j, sub)
			return nil
		}
		if err := w.Add(abs); err != nil {
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EMFILE) {
				j.m.log.Warn("inotify limit reached: polling instead", "id", j.rec.ID, "dir", abs)
			}
			p.add(j, sub)
		}
		return nil
	})
}

// flush sends one batch: what exists on the host goes in a tar, what is
// gone is removed in the sandbox.
func (j *job) flush(ctx context.Context, pending map[string]bool) error {
	if len(pending) == 0 {
		return nil
	}
	// A deleted host directory ends the job; its deletions are not sent.
	if err := j.checkHost(); err != nil {
		return err
	}
	paths := make([]string, 0, len(pending))
	for p := range pending {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var only, remove []string
	var size int64
	for _, p := range paths {
		fi, err := j.root.Lstat(p)
		switch {
		case err == nil:
			only = append(only, p)
			if fi.Mode().IsRegular() {
				size += fi.Size()
			}
		case errors.Is(err, fs.ErrNotExist):
			if n := len(remove); n == 0 || !strings.HasPrefix("./"+p, remove[n-1]+"/") {
				remove = append(remove, "./"+p)
			}
		}
	}
	var pack func(io.Writer) error
	var counts transfer.Counts
	if len(only) > 0 {
		pack = func(w io.Writer) error {
			var err error
			counts, err = transfer.Pack(j.root, ".", ".", w, transfer.PackOptions{Ignore: j.ignored, Only: only})
			return err
		}
	}
	if err := j.checkPresence(ctx); err != nil {
		return err
	}
	if err := j.m.opt.Remote.SyncApply(ctx, j.rec.Sandbox, j.rec.SandboxDir, remove, size, pack); err != nil {
		return err
	}
	return j.update(func(s *state.Sync) {
		s.State, s.LastError, s.LastSync = StateRunning, "", time.Now().UTC()
		s.Files += counts.Files
		s.Bytes += counts.Bytes
		s.Removed += int64(len(remove))
	})
}

// poller scans directories inotify could not watch.
type poller struct {
	dirs []string
	snap map[string]fileSig
}

type fileSig struct {
	size  int64
	mtime int64 // unix nanoseconds
	mode  fs.FileMode
}

func (p *poller) add(j *job, dir string) {
	p.dirs = append(p.dirs, dir)
	for rel, sig := range p.read(j, dir) {
		p.snap[rel] = sig
	}
}

// read lists one directory's entries (not recursively: subdirectories
// are watched or polled themselves).
func (p *poller) read(j *job, dir string) map[string]fileSig {
	out := map[string]fileSig{}
	f, err := j.root.Open(dir)
	if err != nil {
		return out
	}
	defer f.Close()
	ents, _ := f.ReadDir(-1)
	for _, e := range ents {
		if j.ignored(e.Name()) {
			continue
		}
		if fi, err := e.Info(); err == nil {
			out[path.Join(dir, e.Name())] = fileSig{fi.Size(), fi.ModTime().UnixNano(), fi.Mode()}
		}
	}
	return out
}

// scan returns the paths in polled directories that changed since the
// last scan.
func (p *poller) scan(j *job) []string {
	var changed []string
	seen := map[string]bool{}
	for _, dir := range p.dirs {
		for rel, sig := range p.read(j, dir) {
			seen[rel] = true
			if old, ok := p.snap[rel]; !ok || old != sig {
				changed = append(changed, rel)
				p.snap[rel] = sig
			}
		}
	}
	for rel := range p.snap {
		if !seen[rel] && slices.Contains(p.dirs, path.Dir(rel)) {
			changed = append(changed, rel)
			delete(p.snap, rel)
		}
	}
	return changed
}
