package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/diskguard"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/hostkill"
)

// Optional engine capabilities are small interfaces a Runtime may also
// implement; the Manager discovers them by type assertion (Renamer,
// StatsReader, DiskLimiter, SizedVolumeCreator, UsageDirs) and falls back
// to something weaker when one is missing.

// DiskLimiter is implemented by engines that can say which disk limits
// this host enforces. The answer is worked out once and cached.
type DiskLimiter interface {
	DiskSupport(ctx context.Context) DiskSupport
}

// DiskSupport says how an engine on this host can bound a sandbox's disk.
type DiskSupport struct {
	// RootfsSize: `run --storage-opt size=` bounds the writable root
	// filesystem (overlay on xfs with project quotas, or btrfs).
	RootfsSize bool
	// VolumeSize: volumes can be created with a fixed size
	// (SizedVolumeCreator), e.g. an ext4 image on a loop device.
	VolumeSize bool
	// Pids: the engine enforces RunSpec.PidsLimit.
	Pids bool
	// RootfsUnwatchable says why the disk watcher cannot measure a
	// container's root filesystem here ("" when it can): a storage driver
	// without an upper directory (vfs copies the whole image).
	RootfsUnwatchable string
	// SharedCgroup says why a sandbox has no cgroup of its own here, so
	// that the CPU and memory figures read in it are the host's ("" when
	// it has one): a rootless engine on cgroup v1.
	SharedCgroup string
	// Notes says why a limit is not available, for doctor.
	Notes []string
}

// SizedVolumeCreator is implemented by engines that can create a volume of
// a fixed size. Creating one that exists and is usable is not an error; an
// engine may repair one whose backing storage went away (a host reboot
// detaches loop devices).
// It returns false when a volume of that name already exists without a
// size (made before limits existed); it is kept as it is. fresh says the
// caller knows of no volume of that name (a new sandbox's): an engine
// that refuses a second volume of one name may then create without a
// look first, and look only when refused.
type SizedVolumeCreator interface {
	VolumeCreateSized(ctx context.Context, name string, labels map[string]string, bytes int64, fresh bool) (bool, error)
}

// VolumeSizer is implemented by engines that can tell the size of a sized
// volume from the host (its image file): what the volume holds, whatever
// a sandbox's labels say.
type VolumeSizer interface {
	// VolumeSize returns the volume's size; false for a volume of no
	// fixed size.
	VolumeSize(ctx context.Context, name string) (int64, bool, error)
}

// UsageDirs is implemented by engines whose container and volume storage
// is a host directory the server can read, which is what the disk watcher
// measures.
type UsageDirs interface {
	// RootfsDir is the directory holding the container's writes to its
	// root filesystem (overlay's upper directory).
	RootfsDir(ctx context.Context, name string) (string, error)
	// VolumeDir is the directory holding a volume's files.
	VolumeDir(ctx context.Context, volume string) (string, error)
}

// HostPIDs is implemented by runtimes whose containers run on the server's
// own kernel, so that the disk watcher can stop writers from the host at
// once (see package hostkill) instead of through an engine exec.
type HostPIDs interface {
	// InitPID is the host PID of the container's first process.
	InitPID(ctx context.Context, name string) (int, error)
}

// How a disk limit is enforced on one part of a sandbox.
const (
	MechVolumeSize = "volume-size" // /workspace is a filesystem of that size
	MechStorageOpt = "storage-opt" // the engine's storage quota on the rootfs
	MechWatcher    = "watcher"     // the server polls usage and stops writers
	MechNone       = "none"        // nothing bounds it on this host
)

// LabelLimits records on a container the limits it was booted with, e.g.
// "disk:20G,pids:1024,workspace:volume-size,rootfs:watcher". A container
// without it predates limits: a reset applies them. The value holds no
// '=': Apple's `run -l` refuses a label whose value has one. Containers
// booted by older servers carry "disk=20G,pids=1024,…", which is still
// read.
const LabelLimits = "io.sandbox-mcp.limits"

