package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
)

// Egress. A sandbox whose effective mode (its own profile's, narrowed by
// every ancestor's) is allowlist or none boots with no network at all
// (`--network none`): loopback only, no route, no DNS. An allowlist
// sandbox reaches out only through the proxy its agent serves on
// 127.0.0.1:ProxyPort, whose connections arrive here as streams and are
// decided by package egress against the policies in force at that moment
// (a changed allowlist takes effect on the next connection). Without an
// agent nothing gets out: the failure is closed.
//
// The mode a container booted with is in its LabelEgress label. Moving a
// sandbox between open and the other modes changes its network, which
// takes a reset (or destroy) to apply; status says so.

// LabelEgress records the egress mode a container was booted with.
const LabelEgress = "io.sandbox-mcp.egress"

// ProxyPort is where, inside an allowlist sandbox, the agent serves the
// proxy (HTTP CONNECT, plain HTTP and SOCKS5 on one port).
const ProxyPort = 3128

// maxEgressConns bounds one sandbox's proxied connections open at once;
// past it new ones are closed at once.
const maxEgressConns = 1024

// ProxyEnv is the environment every process of an allowlist sandbox gets:
// the proxy for the tools that read the usual variables (curl, wget, apt,
// pip, npm, git, Go; Node with NODE_USE_ENV_PROXY).
func ProxyEnv() map[string]string {
	url := "http://127.0.0.1:" + strconv.Itoa(ProxyPort)
	socks := "socks5h://127.0.0.1:" + strconv.Itoa(ProxyPort)
	no := "localhost,127.0.0.1,::1"
	return map[string]string{
		"HTTP_PROXY": url, "http_proxy": url, "HTTPS_PROXY": url, "https_proxy": url,
		"ALL_PROXY": socks, "all_proxy": socks, "NO_PROXY": no, "no_proxy": no,
		"NODE_USE_ENV_PROXY": "1", "NODE_EXTRA_CA_CERTS": caFile,
	}
}

// egressState is a sandbox's proxy on the host side.
type egressState struct {
	// mode is the mode the container was booted with.
	mode string
	// channelDir is the host directory mounted as its channel, or ""
	// (channel.go); channel is this server's socket there, once listened.
	channelDir string
	channel    *channelListener
	mu         sync.Mutex
	conns      int
	// chain is the sandbox's policy chain as read at chainAt (a child's
	// needs a read of the state file: not one per connection).
	chain   []egress.Policy
	chainAt time.Time
}

// chainTTL is how long a policy chain read is used: a reloaded
// configuration applies within it.
const chainTTL = time.Second

// egressMode reads the mode c was booted with; a container from before
// egress modes existed is open, or none when it has no network.
func egressMode(c Container) string {
	if m := c.Labels[LabelEgress]; egress.ValidMode(m) {
		return m
	}
	if c.NoNetwork {
		return egress.ModeNone
	}
	return egress.ModeOpen
}

// EgressChain is the network policies that bound sandbox name: its own,
// then its parent's, and so on up to its root. A child's own policy is
// the profile of its name, or none when it was spawned without peers.
func (m *Manager) EgressChain(name string) ([]egress.Policy, error) {
	var chain []egress.Policy
	cur := name
	for depth := 0; depth < 32; depth++ {
		prof := m.ProfileFor(cur)
		cp, labels, isChild, err := m.childProfile(cur)
		if err != nil {
			return nil, err
		}
		if isChild && cp.Network == egress.ModeNone {
			prof.Network = egress.ModeNone
		}
		pol, err := prof.EgressPolicy()
		if err != nil {
			return nil, fmt.Errorf("sandbox %q: %w", cur, err)
		}
		chain = append(chain, pol)
		if !isChild {
			return chain, nil
		}
		if cp.Allow != nil {
			// The hosts the child's spawn asked to be limited to: a level
			// of their own, so they only ever narrow what it may reach.
			req, err := egress.NewPolicy(egress.ModeAllowlist, nil, cp.Allow)
			if err != nil {
				return nil, fmt.Errorf("sandbox %q: its spawn's allow: %w", cur, err)
			}
			req.Requested = depth == 0 // an ancestor's is its ancestors' limit
			chain = append(chain, req)
		}
		cur = labels[LabelChildOf]
		if ValidateName(cur) != nil {
			return nil, fmt.Errorf("sandbox %q: its parent %q is not a sandbox name", name, cur)
		}
	}
	return nil, fmt.Errorf("sandbox %q: more than 32 ancestors", name)
}

