package sandbox

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
)

// Networks. Where the engine makes networks (Networker: podman, docker),
// the sandboxes of one prefix share a bridge network, <prefix>-net, on
// which each answers to its sandbox name and its container's name through
// the engine's DNS: `curl http://web:8000` from one sandbox reaches the
// sandbox "web". A sandbox with network "none" has loopback only. Other
// engines (Apple's container) boot sandboxes on their default network.
//
// Where the engine resolves no sandbox names but lets containers reach
// each other by address (Apple's container on macOS 26), the server keeps
// a block of /etc/hosts in every running sandbox that names the others,
// rewritten whenever a sandbox boots or is destroyed (and before a
// network_info answers).
//
// A boot needs only a network name and the aliases on it, so a family of
// sandboxes can be given a network of its own the same way.

// netState remembers that this server made (or found) the network.
type netState struct {
	mu    sync.Mutex
	ready bool
	// joined maps a family's root to the container of it that this
	// server made sure is on the family's network.
	joined map[string]string
	hosts  sync.Mutex // one hosts refresh at a time
}

// LabelFamily, on a child sandbox whose peers are its family, names the
// root of the family: the child boots on the family's network
// (FamilyNetworkName), which the root joins too, instead of the shared
// one. Where the engine makes no networks the label changes nothing.
const LabelFamily = "io.sandbox-mcp.family"

// FamilyNetworkName is the network of the family of sandboxes under root.
func (m *Manager) FamilyNetworkName(root string) string { return m.cfg.Prefix + "-fam-" + root }

// ours reports whether network is one this Manager makes: the shared
// network or a family's.
func (m *Manager) ours(network string) bool {
	return network == m.NetworkName() || strings.HasPrefix(network, m.cfg.Prefix+"-fam-")
}

// hostsMark ends each /etc/hosts line the server keeps.
const hostsMark = " # sandbox-mcp"

// hostsScript replaces the kept lines of /etc/hosts with its arguments,
// in place (engines bind-mount the file, so it cannot be renamed over).
const hostsScript = `kept=$(grep -v ' # sandbox-mcp$' /etc/hosts 2>/dev/null)
{ [ -n "$kept" ] && printf '%s\n' "$kept"; for l in "$@"; do printf '%s # sandbox-mcp\n' "$l"; done; } >/etc/hosts`

// keepsHosts reports whether this engine's sandboxes find each other
// through kept /etc/hosts lines rather than the engine's DNS.
func (m *Manager) keepsHosts() bool {
	if _, ok := m.rt.(Networker); ok {
		return false
	}
	if pr, ok := m.rt.(PeerReacher); ok {
		reachable, _ := pr.PeersReachable()
		return reachable
	}
	return true
}

// refreshHostsSoon rewrites the kept hosts lines in the background.
func (m *Manager) refreshHostsSoon() {
	if m.keepsHosts() {
		m.spawn(func() { m.refreshHosts(m.life) })
	}
}

// refreshHosts writes, in every running sandbox of this prefix, one hosts
// line for each other running sandbox it shares a network with: its
// address, then its sandbox and container names. Everything written comes
// from the engine's inspect and is checked first: an address must parse,
// a name must be valid.
func (m *Manager) refreshHosts(ctx context.Context) {
	m.net.hosts.Lock()
	defer m.net.hosts.Unlock()
	cs, err := m.listOwn(ctx)
	if err != nil {
		m.log.Debug("refresh the sandboxes' hosts entries", "err", err)
		return
	}
	var running []Container
	for _, c := range cs {
		if c.Running() && !c.NoNetwork && ValidateName(c.Labels[LabelName]) == nil && c.Name == m.ContainerFor(c.Labels[LabelName]) {
			running = append(running, c)
		}
	}
	for _, a := range running {
		var lines []string
		for _, b := range running {
			if ip := sharedIP(a, b); b.Name != a.Name && net.ParseIP(ip) != nil {
				lines = append(lines, ip+" "+b.Labels[LabelName]+" "+b.Name)
			}
		}
		argv := append([]string{"sh", "-c", hostsScript, "sh"}, lines...)
		if out, err := m.rt.Exec(ctx, a.Name, ExecSpec{Argv: argv, User: "root"}); err != nil || out.ExitCode != 0 {
			m.log.Debug("write hosts entries", "sandbox", a.Labels[LabelName], "err", err, "stderr", textcut.Shorten(string(out.Stderr), 200))
		}
	}
}

