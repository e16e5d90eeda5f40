package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// Warm spares: booted sandboxes of the default profile that wait, under
// names of their own, for the first call on a new name. The call renames
// one to the name's container (one engine round trip where a boot takes
// several), and a new spare boots in the background. A named profile
// with spares (Profile.Spares) has one more kept for its name while that
// name has no sandbox.
//
// A spare keeps what it was booted with: its labels (role spare, the key
// below) and its workspace volume, which is named after the spare, not the
// sandbox. So the name of a claimed spare's container is what binds it to
// its sandbox (sandboxOf), its LabelVolume says which workspace it
// mounts, and the sandbox's record keeps the volume for when the container
// is gone (workspaceVolume). The engine's rename is the claim: a server
// killed just before it leaves a spare, just after it a sandbox the next
// boot adopts.
//
// Spares need an engine that renames containers (docker and podman; not
// Apple's CLI) and a state store. Each spare's lock (its container name)
// is held while it is claimed or removed, so two servers never claim the
// same one; the refill holds a lock of its own, so servers keep N between
// them, not N each.

const (
	// LabelSpare is a spare's key (spareKey): what it was booted as.
	LabelSpare = "io.sandbox-mcp.spare"
	// LabelSpareImage is the ID of the image a spare was booted from,
	// where the engine tells it (ImageIdentifier): a spare of an image
	// since rebuilt under the same name is not taken.
	LabelSpareImage = "io.sandbox-mcp.spare-image"
	// LabelSpareFor is the named profile a spare was booted for, on
	// spares kept for a profile's name (not the defaults').
	LabelSpareFor = "io.sandbox-mcp.spare-for"
	// LabelVolume names the workspace volume of a container whose volume
	// is not named after its sandbox (a claimed spare's).
	LabelVolume = "io.sandbox-mcp.volume"
	// RoleSpare is LabelRole of a spare, claimed or not.
	RoleSpare = "spare"
)

// spareState is the Manager's refill of spares.
type spareState struct {
	// mu orders claims and removals of spares within this process (the
	// spares' locks order them between processes, where there is a lock
	// directory).
	mu sync.Mutex
	// running is set while a refill runs; again asks it for one more
	// pass.
	running, again atomic.Bool
	// want is how many of the defaults' to keep (KeepSpares); profiles
	// how many named profiles ask for one (SetProfiles), so that whether
	// spares are kept is two loads on every call's path; watching starts
	// watchLocal once.
	want, profiles atomic.Int32
	watching       sync.Once
	// local are the spares this server booted, oldest first, as
	// inspected after their boot; busy are the spares a claim or removal
	// of this server's holds. Both under mu.
	local []*localSpare
	busy  map[string]bool
	// booting are the spares this server is booting, from before their
	// run until they are among local, true while no claim of this
	// server's took one through the engine's listing: the boot then
	// ends what it holds open in it (its shell, its agent), which would
	// otherwise be left in the claimant's sandbox. Under mu.
	booting map[string]bool
	// volumes are the workspaces resets and restores under way found on
	// the containers they replace, by sandbox (setKnownVolume).
	volumes map[string]string
	// checked is when a refill last looked (UnixNano), for refillIfDue.
	checked atomic.Int64
}

// Spares lists the spares waiting to be claimed (Name empty, Container
// the spare's), running or stopped by their watchdog.
func (m *Manager) Spares(ctx context.Context) ([]Info, error) {
	if !m.sparesPossible() {
		return nil, nil
	}
	cs, err := m.spareCandidates(ctx)
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, c := range cs {
		if m.isSpareName(c.Name) {
			out = append(out, Info{Container: c.Name, State: c.State, Image: c.Image, Created: c.Created, SpareFor: c.Labels[LabelSpareFor]})
		}
	}
	return out, nil
}

// MaxSpares bounds KeepSpares.
const MaxSpares = 8

// KeepSpares has the Manager keep n warm spares of the default profile
// booted for the first call on a new name, from now on (0: none, and the
// ones there are removed). Spares need an engine that renames containers
// and a state store; elsewhere this does nothing and Spares says why.
//
// Named profiles with spares (Profile.Spares) have theirs kept besides,
// whatever n is.
func (m *Manager) KeepSpares(n int) {
	m.spares.want.Store(int32(min(max(n, 0), MaxSpares)))
	m.watchSpares()
	m.refillSoon()
}

// watchSpares starts watchLocal once spares are kept.
func (m *Manager) watchSpares() {
	if m.sparesOn() && !m.closed.Load() {
		m.spares.watching.Do(func() { m.spawn(m.watchLocal) })
	}
}

// DescribeSpares says, for doctor, what keeping n spares of the defaults
// on rt comes to, and one for each of the named profiles listed.
func DescribeSpares(rt Runtime, n int, profiles []string) string {
	why := whyNoRename(rt)
	var s string
	switch {
	case n <= 0 && len(profiles) == 0:
		return "off (--spares 0)"
	case why != "":
		return fmt.Sprintf("none: %s, which taking a spare is", why)
	case n <= 0:
		s = "none of the defaults (--spares 0)"
	default:
		s = fmt.Sprintf("%d booted and waiting for the first call on a new name (--spares)", min(n, MaxSpares))
	}
	if len(profiles) > 0 {
		s += fmt.Sprintf("; one for each of the profiles %s while its name has no sandbox", strings.Join(profiles, ", "))
	}
	return s
}

// refillDelay is how long a refill waits before it looks, so that the
// boot of a new spare does not compete with the first command of the name
// that took the last one.
const refillDelay = time.Second

// spareTries bounds how many spares one claim tries before it boots the
// name the usual way (each failure is a spare another server took).
const spareTries = 3

// spareName is the container name of spare id. It can never be a
// sandbox's: those are the prefix and '-'.
func (m *Manager) spareName(id string) string { return m.cfg.Prefix + "_spare_" + id }

func (m *Manager) spareVolume(id string) string { return m.cfg.Prefix + "-ws_spare_" + id }

// isSpareName reports whether ctr is the name of an unclaimed spare of
// this prefix.
func (m *Manager) isSpareName(ctr string) bool { return spareNamed(ctr, m.spareName("")) }

// spareNamed reports whether s is prefix followed by a spare's id (16
// hex digits, as spareName and spareVolume make them).
func spareNamed(s, prefix string) bool {
	id, ok := strings.CutPrefix(s, prefix)
	return ok && len(id) == 16 && isHex(id)
}