// effectiveMode is the least open mode on name's chain; none when the
// chain cannot be read (a child must not boot with more than its parent).
func (m *Manager) effectiveMode(name string, prof Profile) string {
	chain, err := m.EgressChain(name)
	if err != nil {
		m.log.Warn("the sandbox boots without network: its policy cannot be read", "sandbox", name, "err", err)
		return egress.ModeNone
	}
	modes := []string{prof.EgressMode()}
	if prof.Network == "" {
		modes[0] = chain[0].Mode
	}
	for _, p := range chain[1:] {
		modes = append(modes, p.Mode)
	}
	return egress.Narrowest(modes...)
}

// serveEgress answers the connections sb's programs make to its proxy.
func (m *Manager) serveEgress(sb *Sandbox) func(net.Conn) {
	h := egress.Handler{
		Decide: func(ctx context.Context, host string, port int) egress.Decision {
			return m.decideEgress(ctx, sb, host, port)
		},
		Dial: func(ctx context.Context, d egress.Decision) (net.Conn, error) {
			if d.Peer != "" {
				return m.DialExisting(ctx, d.Peer, d.Port)
			}
			return egress.DialAddrs(ctx, d.Addrs, d.Port)
		},
		Record:  func(ev egress.Event) { m.recordEgress(sb.Name, ev) },
		Secrets: func() []egress.Secret { return m.egressSecrets(sb.Name) },
		Intercept: func(host string, port int) bool {
			rules, err := egress.ParseSecretHosts(m.ProfileFor(sb.Name).Intercept)
			if err != nil {
				return false
			}
			return egress.Secret{Hosts: rules}.For(host, port)
		},
		CA:            m.cfg.CA,
		UpstreamRoots: m.cfg.UpstreamRoots,
	}
	return func(conn net.Conn) {
		sb.egress.mu.Lock()
		full := sb.egress.conns >= maxEgressConns
		if !full {
			sb.egress.conns++
		}
		sb.egress.mu.Unlock()
		if full {
			conn.Close()
			return
		}
		done := sb.busy()
		defer func() {
			done()
			sb.egress.mu.Lock()
			sb.egress.conns--
			sb.egress.mu.Unlock()
		}()
		h.Serve(sb.life, conn)
	}
}

// decideEgress decides one connection of sb to host:port.
func (m *Manager) decideEgress(ctx context.Context, sb *Sandbox, host string, port int) egress.Decision {
	chain, err := m.chainOf(sb)
	if err != nil {
		return egress.Decision{Host: host, Port: port, Reason: "its policy cannot be read: " + err.Error()}
	}
	// A policy of none on the chain (a reloaded one included) shuts the
	// way to the other sandboxes too.
	if !slices.ContainsFunc(chain, func(p egress.Policy) bool { return p.Mode == egress.ModeNone }) {
		if peer, ok := m.peerHost(ctx, sb.Name, host); ok {
			return egress.Decision{Allowed: true, Host: host, Port: port, Peer: peer, Rule: "peer sandbox"}
		}
	}
	return egress.Decide(ctx, m.resolver(), chain, host, port)
}

// chainOf is sb's policy chain, read again once chainTTL has passed.
func (m *Manager) chainOf(sb *Sandbox) ([]egress.Policy, error) {
	sb.egress.mu.Lock()
	defer sb.egress.mu.Unlock()
	if sb.egress.chain != nil && time.Since(sb.egress.chainAt) < chainTTL {
		return sb.egress.chain, nil
	}
	chain, err := m.EgressChain(sb.Name)
	if err != nil {
		return nil, err
	}
	sb.egress.chain, sb.egress.chainAt = chain, time.Now()
	return chain, nil
}

