// Package children keeps the child sandboxes: code inside a sandbox (over
// the control socket) or the user (through the MCP tools) spawns them
// under the policies of package spawn, and they are destroyed when their
// life ends or their parent is reset, restored or destroyed. Their records
// live in the state, so every server knows every family.
package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/ctl"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/spawn"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// Sandboxes is what the package needs of the sandbox manager.
type Sandboxes interface {
	List(ctx context.Context) ([]sandbox.Info, error)
	CreateChild(ctx context.Context, name, parent string, prof sandbox.Profile, labels map[string]string) (sandbox.BootInfo, error)
	Destroy(ctx context.Context, name string) (bool, error)
	Exec(ctx context.Context, name string, req shell.Request) (sandbox.ExecResult, error)
	Status(ctx context.Context, name string) (sandbox.Info, error)
}

// Store keeps the records (*state.Store).
type Store interface {
	Sandboxes() ([]state.Sandbox, error)
	PutChild(c state.Child) error
	Children() ([]state.Child, error)
	DeleteChild(name string) (bool, error)
	Spawned() (map[string]int, error)
	AddSpawned(name string) (int, error)
}

// Options configure a Keeper.
type Options struct {
	Sandboxes Sandboxes
	Store     Store
	// Policies are the configured policies of root sandboxes by name;
	// a sandbox not named cannot spawn.
	Policies map[string]spawn.Policy
	Locks    locks.Dir
	Log      *slog.Logger
	// DefaultTimeout bounds a command run through the socket without a
	// timeout of its own; MaxTimeout bounds any.
	DefaultTimeout, MaxTimeout time.Duration
}

// Keeper keeps the child sandboxes.
type Keeper struct {
	opt  Options
	ctl  ctl.Server
	life context.Context
	end  context.CancelFunc
	wg   sync.WaitGroup
}

// New returns a Keeper; Start begins reaping.
func New(opt Options) *Keeper {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.DefaultTimeout <= 0 {
		opt.DefaultTimeout = 5 * time.Minute
	}
	if opt.MaxTimeout <= 0 {
		opt.MaxTimeout = time.Hour
	}
	k := &Keeper{opt: opt}
	k.ctl.Handler = k
	k.life, k.end = context.WithCancel(context.Background())
	return k
}

// lockKey serialises spawns across servers: the limits are checked and
// the record written under it.
const lockKey = "children-spawn"

// Spawn starts a child of parent under parent's policy, for the user:
// parent must exist.
func (k *Keeper) Spawn(ctx context.Context, parent string, p ctl.SpawnParams) (ctl.Child, error) {
	if _, ok := k.record(parent); !ok {
		if _, err := k.opt.Sandboxes.Status(ctx, parent); err != nil {
			return ctl.Child{}, err
		}
	}
	return k.spawn(ctx, parent, p)
}

