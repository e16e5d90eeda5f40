package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// Lifecycle of one sandbox name.
//
// Boot, destroy and reset of a name hold its lifecycle lock: a token in
// this process (slot.lc) and then a lock file, <LockDir>/<prefix>-<name>.lock,
// that every server sharing the state directory takes too. So a destroy
// that arrives during a boot waits for it and then removes the sandbox;
// two resets run one after the other; and a name means one container
// whichever server boots it.
//
// Destroy and reset also move the name's generation on, a small file
// beside the lock (<prefix>-<name>.gen: counter, pid, what). A server
// compares it with the generation its sandbox was booted under: on the
// next call (one stat of the file) and whenever a command's shell dies.
// That is how a command cut short by another server's reset says so, and
// how the next command finds the new container.

// lockKey names the lock and generation files of a sandbox.
func (m *Manager) lockKey(name string) string { return m.cfg.Prefix + "-" + name }

// lockName takes name's lifecycle lock, waiting for any boot, destroy or
// reset of it in this or another server process, until ctx ends.
func (m *Manager) lockName(ctx context.Context, name, purpose string) (release func(), err error) {
	s := m.slotFor(name)
	select {
	case s.lc <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("sandbox %q is busy (%s waits for a boot, destroy or reset): %w", name, purpose, ctx.Err())
	}
	h, err := m.locks.Lock(ctx, m.lockKey(name), purpose+" "+name)
	if err != nil {
		<-s.lc
		return nil, fmt.Errorf("sandbox %q: %w", name, err)
	}
	return func() { h.Release(); <-s.lc }, nil
}

// generation identifies one lifecycle of a sandbox name: it moves on at
// every destroy and reset, in any server.
type generation struct {
	N    uint64
	PID  int
	What string // "destroyed" or "reset"
	// mod is the generation file's mtime when read, for the cheap check.
	mod int64
}

func (m *Manager) genPath(name string) string {
	return filepath.Join(m.cfg.LockDir, m.lockKey(name)+".gen")
}