func (m *Manager) resolver() egress.Resolver {
	if m.cfg.Resolver != nil {
		return m.cfg.Resolver
	}
	return net.DefaultResolver
}

// recordEgress logs a decision.
func (m *Manager) recordEgress(name string, ev egress.Event) {
	if !ev.Ended {
		m.log.Debug("egress", "sandbox", name, "host", ev.Host, "port", ev.Port, "allowed", ev.Allowed, "rule", ev.Rule, "reason", ev.Reason)
		if m.cfg.Events != nil {
			decision := "refused"
			if ev.Allowed {
				decision = "allowed"
			}
			m.cfg.Events("egress", decision)
		}
	}
	if m.cfg.EgressLog == nil {
		return
	}
	if err := m.cfg.EgressLog.Append(name, ev); err != nil {
		m.log.Warn("network log", "sandbox", name, "err", err)
	}
}

// peerHost reports whether host names another sandbox that name may reach
// through its proxy: a name without dots that is a sandbox here, in
// name's family (or both roots, or children spawned to reach all).
func (m *Manager) peerHost(ctx context.Context, name, host string) (string, bool) {
	if strings.Contains(host, ".") || ValidateName(host) != nil || host == name {
		return "", false
	}
	if _, ok := m.Lookup(host); !ok && !m.sandboxNamed(ctx, host) {
		return "", false
	}
	from, to := m.peerGroup(name), m.peerGroup(host)
	switch {
	case from.kind == "none" || to.kind == "none":
		return "", false
	case from.kind == "family":
		return host, (to.kind == "root" && host == from.root) || (to.kind == "family" && to.root == from.root)
	case from.kind == "root":
		return host, to.kind == "root" || to.kind == "all" || (to.kind == "family" && to.root == name)
	default: // all
		return host, to.kind == "root" || to.kind == "all"
	}
}

type peerGroup struct{ kind, root string }

// peerGroup places a sandbox for peer checks: a root, a child of a family
// (its root named), a child that reaches all, or one that reaches none.
func (m *Manager) peerGroup(name string) peerGroup {
	cp, labels, isChild, err := m.childProfile(name)
	switch {
	case err != nil:
		return peerGroup{kind: "none"}
	case !isChild:
		return peerGroup{kind: "root"}
	case cp.Network == egress.ModeNone:
		return peerGroup{kind: "none"}
	case labels[LabelFamily] != "":
		return peerGroup{kind: "family", root: labels[LabelFamily]}
	}
	return peerGroup{kind: "all"}
}

// NetState is what status and network_info tell of a sandbox's egress.
type NetState struct {
	// Mode is the mode the sandbox runs with; Wanted the one its policy
	// says now, when a reset would change it.
	Mode   string `json:"mode"`
	Wanted string `json:"wanted,omitempty"`
	// Policy describes the rules in force (its own, and its ancestors').
	Policy []string `json:"policy,omitempty"`
	// Proxy is where programs in the sandbox find the proxy.
	Proxy string `json:"proxy,omitempty"`
	// Transport is how the proxy's connections reach the host: "host
	// socket" (a socket mounted in: channel.go) or "engine exec".
	Transport string `json:"transport,omitempty"`
	// ChannelConns counts the connections the host socket has carried to
	// this server since the sandbox booted here.
	ChannelConns int64 `json:"channel_connections,omitempty"`
	egress.Summary
}

// NetworkState describes sandbox name's egress from its container and the
// policy now in force, with the last refusals and the bytes per host from
// its network log.
func (m *Manager) NetworkState(ctx context.Context, name string) (NetState, error) {
	if err := ValidateName(name); err != nil {
		return NetState{}, err
	}
	c, err := m.inspectOwned(ctx, name)
	if err != nil {
		return NetState{}, fmt.Errorf("sandbox %q: %w", name, err)
	}
	return m.netStateOf(name, c)
}