// spawn starts a child of parent, which exists (it may be calling).
func (k *Keeper) spawn(ctx context.Context, parent string, p ctl.SpawnParams) (ctl.Child, error) {
	mode, allow, err := spawnNetwork(p)
	if err != nil {
		return ctl.Child{}, err
	}
	held, err := k.opt.Locks.Lock(ctx, lockKey, "spawn a child of "+parent)
	if err != nil {
		return ctl.Child{}, err
	}
	fam, err := k.family(parent)
	if err != nil {
		held.Release()
		return ctl.Child{}, err
	}
	now := time.Now()
	d, err := spawn.Decide(fam, spawn.Request{Parent: parent, Name: p.Name, Image: p.Image, CPUs: p.CPUs, Memory: p.Memory}, now, sandbox.ValidateName)
	if err != nil {
		held.Release()
		return ctl.Child{}, err
	}
	rec := state.Child{Name: d.Name, Parent: parent, Root: d.Root, Image: d.Image, CPUs: d.CPUs, Memory: int64(d.Memory),
		Created: now.UTC(), Expires: d.Expires.UTC(), Peers: d.Peers, PortForward: d.PortForward, Reset: d.Reset, Snapshot: d.Snapshot,
		Network: mode, Allow: allow}
	if d.Policy != nil {
		rec.Policy, _ = json.Marshal(d.Policy)
	}
	// While the child boots, this server holds its spawning lock: a record
	// not ready whose lock is free was left by a server that died
	// mid-spawn, and the reaper clears it at once.
	booting, err := k.opt.Locks.TryLock(spawningKey(d.Name), "boot child "+d.Name)
	if err != nil {
		held.Release()
		return ctl.Child{}, fmt.Errorf("child %q: %w", d.Name, err)
	}
	defer booting.Release()
	if err := k.opt.Store.PutChild(rec); err != nil {
		held.Release()
		return ctl.Child{}, fmt.Errorf("record the child: %w", err)
	}
	if _, err := k.opt.Store.AddSpawned(parent); err != nil {
		k.opt.Log.Warn("count a spawn", "parent", parent, "err", err)
	}
	held.Release() // the record holds the child's place now
	prof, labels := profileOf(rec)
	boot, err := k.opt.Sandboxes.CreateChild(ctx, d.Name, parent, prof, labels)
	if err != nil {
		var exists *sandbox.ArgError
		if errors.As(err, &exists) {
			// The name is someone else's sandbox: never touch it.
			_, _ = k.opt.Store.DeleteChild(d.Name)
		} else {
			k.remove(context.WithoutCancel(ctx), d.Name)
			if expired := endedWhileBooting(rec, err); expired != nil {
				return ctl.Child{}, expired
			}
		}
		return ctl.Child{}, fmt.Errorf("boot child %q: %w", d.Name, err)
	}
	// A reset, restore or destroy of the parent, or a destroy of the
	// child, while it booted took its record away: the child must not come
	// back. The spawn lock orders this check against ParentChanged.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	held, err = k.opt.Locks.Lock(lctx, lockKey, "record child "+d.Name)
	if err != nil {
		k.remove(lctx, d.Name)
		return ctl.Child{}, fmt.Errorf("record child %q: %w", d.Name, err)
	}
	if _, ok, err := k.lookup(d.Name); err != nil || !ok {
		held.Release()
		k.remove(lctx, d.Name)
		if err != nil {
			return ctl.Child{}, fmt.Errorf("record child %q: %w", d.Name, err)
		}
		if expired := endedWhileBooting(rec, nil); expired != nil {
			return ctl.Child{}, expired // the reaper took it at its end
		}
		return ctl.Child{}, ctl.Errorf(ctl.CodeNotFound, "child %q was destroyed while it booted (its parent %q was reset, restored or destroyed, or the child was destroyed)", d.Name, parent)
	}
	rec.Ready = true
	err = k.opt.Store.PutChild(rec)
	held.Release()
	if err != nil {
		k.remove(lctx, d.Name)
		return ctl.Child{}, fmt.Errorf("record child %q as ready: %w", d.Name, err)
	}
	out := childOf(rec)
	out.Notes = d.Notes
	out.Container, out.IP = boot.Container, boot.IP
	return out, nil
}

// Bounds of what a spawn may ask of its child's network.
const (
	maxSpawnAllow     = 64  // patterns
	maxSpawnAllowSize = 300 // bytes of one pattern
)