// readGen reads name's generation; zero if none was ever recorded.
func (m *Manager) readGen(name string) generation {
	var g generation
	if m.cfg.LockDir == "" {
		return g
	}
	f, err := os.Open(m.genPath(name))
	if err != nil {
		return g
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil {
		g.mod = st.ModTime().UnixNano()
	}
	var b [128]byte
	n, _ := f.Read(b[:])
	fields := strings.Fields(string(b[:n]))
	if len(fields) == 3 {
		g.N, _ = strconv.ParseUint(fields[0], 10, 64)
		g.PID, _ = strconv.Atoi(fields[1])
		g.What = fields[2]
	}
	return g
}

// bumpGen moves name's generation on; the caller holds the lifecycle lock.
func (m *Manager) bumpGen(name, what string) {
	if m.cfg.LockDir == "" {
		return
	}
	g := m.readGen(name)
	line := fmt.Sprintf("%d %d %s\n", g.N+1, os.Getpid(), what)
	tmp := m.genPath(name) + ".tmp"
	if err := os.WriteFile(tmp, []byte(line), 0o600); err != nil {
		m.log.Warn("record lifecycle change", "sandbox", name, "err", err)
		return
	}
	if err := os.Rename(tmp, m.genPath(name)); err != nil {
		m.log.Warn("record lifecycle change", "sandbox", name, "err", err)
	}
}

// current reports whether sb is still the sandbox its name stands for:
// no other server destroyed or reset it since it was booted here. It costs
// one stat of the generation file.
func (m *Manager) current(sb *Sandbox) bool {
	if m.cfg.LockDir == "" {
		return true
	}
	var mod int64
	if st, err := os.Stat(m.genPath(sb.Name)); err == nil {
		mod = st.ModTime().UnixNano()
	}
	if mod == sb.gen.mod {
		return true
	}
	return m.readGen(sb.Name).N == sb.gen.N
}

// changedElsewhere reports whether another server destroyed or reset
// sb's name since sb was booted here, and the generation that says how.
func (m *Manager) changedElsewhere(sb *Sandbox) (generation, bool) {
	g := m.readGen(sb.Name)
	return g, g.N != sb.gen.N
}

// describe says how the generation began, for a command or boot it
// affected: "was reset by another server (pid 12)".
func (g generation) describe() string {
	return fmt.Sprintf("was %s by another server (pid %d)", g.What, g.PID)
}

// Get returns the named sandbox, creating, starting or adopting its
// container as needed. Concurrent calls for one name share one boot.
func (m *Manager) Get(ctx context.Context, name string) (*Sandbox, BootInfo, error) {
	if err := ValidateName(name); err != nil {
		return nil, BootInfo{}, err
	}
	if m.closed.Load() {
		return nil, BootInfo{}, ErrClosed
	}
	m.refillIfDue() // spare.go
	if sb, ok := m.Lookup(name); ok && m.current(sb) {
		return sb, BootInfo{Recovered: m.takeNote(name)}, nil
	}
	release, err := m.lockName(ctx, name, "boot")
	if err != nil {
		return nil, BootInfo{}, err
	}
	defer release()
	// A plain boot, which the engine finishes on its own and the next
	// server adopts: a server may exit while it runs (Booting). A reset's,
	// restore's or clone's boot is followed by work of the server's, and
	// is not counted.
	defer m.markBooting(name)()
	return m.bootLocked(ctx, name, bootFind)
}

// bootMode says what a boot already knows.
type bootMode int

const (
	// bootFind looks for the container and adopts, starts or creates it.
	bootFind bootMode = iota
	// bootCreate creates the container without looking: it is known gone.
	bootCreate
	// bootReplace creates it without looking or checking image and
	// workspace: a reset just moved aside a container that used both.
	bootReplace
	// bootNew creates it without looking, and fails with an *ArgError if
	// the name is taken: it must be new.
	bootNew
)

// bootLocked returns name's ready sandbox, or boots one; the caller holds
// name's lifecycle lock. A sandbox another server destroyed or reset since
// it was booted here is dropped and its name booted afresh.
func (m *Manager) bootLocked(ctx context.Context, name string, mode bootMode) (*Sandbox, BootInfo, error) {
	var info BootInfo
	if sb, ok := m.Lookup(name); ok {
		g, changed := m.changedElsewhere(sb)
		if !changed {
			return sb, info, nil
		}
		m.detach(name)
		sb.end(g.describe())
		info.Recovered = g.describe()
	}
	// The boot outlives a caller that gives up, so the next call still
	// finds the sandbox.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.BootTimeout)
	defer cancel()
	var carried []guest.EnvVar // a wipe's, for the sandbox booted next
	if mode == bootFind {
		said, env, err := m.finishPending(bctx, name) // intent.go
		if err != nil {
			return nil, info, err
		}
		info.Recovered, carried = joinNotes(info.Recovered, said), env
	}
	gen := m.readGen(name) // after the destroy, which moves it on
	var resumed *resumption
	if mode == bootFind {
		resumed = m.resumeIntent(bctx, name) // intent.go
	}
	start := time.Now()
	// A spare is taken only for a name with nothing of a sandbox left: no
	// intent of a reset or restore, no record, no workspace (spare.go). A
	// name the store says it has no record of is created without a look
	// first.
	none, told := m.noRecord(name)
	find := mode == bootFind && resumed == nil
	spareOK := find && m.sparesOn() && none
	fresh := find && none && told
	sb, binfo, err := m.boot(bctx, name, mode, spareOK, fresh)
	binfo.Took = time.Since(start)
	binfo.Recovered = joinNotes(info.Recovered, m.takeNote(name))
	if err != nil {
		if _, bad := errors.AsType[*ArgError](err); !bad {
			m.log.Warn("boot failed", "name", name, "took", binfo.Took, "err", err)
		}
		return nil, binfo, err
	}
	sb.gen = gen
	if err := m.install(sb); err != nil {
		sb.end(endedByShutdown)
		return nil, binfo, err
	}
	if resumed != nil {
		binfo.Recovered = joinNotes(binfo.Recovered, m.finishResumed(bctx, sb, resumed))
	}
	if len(carried) > 0 {
		m.writeEnvStore(bctx, name, carried)
	}
	m.log.Info("sandbox ready", "name", name, "container", sb.Container,
		"created", binfo.Created, "started", binfo.Started, "adopted", binfo.Adopted, "took", binfo.Took)
	if m.cfg.Events != nil {
		how := "adopted"
		switch {
		case binfo.Created:
			how = "created"
		case binfo.Started:
			how = "started"
		}
		m.cfg.Events("boot", how)
	}
	if binfo.Created || binfo.Started {
		m.refreshHostsSoon() // network.go
	}
	m.controlSoon(sb, binfo) // children.go
	return sb, binfo, nil
}

func (m *Manager) boot(ctx context.Context, name string, mode bootMode, spareOK, fresh bool) (*Sandbox, BootInfo, error) {
	var info BootInfo
	prof := m.ProfileFor(name)
	if o := m.override(name); o != nil {
		prof = o.prof // a restore or clone: another image, perhaps another profile
	} else if cp, _, ok, err := m.childProfile(name); err != nil {
		return nil, info, err
	} else if ok {
		prof = cp // a child keeps what it was spawned with (children.go)
	}
	if err := prof.Validate(); err != nil {
		return nil, info, err
	}
	ctr := m.ContainerFor(name)
	own := m.newOwner(name)
	c, err := Container{}, error(ErrNotFound)
	var early *shell.Pool // a shell opened while the inspect runs
	// An allowlist sandbox with a channel: one this boot made has its
	// agent started by its own main process, which calls this server
	// (callingAgent: no exec for it); one found running gets it started
	// from the channel by an exec while the first shell opens. Either way
	// the sandbox's first agentOf (its controlSoon, after the boot) takes
	// it: the boot does not wait for it, and the first command waits less.
	var earlyAgent chan *agentConn
	stopEarly := context.CancelFunc(func() {})
	startEarly := func(id, egressAt, channelAt string, call *agentCall) {
		if earlyAgent != nil || ((id == "" || egressAt != egress.ModeAllowlist || !validChannelDir(channelAt)) && call == nil) {
			return
		}
		ectx, cancel := context.WithCancel(m.life)
		earlyAgent, stopEarly = make(chan *agentConn, 1), cancel
		go func(ch chan<- *agentConn) {
			if call != nil {
				ch <- m.calledAgent(ectx, call)
				return
			}
			ch <- m.earlyAgent(ectx, id, channelAt)
		}(earlyAgent)
	}
	defer func() {
		if earlyAgent != nil { // the boot failed before it passed it on
			stopEarly() // ends its exec: no wait for its hello
			if a := <-earlyAgent; a != nil {
				a.c.Close()
			}
		}
	}()
	spare, spareCA := false, false
	var handed *agentConn // a claimed spare's running agent
	defer func() {
		if handed != nil {
			handed.c.Close() // the boot failed before it took it
		}
	}()
	if spareOK {
		// Tried before the look: the claim's rename fails if a container
		// has the name.
		if cl, ok := m.claimSpare(ctx, own); ok { // spare.go
			c, err, spare, early, handed = cl.c, nil, true, cl.pool, cl.agent
			spareCA = cl.caDone
		}
	}
	switch {
	case mode != bootFind || spare:
	case fresh:
		// Nothing of a sandbox of this name is on record (and no spare
		// took it): it is created without a look first. A container that
		// has the name all the same makes the create fail, and is then
		// adopted (or refused) as below.
	case m.rt.Kind() == "docker":
		// No shell before the container is known to run: docker's exec
		// into a paused container blocks dockerd's hold on it.
		c, err = m.inspectOwned(ctx, name)
		if err == nil && c.Running() {
			startEarly(c.ID, egressMode(c), c.Labels[LabelChannel], nil)
		}
	default:
		// A running sandbox of ours: its agent starts once the inspect
		// says so (by the ID it read), while the shell still opens.
		c, early, err = m.inspectWithShell(ctx, own, func(c Container) {
			startEarly(c.ID, egressMode(c), c.Labels[LabelChannel], nil)
		})
	}
	var lim Limits
	egressAt, channelAt := "", ""
	createdVol, createdID := "", ""
	var called *agentCall // the agent the created container's main process starts
	if errors.Is(err, ErrNotFound) {
		var made created
		made, err = m.create(ctx, name, prof, mode == bootReplace, fresh)
		lim, createdID, called = made.lim, made.id, made.agent
		egressAt, channelAt = made.labels[LabelEgress], made.labels[LabelChannel]
		createdVol = m.volumeOf(name, Container{Labels: made.labels})
		if err == nil {
			info.Created = true
		} else if errors.Is(err, ErrAlreadyExists) && mode == bootNew {
			return nil, info, &ArgError{Err: fmt.Errorf("sandbox %q exists", name)}
		} else if errors.Is(err, ErrAlreadyExists) {
			// Another server created it first: adopt theirs.
			c, err = m.inspectCreated(ctx, name)
			if err == nil && fresh {
				m.dropUnusedVolume(ctx, name, c)
			}
		}
	}
	if err != nil {
		return nil, info, err
	}
	if !info.Created {
		own.record(c)
		if err := m.adopt(ctx, name, c, &info); err != nil {
			return nil, info, err
		}
		if c.Image != "" {
			prof.Image = c.Image
		}
		lim = limitsOf(c, prof)
		egressAt, channelAt = egressMode(c), c.Labels[LabelChannel]
	}
	if spare {
		info.Created, info.Adopted, info.Spare = true, false, true
	}
	if info.Created && !spare {
		startEarly(createdID, egressAt, channelAt, called)
	}
	pool := early
	switch {
	case pool != nil:
	case createdID != "":
		// The container this boot started, by the ID its run reported: no
		// other can answer to that, so the first shell needs no inspect at
		// its gate (later ones look by name, as ever).
		own.record(Container{ID: createdID})
		verdict := make(chan error, 1)
		verdict <- nil
		own.expect(verdict)
		pool = m.poolOn(createdID, own.gate)
	default:
		pool = m.newPool(own)
	}
	if err := pool.Warm(ctx); err != nil {
		pool.Close()
		if !info.Started || !m.stoppedAgain(ctx, c) {
			return nil, info, fmt.Errorf("open a shell in sandbox %q: %w", name, err)
		}
		// The container this boot started stopped again at once. On
		// podman the clean-up of a container whose main process ended by
		// itself (the idle watchdog's stop) runs after the exit, and on
		// a loaded machine after the next start too, which it then ends.
		// One more start, after that clean-up, holds.
		m.log.Warn("the sandbox stopped right after its start; starting it again", "sandbox", name, "err", err)
		if serr := m.rt.Start(ctx, idOr(c)); serr != nil {
			return nil, info, fmt.Errorf("open a shell in sandbox %q: %w (it stopped right after its start, and starting it again failed: %v)", name, err, serr)
		}
		pool = m.newPool(own)
		if err := pool.Warm(ctx); err != nil {
			pool.Close()
			return nil, info, fmt.Errorf("open a shell in sandbox %q (started twice: it stopped right after its first start): %w", name, err)
		}
	}
	sb := newSandbox(name, ctr, prof, m.IdleTTL(name), pool)
	sb.own = own
	sb.newChores = func() *shell.Pool { return m.newChorePool(own) }
	sb.limits = lim
	if info.Adopted {
		sb.inspected = c
	}
	if !info.Created || spareCA {
		sb.caLabel = c.Labels[LabelCA] // a claimed spare's: installed while it waited
	}
	sb.caAtStart = info.Created && !spare && called != nil && called.ca
	sb.volume = m.volumeOf(name, c)
	if info.Created && !spare {
		sb.volume = createdVol
	}
	sb.egress.mode = egressAt
	if validChannelDir(channelAt) {
		sb.egress.channelDir = channelAt
	}
	if earlyAgent != nil {
		sb.agent.early, sb.agent.stopEarly, earlyAgent = earlyAgent, stopEarly, nil
	}
	if handed != nil {
		m.handAgent(sb, handed) // agent.go
		handed = nil
	}
	m.startGuard(sb)                              // limits.go: the disk watcher, ended with the sandbox
	m.spawn(func() { m.recordSandbox(sb, info) }) // off the path of the first command
	return sb, info, nil
}

// recordSandbox saves the profile a sandbox runs with.
func (m *Manager) recordSandbox(sb *Sandbox, info BootInfo) {
	if m.cfg.Sandboxes == nil {
		return
	}
	prof, _ := json.Marshal(sb.Profile)
	rec := state.Sandbox{Name: sb.Name, Container: sb.Container, Profile: prof,
		IdleTTL: sb.IdleTTL.String(), LastBoot: time.Now().UTC()}
	m.recordMu.Lock()
	defer m.recordMu.Unlock()
	switch {
	case m.restoringOnto(sb.Name, sb.volume):
		// volsnap.go: a restore not yet finished, which records its new
		// workspace itself once it is; the old one stays recorded.
		if prev, ok, _ := m.sandboxRecord(sb.Name); ok {
			rec.Volume = prev.Volume
		}
	case m.validSpareVolume(sb.volume):
		rec.Volume = sb.volume // spare.go: what a reset or destroy without the container needs
	}
	if info.Created {
		rec.Created = rec.LastBoot
	}
	if err := m.cfg.Sandboxes.PutSandbox(rec); err != nil {
		m.log.Warn("save sandbox record", "sandbox", sb.Name, "err", err)
	}
}

// inspectWithShell inspects a sandbox's container and, at the same time,
// starts a shell process in it, so adopting a running sandbox (a server
// restarted, a second server) costs one engine round trip, not two. The
// shell is held at its gate, with nothing written to it, until the inspect
// shows the container is ours and running; otherwise it is dropped and
// nil returned. Later shells of the pool check for themselves (owner.go).
// ours is called with the container as soon as the inspect shows it is
// ours and running, before the wait for the shell.
func (m *Manager) inspectWithShell(ctx context.Context, own *owner, ours func(Container)) (Container, *shell.Pool, error) {
	verdict := make(chan error, 1)
	own.expect(verdict)
	pool := m.newPool(own)
	warmed := make(chan error, 1)
	go func() { warmed <- pool.Warm(ctx) }()
	c, err := m.inspectOwned(ctx, own.name)
	ok := err == nil && c.Running()
	if ok {
		own.record(c)
		verdict <- nil
		ours(c)
	} else {
		verdict <- errors.New("the container is not a running sandbox of ours")
	}
	if !ok {
		// Not one to adopt as it is: go on with creating or starting it
		// while the held shell fails at its gate.
		own.disarm() // so the verdict cannot reach the next pool's first shell
		m.spawn(func() { <-warmed; pool.Close() })
		return c, nil, err
	}
	werr := <-warmed
	own.disarm() // in case the shell failed before its gate
	if werr != nil {
		pool.Close()
		return c, nil, err
	}
	return c, pool, err
}

// checkOwner returns a *ForeignError if c is not labelled as sandbox
// name's container.
func (m *Manager) checkOwner(c Container, name string) error {
	if e := m.foreign(c, name); e != nil {
		return e
	}
	return nil
}

// inspectOwned inspects a sandbox's container and checks that it is ours.
// A missing container gives an error wrapping ErrNotFound.
func (m *Manager) inspectOwned(ctx context.Context, name string) (Container, error) {
	c, err := m.rt.Inspect(ctx, m.ContainerFor(name))
	if err != nil {
		return c, fmt.Errorf("inspect sandbox %q: %w", name, err)
	}
	if err := m.checkOwner(c, name); err != nil {
		return c, err
	}
	if c.Labels[LabelRole] == RoleSpare {
		// A claimed spare: its record names its workspace from the first
		// look, for when the container is gone (a claim's server may have
		// died before it wrote it).
		m.recordWorkspace(name, c) // spare.go
	}
	return m.asSandbox(c), nil
}

// inspectCreated inspects a container another process has just created.
// Some engines (Apple's among them) refuse a duplicate name before the
// winner's container is visible to inspect, so a short wait for it is
// normal, not an error.
func (m *Manager) inspectCreated(ctx context.Context, name string) (Container, error) {
	const tries, pause = 20, 150 * time.Millisecond
	for i := 1; ; i++ {
		c, err := m.inspectOwned(ctx, name)
		if !errors.Is(err, ErrNotFound) || i == tries {
			return c, err
		}
		select {
		case <-ctx.Done():
			return c, err
		case <-time.After(pause):
		}
	}
}

// adopt takes over an existing container of ours, starting it if stopped,
// and records which it did in info.
func (m *Manager) adopt(ctx context.Context, name string, c Container, info *BootInfo) error {
	if c.Running() {
		info.Adopted = true
		return nil
	}
	if c.State == StatePaused {
		return m.pausedError(name, c.Name)
	}
	m.repairWorkspace(ctx, name, c) // limits.go
	m.channelBeforeStart(c)         // channel.go
	if why := StoppedBy(c); why != "" && m.cfg.Stopped != nil {
		m.cfg.Stopped(c.Name, c.Finished, why)
	}
	if err := m.rt.Start(ctx, idOr(c)); err != nil {
		return fmt.Errorf("start sandbox %q: %w", name, err)
	}
	info.Started = true
	return nil
}

// stoppedAgain reports whether container c, which this boot started, is
// known to be stopped now.
func (m *Manager) stoppedAgain(ctx context.Context, c Container) bool {
	now, err := m.rt.Inspect(ctx, idOr(c))
	return err == nil && now.State == StateStopped && (c.ID == "" || now.ID == c.ID)
}

// pausedError says that sandbox name's container ctr is paused, and how
// to go on. Nothing is unpaused for the user: whoever paused it meant it.
func (m *Manager) pausedError(name, ctr string) error {
	if ctr == "" {
		ctr = m.ContainerFor(name)
	}
	return fmt.Errorf("sandbox %q is %w: its container %s was paused outside sandbox-mcp, so nothing runs in it; "+
		"unpause it with `%s unpause %s`, or reset the sandbox", name, ErrPaused, ctr, filepath.Base(m.rt.Binary()), ctr)
}

// ErrImageMissing is returned when a sandbox's image is not present locally.
var ErrImageMissing = errors.New("image not present")

// ImageHint tells the user how to get a missing sandbox image on rt.
func ImageHint(rt Runtime) string {
	if rt.Kind() == "container" {
		return "build the default image with `container build -t mcp-dev -f Containerfile.mcp-dev .` in the sandbox-mcp checkout, or run `make setup` there; other images: `container image pull`"
	}
	if rt.Kind() == "podman" && os.Geteuid() != 0 {
		// A root set-up built the images into root's store, which a rootless
		// podman does not see; make setup as this user builds them here.
		return "podman keeps images per user: run `make setup` as this user (it uses sudo only to install packages) to build the default image into your store; other images: pull or build them with " + rt.Binary()
	}
	return "on Linux run `make setup` to build the default image; other images: pull or build them with " + rt.Binary()
}

// create boots a new container. known skips checking the image and
// creating the workspace volume, for a container replacing one that used
// both; fresh says nothing of a sandbox of that name is on record.
func (m *Manager) create(ctx context.Context, name string, prof Profile, known, fresh bool) (created, error) {
	lim, spec, id, call, err := m.createSpec(ctx, name, prof, known, fresh)
	return created{lim: lim, labels: spec.Labels, id: id, agent: call}, err
}

// created is what create made: the container's limits and labels, its
// ID when the runtime reported it, and the call its agent makes when its
// main process starts one (callingAgent; nil otherwise).
type created struct {
	lim    Limits
	labels map[string]string
	id     string
	agent  *agentCall
}

// createSpec is create, returning the spec it booted.
func (m *Manager) createSpec(ctx context.Context, name string, prof Profile, known, fresh bool) (Limits, RunSpec, string, *agentCall, error) {
	labels := m.labels(name)
	if o := m.override(name); o != nil {
		for k, v := range o.labels {
			labels[k] = v
		}
	} else if _, cl, ok, err := m.childProfile(name); err != nil {
		return Limits{}, RunSpec{}, "", nil, err
	} else if ok {
		for k, v := range cl {
			labels[k] = v
		}
	}
	// A sandbox that began as a spare keeps the spare's workspace.
	vol, err := m.recordedVolume(name) // spare.go
	if err != nil {
		return Limits{}, RunSpec{}, "", nil, err
	}
	if vol != m.volumeFor(name) {
		labels[LabelVolume] = vol
	}
	// The image is looked up while the workspace is made: a boot whose
	// image is missing leaves that workspace, which its next boot (or a
	// destroy, or prune) takes.
	imageChecked := make(chan error, 1)
	if known {
		imageChecked <- nil
	} else {
		go func() {
			ok, err := m.rt.ImageExists(ctx, prof.Image)
			switch {
			case err != nil:
				imageChecked <- fmt.Errorf("look up image %q: %w", prof.Image, err)
			case !ok:
				imageChecked <- fmt.Errorf("%w: %q (%s)", ErrImageMissing, prof.Image, ImageHint(m.rt))
			default:
				imageChecked <- nil
			}
		}()
	}
	spec := m.runSpec(m.ContainerFor(name), prof, vol, labels, m.IdleTTL(name), childEnd(labels)) // children.go
	// limits.go: workspace volume (sized where possible), pids, rootfs size.
	perr := m.prepareLimits(ctx, name, prof, vol, m.labels(name), known, fresh, &spec)
	if err := <-imageChecked; err != nil {
		return Limits{}, RunSpec{}, "", nil, err
	}
	if perr != nil {
		return Limits{}, RunSpec{}, "", nil, perr
	}
	m.placeOnNetwork(ctx, name, prof, &spec) // network.go
	call := m.callingAgent(ctx, &spec)       // agent.go
	id, err := m.runContainer(ctx, name, prof, spec)
	if err != nil {
		if call != nil {
			call.Close()
		}
		return Limits{}, RunSpec{}, "", nil, fmt.Errorf("boot sandbox %q: %w", name, err)
	}
	lim, _ := parseLimitsLabel(spec.Labels[LabelLimits])
	return lim, spec, id, call, nil
}

// runSpec is the spec of a new sandbox container ctr (a sandbox's or a
// spare's) of profile prof, with workspace vol, whose watchdog stops it
// after ttl without use (0: never) or at until (zero: never).
func (m *Manager) runSpec(ctr string, prof Profile, vol string, labels map[string]string, ttl time.Duration, until time.Time) RunSpec {
	spec := RunSpec{
		Name:           ctr,
		Image:          prof.Image,
		Labels:         labels,
		CPUs:           prof.CPUs,
		Memory:         prof.Memory,
		Virtualization: prof.Virtualization,
		Mounts:         []Mount{{Volume: vol, Target: m.cfg.Workdir}},
		Workdir:        m.cfg.Workdir,
		Init:           true,
		Command:        []string{"sleep", "infinity"},
	}
	if ttl > 0 || !until.IsZero() {
		spec.Command = guest.WatchdogCommand(ttl, watchdogEvery(ttl, until), until)
	}
	return spec
}

func (m *Manager) labels(name string) map[string]string {
	return map[string]string{LabelOwner: m.cfg.Prefix, LabelName: name, LabelRole: "primary"}
}

// shellInit is the init text of every shell: the env store and the
// workspace, and the server's mark removed from what commands inherit.
func (m *Manager) shellInit() string {
	return guest.InitScript(m.cfg.Workdir) + "unset " + guest.ShellVar + "\n"
}

// Destroy removes a sandbox's container and workspace. It reports whether
// there was anything to remove; destroying a missing sandbox is not an
// error. It waits for a boot, reset or destroy of the same name in any
// server, and cuts short the commands running in it.
func (m *Manager) Destroy(ctx context.Context, name string) (bool, error) {
	if err := ValidateName(name); err != nil {
		return false, err
	}
	release, err := m.lockName(ctx, name, "destroy")
	if err != nil {
		return false, err
	}
	defer release()
	gone, err := m.destroyLocked(ctx, name)
	if err == nil && slices.Contains(m.profilesWithSpares(), name) {
		m.refillSoon() // its profile's spare, for its next first call (spare.go)
	}
	return gone, err
}

// destroyLocked is Destroy under name's lifecycle lock. The destroy is
// recorded before its first step: a server killed in its middle (the
// container gone, the workspace not yet) leaves the record, and the next
// server finishes it before it boots anything under the name, so a
// destroyed workspace never comes back as the sandbox's (finishPending).
// A destroy that failed keeps its record too: it was asked for, and the
// next call on the name carries it on.
func (m *Manager) destroyLocked(ctx context.Context, name string) (bool, error) {
	if err := m.putIntent(state.Intent{Sandbox: name, Op: opDestroy, Phase: intentBegun, Began: time.Now().UTC()}); err != nil {
		return false, err
	}
	m.bumpGen(name, "destroyed")
	m.runHooks(name, "destroy")
	sb := m.detach(name)
	if sb != nil {
		sb.end(endedByDestroy)
	}
	id := ""
	if sb != nil {
		id = sb.own.ID()
	}
	existed, err := m.remove(ctx, name, id, true)
	existed = existed || sb != nil
	if err == nil && sb != nil {
		m.removeChannel(sb.egress.channelDir) // a claimed spare's is named after the spare
	}
	if err == nil {
		if err := m.history.Forget(name); err != nil {
			m.log.Warn("forget history", "sandbox", name, "err", err)
		}
		m.forgetJobs(name)
		if m.cfg.Sandboxes != nil {
			if err := m.cfg.Sandboxes.DeleteSandbox(name); err != nil {
				m.log.Warn("forget sandbox record", "sandbox", name, "err", err)
			}
		}
		if existed {
			m.refreshHostsSoon() // network.go
		}
		m.removeFamilyNetworkSoon(name) // network.go
		if m.cfg.EgressLog != nil {
			m.cfg.EgressLog.Remove(name)
		}
		m.forgetEgressSecret(name, "")
		m.endIntent(name)
	}
	return existed, err
}

// remove deletes name's container and, with wipe, its workspace and any
// container a reset left behind. A container under the name that is not
// ours is left alone: without wipe that is an error (there is nothing of
// ours to remove), with wipe what is ours still goes. id, when set, is the
// container this server verified as the sandbox's at its boot: it is
// removed without another inspect, where the engine's IDs are not names
// (Apple's container is addressed by its name, which a stranger may have
// taken since).
func (m *Manager) remove(ctx context.Context, name, id string, wipe bool) (bool, error) {
	existed := true
	if id != "" && id != m.ContainerFor(name) {
		err := m.rt.Remove(ctx, id)
		if err == nil {
			if wipe {
				m.removeChannel(m.channelDir(m.ContainerFor(name))) // channel.go
			}
			vol, err := m.recordedVolume(name)
			if err != nil {
				return true, err
			}
			return true, m.wipe(ctx, name, vol, wipe, false)
		}
		if !errors.Is(err, ErrNotFound) {
			return false, fmt.Errorf("remove sandbox %q: %w", name, err)
		}
		// Gone already: look under the name.
	}
	c, err := m.inspectOwned(ctx, name)
	vol, verr := m.recordedVolume(name) // spare.go
	if verr != nil && wipe && err != nil {
		// No container to say which workspace is the sandbox's.
		return false, verr
	}
	switch {
	case errors.Is(err, ErrNotFound):
		existed = false
	case errors.Is(err, ErrForeign) && wipe:
		existed = false
		m.log.Warn("leaving alone a container that is not the sandbox's", "sandbox", name, "err", err)
	case err != nil:
		return false, err
	default:
		if err := m.rt.Remove(ctx, idOr(c)); err != nil && !errors.Is(err, ErrNotFound) {
			return false, fmt.Errorf("remove sandbox %q: %w", name, err)
		}
		if wipe {
			m.removeChannel(c.Labels[LabelChannel]) // channel.go
		}
		vol = m.volumeOf(name, c)
	}
	return existed, m.wipe(ctx, name, vol, wipe, !existed)
}

// wipe removes name's workspace vol (when wipe is set) and the
// containers a reset left behind that still hold it. Those are looked for
// first when look is set, else only when the workspace will not go: a
// leftover container holds the workspace it was booted with.
func (m *Manager) wipe(ctx context.Context, name, vol string, wipe, look bool) error {
	if !wipe {
		return nil
	}
	if !look {
		err := m.rt.VolumeRemove(ctx, vol)
		if err == nil {
			m.dropSpareChannel(vol) // channel.go
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			// An engine that does not answer: looking for containers
			// would only wait on it again.
			return fmt.Errorf("remove workspace of %q: %w", name, err)
		}
	}
	olds, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix, LabelName: name})
	if err != nil {
		return fmt.Errorf("list containers of %q: %w", name, err)
	}
	if m.validSpareVolume(vol) {
		// A claimed spare moved aside carries no name label: its volume's.
		more, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix, LabelVolume: vol})
		if err != nil {
			return fmt.Errorf("list containers of %q: %w", name, err)
		}
		olds = append(olds, more...)
	}
	for _, c := range olds {
		// It may already be going (the reset's own removal): the volume
		// removal below retries until it is gone.
		_ = m.rt.Remove(ctx, c.Name)
	}
	if err := m.removeVolume(ctx, vol); err != nil {
		return fmt.Errorf("remove workspace of %q: %w", name, err)
	}
	m.dropSpareChannel(vol) // channel.go
	return nil
}

