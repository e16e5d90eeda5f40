package spawn

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Code classifies a refusal; the control socket reports it as is.
type Code string

// Refusal codes.
const (
	InvalidRequest   Code = "INVALID_REQUEST"
	PermissionDenied Code = "PERMISSION_DENIED"
	NotFound         Code = "NOT_FOUND"
	LimitReached     Code = "LIMIT_REACHED"
	InternalError    Code = "INTERNAL_ERROR"
)

// Error is a refused spawn.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func refuse(code Code, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// Member is one sandbox as a decision sees it.
type Member struct {
	Name string
	// Parent is the sandbox that spawned it; "" for a root (a sandbox the
	// user made).
	Parent string
	CPUs   float64
	Memory Bytes
	// Expires is when a child's life ends; zero for a root.
	Expires time.Time
	// Spawned counts the children it spawned over its life.
	Spawned int
	// Policy is what it may spawn under; nil: nothing.
	Policy *Policy
}

// Family is every sandbox there is, by name: roots with their configured
// policies, and the live children with their derived ones.
type Family map[string]Member

// Request asks for a child of Parent.
type Request struct {
	Parent string
	// Name is the child's; "" picks <parent>-child-NNNN.
	Name string
	// Image is the child's; "" is the policy's first allowed image.
	Image string
	// CPUs 0 is the policy's per-child maximum.
	CPUs float64
	// Memory ("512M") "" is the policy's per-child maximum.
	Memory string
}

// Decision is an allowed spawn: what to boot, and the child's place.
type Decision struct {
	Name    string
	Image   string
	CPUs    float64
	Memory  Bytes
	Expires time.Time
	// Depth is 1 for a child, 2 for a grandchild.
	Depth int
	// Root is the family's root.
	Root string
	// Policy is what the child may spawn under; nil: nothing.
	Policy *Policy
	// Peers is whom the child's network reaches (PeersFamily, ...).
	Peers string
	// PortForward, Reset and Snapshot say what may be done to the child.
	PortForward, Reset, Snapshot bool
	// Notes say what was lowered to fit the policy.
	Notes []string
}

// epsilon absorbs float rounding in CPU sums.
const epsilon = 1e-9

// Decide says whether req may spawn now, and with what. valid checks a
// name the request gives (nil: any name). Everything the request asks for
// is checked against the parent's policy, and the sums against the root's
// too, so that no family outgrows its root's envelope however its
// children spawn.
func Decide(f Family, req Request, now time.Time, valid func(string) error) (Decision, error) {
	parent, ok := f[req.Parent]
	if !ok {
		return Decision{}, refuse(NotFound, "no sandbox %q to spawn from", req.Parent)
	}
	chain, err := ancestry(f, req.Parent)
	if err != nil {
		return Decision{}, err
	}
	depth := len(chain) // the child's: the parent's ancestors and the parent
	if parent.Policy == nil {
		if depth > 1 {
			return Decision{}, refuse(PermissionDenied, "sandbox %q may not spawn: its parent's policy does not let children spawn", req.Parent)
		}
		return Decision{}, refuse(PermissionDenied, "sandbox %q may not spawn children: no policy names it", req.Parent)
	}
	if depth > MaxDepth {
		return Decision{}, refuse(PermissionDenied, "sandbox %q may not spawn: a family is at most %d deep (root, child, grandchild)", req.Parent, MaxDepth)
	}
	if !parent.Expires.IsZero() && !now.Before(parent.Expires) {
		return Decision{}, refuse(PermissionDenied, "sandbox %q may not spawn: its own life has ended", req.Parent)
	}
	p := *parent.Policy
	d := Decision{Depth: depth, Root: chain[0], Peers: p.ChildNetworkPeers,
		PortForward: p.ChildAllowPortForward, Reset: p.ChildAllowReset, Snapshot: p.ChildAllowSnapshot}

	d.Image = req.Image
	switch {
	case d.Image == "" && len(p.AllowedImages) > 0:
		d.Image = p.AllowedImages[0]
	case !slices.Contains(p.AllowedImages, d.Image):
		return Decision{}, refuse(PermissionDenied, "image %q is not allowed for children of %q (allowed: %v)", req.Image, req.Parent, p.AllowedImages)
	}

	switch c := req.CPUs; {
	case !finite(c) || c < 0 || (c > 0 && c < MinCPUs):
		return Decision{}, refuse(InvalidRequest, "cpus %v: want at least %g (or 0 for the most allowed, %g)", c, MinCPUs, p.ChildMaxCPUs)
	case c == 0:
		d.CPUs = p.ChildMaxCPUs
	case c > p.ChildMaxCPUs:
		d.CPUs = p.ChildMaxCPUs
		d.Notes = append(d.Notes, fmt.Sprintf("cpus lowered from %g to the per-child maximum of %g", c, p.ChildMaxCPUs))
	default:
		d.CPUs = c
	}
	d.Memory = p.ChildMaxMemory
	if req.Memory != "" {
		m, err := ParseBytes(req.Memory)
		if err != nil {
			return Decision{}, refuse(InvalidRequest, "memory: %v", err)
		}
		switch {
		case m < MinMemory:
			return Decision{}, refuse(InvalidRequest, "memory %s is below the minimum of %s", req.Memory, Bytes(MinMemory))
		case m > p.ChildMaxMemory:
			d.Notes = append(d.Notes, fmt.Sprintf("memory lowered from %s to the per-child maximum of %s", req.Memory, p.ChildMaxMemory))
		default:
			d.Memory = m
		}
	}

	if parent.Spawned >= p.MaxTotal {
		return Decision{}, refuse(LimitReached, "sandbox %q has spawned %d children, all its policy allows over its life", req.Parent, parent.Spawned)
	}
	live, cpus, mem := sums(f, func(m Member) bool { return m.Parent == req.Parent })
	if live >= p.MaxConcurrent {
		return Decision{}, refuse(LimitReached, "sandbox %q has %d live children, the most its policy allows at once: destroy one first", req.Parent, live)
	}
	if cpus+d.CPUs > p.TotalChildCPUs+epsilon {
		return Decision{}, refuse(LimitReached, "%g more cpus would take the children of %q to %g, over their budget of %g", d.CPUs, req.Parent, cpus+d.CPUs, p.TotalChildCPUs)
	}
	if mem+d.Memory > p.TotalChildMemory {
		return Decision{}, refuse(LimitReached, "%s more memory would take the children of %q to %s, over their budget of %s", d.Memory, req.Parent, mem+d.Memory, p.TotalChildMemory)
	}
	// The whole family, grandchildren included, stays inside its root's
	// envelope.
	if root := f[d.Root]; root.Policy != nil {
		_, cpus, mem := sums(f, func(m Member) bool { return descends(f, m.Name, d.Root) })
		rp := root.Policy
		if cpus+d.CPUs > rp.TotalChildCPUs+epsilon || mem+d.Memory > rp.TotalChildMemory {
			return Decision{}, refuse(LimitReached, "the family of %q would use %g cpus and %s, over its root's budget of %g cpus and %s",
				d.Root, cpus+d.CPUs, mem+d.Memory, rp.TotalChildCPUs, rp.TotalChildMemory)
		}
	}

	if d.Name, err = childName(f, req, parent, valid); err != nil {
		return Decision{}, err
	}
	d.Expires = now.Add(time.Duration(p.ChildTTL))
	if !parent.Expires.IsZero() && parent.Expires.Before(d.Expires) {
		d.Expires = parent.Expires
	}
	if p.ChildCanSpawn && depth < MaxDepth {
		dp := Derive(p, d.Expires.Sub(now))
		d.Policy = &dp
	}
	return d, nil
}