// spareKey is what a spare was booted as, and what a name must boot as to
// take it: the parts of its profile fixed at creation, the idle TTL its
// watchdog runs with, and its network mode; and for a spare of a named
// profile, that profile's name, whose sandbox alone takes it.
func spareKey(p Profile, ttl time.Duration, mode, profile string) string {
	fields := []any{p.Image, p.CPUs, p.Memory, p.Virtualization, p.Disk, p.Pids, ttl.String(), mode}
	if profile != "" {
		fields = append(fields, profile)
	}
	b, _ := json.Marshal(fields)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// spareProfile is what spares boot as: the defaults, with the idle TTL
// and network mode a name without a profile of its own gets.
func (m *Manager) spareProfile() (Profile, time.Duration, string) {
	m.profMu.RLock()
	prof := m.cfg.Defaults
	m.profMu.RUnlock()
	ttl := DefaultIdleTTL
	if prof.IdleTTL != "" {
		if d, err := ParseIdleTTL(prof.IdleTTL); err == nil {
			ttl = d
		}
	}
	return prof, ttl, egress.Narrowest(prof.EgressMode())
}

// sparesOn reports whether this Manager keeps spares: of the defaults,
// or of a named profile.
func (m *Manager) sparesOn() bool {
	return (m.spares.want.Load() > 0 || m.spares.profiles.Load() > 0) && m.sparesPossible()
}

// profilesWithSpares are the named profiles that ask for a spare, sorted.
func (m *Manager) profilesWithSpares() []string {
	m.profMu.RLock()
	defer m.profMu.RUnlock()
	return profilesWithSpares(m.cfg.Profiles)
}

// profilesWithSpares are the profiles of profiles that ask for a spare,
// sorted.
func profilesWithSpares(profiles map[string]Profile) []string {
	var names []string
	for name, p := range profiles {
		if p.Spares > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// spareTarget is one kind of spare the Manager keeps: what they boot as,
// their key, and how many. profile is "" for the defaults' spares, else
// the named profile whose name takes them.
type spareTarget struct {
	profile string
	prof    Profile
	ttl     time.Duration
	mode    string
	key     string
	want    int
}

// spareTargets are the spares to keep: KeepSpares' count of the
// defaults, and one for each named profile with spares whose name can
// take one (bootsAs). For a refill, a profile whose name has a sandbox
// record is left out (a name in use takes no spare); otherwise they are
// the keys a claim may take.
func (m *Manager) spareTargets(refill bool) []spareTarget {
	var ts []spareTarget
	if n := int(m.spares.want.Load()); n > 0 {
		prof, ttl, mode := m.spareProfile()
		ts = append(ts, spareTarget{prof: prof, ttl: ttl, mode: mode, key: spareKey(prof, ttl, mode, ""), want: n})
	}
	for _, name := range m.profilesWithSpares() {
		prof, ttl, mode, ok := m.bootsAs(name)
		if !ok || ttl == 0 {
			continue // never takes one, or its spare would never stop (config refuses it)
		}
		if refill && m.nameInUse(name) {
			continue
		}
		ts = append(ts, spareTarget{profile: name, prof: prof, ttl: ttl, mode: mode, key: spareKey(prof, ttl, mode, name), want: 1})
	}
	return ts
}

// nameInUse reports whether sandbox name has, or is getting, a sandbox,
// so that a spare kept for it would not be taken: a record, a sandbox
// this server holds, or a lifecycle under way here or in another server.
func (m *Manager) nameInUse(name string) bool {
	if none, told := m.noRecord(name); !none || !told {
		return true
	}
	if _, ok := m.Lookup(name); ok {
		return true
	}
	s := m.slotFor(name)
	select {
	case s.lc <- struct{}{}:
		defer func() { <-s.lc }()
	default:
		return true // a boot, reset or destroy of this server's
	}
	h, err := m.locks.TryLock(m.lockKey(name), "look for a spare's name")
	if err != nil {
		return true // another server's
	}
	h.Release()
	return false
}

func (m *Manager) sparesPossible() bool {
	_, renames := RenamerOf(m.rt)
	return renames && m.cfg.Sandboxes != nil
}

// bootsAs is what sandbox name boots as, as far as a spare goes (its
// profile, idle TTL and network mode), or false when it never takes a
// spare: it is a child, is restored or cloned, or has a hashed container
// name.
func (m *Manager) bootsAs(name string) (Profile, time.Duration, string, bool) {
	if m.ContainerFor(name) != m.cfg.Prefix+"-"+name || m.override(name) != nil {
		return Profile{}, 0, "", false
	}
	if _, _, child, err := m.childProfile(name); err != nil || child {
		return Profile{}, 0, "", false
	}
	prof := m.ProfileFor(name)
	return prof, m.IdleTTL(name), m.effectiveMode(name, prof), true
}

// spareKeysFor are the keys of the spares sandbox name may take, its own
// profile's first, or none when it must boot otherwise: bootsAs says it
// takes none, or no spare is kept of what it boots as (another profile,
// idle TTL or network mode than the defaults' spares, such as the sandbox
// named default, which is not reaped, and no profile of its own with
// spares).
func (m *Manager) spareKeysFor(name string) []string {
	if !m.sparesOn() {
		return nil
	}
	prof, ttl, mode, ok := m.bootsAs(name)
	if !ok {
		return nil
	}
	targets := m.spareTargets(false)
	var keys []string
	for _, k := range []string{spareKey(prof, ttl, mode, name), spareKey(prof, ttl, mode, "")} {
		if slices.ContainsFunc(targets, func(t spareTarget) bool { return t.key == k }) {
			keys = append(keys, k)
		}
	}
	return keys
}

// errStaleSpare is takeSpare's answer for a spare of an image rebuilt
// since it booted: the next spare is tried.
var errStaleSpare = errors.New("the spare's image was rebuilt since it booted")

// staleSpare reports whether spare c was booted from another image than
// the one its image's name gives now (imageNow, "" when not known).
func staleSpare(c Container, imageNow string) bool {
	was := c.Labels[LabelSpareImage]
	return was != "" && imageNow != "" && was != imageNow
}

// imageID is the ID of image ref now, or "" when the engine does not
// tell it (or the look fails).
func (m *Manager) imageID(ctx context.Context, ref string) string {
	ii, ok := m.rt.(ImageIdentifier)
	if !ok {
		return ""
	}
	id, err := ii.ImageID(ctx, ref)
	if err != nil {
		return ""
	}
	return id
}

// errNameTaken is takeSpare's answer when the sandbox's container name
// is taken: there is a container to find under it, not a spare to claim.
var errNameTaken = errors.New("the sandbox's container name is taken")

// claimSpare renames a spare with sandbox name's key to name's
// container, records its workspace, and returns it with a pool whose
// first shell is open (nil if it failed: a spare of this server's found
// stopped, which the boot starts); false when there is none to take, or
// when a container has the name (the rename says so: the caller may try
// before it looks). The caller holds name's lifecycle lock. The spares
// this server booted are tried first, stopped ones too, without listing
// the engine's; then the running ones the engine lists. A listed spare
// that is not running may still be booting, this server's or another's
// (on Kubernetes a spare with no pod yet lists as stopped): never taken.
func (m *Manager) claimSpare(ctx context.Context, own *owner) (claim, bool) {
	if !m.sparesOn() {
		return claim{}, false
	}
	keys := m.spareKeysFor(own.name)
	if len(keys) == 0 {
		return claim{}, false
	}
	defer m.refillSoon() // one more, or the first after the spares were reaped
	// A name whose workspace volume exists is no new name (a sandbox
	// whose container went, its record with it): it boots on that
	// workspace. Looked up while the first shell opens.
	local := m.localSpares()
	control := ""
	if len(local) > 0 {
		control = local[0].c.Labels[LabelVolume]
	}
	isNew := sync.OnceValue(func() bool { return m.volumeAbsent(ctx, m.volumeFor(own.name), control) })
	go isNew()
	// And what the spares' image is now, to tell a spare of an image
	// since rebuilt.
	prof := m.ProfileFor(own.name)
	imageNow := sync.OnceValue(func() string { return m.imageID(ctx, prof.Image) })
	go imageNow()
	current := func(c Container) bool { return !staleSpare(c, imageNow()) }
	r, _ := RenamerOf(m.rt)
	tried := map[string]bool{}
	for _, ls := range local {
		c := ls.c
		tried[c.Name] = true
		got, err := m.takeSpare(ctx, r, own, c, keys, isNew, current)
		if err == nil {
			return got, true
		}
		if errors.Is(err, errNameTaken) {
			return claim{}, false
		}
	}
	if _, pools := poolKeeperOf(m.rt); pools && !isNew() {
		// A pool's spare is not put back: a name with a workspace boots
		// on it, without one.
		return claim{}, false
	}
	cs, err := m.spareCandidates(ctx)
	if err != nil {
		m.log.Warn("list spares", "err", err)
		return claim{}, false
	}
	tries := 0
	for _, c := range cs {
		if tried[c.Name] || !c.Running() || !m.isSpareName(c.Name) || !slices.Contains(keys, c.Labels[LabelSpare]) {
			continue
		}
		if tries++; tries > spareTries {
			break
		}
		got, err := m.takeSpare(ctx, r, own, c, keys, isNew, current)
		if err == nil {
			return got, true
		}
		if errors.Is(err, errNameTaken) {
			return claim{}, false
		}
	}
	return claim{}, false
}

// spareCandidates are the spares to claim: the engine's containers of
// role spare, or the spares of the runtime's pools.
func (m *Manager) spareCandidates(ctx context.Context) ([]Container, error) {
	if pk, ok := poolKeeperOf(m.rt); ok {
		return pk.Pooled(ctx, m.cfg.Prefix)
	}
	return m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix, LabelRole: RoleSpare})
}

// claim is what a claim of a spare gives its sandbox's boot: the
// container, a pool whose first shell is open (nil if that failed), and
// the agent the spare ran, if it did.
type claim struct {
	c      Container
	pool   *shell.Pool
	agent  *agentConn
	caDone bool // the egress CA install is done in it (installed, or not the user's to write), run while it waited
}

// localSpare is a spare this server booted, as inspected then, with
// what it holds open for the sandbox that takes it: a shell (opened by the
// container's ID, through a gate that takes the sandbox's owner once
// claimed) and, for an allowlist spare, its running agent.
type localSpare struct {
	c      Container
	pool   *shell.Pool
	holder *atomic.Pointer[owner]
	agent  *agentConn
	caDone bool // the egress CA install is done in it (installSpareCA)
}

// installSpareCA runs the egress CA's install (installCA's) in an
// allowlist spare through its open shell while it waits, so that the
// first command of the sandbox that claims it need not wait for that
// (controlSoon); false if it did not run or failed (caRun). The install puts the CA in the
// trust stores the image has, as it would at the sandbox's boot.
func (m *Manager) installSpareCA(ctx context.Context, pool *shell.Pool) bool {
	if m.cfg.CA == nil || pool == nil {
		return false
	}
	res, err := pool.Run(ctx, shell.Request{Command: m.caInstallScript(), Trusted: true, Timeout: scriptTimeout})
	if err != nil || res.TimedOut || res.ShellLost || res.ExitCode != 0 {
		m.log.Debug("a spare's egress CA", "err", err, "exit", res.ExitCode, "timed_out", res.TimedOut)
		return false
	}
	return true
}

// close ends what ls holds open.
func (ls *localSpare) close() {
	if ls.pool != nil {
		ls.pool.Close()
	}
	if ls.agent != nil {
		ls.agent.c.Close()
	}
}

// localSpares are the spares this server booted and has not seen taken,
// oldest first.
func (m *Manager) localSpares() []*localSpare {
	m.spares.mu.Lock()
	defer m.spares.mu.Unlock()
	return slices.Clone(m.spares.local)
}

// forgetLocal drops spare from the ones this server booted and returns
// it (nil if it was not one), for the caller to hand on or close.
func (m *Manager) forgetLocal(spare string) *localSpare {
	m.spares.mu.Lock()
	defer m.spares.mu.Unlock()
	i := slices.IndexFunc(m.spares.local, func(ls *localSpare) bool { return ls.c.Name == spare })
	if i < 0 {
		return nil
	}
	ls := m.spares.local[i]
	m.spares.local = slices.Delete(m.spares.local, i, i+1)
	return ls
}

// setBooting marks spare as one this server is booting, or no longer.
func (m *Manager) setBooting(spare string, on bool) {
	m.spares.mu.Lock()
	defer m.spares.mu.Unlock()
	if !on {
		delete(m.spares.booting, spare)
		return
	}
	if m.spares.booting == nil {
		m.spares.booting = map[string]bool{}
	}
	m.spares.booting[spare] = true
}

// claimedWhileBooting notes that a claim took spare, if this server is
// still booting it (see booting).
func (m *Manager) claimedWhileBooting(spare string) {
	m.spares.mu.Lock()
	defer m.spares.mu.Unlock()
	if _, ok := m.spares.booting[spare]; ok {
		m.spares.booting[spare] = false
	}
}

// isLocal reports whether this server booted spare and still holds it.
func (m *Manager) isLocal(spare string) bool {
	m.spares.mu.Lock()
	defer m.spares.mu.Unlock()
	return slices.ContainsFunc(m.spares.local, func(ls *localSpare) bool { return ls.c.Name == spare })
}

// dropTaken ends what this server holds in its spares that cs (a listing
// of this prefix's spares) no longer shows as spares: another server took
// them, or they went. A spare of this server's that stopped (its idle
// TTL, or it died) is kept, for a claim to start it (takeSpare) or the
// refill to remove it, as it would be before this look. Each under the
// spare's lock, so a claim of this server's under way keeps what it holds.
func (m *Manager) dropTaken(cs []Container) {
	listed := map[string]string{} // spare name: container ID
	for _, c := range cs {
		if m.isSpareName(c.Name) {
			listed[c.Name] = c.ID
		}
	}
	for _, ls := range m.localSpares() {
		if id, ok := listed[ls.c.Name]; ok && id == ls.c.ID {
			continue
		}
		if release, err := m.holdSpare(ls.c.Name, "forget spare"); err == nil {
			m.dropLocal(ls.c.Name)
			release()
		}
	}
}

// watchLocal looks at this server's spares every refillEvery, while the
// Manager lives, to end what it holds in those another server took or
// that stopped, even with no call coming (refills run only on calls).
func (m *Manager) watchLocal() {
	t := time.NewTicker(refillEvery)
	defer t.Stop()
	for {
		select {
		case <-m.life.Done():
			return
		case <-t.C:
		}
		m.lookAtLocal(m.life)
	}
}

// lookAtLocal is one look of watchLocal's.
func (m *Manager) lookAtLocal(ctx context.Context) {
	if len(m.localSpares()) == 0 {
		return
	}
	cs, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix, LabelRole: RoleSpare})
	if err == nil {
		m.dropTaken(cs)
	}
}