// sharedIP is b's address on a network a is on too, or "".
func sharedIP(a, b Container) string {
	for _, x := range a.Networks {
		for _, y := range b.Networks {
			if x.Network == y.Network && x.IP != "" && y.IP != "" {
				return y.IP
			}
		}
	}
	return ""
}

// NetworkName is the network the sandboxes of this Manager share, where
// the engine makes networks.
func (m *Manager) NetworkName() string { return NetworkNameFor(m.cfg.Prefix) }

// NetworkNameFor is the network the sandboxes of prefix share.
func NetworkNameFor(prefix string) string { return prefix + "-net" }

// placeOnNetwork sets the network a sandbox of profile prof boots on.
// When the shared network cannot be made, the sandbox boots on the
// engine's default network (reachable by address where the engine allows
// it) rather than not at all.
func (m *Manager) placeOnNetwork(ctx context.Context, name string, prof Profile, spec *RunSpec) {
	m.placeAs(ctx, m.effectiveMode(name, prof), name, spec) // egress.go
}

// placeSpare puts a spare (spare.go) on the network its mode gives, with
// no name to answer to: a claimed spare is reached through the hosts
// entries and the egress proxy, which go by its container's name.
func (m *Manager) placeSpare(ctx context.Context, mode string, spec *RunSpec) {
	m.placeAs(ctx, mode, "", spec)
}

// placeAs is placeOnNetwork for a sandbox of egress mode, answering to
// alias on the sandboxes' network when alias is set.
func (m *Manager) placeAs(ctx context.Context, mode, alias string, spec *RunSpec) {
	spec.Labels[LabelEgress] = mode
	if mode != egress.ModeOpen {
		spec.Network, spec.Aliases = "none", nil
		if mode == egress.ModeAllowlist {
			if spec.Env == nil {
				spec.Env = map[string]string{}
			}
			for k, v := range ProxyEnv() {
				spec.Env[k] = v
			}
			if p := m.caPrint(); p != "" {
				spec.Labels[LabelCA] = p // egress.go
			}
			m.addChannel(spec) // channel.go
		}
		return
	}
	nw, ok := m.rt.(Networker)
	if !ok {
		return
	}
	if root := spec.Labels[LabelFamily]; root != "" && ValidateName(root) == nil && alias != "" {
		m.placeInFamily(ctx, nw, alias, root, spec)
		return
	}
	m.net.mu.Lock()
	defer m.net.mu.Unlock()
	if !m.net.ready {
		labels := map[string]string{LabelOwner: m.cfg.Prefix}
		if err := nw.EnsureNetwork(ctx, m.NetworkName(), labels); err != nil {
			m.log.Warn("sandboxes will not reach each other by name: booting on the engine's default network", "network", m.NetworkName(), "err", err)
			return
		}
		m.net.ready = true
	}
	spec.Network = m.NetworkName()
	spec.Aliases = nil
	if alias != "" {
		spec.Aliases = []string{alias}
	}
}

// placeInFamily puts a child on the network of its family, made if need
// be, and joins the family's root to it, so that the root, the child and
// its siblings reach each other by name and no other sandbox reaches them.
// A failure falls back to no network at all: a child must not reach
// sandboxes outside its family.
//
// The root's container, once joined, is remembered: the next spawn in the
// family costs no network call while that container lives.
func (m *Manager) placeInFamily(ctx context.Context, nw Networker, name, root string, spec *RunSpec) {
	fam := m.FamilyNetworkName(root)
	spec.Network, spec.Aliases = fam, []string{name}
	rootID := ""
	if sb, ok := m.Lookup(root); ok {
		rootID = sb.own.ID()
	}
	m.net.mu.Lock()
	done := rootID != "" && m.net.joined[root] == rootID
	m.net.mu.Unlock()
	if done {
		return
	}
	if err := nw.EnsureNetwork(ctx, fam, map[string]string{LabelOwner: m.cfg.Prefix, LabelFamily: root}); err != nil {
		m.log.Warn("the child gets no network: its family's network cannot be made", "child", name, "network", fam, "err", err)
		spec.Network, spec.Aliases = "none", nil
		return
	}
	if err := nw.ConnectNetwork(ctx, m.ContainerFor(root), fam, []string{root}); err != nil {
		m.log.Warn("the family's root does not reach its children by name", "root", root, "network", fam, "err", err)
		return
	}
	if rootID != "" {
		m.net.mu.Lock()
		if m.net.joined == nil {
			m.net.joined = map[string]string{}
		}
		m.net.joined[root] = rootID
		m.net.mu.Unlock()
	}
}