// childName is the request's name, checked, or the next free
// <parent>-child-NNNN.
func childName(f Family, req Request, parent Member, valid func(string) error) (string, error) {
	if req.Name != "" {
		if valid != nil {
			if err := valid(req.Name); err != nil {
				return "", refuse(InvalidRequest, "child name: %v", err)
			}
		}
		// A child's name starts with its parent's, and a taken name is
		// refused: a sandbox cannot take over one of the user's. It can
		// take a name the user has not used yet under its own prefix
		// (default-web); status and list_all show such a sandbox as its
		// child.
		if !strings.HasPrefix(req.Name, req.Parent+"-") || len(req.Name) == len(req.Parent)+1 {
			return "", refuse(InvalidRequest, "child name %q must start with %q", req.Name, req.Parent+"-")
		}
		if _, taken := f[req.Name]; taken {
			return "", refuse(InvalidRequest, "the name %q is taken by another sandbox", req.Name)
		}
		return req.Name, nil
	}
	for n := parent.Spawned + 1; n <= parent.Spawned+1+len(f); n++ {
		name := fmt.Sprintf("%s-child-%04d", req.Parent, n)
		if valid != nil && valid(name) != nil {
			return "", refuse(InvalidRequest, "sandbox %q has too long a name to name its children after it: give the child a name", req.Parent)
		}
		if _, taken := f[name]; !taken {
			return name, nil
		}
	}
	return "", refuse(InternalError, "no free child name for %q", req.Parent)
}

// ancestry returns the chain from the root down to name.
func ancestry(f Family, name string) ([]string, error) {
	chain := []string{name}
	for m := f[name]; m.Parent != ""; m = f[m.Parent] {
		if len(chain) > MaxDepth+1 || slices.Contains(chain, m.Parent) {
			return nil, refuse(InternalError, "the family of %q loops or is deeper than %d", name, MaxDepth)
		}
		if _, ok := f[m.Parent]; !ok {
			return nil, refuse(InternalError, "sandbox %q names a parent %q that is gone", m.Name, m.Parent)
		}
		chain = append(chain, m.Parent)
	}
	slices.Reverse(chain)
	return chain, nil
}

// descends reports whether name is a descendant of root.
func descends(f Family, name, root string) bool {
	for i, m := 0, f[name]; m.Parent != "" && i <= MaxDepth; i, m = i+1, f[m.Parent] {
		if m.Parent == root {
			return true
		}
	}
	return false
}

// sums counts the members for which keep holds, and adds up their CPUs
// and memory.
func sums(f Family, keep func(Member) bool) (n int, cpus float64, mem Bytes) {
	for _, m := range f {
		if keep(m) {
			n++
			cpus += m.CPUs
			mem += m.Memory
		}
	}
	return n, cpus, mem
}