// dropLocal is forgetLocal for a spare no sandbox of this server takes.
func (m *Manager) dropLocal(spare string) {
	if ls := m.forgetLocal(spare); ls != nil {
		ls.close()
	}
}

// sparePool is a pool of shells in spare id, opened by its ID: its gate
// lets the first shell open while the spare waits (this server has just
// booted it), and has the sandbox that takes it (holder, set at the
// claim) check the later ones.
func (m *Manager) sparePool(id string, holder *atomic.Pointer[owner]) *shell.Pool {
	return m.poolOn(id, func(ctx context.Context) error {
		if o := holder.Load(); o != nil {
			return o.gate(ctx)
		}
		return nil
	})
}

// closeSpares ends what this server holds open in its spares, which stay
// for the next server (Close).
func (m *Manager) closeSpares() {
	m.spares.mu.Lock()
	local := m.spares.local
	m.spares.local = nil
	m.spares.mu.Unlock()
	for _, ls := range local {
		ls.close()
	}
}

// holdSpare takes spare's lock, which orders claims and removals of it
// between servers (its lock file) and within this one (busy, for a
// Manager without a lock directory); release gives it back.
func (m *Manager) holdSpare(spare, purpose string) (release func(), err error) {
	m.spares.mu.Lock()
	if m.spares.busy[spare] {
		m.spares.mu.Unlock()
		return nil, errors.New("spare in use")
	}
	if m.spares.busy == nil {
		m.spares.busy = map[string]bool{}
	}
	m.spares.busy[spare] = true
	m.spares.mu.Unlock()
	free := func() {
		m.spares.mu.Lock()
		delete(m.spares.busy, spare)
		m.spares.mu.Unlock()
	}
	h, err := m.locks.TryLock(spare, purpose)
	if err != nil {
		free()
		return nil, err
	}
	return func() { h.Release(); free() }, nil
}

