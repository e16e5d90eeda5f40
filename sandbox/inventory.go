package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
)

// RemoveOrphans deletes containers of this prefix whose name is not their
// sandbox's (left by a reset whose server exited before deleting the old
// container). It returns how many it removed.
func (m *Manager) RemoveOrphans(ctx context.Context) (int, error) {
	cs, err := m.listOwn(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	pending := m.intentTrash()
	for _, name := range m.orphans(cs) {
		if pending[name] {
			continue // an interrupted restore's old container, which may yet be put back
		}
		if err := m.rt.Remove(ctx, name); err == nil {
			n++
		}
	}
	return n, nil
}

// orphans are the containers among cs (this prefix's) that no sandbox
// uses: their name is not their sandbox's. A container of a sandbox whose
// lifecycle lock another operation holds is left out: a restore or reset
// in progress (in any server) has moved it aside and still needs it.
func (m *Manager) orphans(cs []Container) []string {
	var names []string
	for _, c := range cs {
		name := c.Labels[LabelName]
		if c.Name == m.ContainerFor(name) || m.isSpareName(c.Name) {
			continue // a sandbox's, or a spare waiting to be claimed
		}
		if name == "" && m.validSpareVolume(c.Labels[LabelVolume]) {
			// A claimed spare moved aside: its sandbox is the one whose
			// record names its workspace.
			name = m.volumeOwner(c.Labels[LabelVolume])
		}
		if ValidateName(name) == nil {
			h, err := m.locks.TryLock(m.lockKey(name), "look for containers left by resets")
			if err != nil {
				continue // in use: a later look removes it if it is left
			}
			h.Release()
		}
		names = append(names, c.Name)
	}
	return names
}

// Reconcile brings the state in line with the engine, the truth for what
// exists, when a server starts: it finishes or undoes the restores and
// clones that killed servers left half done, removes containers a reset
// left behind,
// ends and records the commands that killed servers left running (see
// sweep.go), removes the workspaces of spares whose boot killed servers
// cut short and the workspace images they left without a volume
// (DiskSweeper), forgets the job records of sandboxes whose container is gone,
// and reports (never removes) the sandboxes earlier servers left running
// or stopped, which any server adopts on first use.
func (m *Manager) Reconcile(ctx context.Context) error {
	m.resumeIntents(ctx) // intent.go: before the old containers they may put back are removed
	m.removeLegacyPartials()
	m.adoptSnapshots(ctx) // staging.go
	if n, err := m.RemoveOrphans(ctx); err != nil {
		return fmt.Errorf("remove containers left by resets: %w", err)
	} else if n > 0 {
		m.log.Info("removed containers left by earlier resets", "count", n)
	}
	cs, err := m.listOwn(ctx)
	if err != nil {
		return err
	}
	m.sweepGoneServers(ctx, cs)                            // sweep.go
	if gone, err := m.sweepSpareVolumes(ctx); err != nil { // spare.go
		m.log.Warn("look for spares killed servers left", "err", err)
	} else if len(gone) > 0 {
		m.log.Info("removed the workspaces of spares killed servers left", "volumes", gone)
	}
	if ds, ok := m.rt.(DiskSweeper); ok { // after the spares': their images go with them
		if gone, err := ds.SweepDisks(ctx); err != nil {
			m.log.Warn("look for workspace images killed servers left", "err", err)
		} else if len(gone) > 0 {
			m.log.Info("removed workspace images killed servers left", "images", gone)
		}
	}
	exists := map[string]bool{}
	var found []string
	for _, c := range cs {
		name := c.Labels[LabelName]
		if c.Name != m.ContainerFor(name) {
			continue
		}
		exists[name] = true
		found = append(found, name+" ("+string(c.State)+")")
	}
	if len(found) > 0 {
		m.log.Info("sandboxes found in the engine", "sandboxes", strings.Join(found, ", "))
	}
	// What the listing lacks is forgotten only once its name is claimed
	// and the engine still has no container of it: the listing may be
	// older than a boot that finished meanwhile, here or in another
	// server, whose sandbox and jobs are no one's to forget.
	records := map[string]bool{}
	var gone []string
	if m.cfg.Sandboxes != nil {
		recs, err := m.cfg.Sandboxes.Sandboxes()
		if err != nil {
			return err
		}
		for _, r := range recs {
			// A sandbox that began as a spare keeps its record, the only
			// pointer to its workspace, until it is destroyed.
			if !exists[r.Name] && r.Container == m.ContainerFor(r.Name) && !m.validSpareVolume(r.Volume) {
				records[r.Name] = true
				gone = append(gone, r.Name)
			}
		}
	}
	names, err := m.jobs.JobSandboxes()
	if err != nil {
		return fmt.Errorf("read job records: %w", err)
	}
	for _, name := range names {
		if !exists[name] && !records[name] {
			gone = append(gone, name)
		}
	}
	for _, name := range gone {
		release, ok := m.claimGone(ctx, name)
		if !ok {
			continue
		}
		if records[name] {
			m.log.Info("forgetting a sandbox the engine no longer has", "sandbox", name)
			if err := m.cfg.Sandboxes.DeleteSandbox(name); err != nil {
				release()
				return err
			}
		}
		if slices.Contains(names, name) {
			m.forgetOwnJobs(name)
		}
		release()
	}
	return nil
}

// forgetOwnJobs forgets the job records of sandbox name that ran in this
// prefix's container: servers of another prefix may share the state file,
// and their sandbox of the same name is theirs.
func (m *Manager) forgetOwnJobs(name string) {
	recs, err := m.jobs.Jobs(name)
	if err != nil {
		return
	}
	var mine []string
	for _, j := range recs {
		if j.Container == "" || j.Container == m.ContainerFor(name) {
			mine = append(mine, j.Name)
		}
	}
	if len(mine) == 0 {
		return
	}
	m.log.Info("forgetting the jobs of a sandbox the engine no longer has", "sandbox", name, "jobs", len(mine))
	if err := m.jobs.DeleteJobs(name, mine...); err != nil {
		m.log.Warn("forget jobs", "sandbox", name, "err", err)
	}
}

// claimGone takes name's lifecycle lock without waiting and asks the
// engine again for its container. It returns the lock's release and true
// when the name was free and the container is still gone; false when the
// name is booted here, busy (a boot, destroy or reset under way in any
// server) or has a container now.
func (m *Manager) claimGone(ctx context.Context, name string) (release func(), ok bool) {
	if _, live := m.Lookup(name); live {
		return nil, false
	}
	s := m.slotFor(name)
	select {
	case s.lc <- struct{}{}:
	default:
		return nil, false
	}
	h, err := m.locks.TryLock(m.lockKey(name), "forget "+name)
	if err != nil {
		<-s.lc
		return nil, false
	}
	release = func() { h.Release(); <-s.lc }
	if _, err := m.rt.Inspect(ctx, m.ContainerFor(name)); !errors.Is(err, ErrNotFound) {
		release()
		return nil, false
	}
	return release, true
}

// Info describes a sandbox for status and listing.
type Info struct {
	Name      string    `json:"name"`
	Container string    `json:"container"`
	State     State     `json:"state"`
	Image     string    `json:"image"`
	Created   time.Time `json:"created,omitzero"`
	Started   time.Time `json:"started,omitzero"`
	IP        string    `json:"ip,omitempty"`
	CPUs      float64   `json:"cpus,omitempty"`
	MemoryB   int64     `json:"memory_bytes,omitempty"`
	Connected bool      `json:"connected"` // this server holds shells in it
	Cwd       string    `json:"cwd,omitempty"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	// ChildOf is the sandbox that spawned this one, for a child sandbox:
	// a name the user did not make may be a parent's child.
	ChildOf string `json:"child_of,omitempty"`
	// Limits are the disk and pids limits the container was booted with
	// and how each is enforced (limits.go).
	Limits Limits `json:"limits"`
	// Pending is an operation a dead server (or one that failed) left
	// unfinished on the sandbox, which the next call on it or the next
	// server's start finishes: a destroy, or a reset with wipe_workspace.
	Pending string `json:"pending,omitempty"`
	// StoppedBy says what stopped a stopped sandbox, where the engine
	// keeps its main process's exit code: "idle" (its idle TTL) or
	// "lifetime" (a child's end of life); "" for a stop by a person or a
	// server, or not known. Finished is when. For the server's metrics.
	StoppedBy string    `json:"-"`
	Finished  time.Time `json:"-"`
	// SpareFor is, on an unclaimed spare (Manager.Spares), the named
	// profile whose name it waits for; "" for a spare of the defaults.
	SpareFor string `json:"-"`
}

// StoppedBy is what stopped container c, by its main process's exit code
// (guest.ExitIdle, guest.ExitLifetime): "idle", "lifetime", or "".
func StoppedBy(c Container) string {
	if c.State != StateStopped || c.Finished.IsZero() {
		return ""
	}
	switch c.ExitCode {
	case guest.ExitIdle:
		return "idle"
	case guest.ExitLifetime:
		return "lifetime"
	}
	return ""
}

// List returns every sandbox of this Manager's prefix the engine knows.
func (m *Manager) List(ctx context.Context) ([]Info, error) {
	cs, err := m.listOwn(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(cs))
	for _, c := range cs {
		if c.Name != m.ContainerFor(c.Labels[LabelName]) {
			continue // a replaced container being deleted
		}
		out = append(out, m.info(c.Labels[LabelName], c))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Status describes one sandbox without booting it; a sandbox that does not
// exist returns an error wrapping ErrNotFound.
func (m *Manager) Status(ctx context.Context, name string) (Info, error) {
	if err := ValidateName(name); err != nil {
		return Info{}, err
	}
	c, err := m.inspectOwned(ctx, name)
	if err != nil {
		return Info{}, err
	}
	return m.info(name, c), nil
}

func (m *Manager) info(name string, c Container) Info {
	in := Info{
		Name: name, Container: c.Name, State: c.State, Image: c.Image,
		Created: c.Created, Started: c.Started, IP: c.IP, CPUs: c.CPUs, MemoryB: c.Memory,
		Limits:    limitsOf(c, m.ProfileFor(name)),
		StoppedBy: StoppedBy(c), Finished: c.Finished,
	}
	if p, ok, _ := m.intentOf(name); ok {
		switch p.Op {
		case opDestroy:
			in.Pending = "a destroy begun at " + p.Began.Format(time.RFC3339) + " has not finished: the next call on it, or destroy, finishes it"
		case opWipe:
			in.Pending = "a reset with wipe_workspace begun at " + p.Began.Format(time.RFC3339) + " has not finished: the next call on it finishes it"
		}
	}
	if c.Labels[LabelRole] == "child" && ValidateName(c.Labels[LabelChildOf]) == nil {
		in.ChildOf = c.Labels[LabelChildOf]
	}
	if sb, ok := m.Lookup(name); ok {
		in.Connected = true
		in.LastUsed = sb.LastUsed()
		if st, ok := sb.pool.State(); ok {
			in.Cwd = st.Cwd
		}
	}
	return in
}

// ReconcileAfter runs Reconcile once, after delay (so it does not compete
// with the first call a fresh server usually gets), in the Manager's
// background. Only one server tidies at a time: if another holds the
// reconcile lock, this one leaves it to them.
func (m *Manager) ReconcileAfter(delay time.Duration) {
	m.spawn(func() {
		select {
		case <-m.life.Done():
			return
		case <-time.After(delay):
		}
		h, err := m.locks.TryLock(m.cfg.Prefix+"-reconcile", "reconcile")
		if err != nil {
			m.log.Debug("reconcile left to another server", "err", err)
			return
		}
		defer h.Release()
		if err := m.Reconcile(m.life); err != nil {
			m.log.Debug("reconcile state with the engine", "err", err)
		}
	})
}

// BootInBackground boots name in the Manager's background, so a starting
// server's first call finds it ready.
func (m *Manager) BootInBackground(name string) {
	m.spawnBoot(func() {
		if _, info, err := m.Get(m.life, name); err != nil {
			if m.life.Err() == nil {
				m.log.Warn("sandbox not booted", "sandbox", name, "err", err)
			}
		} else {
			m.log.Debug("sandbox ready", "sandbox", name, "took", info.Took)
		}
	})
}