// netStateOf is NetworkState for the container c of sandbox name.
func (m *Manager) netStateOf(name string, c Container) (NetState, error) {
	st := NetState{Mode: egressMode(c)}
	chain, err := m.EgressChain(name)
	if err != nil {
		return st, err
	}
	wanted := m.effectiveMode(name, m.ProfileFor(name))
	if wanted != st.Mode {
		st.Wanted = wanted
	}
	ancestor := 0
	for i, p := range chain {
		line := p.String()
		switch {
		case p.Requested:
			line = "its spawn request: " + line
		case i > 0:
			ancestor++
			line = "ancestor " + strconv.Itoa(ancestor) + ": " + line
		}
		st.Policy = append(st.Policy, line)
	}
	if st.Mode == egress.ModeAllowlist {
		st.Proxy = ProxyEnv()["HTTP_PROXY"] + " (also SOCKS5); no DNS inside: the host resolves names"
		st.Transport = "engine exec"
		if c.Labels[LabelChannel] != "" {
			st.Transport = "host socket"
		}
		if sb, ok := m.Lookup(name); ok {
			st.ChannelConns = max(sb.channelConns(), 0)
		}
	}
	st.Summary = egress.Summary{Bytes: []egress.HostBytes{}, Refused: []egress.Refused{}}
	if m.cfg.EgressLog != nil {
		evs, err := m.cfg.EgressLog.Read(name, 0)
		if err != nil {
			return st, err
		}
		st.Summary = egress.Summarize(evs, 10)
	}
	return st, nil
}

// NetworkLog returns the last n decisions of sandbox name's proxy, oldest
// first; only refused ones with refusedOnly.
func (m *Manager) NetworkLog(ctx context.Context, name string, n int, refusedOnly bool) ([]egress.Event, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if m.cfg.EgressLog == nil {
		return nil, errors.New("this server keeps no network log")
	}
	evs, err := m.cfg.EgressLog.Read(name, 0)
	if err != nil {
		return nil, err
	}
	if refusedOnly {
		evs = slices.DeleteFunc(evs, func(ev egress.Event) bool { return ev.Allowed })
	}
	if n > 0 && len(evs) > n {
		evs = evs[len(evs)-n:]
	}
	return evs, nil
}

// SetEgressSecret puts a placeholder for key in sandbox name's
// environment (every later command sees it) and keeps value in this
// process's memory only: the proxy puts it in place of the placeholder in
// requests to hosts (headers of plain HTTP requests, and of HTTPS requests
// to hosts the profile's intercept key opts in). The value never enters
// the sandbox. It returns the placeholder.
func (m *Manager) SetEgressSecret(ctx context.Context, name, key, value string, hosts []string) (string, error) {
	rules, err := egress.ParseSecretHosts(hosts)
	if err != nil {
		return "", &ArgError{Err: err}
	}
	if value == "" || strings.IndexByte(value, 0) >= 0 {
		return "", &ArgError{Err: errors.New("a secret's value must be non-empty text")}
	}
	sb, _, err := m.Get(ctx, name)
	if err != nil {
		return "", err
	}
	if sb.egress.mode != egress.ModeAllowlist {
		return "", &ArgError{Err: fmt.Errorf("sandbox %q has egress mode %s: its connections do not pass the host's proxy, so no secret can be swapped in; "+
			"give it network allowlist (and reset it), or set the variable without hosts", name, sb.egress.mode)}
	}
	placeholder := egress.NewPlaceholder(key)
	if err := m.SetEnv(ctx, name, key, placeholder, false); err != nil {
		return "", err
	}
	// SetEnv dropped a secret of key this server held; the new one goes
	// in after it.
	m.secretsMu.Lock()
	if m.secrets == nil {
		m.secrets = map[string]map[string]egress.Secret{}
	}
	if m.secrets[name] == nil {
		m.secrets[name] = map[string]egress.Secret{}
	}
	sec := egress.Secret{Name: key, Placeholder: placeholder, Value: value, Hosts: rules}
	m.secrets[name][key] = sec
	peers := m.secretPeers
	m.secretsMu.Unlock()
	if peers != nil {
		peers.Put(name, sec)
	}
	return placeholder, nil
}