// volumeAbsent reports whether volume vol does not exist; false when it
// cannot tell. It is read from the host where the engine's volumes are
// directories there (HostVolumes) and that view shows volume known, which
// exists (a spare's workspace); the engine is asked otherwise.
func (m *Manager) volumeAbsent(ctx context.Context, vol, known string) bool {
	if hv, ok := m.rt.(HostVolumes); ok && known != "" {
		if there, ok := hv.VolumeOnHost(known); ok && there {
			if exists, ok := hv.VolumeOnHost(vol); ok {
				return !exists
			}
		}
	}
	vs, ok := m.rt.(VolumeSizer)
	if !ok {
		return false
	}
	_, _, err := vs.VolumeSize(ctx, vol)
	return errors.Is(err, ErrNotFound)
}

// takeSpare claims spare c (as listed or inspected when it booted) for
// the sandbox own is for, under the spare's lock, by renaming it by its
// spare name: under the lock nobody else renames it, and once claimed
// that name is gone for good (none is used twice), so a spare another
// server took is never taken back. The sandbox's first shell opens by the
// container's ID while the engine renames it, held at its gate until the
// rename is done. isNew and current are looked up while the rename runs:
// a name with a workspace, or a spare of an image rebuilt since
// (current false), gets the spare renamed back.
func (m *Manager) takeSpare(ctx context.Context, r Renamer, own *owner, c Container, keys []string, isNew func() bool, current func(Container) bool) (claim, error) {
	name := own.name
	if c.ID == "" || c.Labels[LabelOwner] != m.cfg.Prefix || c.Labels[LabelRole] != RoleSpare || !slices.Contains(keys, c.Labels[LabelSpare]) || !m.isSpareName(c.Name) {
		return claim{}, errors.New("not a spare this name takes")
	}
	release, err := m.holdSpare(c.Name, "claim for "+name)
	if err != nil {
		return claim{}, err // another claim or removal has it
	}
	defer release()
	spare := c.Name
	ls := m.forgetLocal(spare)
	keep := func() { // still a spare: back among this server's
		if ls == nil {
			return
		}
		ls.holder.Store(nil)
		m.spares.mu.Lock()
		closed := m.closed.Load()
		if !closed {
			m.spares.local = append(m.spares.local, ls)
		}
		m.spares.mu.Unlock()
		if closed {
			ls.close() // closeSpares has run
		}
	}
	verdict := make(chan error, 1)
	var pool *shell.Pool
	warmed := make(chan error, 1)
	opened := ls != nil && ls.pool != nil
	if opened {
		// Its shell is open already (checked once the rename is done:
		// one that died with the container is opened again through the
		// sandbox's gate, which the holder gives it).
		pool = ls.pool
	} else {
		// The first shell waits at its gate for this claim's verdict
		// only (never for another boot's, nor past a failed claim); the
		// sandbox's gate checks the later ones.
		var first atomic.Bool
		gate := func(gctx context.Context) error {
			if first.CompareAndSwap(false, true) {
				select {
				case err := <-verdict:
					return err
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			return own.gate(gctx)
		}
		pool = m.poolOn(c.ID, gate)
		go func() { warmed <- pool.Warm(ctx) }()
	}
	// The rename runs while the look for the name's workspace does; a
	// name that has one gets the spare renamed back (the caller holds the
	// name's lock, so nothing else uses the name meanwhile).
	err = r.Rename(ctx, spare, m.ContainerFor(name))
	stale := false
	if err == nil && (!isNew() || !current(c)) {
		stale = isNew()
		if berr := r.Rename(context.WithoutCancel(ctx), c.ID, spare); berr != nil {
			// Kept as the sandbox's, on the spare's workspace: its own
			// stays where it is, untouched, and the user is told.
			m.log.Error("a spare taken for a name with a workspace could not be put back", "sandbox", name, "spare", spare, "err", berr)
			err = nil
			if stale {
				m.note(name, fmt.Sprintf("this sandbox began as a spare booted from image %q before it was rebuilt: reset it to run the image as it is now", c.Image))
			} else {
				m.note(name, fmt.Sprintf("this sandbox runs on a new workspace: its earlier one, volume %s, is kept but could not be mounted (%v); destroy and create it again to use that one", m.volumeFor(name), berr))
			}
		} else if stale {
			err = errStaleSpare
		} else {
			err = errNameTaken
		}
	}
	if err != nil {
		verdict <- errors.New("the spare was not claimed")
		if ls == nil || pool != ls.pool {
			m.spawn(func() { <-warmed; pool.Close() })
		}
		switch {
		case errors.Is(err, errNameTaken), errors.Is(err, ErrAlreadyExists):
			keep()
			return claim{}, errNameTaken
		case errors.Is(err, errStaleSpare):
			keep() // the refill after this claim removes it
			return claim{}, err
		case errors.Is(err, ErrNotFound):
			if ls != nil {
				ls.close() // another server took it, or it is gone
			}
			m.locks.Remove(spare)
		default:
			keep()
			m.log.Warn("claim a spare", "spare", spare, "sandbox", name, "err", err)
		}
		return claim{}, err
	}
	var a *agentConn
	caDone := false
	if ls != nil {
		a, caDone = ls.agent, ls.caDone
	}
	m.locks.Remove(spare) // no spare name is used twice
	if ls == nil {
		m.claimedWhileBooting(spare)
	}
	c.Name = m.ContainerFor(name)
	own.record(c)
	verdict <- nil
	if opened {
		ls.holder.Store(own)
		warmed <- pool.Warm(ctx)
	}
	if err := <-warmed; err != nil {
		// Not running after all (it died since it was seen): the boot
		// starts it, as any stopped sandbox, and opens its shells.
		pool.Close()
		pool = nil
		if a != nil {
			a.c.Close() // it ran in the container's last life
			a = nil
		}
		if now, ierr := m.rt.Inspect(ctx, c.ID); ierr == nil {
			now.Name = c.Name
			c = now
		} else {
			c.State = StateStopped
		}
	}
	m.recordWorkspace(name, c)
	m.log.Info("claimed a spare", "sandbox", name, "spare", spare)
	return claim{c: m.asSandbox(c), pool: pool, agent: a, caDone: caDone && pool != nil}, nil
}

// recordWorkspace saves, before anything else is done with it, which
// workspace volume sandbox name's container c mounts when it is not the
// one named after the sandbox, so that a reset, restore or destroy that
// finds no container still knows it.
func (m *Manager) recordWorkspace(name string, c Container) {
	m.recordVolume(name, c.Labels[LabelVolume])
}

// recordVolume saves vol as sandbox name's workspace in its record (a
// claimed spare's, or one a restore made from a volume snapshot); a vol
// that is not such a one (the workspace named after the sandbox) clears
// the record's, where there is a record.
func (m *Manager) recordVolume(name, vol string) {
	if m.cfg.Sandboxes == nil {
		return
	}
	m.recordMu.Lock()
	defer m.recordMu.Unlock()
	rec, ok, err := m.sandboxRecord(name)
	if err != nil {
		m.log.Warn("record a sandbox's workspace: read the record", "sandbox", name, "err", err)
	}
	if !m.validSpareVolume(vol) {
		if !ok || rec.Volume == "" {
			return
		}
		vol = ""
	}
	if rec.Volume == vol {
		return
	}
	rec.Name, rec.Container, rec.Volume = name, m.ContainerFor(name), vol
	if rec.LastBoot.IsZero() {
		rec.Created, rec.LastBoot = time.Now().UTC(), time.Now().UTC()
	}
	if err := m.cfg.Sandboxes.PutSandbox(rec); err != nil {
		m.log.Warn("record a sandbox's workspace", "sandbox", name, "volume", vol, "err", err)
	}
}

// noRecord reports whether the store holds no record of sandbox name
// (every boot writes one, and a destroy removes it), and whether a store
// told so: without a store there is no record, and nothing told; a store
// that cannot be read tells nothing, and a record is assumed.
func (m *Manager) noRecord(name string) (none, told bool) {
	if m.cfg.Sandboxes == nil {
		return true, false
	}
	_, ok, err := m.sandboxRecord(name)
	if err != nil {
		return false, false
	}
	return !ok, true
}

// sandboxRecord is sandbox name's record, if there is one.
func (m *Manager) sandboxRecord(name string) (state.Sandbox, bool, error) {
	if m.cfg.Sandboxes == nil {
		return state.Sandbox{}, false, nil
	}
	return m.cfg.Sandboxes.Sandbox(name)
}

// volumeOwner is the sandbox whose record names spare workspace vol, or
// "".
func (m *Manager) volumeOwner(vol string) string {
	if m.cfg.Sandboxes == nil {
		return ""
	}
	recs, err := m.cfg.Sandboxes.Sandboxes()
	if err != nil {
		return ""
	}
	for _, r := range recs {
		if r.Volume == vol {
			return r.Name
		}
	}
	return ""
}

// validSpareVolume reports whether vol is a spare's workspace volume of
// this prefix (a label read back from the engine is checked before it is
// used).
func (m *Manager) validSpareVolume(vol string) bool { return spareNamed(vol, m.spareVolume("")) }

// volumeOf is the workspace volume of container c of sandbox name: the
// one its LabelVolume names (a claimed spare's, and its replacements'
// after a reset), else the one named after the sandbox.
func (m *Manager) volumeOf(name string, c Container) string {
	if vol := c.Labels[LabelVolume]; m.validSpareVolume(vol) {
		return vol
	}
	return m.volumeFor(name)
}

// recordedVolume is the workspace volume of sandbox name when its
// container is not at hand (gone, or moved aside by a reset): the one its
// record names, for a sandbox that began as a spare, else the one named
// after the sandbox.
func (m *Manager) recordedVolume(name string) (string, error) {
	if vol := m.knownVolume(name); vol != "" {
		return vol, nil
	}
	rec, ok, err := m.sandboxRecord(name)
	if err != nil {
		return "", fmt.Errorf("which workspace sandbox %q has cannot be told: read its record: %w", name, err)
	}
	if ok && m.validSpareVolume(rec.Volume) {
		return rec.Volume, nil
	}
	return m.volumeFor(name), nil
}

// knownVolume is the workspace a reset or restore of sandbox name found
// on the container it moves aside (setKnownVolume), or "".
func (m *Manager) knownVolume(name string) string {
	m.spares.mu.Lock()
	defer m.spares.mu.Unlock()
	return m.spares.volumes[name]
}

// setKnownVolume has name's next boot take vol as its workspace, until
// the returned func is called: a reset or restore, which knows the
// volume from the container it replaces, does not depend on the record.
func (m *Manager) setKnownVolume(name, vol string) (done func()) {
	if !m.validSpareVolume(vol) {
		return func() {}
	}
	m.spares.mu.Lock()
	if m.spares.volumes == nil {
		m.spares.volumes = map[string]string{}
	}
	m.spares.volumes[name] = vol
	m.spares.mu.Unlock()
	return func() {
		m.spares.mu.Lock()
		delete(m.spares.volumes, name)
		m.spares.mu.Unlock()
	}
}

// sandboxOf is the sandbox container c of this prefix is: the name it is
// labelled with, or for a claimed spare the name its container has.
func (m *Manager) sandboxOf(c Container) (string, bool) {
	if c.Labels[LabelOwner] != m.cfg.Prefix {
		return "", false
	}
	if c.Labels[LabelRole] == RoleSpare {
		name, ok := strings.CutPrefix(c.Name, m.cfg.Prefix+"-")
		if !ok || ValidateName(name) != nil || m.ContainerFor(name) != c.Name {
			return "", false
		}
		return name, true
	}
	name := c.Labels[LabelName]
	if ValidateName(name) != nil || c.Name != m.ContainerFor(name) {
		return "", false
	}
	return name, true
}

// listOwn lists this prefix's containers, each claimed spare labelled (in
// the copy returned) with the sandbox its name says, as a container
// created for that sandbox is.
func (m *Manager) listOwn(ctx context.Context) ([]Container, error) {
	cs, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix})
	for i := range cs {
		cs[i] = m.asSandbox(cs[i])
	}
	return cs, err
}

