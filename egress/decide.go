package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Resolver turns a name into addresses on the host. *net.Resolver is one;
// tests give their own.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Decision is the host's answer to one connection.
type Decision struct {
	Allowed bool
	Host    string
	Port    int
	// Addrs are the checked addresses to dial, in order.
	Addrs []netip.Addr
	// Peer is set when the host named another sandbox that this one may
	// reach: the connection goes into that sandbox, not to the network.
	Peer string
	// Rule is the rule (of the sandbox's own policy) that allowed it.
	Rule string
	// Reason says why it was refused; Hint how to allow it.
	Reason string
	Hint   string
}

// Refusal is the text a refused program shows.
func (d Decision) Refusal() string {
	s := fmt.Sprintf("blocked by the sandbox's network policy: %s", d.Reason)
	if d.Hint != "" {
		s += "; " + d.Hint
	}
	return s
}

// resolveTimeout bounds a name's resolution.
const resolveTimeout = 10 * time.Second

// Decide answers a connection to host:port from a sandbox whose policies
// are chain (its own first, then each ancestor's): every one must allow
// the name (or, for an address, hold it in a CIDR rule); the host then
// resolves the name, and every address it gives must be public or held by
// a CIDR rule of every allowlist policy on the chain.
func Decide(ctx context.Context, res Resolver, chain []Policy, host string, port int) Decision {
	d := Decision{Host: host, Port: port}
	if len(chain) == 0 {
		d.Reason = "the sandbox has no policy"
		return d
	}
	for i, p := range chain {
		if p.Mode == ModeNone {
			d.Reason = "network none"
			if i > 0 {
				d.Reason = "its parent's network is none"
			}
			return d
		}
	}
	authority := hostPort(host, port)
	hint := fmt.Sprintf("allow it with the profile key allow=%s (or allow=*.%s for its subdomains) in the server's configuration", authority, parentDomain(host))
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		hint = fmt.Sprintf("allow it with allow=%s/%d in the server's configuration", a, a.BitLen())
		for i, p := range chain {
			if p.Mode == ModeOpen {
				continue
			}
			rule, ok := p.allowsAddr(a, port)
			if !ok {
				d.Reason, d.Hint = fmt.Sprintf("%s is an address no CIDR rule holds%s", authority, whose(i, p)), hintFor(p, hint, a.String()+"/"+strconv.Itoa(a.BitLen()))
				return d
			}
			if i == 0 {
				d.Rule = rule
			}
		}
		if cls, sp := Special(a); sp && allOpen(chain) {
			d.Reason, d.Hint = fmt.Sprintf("%s is a %s address", authority, cls), hint
			return d
		}
		d.Allowed, d.Addrs = true, []netip.Addr{a}
		return d
	}
	if err := checkHostName(host); err != nil {
		d.Reason = fmt.Sprintf("%q is not a host name", host)
		return d
	}
	for i, p := range chain {
		rule, ok := p.allowsName(host, port)
		if !ok {
			d.Reason, d.Hint = fmt.Sprintf("%s is not on the allowlist%s", authority, whose(i, p)), hintFor(p, hint, authority)
			return d
		}
		if i == 0 {
			d.Rule = rule
		}
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := res.LookupNetIP(rctx, "ip", host)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			d.Reason = fmt.Sprintf("%s: no such host", host)
		} else {
			d.Reason = fmt.Sprintf("%s: the host could not resolve it: %v", host, err)
		}
		return d
	}
	var refused []string
	for _, a := range addrs {
		a = a.Unmap()
		if cls, sp := Special(a); sp && !addrAllowed(chain, a, port) {
			refused = append(refused, a.String()+" ("+cls+")")
			continue
		}
		d.Addrs = append(d.Addrs, a)
	}
	if len(d.Addrs) == 0 {
		d.Reason = fmt.Sprintf("%s resolves only to addresses the policy keeps out: %s", host, strings.Join(refused, ", "))
		if len(addrs) == 0 {
			d.Reason = fmt.Sprintf("%s: no addresses", host)
		} else {
			d.Hint = fmt.Sprintf("allow the range with a CIDR rule, e.g. allow=%s/%d, only if that is meant", addrs[0].Unmap(), addrs[0].Unmap().BitLen())
		}
		return d
	}
	d.Allowed = true
	return d
}

// addrAllowed reports whether every allowlist policy on chain holds a in
// a CIDR rule (and at least one does: an open chain does not reach this
// host's own networks through the proxy).
func addrAllowed(chain []Policy, a netip.Addr, port int) bool {
	held := false
	for _, p := range chain {
		if p.Mode == ModeOpen {
			continue
		}
		if _, ok := p.allowsAddr(a, port); !ok {
			return false
		}
		held = true
	}
	return held
}

func allOpen(chain []Policy) bool {
	for _, p := range chain {
		if p.Mode != ModeOpen {
			return false
		}
	}
	return true
}

// whose says whose policy the chain's level i is, for a refusal.
func whose(i int, p Policy) string {
	switch {
	case p.Requested:
		return " of its spawn request"
	case i == 0:
		return ""
	}
	return " of its parent"
}

// hintFor is how to allow what level p refused: hint, or for a child's
// own request, to spawn it asking for the pattern too.
func hintFor(p Policy, hint, pattern string) string {
	if !p.Requested {
		return hint
	}
	return "the child was spawned with sandbox-ctl spawn --allow; spawn it again with --allow " + pattern + " added"
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

// parentDomain is host without its first label (host itself for one of
// two labels or fewer).
func parentDomain(host string) string {
	if strings.Count(host, ".") < 2 {
		return host
	}
	_, rest, _ := strings.Cut(host, ".")
	return rest
}