// spawnNetwork checks what a spawn asks of its child's network, which
// comes from inside a sandbox, and returns the mode and patterns to
// record: a request can only narrow (a child never gets more than its
// parent, whatever it asks).
func spawnNetwork(p ctl.SpawnParams) (mode string, allow []string, err error) {
	switch p.Network {
	case "", egress.ModeAllowlist, egress.ModeNone:
	case egress.ModeOpen:
		return "", nil, ctl.Errorf(ctl.CodeInvalidRequest, "network open: a child gets at most its parent's network; ask for none or allowlist, or leave it out")
	default:
		return "", nil, ctl.Errorf(ctl.CodeInvalidRequest, "network %q: want none or allowlist", textcut.Shorten(p.Network, 40))
	}
	if len(p.Allow) == 0 {
		return p.Network, nil, nil
	}
	if p.Network == egress.ModeNone {
		return "", nil, ctl.Errorf(ctl.CodeInvalidRequest, "allow with network none: a child without a network reaches nothing")
	}
	if len(p.Allow) > maxSpawnAllow {
		return "", nil, ctl.Errorf(ctl.CodeInvalidRequest, "%d allow patterns: at most %d", len(p.Allow), maxSpawnAllow)
	}
	for _, a := range p.Allow {
		if len(a) > maxSpawnAllowSize {
			return "", nil, ctl.Errorf(ctl.CodeInvalidRequest, "allow %q: longer than %d bytes", textcut.Shorten(a, 40), maxSpawnAllowSize)
		}
		if _, err := egress.ParseRule(a); err != nil {
			return "", nil, ctl.Errorf(ctl.CodeInvalidRequest, "allow: %v", err)
		}
	}
	return egress.ModeAllowlist, slices.Clone(p.Allow), nil
}

// profileOf is the profile and labels every boot of a child uses. The
// network its spawn asked for is the profile's network and allow (the
// manager puts allow on a level of its own in the child's policy chain).
func profileOf(r state.Child) (sandbox.Profile, map[string]string) {
	prof := sandbox.Profile{Image: r.Image, CPUs: r.CPUs, Memory: spawn.Bytes(r.Memory).String(), IdleTTL: "off",
		Network: r.Network, Allow: r.Allow}
	if r.Peers == spawn.PeersNone {
		prof.Network = "none"
	}
	labels := map[string]string{sandbox.LabelRole: "child", sandbox.LabelChildOf: r.Parent,
		sandbox.LabelEnd: strconv.FormatInt(r.Expires.Unix(), 10)}
	if r.Peers == spawn.PeersFamily && r.Root != "" {
		labels[sandbox.LabelFamily] = r.Root
	}
	return prof, labels
}

// endedWhileBooting is the error of a spawn whose child reached the end
// of its life before its boot ended (its container stops then, so its
// shell dies at start, or the reaper takes it): the TTL is the cause to
// tell, not how the boot broke. Nil while the child still has life left.
func endedWhileBooting(r state.Child, bootErr error) error {
	if time.Now().Before(r.Expires) {
		return nil
	}
	msg := fmt.Sprintf("child %q reached the end of its life (%s after its spawn) while it booted, and was removed: "+
		"its TTL (the parent's policy's child_ttl, or what was left of the parent's own life) must outlast a boot",
		r.Name, r.Expires.Sub(r.Created).Round(time.Second))
	if bootErr != nil {
		msg += fmt.Sprintf(" (the boot: %v)", bootErr)
	}
	return ctl.Errorf(ctl.CodeLimitReached, "%s", msg)
}

// spawningKey names the lock a server holds while it boots child name.
func spawningKey(name string) string { return "spawning-" + name }

// Child gives a child's profile and labels to the sandbox manager, for
// every boot of it.
func (k *Keeper) Child(name string) (sandbox.Profile, map[string]string, bool, error) {
	r, ok, err := k.lookup(name)
	if err != nil || !ok {
		return sandbox.Profile{}, nil, false, err
	}
	p, l := profileOf(r)
	return p, l, true, nil
}

// record is child name's record; false when there is none or the state
// cannot be read.
func (k *Keeper) record(name string) (state.Child, bool) {
	r, ok, _ := k.lookup(name)
	return r, ok
}

// lookup is child name's record, and whether there is one; an error when
// the state cannot be read, which is no answer either way.
func (k *Keeper) lookup(name string) (state.Child, bool, error) {
	recs, err := k.opt.Store.Children()
	if err != nil {
		return state.Child{}, false, fmt.Errorf("read the children's records: %w", err)
	}
	i := slices.IndexFunc(recs, func(r state.Child) bool { return r.Name == name })
	if i < 0 {
		return state.Child{}, false, nil
	}
	return recs[i], true, nil
}