// asSandbox is c, labelled with its sandbox's name if it is a claimed
// spare.
func (m *Manager) asSandbox(c Container) Container {
	if c.Labels[LabelRole] != RoleSpare {
		return c
	}
	if name, ok := m.sandboxOf(c); ok {
		labels := maps.Clone(c.Labels)
		labels[LabelName] = name
		c.Labels = labels
	}
	return c
}

// refillSoon refills the spares in the background, once at a time.
func (m *Manager) refillSoon() {
	if !m.sparesPossible() || m.closed.Load() {
		return
	}
	if !m.spares.running.CompareAndSwap(false, true) {
		m.spares.again.Store(true)
		return
	}
	m.spawn(func() {
		// After the claim's first command: a boot competes with it for
		// the engine.
		select {
		case <-m.life.Done():
		case <-time.After(refillDelay):
		}
		for !m.closed.Load() {
			m.refillSpares(m.life)
			if m.spares.again.Swap(false) {
				continue
			}
			m.spares.running.Store(false)
			// A request that came between the Swap and the Store found
			// running set: this goroutine takes it, unless another one
			// has started meanwhile.
			if !m.spares.again.Load() || !m.spares.running.CompareAndSwap(false, true) {
				return
			}
		}
		m.spares.running.Store(false)
	})
}