// Limits says what bounds a sandbox's disk and processes.
type Limits struct {
	Disk string `json:"disk,omitempty"`
	Pids int    `json:"pids,omitempty"`
	// Workspace and Rootfs are the mechanisms in force: volume-size,
	// storage-opt, watcher or none.
	Workspace string `json:"workspace,omitempty"`
	Rootfs    string `json:"rootfs,omitempty"`
	// Note is set when the sandbox was booted without these limits (before
	// they existed, or with another profile): "reset to apply".
	Note string `json:"note,omitempty"`
}

// String renders limits for people, e.g. "disk 20G (workspace volume-size,
// rootfs watcher), pids 1024".
func (l Limits) String() string {
	var parts []string
	if l.Disk != "" {
		parts = append(parts, fmt.Sprintf("disk %s (workspace %s, rootfs %s)", l.Disk, l.Workspace, l.Rootfs))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
	}
	s := strings.Join(parts, ", ")
	if s == "" {
		s = "no disk or pids limits"
	}
	if l.Note != "" {
		s += "; " + l.Note
	}
	return s
}

// encode renders limits as the value of LabelLimits.
func (l Limits) encode() string {
	return fmt.Sprintf("disk:%s,pids:%d,workspace:%s,rootfs:%s", l.Disk, l.Pids, l.Workspace, l.Rootfs)
}

// parseLimitsLabel reads LabelLimits in either form ("disk:20G,…" or the
// older "disk=20G,…"); ok is false when it is missing.
func parseLimitsLabel(s string) (Limits, bool) {
	if s == "" {
		return Limits{}, false
	}
	var l Limits
	for _, kv := range strings.Split(s, ",") {
		k, v := kv, ""
		if i := strings.IndexAny(kv, ":="); i >= 0 {
			k, v = kv[:i], kv[i+1:]
		}
		switch k {
		case "disk":
			l.Disk = v
		case "pids":
			l.Pids, _ = strconv.Atoi(v)
		case "workspace":
			l.Workspace = v
		case "rootfs":
			l.Rootfs = v
		}
	}
	return l, true
}

// diskSupport asks the engine what it can enforce; engines that cannot
// say enforce nothing.
func diskSupport(ctx context.Context, rt Runtime) DiskSupport {
	if dl, ok := rt.(DiskLimiter); ok {
		return dl.DiskSupport(ctx)
	}
	return DiskSupport{Notes: []string{rt.Kind() + " reports no disk or pids limits"}}
}

// HostLimits says how this engine and host would enforce prof's limits,
// and what it cannot enforce (for doctor).
func HostLimits(ctx context.Context, rt Runtime, prof Profile) (Limits, DiskSupport) {
	ds := diskSupport(ctx, rt)
	return planLimits(ds, rt, prof), ds
}

// planLimits decides how prof's limits are enforced for a new container.
func planLimits(ds DiskSupport, rt Runtime, prof Profile) Limits {
	l := Limits{Disk: prof.Disk}
	if ds.Pids {
		l.Pids = prof.Pids
	}
	if prof.Disk == "" {
		return l
	}
	_, watchable := rt.(UsageDirs)
	pick := func(native bool, mech string) string {
		switch {
		case native:
			return mech
		case watchable:
			return MechWatcher
		}
		return MechNone
	}
	l.Workspace = pick(ds.VolumeSize, MechVolumeSize)
	if _, ok := rt.(SizedVolumeCreator); !ok && l.Workspace == MechVolumeSize {
		l.Workspace = pick(false, "")
	}
	if ds.RootfsSize || ds.RootfsUnwatchable == "" {
		l.Rootfs = pick(ds.RootfsSize, MechStorageOpt)
	} else {
		l.Rootfs = MechNone
	}
	return l
}

// limitsOf reads the limits a container was booted with and compares them
// with the profile it would boot with now.
func limitsOf(c Container, prof Profile) Limits {
	l, ok := parseLimitsLabel(c.Labels[LabelLimits])
	switch {
	case !ok && (prof.Disk != "" || prof.Pids > 0):
		l.Note = "booted before disk and pids limits: reset to apply"
	case ok && (l.Disk != prof.Disk || (l.Pids != prof.Pids && l.Pids != 0)):
		l.Note = fmt.Sprintf("profile now asks for disk %q, pids %d: reset to apply", prof.Disk, prof.Pids)
	}
	return l
}