func childOf(r state.Child) ctl.Child {
	return ctl.Child{Name: r.Name, Image: r.Image, CPUs: r.CPUs, MemoryMB: r.Memory >> 20, ExpiresAt: r.Expires}
}

// family is every sandbox as spawn.Decide sees it, parent among them.
// The sandboxes come from the state's records (every server records what
// it boots), not the engine: a spawn costs no engine listing. A name a
// record misses (a sandbox booted a moment ago) is refused at the boot,
// never taken over.
func (k *Keeper) family(parent string) (spawn.Family, error) {
	boxes, err := k.opt.Store.Sandboxes()
	if err != nil {
		return nil, err
	}
	recs, err := k.opt.Store.Children()
	if err != nil {
		return nil, err
	}
	counts, err := k.opt.Store.Spawned()
	if err != nil {
		return nil, err
	}
	fam := spawn.Family{}
	root := func(name string) {
		m := spawn.Member{Name: name, Spawned: counts[name]}
		if p, ok := k.opt.Policies[name]; ok {
			m.Policy = &p
		}
		fam[name] = m
	}
	for _, b := range boxes {
		root(b.Name)
	}
	// The parent exists, and so does its family's root: their records may
	// still be on their way (a boot records its sandbox after it).
	top := parent
	if i := slices.IndexFunc(recs, func(r state.Child) bool { return r.Name == parent }); i >= 0 {
		top = recs[i].Root
	}
	if _, ok := fam[top]; !ok && top != "" {
		root(top)
	}
	for _, r := range recs {
		m := spawn.Member{Name: r.Name, Parent: r.Parent, CPUs: r.CPUs, Memory: spawn.Bytes(r.Memory), Expires: r.Expires, Spawned: counts[r.Name]}
		if len(r.Policy) > 0 {
			var p spawn.Policy
			if json.Unmarshal(r.Policy, &p) == nil {
				m.Policy = &p
			}
		}
		fam[r.Name] = m
	}
	// A record whose parent is gone keeps no place of its own.
	for n, m := range fam {
		if _, ok := fam[m.Parent]; m.Parent != "" && !ok {
			delete(fam, n)
		}
	}
	return fam, nil
}

// descendants returns the records below name, deepest first.
func descendants(recs []state.Child, name string) []state.Child {
	var out []state.Child
	for _, r := range recs {
		if r.Parent == name {
			out = append(out, descendants(recs, r.Name)...)
			out = append(out, r)
		}
	}
	return out
}