// refillEvery is how often a server in use looks at its spares besides
// at claims: one stopped by its idle TTL while nobody asked for a new name
// is replaced once calls come again.
const refillEvery = time.Minute

// refillIfDue refills when the last look is refillEvery old.
func (m *Manager) refillIfDue() {
	if !m.sparesOn() || time.Since(time.Unix(0, m.spares.checked.Load())) < refillEvery {
		return
	}
	m.spares.checked.Store(time.Now().UnixNano())
	m.refillSoon()
}

// refillSpares removes the spares that cannot be claimed (stopped by
// their watchdog, or booted as something no longer kept: other defaults,
// a profile changed, a profile's name now in use) and boots new ones
// until there are as many as spareTargets says.
func (m *Manager) refillSpares(ctx context.Context) {
	if pk, ok := poolKeeperOf(m.rt); ok {
		m.keepPools(ctx, pk)
		return
	}
	if !m.sparesOn() && len(m.localSpares()) == 0 {
		return // spares already there are another server's, or stop with their idle TTL
	}
	m.spares.checked.Store(time.Now().UnixNano())
	// Another server's refill may hold it: this one looks after it, as
	// that one's listing may be older than a claim since.
	lctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	h, err := m.locks.Lock(lctx, m.cfg.Prefix+"_spares", "keep spares")
	cancel()
	if err != nil {
		return
	}
	defer h.Release()
	targets := m.spareTargets(true)
	want := map[string]int{}     // by key (each target's is its own)
	image := map[string]string{} // by key: the image it boots from
	for _, t := range targets {
		want[t.key] = t.want
		image[t.key] = t.prof.Image
	}
	cs, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix, LabelRole: RoleSpare})
	if err != nil {
		m.log.Warn("list spares", "err", err)
		return
	}
	m.dropTaken(cs)
	imageNow := map[string]string{} // by image ref, looked up once each
	current := func(c Container) bool {
		ref := image[c.Labels[LabelSpare]]
		id, ok := imageNow[ref]
		if !ok {
			id = m.imageID(ctx, ref)
			imageNow[ref] = id
		}
		return !staleSpare(c, id)
	}
	live := map[string]int{}
	for _, c := range cs {
		if !m.isSpareName(c.Name) {
			continue // claimed: a sandbox
		}
		key := c.Labels[LabelSpare]
		switch {
		case !c.Running():
			m.dropSpare(ctx, c) // stopped by its watchdog, or it died
		case want[key] == 0:
			// Booted as what this server no longer keeps: its own was
			// before a reload, or for a name now in use; another
			// server's is that server's to keep.
			if m.isLocal(c.Name) {
				m.dropSpare(ctx, c)
			}
		case !current(c):
			m.dropSpare(ctx, c) // its image was rebuilt since, whoever's it is
		case live[key] < want[key] || !m.isLocal(c.Name):
			live[key]++
		default:
			m.dropSpare(ctx, c) // one too many of this server's
		}
	}
	for _, t := range targets {
		for ; live[t.key] < want[t.key] && ctx.Err() == nil && !m.closed.Load(); live[t.key]++ {
			c, err := m.bootSpare(ctx, t)
			if err != nil {
				if ctx.Err() == nil {
					m.log.Warn("boot a spare", "profile", t.profile, "err", err)
				}
				break // the next target's may boot
			}
			if t.profile != "" && c.Name != "" && m.nameInUse(t.profile) {
				m.dropSpare(ctx, c) // its name got a sandbox while it booted
			}
		}
	}
}