// dropUnusedVolume removes the workspace named after sandbox name when c,
// the sandbox's container, mounts another: a spare's, which a server
// killed between the rename of its claim and its record left. A create
// made without a look (fresh) has just made the named one, which nothing
// else would remove: the sandbox's record, its destroy and prune all go
// by the spare's. The caller holds name's lifecycle lock.
func (m *Manager) dropUnusedVolume(ctx context.Context, name string, c Container) {
	vol := m.volumeFor(name)
	if m.volumeOf(name, c) == vol {
		return
	}
	if err := m.rt.VolumeRemove(ctx, vol); err != nil && !errors.Is(err, ErrNotFound) {
		m.log.Warn("remove a workspace its sandbox does not use", "sandbox", name, "volume", vol, "err", err)
	}
	// And the channel directory the create made for its container.
	if dir := m.channelDir(m.ContainerFor(name)); dir != "" && c.Labels[LabelChannel] != dir {
		m.removeChannel(dir)
	}
}

// volumeInUseWait bounds how long a removal waits for the containers that
// hold a workspace to go: a container full of processes takes a while to
// remove on a loaded machine.
const volumeInUseWait = time.Minute

// removeVolume removes a workspace volume once the containers that hold it
// are gone (see RemoveVolume).
func (m *Manager) removeVolume(ctx context.Context, vol string) error {
	return RemoveVolume(ctx, m.rt, vol, volumeInUseWait)
}