// forgetFamily drops what this server remembers of root's family network
// (its network went away, or root did).
func (m *Manager) forgetFamily(root string) {
	m.net.mu.Lock()
	delete(m.net.joined, root)
	m.net.mu.Unlock()
}

// removeFamilyNetworkSoon removes, in the background, the network of
// root's family once root is gone (its children went before it).
func (m *Manager) removeFamilyNetworkSoon(root string) {
	m.forgetFamily(root)
	if nw, ok := m.rt.(Networker); ok {
		m.spawn(func() {
			if _, err := nw.RemoveNetwork(m.life, m.FamilyNetworkName(root), false); err != nil {
				m.log.Debug("remove a family's network", "root", root, "err", err)
			}
		})
	}
}

// runContainer boots spec. When the shared network went away under this
// server (pruned, removed by hand), it is made again and the boot retried.
func (m *Manager) runContainer(ctx context.Context, name string, prof Profile, spec RunSpec) (string, error) {
	id, err := m.rt.Run(ctx, spec)
	if err == nil || !m.ours(spec.Network) || !strings.Contains(strings.ToLower(err.Error()), "network") {
		return id, err
	}
	if c, ierr := m.rt.Inspect(ctx, spec.Name); ierr == nil {
		if c.Running() {
			return "", err // it runs: the failure is not the network's
		}
		// docker creates the container, then fails to start it.
		if rerr := m.rt.Remove(ctx, spec.Name); rerr != nil {
			return "", err
		}
	}
	m.net.mu.Lock()
	m.net.ready = spec.Network != m.NetworkName() && m.net.ready
	m.net.mu.Unlock()
	if root := spec.Labels[LabelFamily]; root != "" {
		m.forgetFamily(root)
	}
	spec.Network, spec.Aliases = "", nil
	m.placeOnNetwork(ctx, name, prof, &spec)
	id, rerr := m.rt.Run(ctx, spec)
	if rerr != nil {
		return "", fmt.Errorf("%w (and again with the network made anew: %v)", err, rerr)
	}
	return id, nil
}

// PeerReacher is implemented by engines that say whether containers on
// one network reach each other at all (Apple's container on macOS 15
// isolates every container).
type PeerReacher interface {
	PeersReachable() (ok bool, why string)
}

// NetworkReport says how the sandboxes reach each other.
type NetworkReport struct {
	// Platform says in a sentence how sandboxes reach each other here.
	Platform  string       `json:"platform"`
	Sandboxes []SandboxNet `json:"sandboxes"`
}

// SandboxNet is one sandbox's place in the network.
type SandboxNet struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	// Networks are its networks with its address on each (none while
	// stopped).
	Networks []Attachment `json:"networks"`
	// Isolated is set for a sandbox with network "none".
	Isolated bool `json:"isolated,omitempty"`
	// Names are the host names other sandboxes reach it by.
	Names []string `json:"names,omitempty"`
	// Egress is its egress mode and policy, what was refused lately and
	// the bytes per host (NetworkState).
	Egress *NetState `json:"egress,omitempty"`
	// ReachesByName are the running sandboxes it reaches by name;
	// ReachesByAddress those it reaches only by their address.
	ReachesByName    []string `json:"reaches_by_name"`
	ReachesByAddress []string `json:"reaches_by_address,omitempty"`
}