// keepPools has the runtime's pools keep the spares spareTargets says
// (but those that would need a channel directory of their own on this
// host, where the runtime mounts one), and no others of this prefix's.
func (m *Manager) keepPools(ctx context.Context, pk PoolKeeper) {
	var pools []PoolSpec
	for _, t := range m.spareTargets(true) {
		vol := m.spareVolume(PooledSpareID)
		labels := map[string]string{LabelOwner: m.cfg.Prefix, LabelRole: RoleSpare, LabelSpare: t.key, LabelVolume: vol}
		if t.profile != "" {
			labels[LabelSpareFor] = t.profile
		}
		spec := m.runSpec(m.spareName(PooledSpareID), t.prof, vol, labels, 0, time.Time{}) // lifecycle.go
		if t.ttl > 0 {
			// Idle from the first use on: a spare the pool keeps is not
			// stopped while it waits.
			spec.Command = guest.PooledWatchdogCommand(t.ttl, watchdogEvery(t.ttl, time.Time{}))
		}
		lim := planLimits(diskSupport(ctx, m.rt), m.rt, t.prof)
		spec.PidsLimit = lim.Pids
		if lim.Rootfs == MechStorageOpt {
			spec.StorageSize = t.prof.Disk
		}
		var bytes int64
		if lim.Workspace == MechVolumeSize {
			bytes, _ = ParseSize(t.prof.Disk)
		}
		spec.Labels[LabelLimits] = lim.encode()
		m.placeSpare(ctx, t.mode, &spec)
		if spec.Labels[LabelChannel] != "" {
			continue // a channel directory of its own on this host: not for a pool
		}
		pools = append(pools, PoolSpec{Key: t.key, Spec: spec, WorkspaceBytes: bytes, Count: t.want})
	}
	if err := pk.KeepPools(ctx, m.cfg.Prefix, pools); err != nil && ctx.Err() == nil {
		m.log.Warn("keep warm pools", "err", err)
	}
}

// sweepSpareVolumes removes, at a server's start, what a server killed in
// the middle of a spare's boot left: workspaces that no container of this
// prefix mounts and no sandbox's record names, and the spare's channel
// directory. It holds the refill's lock, looking only when no refill is
// under way elsewhere, and lists the containers once it holds it: a
// spare being booted is no one's to remove. It returns the workspaces
// removed.
func (m *Manager) sweepSpareVolumes(ctx context.Context) ([]string, error) {
	vl, ok := m.rt.(VolumeLister)
	if !ok || !m.sparesPossible() {
		return nil, nil // no spares here: no listing at every start
	}
	h, err := m.locks.TryLock(m.cfg.Prefix+"_spares", "look for spares killed servers left")
	if err != nil {
		return nil, nil // a refill under way: a later start looks
	}
	defer h.Release()
	names, err := vl.VolumeNames(ctx)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	if len(m.unmountedSpareVolumes(nil, names)) == 0 {
		return nil, nil
	}
	cs, err := m.rt.List(ctx, map[string]string{LabelOwner: m.cfg.Prefix})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	vols := m.unmountedSpareVolumes(cs, names)
	keep := map[string]bool{}
	if m.cfg.Sandboxes != nil {
		recs, err := m.cfg.Sandboxes.Sandboxes()
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			keep[r.Volume] = true // a sandbox that began as a spare: its workspace, container or not
		}
	}
	var gone []string
	for _, vol := range vols {
		if keep[vol] {
			continue
		}
		if err := m.rt.VolumeRemove(ctx, vol); err != nil && !errors.Is(err, ErrNotFound) {
			if !errors.Is(err, ErrInUse) {
				m.log.Warn("remove the workspace of a spare a killed server left", "volume", vol, "err", err)
			}
			continue
		}
		m.dropSpareChannel(vol) // channel.go
		gone = append(gone, vol)
	}
	return gone, nil
}