// Reset replaces a sandbox's container with a fresh one from its image. The
// workspace survives unless wipeWorkspace is set. Where the engine can
// rename, the old container is moved aside and deleted in the background
// while the new one boots. Commands running in the old one are cut short
// and say so.
func (m *Manager) Reset(ctx context.Context, name string, wipeWorkspace bool) (BootInfo, error) {
	if err := ValidateName(name); err != nil {
		return BootInfo{}, err
	}
	release, err := m.lockName(ctx, name, "reset")
	if err != nil {
		return BootInfo{}, err
	}
	defer release()
	m.bumpGen(name, "reset")
	m.runHooks(name, "reset")
	// Jobs die with the old container, and their files with its rootfs:
	// their records go once it is replaced (a reset killed before that
	// leaves them running, and still listed).
	defer m.forgetJobs(name)
	sb := m.detach(name)
	// The env store lives in the rootfs: carry it over to the new one.
	env := m.readEnvStore(ctx, name, sb)
	oldChannel := ""
	if sb != nil {
		sb.end(endedByReset)
		oldChannel = sb.egress.channelDir
	}
	recorded := false // the reset's intent, ended once the env is carried over
	defer func() {
		if len(env) > 0 {
			m.writeEnvStore(ctx, name, env)
		}
		if recorded {
			m.endIntent(name)
		}
	}()
	r, canRename := RenamerOf(m.rt)
	if wipeWorkspace || !canRename {
		if wipeWorkspace {
			// Finished by the next boot if this server dies before the
			// new container has the env variables (finishPending): the
			// old workspace never comes back.
			if err := m.putIntent(state.Intent{Sandbox: name, Op: opWipe, Phase: intentBegun, Began: time.Now().UTC()}); err != nil {
				return BootInfo{}, err
			}
			recorded = true
		}
		if _, err := m.remove(ctx, name, "", wipeWorkspace); err != nil {
			return BootInfo{}, err
		}
		now, info, err := m.bootLocked(ctx, name, bootCreate)
		m.dropOldChannel(oldChannel, now, err)
		return info, err
	}
	// The container is addressed by its ID, never its name: a stranger
	// that took the name is neither renamed nor removed.
	var target, vol string
	if sb != nil && sb.own != nil {
		target, vol = sb.own.ID(), sb.volume
	}
	if target == "" {
		// Not booted by this server: make sure the container is ours.
		c, err := m.inspectOwned(ctx, name)
		if errors.Is(err, ErrNotFound) {
			_, info, err := m.bootLocked(ctx, name, bootCreate)
			return info, err
		}
		if err != nil {
			return BootInfo{}, err
		}
		target, vol = idOr(c), m.volumeOf(name, c)
	}
	// The new container mounts the workspace the old one did, whatever
	// the record says (spare.go).
	defer m.setKnownVolume(name, vol)()
	trash := m.trashName()
	// Recorded before the container moves: a server killed before the new
	// one runs with the env variables carried over leaves it for the next
	// server to finish from the old container (intent.go).
	in := state.Intent{Sandbox: name, Op: "reset", Phase: intentBegun, Trash: trash, Began: time.Now().UTC()}
	if err := m.putIntent(in); err != nil {
		return BootInfo{}, err
	}
	recorded = true
	err = r.Rename(ctx, target, trash)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return BootInfo{}, fmt.Errorf("reset sandbox %q: %w", name, err)
	}
	// The image and workspace are known good only if the container moved
	// aside was booted here from the image the profile names now.
	mode := bootCreate
	if err == nil && sb != nil && sb.Profile.Image == m.ProfileFor(name).Image {
		mode = bootReplace
	}
	now, info, bootErr := m.bootLocked(ctx, name, mode)
	if err == nil {
		// Deleted after the boot, so it does not compete with it for the
		// engine.
		m.spawn(func() { m.removeRetired(trash) })
	}
	m.dropOldChannel(oldChannel, now, bootErr)
	return info, bootErr
}