// SecretPeers are the other servers that share this one's sandboxes: a
// secret set or forgotten here is told to them (package secretshare),
// each before the next, so that the server whose agent holds a sandbox's
// proxy swaps in what any of them was given.
type SecretPeers interface {
	Put(name string, s egress.Secret)
	Drop(name, key string)
}

// SetSecretPeers tells the Manager of the other servers.
func (m *Manager) SetSecretPeers(p SecretPeers) {
	m.secretsMu.Lock()
	m.secretPeers = p
	m.secretsMu.Unlock()
}

// PutPeerSecret keeps a secret of sandbox name that another server was
// given. It is checked as one set here would be; errors never hold the
// value.
func (m *Manager) PutPeerSecret(name string, s egress.Secret) error {
	switch {
	case ValidateName(name) != nil:
		return errors.New("not a sandbox name")
	case !strings.HasPrefix(s.Placeholder, egress.PlaceholderPrefix) || s.Name == "":
		return errors.New("not a secret's placeholder")
	case s.Value == "" || strings.IndexByte(s.Value, 0) >= 0:
		return errors.New("a secret's value must be non-empty text")
	case len(s.Hosts) == 0:
		return errors.New("a secret with no host")
	}
	m.secretsMu.Lock()
	defer m.secretsMu.Unlock()
	if m.secrets == nil {
		m.secrets = map[string]map[string]egress.Secret{}
	}
	if m.secrets[name] == nil {
		m.secrets[name] = map[string]egress.Secret{}
	}
	m.secrets[name][s.Name] = s
	return nil
}

// DropPeerSecret forgets, as another server did, key's secret in
// sandbox name ("" for all).
func (m *Manager) DropPeerSecret(name, key string) { m.dropEgressSecret(name, key) }

// AllEgressSecrets are the secrets this server holds, by sandbox.
func (m *Manager) AllEgressSecrets() map[string][]egress.Secret {
	m.secretsMu.Lock()
	defer m.secretsMu.Unlock()
	out := map[string][]egress.Secret{}
	for name, byKey := range m.secrets {
		for _, s := range byKey {
			out[name] = append(out[name], s)
		}
	}
	return out
}

// forgetEgressSecret drops key's secret in sandbox name ("" for all),
// here and in the other servers.
func (m *Manager) forgetEgressSecret(name, key string) {
	m.dropEgressSecret(name, key)
	m.secretsMu.Lock()
	peers := m.secretPeers
	m.secretsMu.Unlock()
	if peers != nil {
		peers.Drop(name, key)
	}
}

// dropEgressSecret drops key's secret in sandbox name ("" for all) here.
func (m *Manager) dropEgressSecret(name, key string) {
	m.secretsMu.Lock()
	defer m.secretsMu.Unlock()
	if key == "" {
		delete(m.secrets, name)
		return
	}
	delete(m.secrets[name], key)
}

// egressSecrets are sandbox name's secrets.
func (m *Manager) egressSecrets(name string) []egress.Secret {
	m.secretsMu.Lock()
	defer m.secretsMu.Unlock()
	out := make([]egress.Secret, 0, len(m.secrets[name]))
	for _, s := range m.secrets[name] {
		out = append(out, s)
	}
	return out
}

// EgressSecretHosts maps each variable of sandbox name whose value is
// swapped in at egress by this server to the hosts it goes to.
func (m *Manager) EgressSecretHosts(name string) map[string][]string {
	out := map[string][]string{}
	for _, s := range m.egressSecrets(name) {
		for _, r := range s.Hosts {
			out[s.Name] = append(out[s.Name], r.Text)
		}
	}
	return out
}

// caFile is where allowlist sandboxes keep the host's CA.
const caFile = "/usr/local/share/ca-certificates/sandbox-mcp-egress.crt"