// List returns the children below parent ("" for every child), by name.
func (k *Keeper) List(parent string) ([]ctl.Child, error) {
	recs, err := k.opt.Store.Children()
	if err != nil {
		return nil, err
	}
	sel := recs
	if parent != "" {
		sel = descendants(recs, parent)
	}
	out := []ctl.Child{}
	for _, r := range sel {
		out = append(out, childOf(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Records returns every child record.
func (k *Keeper) Records() ([]state.Child, error) { return k.opt.Store.Children() }

// Destroy destroys child name and everything below it. caller, unless
// empty (the user), must be above it.
func (k *Keeper) Destroy(ctx context.Context, caller, name string) error {
	if _, err := k.below(caller, name); err != nil {
		return err
	}
	if failed := k.remove(ctx, name); len(failed) > 0 {
		return fmt.Errorf("destroy child %q: %w", name, errors.Join(failed...))
	}
	return nil
}

// below returns name's record if caller ("" for the user) may touch it.
func (k *Keeper) below(caller, name string) (state.Child, error) {
	recs, err := k.opt.Store.Children()
	if err != nil {
		return state.Child{}, err
	}
	i := slices.IndexFunc(recs, func(r state.Child) bool { return r.Name == name })
	if i < 0 || (caller != "" && !slices.ContainsFunc(descendants(recs, caller), func(r state.Child) bool { return r.Name == name })) {
		// A sandbox learns nothing of sandboxes outside its family.
		return state.Child{}, ctl.Errorf(ctl.CodeNotFound, "no child %q of %s", name, orUser(caller))
	}
	return recs[i], nil
}

func orUser(caller string) string {
	if caller == "" {
		return "any sandbox"
	}
	return fmt.Sprintf("%q", caller)
}

// remove destroys name and everything below it, deepest first. Each
// record goes before its container, so no command can reach (and boot
// again) a child being destroyed; a failed destroy puts it back for the
// reaper's next look. It returns what failed, a child each.
func (k *Keeper) remove(ctx context.Context, name string) []error {
	recs, err := k.opt.Store.Children()
	if err != nil {
		// Without the records the descendants are unknown: destroying
		// only name would leave them without a parent.
		k.opt.Log.Warn("destroy a child: read the records", "child", name, "err", err)
		return []error{fmt.Errorf("read the children's records: %w", err)}
	}
	self := state.Child{Name: name}
	if i := slices.IndexFunc(recs, func(r state.Child) bool { return r.Name == name }); i >= 0 {
		self = recs[i]
	}
	var failed []error
	for _, r := range append(descendants(recs, name), self) {
		if _, err := k.opt.Store.DeleteChild(r.Name); err != nil {
			k.opt.Log.Warn("forget a child", "child", r.Name, "err", err)
			failed = append(failed, fmt.Errorf("%s: forget its record: %w", r.Name, err))
			continue
		}
		if _, err := k.opt.Sandboxes.Destroy(ctx, r.Name); err != nil {
			k.opt.Log.Warn("destroy a child", "child", r.Name, "err", err)
			failed = append(failed, fmt.Errorf("%s: %w", r.Name, err))
			if r.Parent != "" {
				_ = k.opt.Store.PutChild(r) // for the reaper's next look
			}
		}
	}
	return failed
}

// ParentChanged destroys the children of a sandbox that is being reset,
// restored or destroyed (a lifecycle hook of the sandbox manager).
func (k *Keeper) ParentChanged(name, event string) {
	recs, err := k.opt.Store.Children()
	if err != nil {
		k.opt.Log.Warn("destroy the children of a sandbox: read the records", "sandbox", name, "event", event, "err", err)
		return
	}
	kids := descendants(recs, name)
	if len(kids) == 0 {
		return
	}
	k.opt.Log.Info("destroying the children of a sandbox", "sandbox", name, "event", event, "children", len(kids))
	ctx, cancel := context.WithTimeout(k.life, 5*time.Minute)
	defer cancel()
	// No spawn from it may slip in while its children go.
	if held, err := k.opt.Locks.Lock(ctx, lockKey, "destroy the children of "+name); err == nil {
		defer held.Release()
	}
	recs, _ = k.opt.Store.Children()
	kids = descendants(recs, name)
	for _, r := range kids {
		if r.Parent == name {
			k.remove(ctx, r.Name)
		}
	}
}

// Exec runs a command in child name through its shell, streaming the
// output to stdout and stderr.
func (k *Keeper) Exec(ctx context.Context, caller string, p ctl.ExecParams, stdout, stderr io.Writer) (ctl.ExecResult, error) {
	r, err := k.below(caller, p.Name)
	if err != nil {
		return ctl.ExecResult{}, err
	}
	if !time.Now().Before(r.Expires) {
		// Its container has stopped itself, or is about to: it is not
		// booted again for a command.
		return ctl.ExecResult{}, ctl.Errorf(ctl.CodeNotFound, "child %q reached the end of its life at %s", p.Name, r.Expires.Format(time.RFC3339))
	}
	timeout, err := k.timeout(p.Timeout)
	if err != nil {
		return ctl.ExecResult{}, err
	}
	if strings.TrimSpace(p.Command) == "" {
		return ctl.ExecResult{}, ctl.Errorf(ctl.CodeInvalidRequest, "no command")
	}
	res, err := k.opt.Sandboxes.Exec(ctx, p.Name, shell.Request{Command: p.Command, Workdir: p.Workdir, Timeout: timeout, Stdout: stdout, Stderr: stderr})
	if err != nil {
		return ctl.ExecResult{}, err
	}
	return ctl.ExecResult{Name: p.Name, ExitCode: res.ExitCode, DurationMS: res.Duration.Milliseconds(), TimedOut: res.TimedOut}, nil
}

// minTimeout is the shortest command timeout a child's exec takes; a
// shorter one (down to a Duration of 0, which is no limit) is refused.
const minTimeout = 10 * time.Millisecond

func (k *Keeper) timeout(secs float64) (time.Duration, error) {
	switch {
	case secs == 0:
		return k.opt.DefaultTimeout, nil
	case !(secs >= minTimeout.Seconds()) || secs > k.opt.MaxTimeout.Seconds(): // compared as seconds: a huge value overflows a Duration
		return 0, ctl.Errorf(ctl.CodeInvalidRequest, "timeout %v: want seconds from %v to %v", secs, minTimeout.Seconds(), k.opt.MaxTimeout.Seconds())
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// Allowed says whether op (destroy, reset, restore, snapshot, clone,
// expose) may be done to sandbox name through the ordinary tools: always
// for a sandbox that is not a child; for a child, reset, snapshot (and
// clone) and expose when its parent's policy allowed them, and never
// destroy or
// restore (destroy_child ends a child; a restore would give it another
// life than its record says).
func (k *Keeper) Allowed(name, op string) error {
	recs, err := k.opt.Store.Children()
	if err != nil {
		// Unknown is not "not a child": refuse rather than let a child
		// be destroyed or restored through the ordinary tools.
		return fmt.Errorf("sandbox %q: cannot tell whether it is a child: %w", name, err)
	}
	i := slices.IndexFunc(recs, func(r state.Child) bool { return r.Name == name })
	if i < 0 {
		return nil
	}
	r := recs[i]
	switch {
	case op == "destroy":
		return fmt.Errorf("sandbox %q is a child of %q: destroy it with destroy_child", name, r.Parent)
	case op == "reset" && r.Reset, (op == "snapshot" || op == "clone") && r.Snapshot, op == "expose" && r.PortForward:
		return nil
	}
	return fmt.Errorf("sandbox %q is a child of %q, and its policy does not allow %s", name, r.Parent, op)
}

// Wants reports whether sandbox name has the control socket: a child
// that may spawn, or a root whose policy says so (a child's record comes
// first: a child named like a configured root does not get its policy).
func (k *Keeper) Wants(name string) bool {
	r, ok, err := k.lookup(name)
	if err != nil {
		return false // unknown: no socket rather than a root's
	}
	if ok {
		var p spawn.Policy
		return len(r.Policy) > 0 && json.Unmarshal(r.Policy, &p) == nil && p.InjectCtl
	}
	p, ok := k.opt.Policies[name]
	return ok && p.InjectCtl
}

// ServeConn answers one connection to sandbox caller's control socket.
func (k *Keeper) ServeConn(ctx context.Context, caller string, c net.Conn) {
	k.ctl.Serve(ctx, caller, c)
}

// Handle implements ctl.Handler; a refusal of the policy keeps its code.
func (k *Keeper) Handle(ctx context.Context, caller string, req ctl.Request, out ctl.Output) (any, error) {
	res, err := k.handle(ctx, caller, req, out)
	var se *spawn.Error
	if errors.As(err, &se) {
		return nil, ctl.Errorf(string(se.Code), "%s", se.Msg)
	}
	return res, err
}

func (k *Keeper) handle(ctx context.Context, caller string, req ctl.Request, out ctl.Output) (any, error) {
	switch req.Method {
	case ctl.MethodPing:
		return ctl.PingResult{OK: true, Parent: caller}, nil
	case ctl.MethodSpawn:
		var p ctl.SpawnParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		return k.spawn(ctx, caller, p)
	case ctl.MethodList:
		l, err := k.List(caller)
		return ctl.ListResult{Children: l}, err
	case ctl.MethodDestroy:
		var p ctl.NameParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		return struct{}{}, k.Destroy(ctx, caller, p.Name)
	case ctl.MethodExec:
		var p ctl.ExecParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		return k.Exec(ctx, caller, p, out.Stdout(), out.Stderr())
	case ctl.MethodRun:
		var p ctl.RunParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		ch, err := k.spawn(ctx, caller, ctl.SpawnParams{Image: p.Image, Network: p.Network, Allow: p.Allow})
		if err != nil {
			return nil, err
		}
		defer k.remove(context.WithoutCancel(ctx), ch.Name)
		return k.Exec(ctx, caller, ctl.ExecParams{Name: ch.Name, Command: p.Command, Timeout: p.Timeout, Workdir: p.Workdir}, out.Stdout(), out.Stderr())
	}
	return nil, ctl.Errorf(ctl.CodeInvalidRequest, "unknown method %q (ping, spawn, list, destroy, exec, run)", req.Method)
}

// params decodes a request's params strictly.
func params(req ctl.Request, v any) error {
	if len(req.Params) == 0 || string(req.Params) == "null" {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(req.Params)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return ctl.Errorf(ctl.CodeInvalidRequest, "params of %s: %v", req.Method, err)
	}
	return nil
}

// reapEvery is how often expired children, and spawns that a dead server
// left half done, are looked for.
const reapEvery = 5 * time.Second

// firstReapAfter is how long a starting server waits before its first
// reap, which also searches the engine: the first commands of a server
// that adopts running sandboxes go first.
const firstReapAfter = 2 * time.Second

// orphansEvery is how many reaps apart the engine is searched for child
// containers without a record (the first reap does it too).
const orphansEvery = 6

// halfDone is how long a spawn may take before its record, still not
// ready, is taken for one a dead server left.
const halfDone = 10 * time.Minute

// Start reaps expired children in the background until Close; one server
// at a time does it.
func (k *Keeper) Start() {
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		select {
		case <-k.life.Done():
			return
		case <-time.After(firstReapAfter):
		}
		t := time.NewTicker(reapEvery)
		defer t.Stop()
		for i := 0; ; i++ {
			k.reap(i%orphansEvery == 0)
			select {
			case <-k.life.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (k *Keeper) reap(orphans bool) {
	held, err := k.opt.Locks.TryLock("children-reaper", "destroy expired children")
	if err != nil {
		return
	}
	defer held.Release()
	// The sandboxes are listed before the records are read: a spawn writes
	// its record before it makes the container, so a child listed here
	// without a record below is no spawn in progress.
	var infos []sandbox.Info
	if orphans {
		if infos, err = k.opt.Sandboxes.List(k.life); err != nil {
			k.opt.Log.Debug("list sandboxes for orphaned children", "err", err)
		}
	}
	recs, err := k.opt.Store.Children()
	if err != nil {
		return
	}
	for _, in := range infos {
		if in.ChildOf != "" && !slices.ContainsFunc(recs, func(r state.Child) bool { return r.Name == in.Name }) {
			// A server killed while its engine command still ran leaves
			// a container the engine finished making after it died.
			k.opt.Log.Info("destroying a child sandbox with no record", "child", in.Name, "parent", in.ChildOf)
			if _, err := k.opt.Sandboxes.Destroy(k.life, in.Name); err != nil {
				k.opt.Log.Warn("destroy a child", "child", in.Name, "err", err)
			}
		}
	}
	now := time.Now()
	for _, r := range recs {
		expired := !now.Before(r.Expires)
		var abandoned *locks.Held
		if !r.Ready {
			abandoned, _ = k.opt.Locks.TryLock(spawningKey(r.Name), "clear a spawn left half done")
		}
		stale := !r.Ready && (abandoned != nil || now.Sub(r.Created) > halfDone)
		if expired || stale {
			k.opt.Log.Info("destroying a child", "child", r.Name, "expired", expired, "spawn left half done", stale)
			k.remove(k.life, r.Name)
		}
		abandoned.Release()
	}
}

// Close stops reaping; the children stay.
func (k *Keeper) Close() {
	k.end()
	k.wg.Wait()
}
