// Package egress decides and carries a sandbox's outbound connections.
//
// A sandbox whose network policy is not "open" boots with no route out:
// its only way to the network is the proxy the agent serves on its
// loopback (HTTP CONNECT, plain HTTP and SOCKS5), whose connections reach
// the host as streams. The host decides each one here: the name must be
// allowed by every policy on the sandbox's chain (its own, then each
// ancestor's), the host resolves it (the sandbox has no DNS), and each
// address it resolves to must be public unless a CIDR rule names it.
// Only then does the host dial, to the addresses it checked.
//
// Everything that arrives on such a stream is the sandbox's and untrusted:
// requests are read through bounded readers and refused with an answer
// the program shows (HTTP 403, a SOCKS refusal), never left hanging.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Modes of a network policy.
const (
	// ModeOpen: the sandbox has the engine's network and a route out; the
	// proxy is not used.
	ModeOpen = "open"
	// ModeAllowlist: no route out; the proxy connects to what the rules
	// allow.
	ModeAllowlist = "allowlist"
	// ModeNone: loopback only; every connection is refused.
	ModeNone = "none"
)

// ValidMode reports whether mode names a policy mode.
func ValidMode(mode string) bool {
	return mode == ModeOpen || mode == ModeAllowlist || mode == ModeNone
}

// rank orders modes from the least to the most open.
func rank(mode string) int {
	switch mode {
	case ModeNone:
		return 0
	case ModeAllowlist:
		return 1
	case ModeOpen:
		return 2
	}
	return 0
}

// Narrowest is the least open of the modes (an unknown mode counts as
// none).
func Narrowest(modes ...string) string {
	out := ModeOpen
	for _, m := range modes {
		if !ValidMode(m) {
			return ModeNone
		}
		if rank(m) < rank(out) {
			out = m
		}
	}
	return out
}

// Rule is one allow pattern: a host name (exact, or "*.suffix" for its
// subdomains), or an address range; with a port, or any port.
type Rule struct {
	// Text is the rule as written.
	Text string
	// Host is the lower-case name; Wildcard makes it match the names
	// under it (not the name itself).
	Host     string
	Wildcard bool
	// Prefix is set for an address rule.
	Prefix netip.Prefix
	// Port is the one port allowed, or 0 for any.
	Port int
}

// MaxRules bounds the rules of one policy.
const MaxRules = 512

// ParseRule reads one pattern: "pypi.org", "*.pypi.org", "github.com:443",
// "host:*", "10.0.0.0/8", "10.1.2.3", "10.0.0.0/8:5432", "fd00::/8" or
// "[fd00::1]:443".
func ParseRule(s string) (Rule, error) {
	text := strings.TrimSpace(s)
	r := Rule{Text: text}
	if text == "" {
		return r, fmt.Errorf("allow: empty pattern")
	}
	if len(text) > 300 {
		return r, fmt.Errorf("allow: pattern %.40q… is too long", text)
	}
	hostPart, port := text, ""
	switch {
	case strings.HasPrefix(text, "["):
		end := strings.Index(text, "]")
		if end < 0 {
			return r, fmt.Errorf("allow: %q: no closing ]", text)
		}
		hostPart, port = text[1:end], strings.TrimPrefix(text[end+1:], ":")
		if text[end+1:] != "" && !strings.HasPrefix(text[end+1:], ":") {
			return r, fmt.Errorf("allow: %q: want [address]:port", text)
		}
	case strings.Count(text, ":") == 1:
		hostPart, port, _ = strings.Cut(text, ":")
	}
	if port != "" && port != "*" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return r, fmt.Errorf("allow: %q: port %q must be 1-65535 or *", text, port)
		}
		r.Port = n
	}
	if p, err := netip.ParsePrefix(hostPart); err == nil {
		r.Prefix = p.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(hostPart); err == nil {
		r.Prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		return r, nil
	}
	host := strings.ToLower(strings.TrimSuffix(hostPart, "."))
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard, host = true, rest
	}
	if err := checkHostName(host); err != nil {
		return r, fmt.Errorf("allow: %q: %w", text, err)
	}
	r.Host = host
	return r, nil
}