// caScript installs the PEM in $1 as caFile and adds it, once, to the
// system bundle where there is one (OpenSSL, curl, git, Python's ssl and
// Go read it; Node reads NODE_EXTRA_CA_CERTS). What is at the temporary
// name goes first: a fifo there (an image may ship one) would hold the
// write. Its status is 0 when both are in place, 2 when the sandbox's
// user may not write them (an image whose user is not root: nothing to
// try again), 1 when a write failed otherwise.
const caScript = `d=/usr/local/share/ca-certificates; f=$d/sandbox-mcp-egress.crt
mkdir -p "$d" 2>/dev/null; [ -d "$d" ] && [ -w "$d" ] || exit 2
rm -f "$f.tmp" && printf '%s' "$1" >"$f.tmp" && mv -f "$f.tmp" "$f" || exit 1
b=/etc/ssl/certs/ca-certificates.crt
if [ -f "$b" ] && ! grep -qF "$2" "$b"; then [ -w "$b" ] || exit 2; printf '%s' "$1" >>"$b" || exit 1; fi
exit 0`

// caRun is caScript with its arguments, in a subshell: a housekeeping
// script runs in the framing shell, which its exit and set must not touch.
// Its status is 0 unless a write failed that may hold another time
// (caScript's 1).
func caRun(pem, mark string) string {
	return "(set -- " + shellQuote(pem) + " " + shellQuote(mark) + "\n" + caScript + "\n) || [ $? -eq 2 ]"
}

// LabelCA records, on an allowlist container, the print (caPrint) of the
// CA its creator installed in it at its first boot. The trust stores are
// in the container's root filesystem, so a later boot of the same
// container by a server with the same CA finds it there: its commands
// need not wait for the install (controlSoon), which runs all the same.
const LabelCA = "io.sandbox-mcp.ca"

// caPrint names this server's egress CA: the first 16 hex digits of its
// certificate's SHA-256 ("" without a CA).
func (m *Manager) caPrint() string {
	if m.cfg.CA == nil {
		return ""
	}
	sum := sha256.Sum256(m.cfg.CA.CertPEM())
	return hex.EncodeToString(sum[:8])
}

// installCA puts the host's CA in allowlist sandbox sb's trust stores.
func (m *Manager) installCA(ctx context.Context, sb *Sandbox) {
	if m.cfg.CA == nil || sb.egress.mode != egress.ModeAllowlist {
		return
	}
	if _, err := sb.housekeep(ctx, m.caInstallScript(), scriptTimeout); err != nil {
		m.log.Warn("install the egress CA in the sandbox", "sandbox", sb.Name, "err", err)
	}
}

// caInstallScript is the script that puts the server's CA in a
// sandbox's trust stores (caRun).
func (m *Manager) caInstallScript() string {
	return caRun(m.caArgs())
}

// caArgs are caScript's arguments for this server's CA: its PEM, and the
// line of it that tells whether a bundle has it.
func (m *Manager) caArgs() (pem, mark string) {
	pem = string(m.cfg.CA.CertPEM())
	lines := strings.Split(strings.TrimSpace(pem), "\n")
	return pem, lines[len(lines)/2]
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// peerList is the engine's list of this prefix's sandbox names, read at
// most once per chainTTL: a sandbox's proxied connections must not each
// cost the host an engine call.
type peerList struct {
	mu    sync.Mutex
	names map[string]bool
	at    time.Time
}

// sandboxNamed reports whether a sandbox of this prefix has that name.
func (m *Manager) sandboxNamed(ctx context.Context, name string) bool {
	m.peers.mu.Lock()
	defer m.peers.mu.Unlock()
	if m.peers.names == nil || time.Since(m.peers.at) >= chainTTL {
		cs, err := m.listOwn(ctx)
		if err != nil {
			return false
		}
		m.peers.names, m.peers.at = map[string]bool{}, time.Now()
		for _, c := range cs {
			if n := c.Labels[LabelName]; c.Name == m.ContainerFor(n) {
				m.peers.names[n] = true
			}
		}
	}
	return m.peers.names[name]
}