// NetworkInfo reports the sandboxes' addresses and which reach which;
// with name set, only that sandbox (which must exist).
func (m *Manager) NetworkInfo(ctx context.Context, name string) (NetworkReport, error) {
	if name != "" {
		if _, err := m.Status(ctx, name); err != nil {
			return NetworkReport{}, err
		}
	}
	cs, err := m.listOwn(ctx)
	if err != nil {
		return NetworkReport{}, err
	}
	var all []Container
	for _, c := range cs {
		if c.Name == m.ContainerFor(c.Labels[LabelName]) {
			all = append(all, c)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Labels[LabelName] < all[j].Labels[LabelName] })
	if m.keepsHosts() {
		m.refreshHosts(ctx)
	}
	_, named := m.rt.(Networker)
	hosts := m.keepsHosts()
	reachable, why := true, ""
	if pr, ok := m.rt.(PeerReacher); ok {
		reachable, why = pr.PeersReachable()
	}
	rep := NetworkReport{Platform: egressNote + m.platformNote(named, hosts, reachable, why), Sandboxes: []SandboxNet{}}
	for _, a := range all {
		an := a.Labels[LabelName]
		if name != "" && an != name {
			continue
		}
		sn := SandboxNet{Name: an, State: a.State, Networks: a.Networks, Isolated: a.NoNetwork, ReachesByName: []string{}}
		if es, err := m.netStateOf(an, a); err == nil {
			sn.Egress = &es
		} else {
			m.log.Debug("network state", "sandbox", an, "err", err)
		}
		if sn.Networks == nil {
			sn.Networks = []Attachment{}
		}
		if (named && m.onOurs(a)) || (hosts && a.Running() && !a.NoNetwork) {
			sn.Names = []string{an, a.Name}
		}
		for _, b := range all {
			bn := b.Labels[LabelName]
			if bn == an || !a.Running() || !b.Running() || !reachable || a.NoNetwork || b.NoNetwork {
				continue
			}
			switch {
			case named && m.shareOurs(a, b), hosts && sharedIP(a, b) != "":
				sn.ReachesByName = append(sn.ReachesByName, bn)
			case sharedIP(a, b) != "":
				sn.ReachesByAddress = append(sn.ReachesByAddress, bn)
			}
		}
		rep.Sandboxes = append(rep.Sandboxes, sn)
	}
	return rep, nil
}

// onOurs reports whether c has an address on a network of this Manager
// (where it answers to its sandbox name).
func (m *Manager) onOurs(c Container) bool {
	return slices.ContainsFunc(c.Networks, func(a Attachment) bool { return m.ours(a.Network) && a.IP != "" })
}

// shareOurs reports whether a and b have addresses on one network of
// this Manager.
func (m *Manager) shareOurs(a, b Container) bool {
	for _, x := range a.Networks {
		for _, y := range b.Networks {
			if x.Network == y.Network && m.ours(x.Network) && x.IP != "" && y.IP != "" {
				return true
			}
		}
	}
	return false
}

// egressNote says how allowlist sandboxes reach out and each other.
const egressNote = "sandboxes with egress mode allowlist or none have no network of their own: an allowlist sandbox reaches the hosts its policy allows, " +
	"and other sandboxes by name (e.g. http://web:8000), only through the proxy at http://127.0.0.1:3128 inside it (set in HTTP_PROXY and the like); " +
	"among open sandboxes: "

func (m *Manager) platformNote(named, hosts, reachable bool, why string) string {
	switch {
	case !reachable:
		return why
	case named:
		return fmt.Sprintf("sandboxes share the %s network %q and reach each other by sandbox name (e.g. http://web:8000 for the sandbox \"web\") through %s's DNS; "+
			"one with network \"none\" reaches none, one booted before the network existed reaches the others by address only, "+
			"and child sandboxes whose policy keeps them to their family are on their family's network %q with its root only", m.rt.Kind(), m.NetworkName(), m.rt.Kind(), m.FamilyNetworkName("ROOT"))
	case hosts && m.rt.Kind() == "kubernetes":
		return "sandboxes are pods on the cluster's pod network; NetworkPolicies let a pod in only from its groups: " +
			"the root sandboxes of this server (and children whose policy lets them reach every sandbox), and a root with its children kept to their family; " +
			"the server keeps each running sandbox's /etc/hosts naming the others it reaches, so they reach each other by sandbox name (e.g. http://web:8000 for the sandbox \"web\"); " +
			"one with network \"none\" reaches none. This holds where the cluster's network plugin enforces NetworkPolicy"
	case hosts:
		return fmt.Sprintf("sandboxes share %s's default network; the server keeps each running sandbox's /etc/hosts naming the others, "+
			"so they reach each other by sandbox name (e.g. http://web:8000 for the sandbox \"web\"); one with network \"none\" reaches none; "+
			"%s makes no networks of its own, so a child sandbox whose policy keeps it to its family reaches every sandbox here", m.rt.Kind(), m.rt.Kind())
	default:
		return fmt.Sprintf("sandboxes share %s's default network and reach each other by address (listed)", m.rt.Kind())
	}
}