// unmountedSpareVolumes are the spare workspaces among the volume names
// that no container of cs mounts.
func (m *Manager) unmountedSpareVolumes(cs []Container, names []string) []string {
	used, err := m.intentVolumes() // volsnap.go: a restore's, not mounted yet
	if err != nil {
		// Which are a restore's cannot be told: none is taken for unused.
		m.log.Warn("look for unused spare workspaces", "err", err)
		return nil
	}
	for _, c := range cs {
		used[c.Labels[LabelVolume]] = true
	}
	var vols []string
	for _, v := range names {
		if m.validSpareVolume(v) && !used[v] {
			vols = append(vols, v)
		}
	}
	return vols
}

// dropSpare removes spare c and its workspace, under its lock; nothing
// when another holds it.
func (m *Manager) dropSpare(ctx context.Context, c Container) {
	release, err := m.holdSpare(c.Name, "remove spare")
	if err != nil {
		return
	}
	defer release()
	m.dropSpareHeld(ctx, c)
}

// dropSpareWaiting is dropSpare for prune, which says the spare is gone
// when it returns: while another holds it (the spares' own look, removing
// it too, or a claim), it waits for that one, for at most spareHoldWait,
// then removes what is left.
func (m *Manager) dropSpareWaiting(ctx context.Context, c Container) {
	deadline := time.Now().Add(spareHoldWait)
	for {
		release, err := m.holdSpare(c.Name, "remove spare")
		if err == nil {
			defer release()
			m.dropSpareHeld(ctx, c)
			return
		}
		if time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// spareHoldWait bounds prune's wait for a spare another holds.
const spareHoldWait = 30 * time.Second

// dropSpareHeld is dropSpare with the spare held: c is removed if it is
// still the container under its name.
func (m *Manager) dropSpareHeld(ctx context.Context, c Container) {
	now, err := m.rt.Inspect(ctx, c.Name)
	if err != nil || now.ID != c.ID {
		return
	}
	m.dropLocal(c.Name) // its shell and agent first
	if err := m.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, ErrNotFound) {
		m.log.Warn("remove a spare", "spare", c.Name, "err", err)
		return
	}
	m.locks.Remove(c.Name)
	m.removeChannel(c.Labels[LabelChannel])
	if vol := c.Labels[LabelVolume]; m.validSpareVolume(vol) {
		if err := m.removeVolume(ctx, vol); err != nil {
			m.log.Warn("remove a spare's workspace", "volume", vol, "err", err)
		}
	}
}

// bootSpare creates one spare of target t, and returns it as inspected
// once booted (its Name empty if the inspect failed).
func (m *Manager) bootSpare(ctx context.Context, t spareTarget) (Container, error) {
	prof, ttl, mode, key := t.prof, t.ttl, t.mode, t.key
	// Not cut short when the server closes (which waits for it): an
	// engine's run killed half way can leave the container's init stuck
	// and its workspace's loop device held.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.BootTimeout)
	defer cancel()
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	name, vol := m.spareName(id), m.spareVolume(id)
	m.setBooting(name, true)
	defer m.setBooting(name, false)
	labels := map[string]string{LabelOwner: m.cfg.Prefix, LabelRole: RoleSpare, LabelSpare: key, LabelVolume: vol}
	if t.profile != "" {
		labels[LabelSpareFor] = t.profile
	}
	if ii, ok := m.rt.(ImageIdentifier); ok {
		id, err := ii.ImageID(bctx, prof.Image)
		if err != nil {
			return Container{}, fmt.Errorf("image %q: %w", prof.Image, err)
		}
		labels[LabelSpareImage] = id
	} else if ok, err := m.rt.ImageExists(bctx, prof.Image); err != nil || !ok {
		return Container{}, fmt.Errorf("image %q: present %v: %v", prof.Image, ok, err)
	}
	spec := m.runSpec(name, prof, vol, labels, ttl, time.Time{}) // lifecycle.go
	volLabels := map[string]string{LabelOwner: m.cfg.Prefix, LabelRole: RoleSpare}
	if err := m.prepareLimits(bctx, name, prof, vol, volLabels, false, true, &spec); err != nil {
		return Container{}, err
	}
	m.placeSpare(bctx, mode, &spec)
	if _, err := m.rt.Run(bctx, spec); err != nil {
		if spec.Network != "" && strings.Contains(strings.ToLower(err.Error()), "network") {
			// The sandboxes' network went (pruned, say): made again at
			// the next boot, as runContainer does for a sandbox's.
			m.net.mu.Lock()
			m.net.ready = false
			m.net.mu.Unlock()
		}
		_ = m.rt.Remove(bctx, name)
		m.removeChannel(spec.Labels[LabelChannel])
		_ = m.rt.VolumeRemove(bctx, vol)
		return Container{}, fmt.Errorf("boot spare %s: %w", name, err)
	}
	c, err := m.rt.Inspect(bctx, name)
	if err == nil {
		ls := &localSpare{c: c, holder: &atomic.Pointer[owner]{}}
		// Opened while the spare waits, under the Manager's life, so
		// that a claim's first command waits for neither (agent.go).
		ls.pool = m.sparePool(c.ID, ls.holder)
		if err := ls.pool.Warm(bctx); err != nil {
			ls.pool.Close()
			ls.pool = nil
		}
		if mode == egress.ModeAllowlist {
			ls.agent, _ = m.spareAgent(m.life, c.ID)
			ls.caDone = m.installSpareCA(bctx, ls.pool)
		}
		m.spares.mu.Lock()
		closed := m.closed.Load()
		claimed := !m.spares.booting[name] // by a claim of this server's meanwhile
		if !closed && !claimed {
			m.spares.local = append(m.spares.local, ls)
		}
		m.spares.mu.Unlock()
		if closed || claimed {
			ls.close()
		}
	}
	// Looked up once more now that the spare waits, where the engine
	// answers it from the host after that: the claim then makes no call
	// for it.
	if w, ok := m.rt.(ImageIDWarmer); ok && err == nil {
		w.WarmImageID(bctx, prof.Image)
	}
	m.log.Info("spare ready", "spare", name, "profile", t.profile)
	return c, nil
}
