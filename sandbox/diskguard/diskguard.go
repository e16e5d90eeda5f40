// Package diskguard bounds a sandbox's disk use where the engine cannot:
// rootless engines and overlay storage on ext4 have no size option for the
// rootfs or for volumes. A Guard polls the size of host directories (the
// container's overlay upper directory, the workspace volume's directory)
// and, once one passes its limit, or the host's free space falls below a
// floor while it grows, stops the sandbox's writers through a callback and
// records why.
//
// Overshoot: a poll happens every Every (250 ms by default, longer when the
// walk itself is slow) and sooner while a target grows toward its limit:
// at the rate it grew, the next poll comes at half the time left before the
// limit (not under MinEvery, 50 ms by default). A writer still passes the
// limit by its write rate × (the poll left + the time to walk and to
// kill). The free-space floor (the larger of 5 % of the filesystem and
// 2 GB) is what keeps that from filling the host.
package diskguard

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
)

// Target is one directory to bound.
type Target struct {
	What  string // for messages: "/workspace", "the root filesystem"
	Dir   string
	Limit int64 // bytes
	// LimitText is the limit as the user wrote it ("1G").
	LimitText string
}

// Options configure a Guard.
type Options struct {
	Sandbox string
	Targets []Target
	// Every is the poll interval; default 250 ms.
	Every time.Duration
	// MinEvery bounds how soon a poll follows the last one while a target
	// grows toward its limit; default 50 ms.
	MinEvery time.Duration
	// Kill stops the processes writing in the sandbox.
	Kill func(ctx context.Context) error
	// Report records a message for the sandbox's next command result.
	Report func(msg string)
	// Usage measures a directory in bytes; default DirUsage.
	Usage func(dir string) (int64, error)
	// Free reports the free and total bytes of the filesystem holding dir;
	// default statfs.
	Free   func(dir string) (free, total int64, err error)
	Logger *slog.Logger
}

// Guard polls one sandbox's usage until Close.
type Guard struct {
	opts Options
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// slack is how much a target must grow after a kill before writers are
// stopped again: a sandbox over its limit can still run `rm`.
const slack = 16 << 20

// Floor is the free space the guard keeps on the host: the larger of 5 % of
// the filesystem and 2 GB.
func Floor(total int64) int64 { return max(total/20, 2<<30) }

// Start begins polling in a goroutine that Close stops and joins.
func Start(opts Options) *Guard {
	if opts.Every <= 0 {
		opts.Every = 250 * time.Millisecond
	}
	if opts.MinEvery <= 0 {
		opts.MinEvery = min(50*time.Millisecond, opts.Every)
	}
	if opts.Usage == nil {
		opts.Usage = DirUsage
	}
	if opts.Free == nil {
		opts.Free = statfs
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Guard{opts: opts, stop: make(chan struct{}), done: make(chan struct{})}
	go g.run()
	return g
}

// Close stops the guard and waits for its goroutine to end.
func (g *Guard) Close() {
	g.once.Do(func() { close(g.stop) })
	<-g.done
}

type targetState struct {
	last     int64     // usage at the previous poll
	lastAt   time.Time // when it was measured
	killedAt int64     // usage when writers were last stopped; -1 none
}

func (g *Guard) run() {
	defer close(g.done)
	st := make([]targetState, len(g.opts.Targets))
	for i := range st {
		st[i] = targetState{last: -1, killedAt: -1}
	}
	wait := time.Duration(0)
	for {
		select {
		case <-g.stop:
			return
		case <-time.After(wait):
		}
		began := time.Now()
		wait = g.opts.Every
		for i, t := range g.opts.Targets {
			wait = min(wait, g.check(t, &st[i]))
		}
		// A slow walk (a huge tree) must not keep a core busy.
		wait = max(wait, 2*time.Since(began))
	}
}

// check polls one target, stops writers when it passed its limit or the
// host's floor, and says how soon it wants the next poll.
func (g *Guard) check(t Target, s *targetState) time.Duration {
	now := time.Now()
	used, err := g.opts.Usage(t.Dir)
	if err != nil {
		g.opts.Logger.Debug("disk guard: measure", "sandbox", g.opts.Sandbox, "dir", t.Dir, "err", err)
		return g.opts.Every
	}
	grew := s.last >= 0 && used > s.last
	next := g.opts.Every
	if grew {
		next = nextPoll(used-s.last, now.Sub(s.lastAt), t.Limit-used, g.opts.MinEvery, g.opts.Every)
	}
	s.last, s.lastAt = used, now
	var why string
	switch {
	case used <= t.Limit:
		s.killedAt = -1
		if free, total, err := g.opts.Free(t.Dir); err == nil && grew && free < Floor(total) {
			why = fmt.Sprintf("the host's free space fell to %s, below its floor of %s, while %s of sandbox %s grew: the writing command was stopped; remove files to continue",
				units.Human(free), units.Human(Floor(total)), t.What, g.opts.Sandbox)
		}
	case s.killedAt < 0 || used > s.killedAt+slack:
		why = fmt.Sprintf("sandbox %s passed its disk limit of %s (%s holds %s): the writing command was stopped; remove files to continue",
			g.opts.Sandbox, t.LimitText, t.What, units.Human(used))
	}
	if why == "" {
		return next
	}
	s.killedAt = used
	g.opts.Report(why)
	g.opts.Logger.Warn("disk guard stopped writers", "sandbox", g.opts.Sandbox, "dir", t.Dir, "used", used, "limit", t.Limit)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.opts.Kill(ctx); err != nil {
		g.opts.Logger.Warn("disk guard: stop writers", "sandbox", g.opts.Sandbox, "err", err)
	}
	// Writes in flight while the kill ran (a writer passes its limit by
	// its write rate × the time to kill) are the stopped command's, not a
	// new writer's: the slack counts from the usage the kill left.
	if after, err := g.opts.Usage(t.Dir); err == nil {
		s.killedAt = max(s.killedAt, after)
		s.last, s.lastAt = after, time.Now()
	}
	return next
}

// nextPoll is how soon to poll a target that grew by grown bytes in dt
// and has left bytes before its limit: half the time it takes at that
// rate, within [lo, hi].
func nextPoll(grown int64, dt time.Duration, left int64, lo, hi time.Duration) time.Duration {
	if grown <= 0 || dt <= 0 || left <= 0 {
		return hi
	}
	eta := time.Duration(float64(left) / float64(grown) * float64(dt))
	return max(lo, min(hi, eta/2))
}

// DirUsage is the disk space used by the files under dir on dir's own
// filesystem, counting each hard-linked file once. Symbolic links are not
// followed.
func DirUsage(dir string) (int64, error) {
	root, err := os.Lstat(dir)
	if err != nil {
		return 0, err
	}
	rst, ok := root.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("%s: no stat", dir)
	}
	seen := map[uint64]bool{}
	var total int64
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed while walking
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Dev != rst.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

func statfs(dir string) (free, total int64, err error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return 0, 0, err
	}
	return int64(s.Bavail) * int64(s.Bsize), int64(s.Blocks) * int64(s.Bsize), nil
}