// ---- Manager side: the sandbox's limits and its disk watcher ----

// prepareLimits decides a new container's limits, creates its workspace
// volume (sized when the engine can) and fills spec's limit fields and
// label. known skips creating the volume (a reset's replacement), but a
// sized one is still checked so the limits reported are the real ones;
// fresh says no volume of that name is known of (SizedVolumeCreator).
func (m *Manager) prepareLimits(ctx context.Context, name string, prof Profile, vol string, labels map[string]string, known, fresh bool, spec *RunSpec) error {
	lim := planLimits(diskSupport(ctx, m.rt), m.rt, prof)
	spec.PidsLimit = lim.Pids
	if lim.Rootfs == MechStorageOpt {
		spec.StorageSize = prof.Disk
	}
	switch svc, _ := m.rt.(SizedVolumeCreator); {
	case lim.Workspace == MechVolumeSize:
		size, _ := ParseSize(prof.Disk) // validated at boot
		sized, err := svc.VolumeCreateSized(ctx, vol, labels, size, fresh && !known)
		if err != nil {
			return fmt.Errorf("create workspace volume for %q: %w", name, err)
		}
		if !sized { // a workspace made before limits: kept, and watched
			lim.Workspace = planLimits(DiskSupport{}, m.rt, prof).Workspace
		}
	case !known:
		if err := m.rt.VolumeCreate(ctx, vol, labels); err != nil {
			return fmt.Errorf("create workspace volume for %q: %w", name, err)
		}
	}
	spec.Labels[LabelLimits] = lim.encode()
	return nil
}

// repairWorkspace makes a stopped sandbox's sized workspace usable before
// it starts (a host reboot detaches loop devices).
func (m *Manager) repairWorkspace(ctx context.Context, name string, c Container) {
	lim, _ := parseLimitsLabel(c.Labels[LabelLimits])
	svc, ok := m.rt.(SizedVolumeCreator)
	if !ok || lim.Workspace != MechVolumeSize {
		return
	}
	size, err := ParseSize(lim.Disk)
	if err == nil {
		_, err = svc.VolumeCreateSized(ctx, m.volumeOf(name, c), m.labels(name), size, false)
	}
	if err != nil {
		m.log.Warn("check sized workspace", "sandbox", name, "err", err)
	}
}

// startGuard starts the disk watcher of a booted sandbox when its limits
// call for one. It runs as the sandbox's work (Sandbox.Go), so it ends
// with the sandbox; the directories it measures are looked up there too,
// off the path of the sandbox's first command.
func (m *Manager) startGuard(sb *Sandbox) {
	lim := sb.limits
	ud, ok := m.rt.(UsageDirs)
	size, err := ParseSize(lim.Disk)
	if !ok || err != nil || (lim.Workspace != MechWatcher && lim.Rootfs != MechWatcher) {
		return
	}
	sb.Go(func(ctx context.Context) {
		var targets []diskguard.Target
		add := func(what, dir string, err error) {
			if err != nil {
				if ctx.Err() == nil {
					m.log.Warn("disk watcher: no directory to measure", "sandbox", sb.Name, "what", what, "err", err)
				}
				return
			}
			targets = append(targets, diskguard.Target{What: what, Dir: dir, Limit: size, LimitText: lim.Disk})
		}
		if lim.Rootfs == MechWatcher {
			dir, err := sb.inspected.UpperDir, error(nil)
			if dir == "" {
				dir, err = ud.RootfsDir(ctx, sb.Container)
			}
			add("the root filesystem", dir, err)
		}
		if lim.Workspace == MechWatcher {
			dir, err := ud.VolumeDir(ctx, sb.volume)
			add(m.cfg.Workdir, dir, err)
		}
		if len(targets) == 0 || ctx.Err() != nil {
			return
		}
		hk := m.hostKiller(sb.Container, sb.inspected)
		g := diskguard.Start(diskguard.Options{
			Sandbox: sb.Name, Targets: targets, Logger: m.log,
			Kill: func(ctx context.Context) error {
				// Only what runs now is stopped: the in-container pass
				// lands a while later, when the user's next command (an
				// `rm`) may have begun.
				by, err := hostkill.Now()
				if err != nil {
					by = anyStart // no clock to tell: stop them all
				}
				hk.kill(ctx, by)
				return m.killWriters(ctx, sb.Container, by)
			},
			Report: func(msg string) { sb.notice.Store(&msg) },
		})
		<-ctx.Done()
		g.Close()
	})
}