// idOr is what to address c by in an engine command: its ID, which no
// other container can take over, else its name.
func idOr(c Container) string {
	if c.ID != "" {
		return c.ID
	}
	return c.Name
}

// trashName is a fresh name for a container being deleted.
func (m *Manager) trashName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	// Never a sandbox's container name (the prefix and '-'): a claimed
	// spare moved aside is told from a sandbox by its name alone.
	return m.cfg.Prefix + "_old_" + hex.EncodeToString(b[:])
}

// readEnvStore reads the env store of name's container, if it runs;
// nil if there is none.
func (m *Manager) readEnvStore(ctx context.Context, name string, sb *Sandbox) []guest.EnvVar {
	out, err := m.guestScript(ctx, name, sb, guest.EnvListScript)
	if err != nil {
		return nil
	}
	return guest.ParseEnvList(out)
}

// writeEnvStore writes vars into the env store of name's new container.
func (m *Manager) writeEnvStore(ctx context.Context, name string, vars []guest.EnvVar) {
	var parts []string
	for _, v := range vars {
		script, err := guest.EnvSetScript(v.Name, v.Value, v.Secret)
		if err != nil {
			continue // ParseEnvList let only valid names through
		}
		parts = append(parts, script)
	}
	sb, _ := m.Lookup(name)
	if _, err := m.guestScript(ctx, name, sb, strings.Join(parts, " && ")); err != nil {
		m.log.Warn("carry env variables over the reset", "sandbox", name, "err", err)
	}
}

// guestScript runs one of the server's scripts in name's container:
// through sb's shells when this server has them (a pipe round trip), else
// with a one-off engine exec. It returns stdout; a non-zero exit is an error.
func (m *Manager) guestScript(ctx context.Context, name string, sb *Sandbox, script string) ([]byte, error) {
	if sb != nil {
		if out, err := sb.housekeep(ctx, script, scriptTimeout); err == nil {
			return out, nil
		}
	}
	c, err := m.inspectOwned(ctx, name)
	if err != nil {
		return nil, err
	}
	out, err := m.rt.Exec(ctx, idOr(c), ExecSpec{Argv: []string{"sh", "-c", script}})
	if err == nil && out.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", out.ExitCode, bytes.TrimSpace(out.Stderr))
	}
	if err != nil {
		return nil, err
	}
	return out.Stdout, nil
}