// checkHostName accepts DNS names: labels of letters, digits, '-' and '_'.
func checkHostName(h string) error {
	if h == "" || len(h) > 253 {
		return fmt.Errorf("not a host name")
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("not a host name")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("not a host name (%q)", c)
			}
		}
	}
	return nil
}

// matchName reports whether r allows host (lower case, no trailing dot)
// on port.
func (r Rule) matchName(host string, port int) bool {
	if r.Host == "" || (r.Port != 0 && r.Port != port) {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(host, "."+r.Host)
	}
	return host == r.Host
}

// matchAddr reports whether r's range holds a on port.
func (r Rule) matchAddr(a netip.Addr, port int) bool {
	return r.Prefix.IsValid() && (r.Port == 0 || r.Port == port) && r.Prefix.Contains(a)
}

// Presets are named lists of rules.
var Presets = map[string][]string{
	// packages: the package hosts of Debian, Ubuntu, Alpine, PyPI, npm,
	// Go modules, crates and RubyGems.
	"packages": {
		"deb.debian.org", "security.debian.org", "*.debian.org:80", "*.debian.org:443",
		"archive.ubuntu.com", "security.ubuntu.com", "ports.ubuntu.com",
		"dl-cdn.alpinelinux.org",
		"pypi.org:443", "files.pythonhosted.org:443",
		"registry.npmjs.org:443", "registry.yarnpkg.com:443",
		"proxy.golang.org:443", "sum.golang.org:443", "storage.googleapis.com:443",
		"crates.io:443", "static.crates.io:443", "index.crates.io:443",
		"rubygems.org:443", "index.rubygems.org:443",
	},
	// git: the common forges over HTTPS.
	"git": {
		"github.com:443", "api.github.com:443", "codeload.github.com:443",
		"objects.githubusercontent.com:443", "raw.githubusercontent.com:443",
		"gitlab.com:443", "bitbucket.org:443", "codeberg.org:443",
	},
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	var out []string
	for k := range Presets {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Policy is one sandbox's own network policy.
type Policy struct {
	Mode  string
	Rules []Rule
	// Presets are the presets its rules came from, for display.
	Presets []string
	// Allow are the patterns given besides presets, for display.
	Allow []string
	// Requested marks the hosts a child's spawn asked to be limited to
	// (sandbox-ctl spawn --allow): a level of its own in the child's
	// chain, placed after the child's policy. An ancestor's request is a
	// level of the chain too, not marked: it is one of the ancestors'.
	Requested bool
}

// NewPolicy builds a policy from a mode, preset names and patterns.
func NewPolicy(mode string, presets, allow []string) (Policy, error) {
	if !ValidMode(mode) {
		return Policy{}, fmt.Errorf("network %q: want open, allowlist or none", mode)
	}
	p := Policy{Mode: mode, Presets: presets, Allow: allow}
	for _, name := range presets {
		list, ok := Presets[name]
		if !ok {
			return Policy{}, fmt.Errorf("network preset %q: want one of %s", name, strings.Join(PresetNames(), ", "))
		}
		for _, s := range list {
			r, err := ParseRule(s)
			if err != nil {
				return Policy{}, err
			}
			p.Rules = append(p.Rules, r)
		}
	}
	for _, s := range allow {
		r, err := ParseRule(s)
		if err != nil {
			return Policy{}, err
		}
		p.Rules = append(p.Rules, r)
	}
	if len(p.Rules) > MaxRules {
		return Policy{}, fmt.Errorf("network policy: %d rules, at most %d", len(p.Rules), MaxRules)
	}
	return p, nil
}

// String describes the policy in a line.
func (p Policy) String() string {
	switch p.Mode {
	case ModeOpen:
		return "open (a direct route out; nothing is checked)"
	case ModeNone:
		return "none (loopback only)"
	}
	var parts []string
	if len(p.Presets) > 0 {
		parts = append(parts, "presets "+strings.Join(p.Presets, ","))
	}
	if len(p.Allow) > 0 {
		parts = append(parts, "allow "+strings.Join(p.Allow, " "))
	}
	if len(parts) == 0 {
		return "allowlist (nothing allowed)"
	}
	return "allowlist: " + strings.Join(parts, "; ")
}

// allowsName is the rule of p that allows host on port, if any. An open
// policy allows every name.
func (p Policy) allowsName(host string, port int) (string, bool) {
	switch p.Mode {
	case ModeOpen:
		return "open", true
	case ModeNone:
		return "", false
	}
	for _, r := range p.Rules {
		if r.matchName(host, port) {
			return r.Text, true
		}
	}
	return "", false
}

// allowsAddr is the rule of p whose range holds a on port, if any. A
// special address (Special) is held only by a rule of /8 or narrower
// (/16 for IPv6): 0.0.0.0/0 means "any public address", not "this host
// and its metadata service too".
func (p Policy) allowsAddr(a netip.Addr, port int) (string, bool) {
	_, sp := Special(a)
	for _, r := range p.Rules {
		if !r.matchAddr(a, port) {
			continue
		}
		if sp && r.Prefix.Bits() < map[bool]int{true: 8, false: 16}[r.Prefix.Addr().Is4()] {
			continue
		}
		return r.Text, true
	}
	return "", false
}

// special lists the ranges that are never reached unless a CIDR rule
// names them: this host, private networks, link-local and cloud metadata
// addresses, shared address space, multicast and the like.
var special = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "100::/64",
		// IPv6 forms that can lead back to IPv4 networks or are not
		// global: 6to4, Teredo, site-local, local-use NAT64,
		// IPv4-compatible.
		"2002::/16", "2001::/32", "fec0::/10", "64:ff9b:1::/48", "::/96",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// nat64 is the well-known NAT64 prefix, whose addresses carry an IPv4
// address in their last 32 bits.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Special reports whether a is an address that only an explicit CIDR rule
// reaches, and which class it is in.
func Special(a netip.Addr) (string, bool) {
	a = a.Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	switch {
	case a.IsLoopback():
		return "loopback", true
	case a == netip.MustParseAddr("169.254.169.254") || a == netip.MustParseAddr("fd00:ec2::254") || a == netip.MustParseAddr("100.100.100.200"):
		return "cloud metadata", true
	case a.IsLinkLocalUnicast():
		return "link-local", true
	case a.IsPrivate():
		return "private", true
	case a.IsUnspecified():
		return "unspecified", true
	case a.IsMulticast():
		return "multicast", true
	}
	for _, p := range special {
		if p.Contains(a) {
			return "reserved", true
		}
	}
	if ownAddrs().has(a) {
		return "this host's own", true
	}
	return "", false
}

// hostAddrs are the addresses of this host's interfaces, read again every
// hostAddrsTTL: the proxy dials from the host, so an allowed name that
// resolves to one of them would reach every service the host runs on it.
type hostAddrs struct {
	mu    sync.Mutex
	addrs map[netip.Addr]bool
	at    time.Time
}

const hostAddrsTTL = 10 * time.Second

var own hostAddrs

func ownAddrs() *hostAddrs {
	own.mu.Lock()
	defer own.mu.Unlock()
	if own.addrs == nil || time.Since(own.at) >= hostAddrsTTL {
		m := map[netip.Addr]bool{}
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if p, err := netip.ParsePrefix(a.String()); err == nil {
					m[p.Addr().Unmap().WithZone("")] = true
				}
			}
		}
		own.addrs, own.at = m, time.Now()
	}
	return &own
}

func (h *hostAddrs) has(a netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.addrs[a.WithZone("")]
}

// splitHostPort splits an authority into a lower-case host (IPv6 without
// brackets) and a port, with def when it has none.
func splitHostPort(s string, def int) (string, int, error) {
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	n := def
	if port != "" {
		v, err := strconv.Atoi(port)
		if err != nil || v < 1 || v > 65535 {
			return "", 0, fmt.Errorf("port %q is not a TCP port", port)
		}
		n = v
	}
	if n == 0 {
		return "", 0, fmt.Errorf("%q has no port", s)
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return "", 0, fmt.Errorf("%q has no host", s)
	}
	return host, n, nil
}