// hostKiller stops a container's writers from the host where the runtime
// allows it. The container's init is looked up ahead of the first kill,
// and again after the container restarted.
type hostKiller struct {
	lookup func(ctx context.Context) (*hostkill.Container, error)
	mu     sync.Mutex
	c      *hostkill.Container
	log    *slog.Logger
}

func (m *Manager) hostKiller(ctr string, seen Container) *hostKiller {
	hp, ok := m.rt.(HostPIDs)
	if !ok {
		return &hostKiller{}
	}
	known := seen.PID
	hk := &hostKiller{log: m.log, lookup: func(ctx context.Context) (*hostkill.Container, error) {
		// The first lookup may start from the PID the boot's inspect
		// read (seen), if that process is still in the container's
		// cgroup, whose path names the container's ID: after a restart
		// the PID may be another's. Otherwise, and on later lookups, the
		// engine is asked.
		pid, err := known, error(nil)
		known = 0
		if pid <= 1 || !inCgroupOf(pid, seen.ID) {
			if pid, err = hp.InitPID(ctx, ctr); err != nil {
				return nil, err
			}
		}
		return hostkill.Open(pid)
	}}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hk.mu.Lock()
		defer hk.mu.Unlock()
		hk.get(ctx)
	}()
	return hk
}

// inCgroupOf reports whether process pid of this host is in a cgroup
// whose path holds container ID id (as docker's and podman's do).
func inCgroupOf(pid int, id string) bool {
	if len(id) < 12 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return err == nil && strings.Contains(string(b), id)
}

// get returns the container, looking it up when unknown; mu is held.
func (hk *hostKiller) get(ctx context.Context) *hostkill.Container {
	if hk.c == nil && hk.lookup != nil {
		c, err := hk.lookup(ctx)
		if err != nil {
			hk.log.Debug("disk watcher: no host view of the container", "err", err)
		}
		hk.c = c
	}
	return hk.c
}

// kill signals the writers that started by startedBy (a hostkill.Now
// reading) that it can reach from the host; the in-container pass that
// follows reaches the rest.
func (hk *hostKiller) kill(ctx context.Context, startedBy uint64) {
	hk.mu.Lock()
	defer hk.mu.Unlock()
	c := hk.get(ctx)
	if c == nil {
		return
	}
	n, err := c.KillWriters(startedBy)
	if err != nil {
		hk.c = nil // restarted: look it up again next time
		if c = hk.get(ctx); c != nil {
			n, err = c.KillWriters(startedBy)
		}
	}
	hk.log.Debug("disk watcher: host kill", "signalled", n, "err", err)
}

// killWriters stops what the user's commands and jobs started in a
// container by startedBy (see guest.KillWritersScript).
func (m *Manager) killWriters(ctx context.Context, ctr string, startedBy uint64) error {
	argv := []string{"sh", "-c", guest.KillWritersScript}
	if startedBy != anyStart {
		argv = append(argv, "sh", strconv.FormatUint(startedBy, 10))
	}
	_, err := m.rt.Exec(ctx, ctr, ExecSpec{Argv: argv})
	return err
}

// anyStart, as killWriters' startedBy, stops writers whenever they started.
const anyStart = math.MaxUint64

// takeNotice returns and clears the message the disk watcher left.
func (sb *Sandbox) takeNotice() string {
	if p := sb.notice.Swap(nil); p != nil {
		return *p
	}
	return ""
}
