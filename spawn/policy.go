// Package spawn decides whether a sandbox may start a child sandbox, and
// with what: the policies that bound a family of sandboxes (who may spawn,
// how many, how much CPU and memory, which images, for how long, how deep)
// and the arithmetic that keeps every family inside its root's envelope.
//
// It is pure: it decides from a snapshot of the family (Family) and the
// time, and the caller does the spawning and keeps the records.
package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
)

// Peers say whom a child's network reaches.
const (
	PeersFamily = "family" // its parent and siblings
	PeersNone   = "none"   // no one
	PeersAll    = "all"    // every sandbox
)

// MaxDepth is the deepest a family goes: root, child, grandchild.
const MaxDepth = 2

// MinCPUs is the least CPU a child may ask for: engines turn a quota that
// rounds to nothing into no limit at all.
const MinCPUs = 0.01

// MinMemory is the least memory a child may have; MinDerivedMemory the
// least a derived (halved) memory budget falls to.
const (
	MinMemory        = 64 << 20
	MinDerivedMemory = 128 << 20
)

// Policy bounds what one sandbox may spawn.
type Policy struct {
	// MaxConcurrent is how many children may live at once; MaxTotal how
	// many may be spawned over the sandbox's life.
	MaxConcurrent int `json:"max_concurrent"`
	MaxTotal      int `json:"max_total"`
	// TotalChildCPUs and TotalChildMemory bound the sums over the live
	// children; ChildMaxCPUs and ChildMaxMemory each child.
	TotalChildCPUs   float64 `json:"total_child_cpus"`
	TotalChildMemory Bytes   `json:"total_child_memory"`
	ChildMaxCPUs     float64 `json:"child_max_cpus"`
	ChildMaxMemory   Bytes   `json:"child_max_memory"`
	// AllowedImages are the images a child may run; the first is the
	// default.
	AllowedImages []string `json:"allowed_images"`
	// ChildTTL is how long a child lives.
	ChildTTL Duration `json:"child_ttl"`
	// ChildCanSpawn lets children spawn grandchildren (under a derived
	// policy, see Derive).
	ChildCanSpawn bool `json:"child_can_spawn"`
	// ChildNetworkPeers is whom a child reaches: family, none or all.
	ChildNetworkPeers string `json:"child_network_peers"`
	// ChildAllowPortForward lets a child's ports be exposed.
	ChildAllowPortForward bool `json:"child_allow_port_forward"`
	// ChildAllowReset and ChildAllowSnapshot let a child be reset, and
	// snapshotted or cloned.
	ChildAllowReset    bool `json:"child_allow_reset"`
	ChildAllowSnapshot bool `json:"child_allow_snapshot"`
	// InjectCtl gives the sandbox the control socket and sandbox-ctl.
	InjectCtl bool `json:"inject_ctl"`
}

// DefaultPolicy is the policy of the sandbox "default" unless configured.
func DefaultPolicy() Policy {
	return Policy{
		MaxConcurrent: 3, MaxTotal: 10,
		TotalChildCPUs: 6, TotalChildMemory: 1536 << 20,
		ChildMaxCPUs: 2, ChildMaxMemory: 512 << 20,
		AllowedImages:     []string{"mcp-dev"},
		ChildTTL:          Duration(300 * time.Second),
		ChildNetworkPeers: PeersFamily,
		InjectCtl:         true,
	}
}

// Validate reports a policy that cannot work.
func (p Policy) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if p.MaxConcurrent < 1 || p.MaxTotal < 1 {
		bad("max_concurrent and max_total must be at least 1")
	}
	if p.MaxConcurrent > p.MaxTotal {
		bad("max_concurrent (%d) must not exceed max_total (%d)", p.MaxConcurrent, p.MaxTotal)
	}
	if !finite(p.ChildMaxCPUs) || !finite(p.TotalChildCPUs) || p.ChildMaxCPUs < MinCPUs || p.TotalChildCPUs < p.ChildMaxCPUs {
		bad("child_max_cpus must be at least %g and at most total_child_cpus", MinCPUs)
	}
	if p.ChildMaxMemory < MinMemory || p.TotalChildMemory < p.ChildMaxMemory {
		bad("child_max_memory must be at least 64M and at most total_child_memory")
	}
	if len(p.AllowedImages) == 0 {
		bad("allowed_images must name at least one image")
	}
	for _, img := range p.AllowedImages {
		if img == "" || strings.HasPrefix(img, "-") || strings.ContainsAny(img, " \t\n") {
			bad("allowed_images: %q is not an image reference", img)
		}
	}
	if p.ChildTTL < Duration(time.Second) {
		bad("child_ttl must be at least 1s")
	}
	switch p.ChildNetworkPeers {
	case PeersFamily, PeersNone, PeersAll:
	default:
		bad("child_network_peers must be family, none or all, not %q", p.ChildNetworkPeers)
	}
	return errors.Join(errs...)
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Derive is the policy a child spawns under when its parent's policy p
// lets it spawn: counts and budgets halved (at least 1 and 128M), children
// that live no longer than the child itself has left (left), and nothing
// further below it: its children may not spawn, be exposed, reset or
// snapshotted. The child itself has the control socket (it needs it to
// spawn).
func Derive(p Policy, left time.Duration) Policy {
	d := p
	d.MaxConcurrent = max(p.MaxConcurrent/2, 1)
	d.MaxTotal = max(p.MaxTotal/2, 1)
	d.TotalChildCPUs = math.Max(p.TotalChildCPUs/2, 1)
	d.ChildMaxCPUs = math.Min(math.Max(p.ChildMaxCPUs/2, 1), d.TotalChildCPUs)
	d.TotalChildMemory = max(p.TotalChildMemory/2, MinDerivedMemory)
	d.ChildMaxMemory = min(max(p.ChildMaxMemory/2, MinDerivedMemory), d.TotalChildMemory)
	d.AllowedImages = append([]string(nil), p.AllowedImages...)
	d.ChildTTL = min(p.ChildTTL, Duration(max(left, 0)))
	d.ChildCanSpawn, d.ChildAllowPortForward, d.ChildAllowReset, d.ChildAllowSnapshot, d.InjectCtl = false, false, false, false, true
	return d
}

// Bytes is a size in bytes; in JSON a number of bytes or a string such as
// "512M" (K, M, G, T are powers of 1024).
type Bytes int64

// ParseBytes reads "512M", "2G", "512MB", "1GiB", "1048576": a size as
// units.ParseSize reads it.
func ParseBytes(s string) (Bytes, error) {
	n, err := units.ParseSize(s)
	return Bytes(n), err
}

// String writes the size as ParseBytes reads it, in the largest unit
// that divides it.
func (b Bytes) String() string { return units.FormatSize(int64(b)) }

// MarshalJSON writes the size as a string ("512M").
func (b Bytes) MarshalJSON() ([]byte, error) { return json.Marshal(b.String()) }

// UnmarshalJSON reads a number of bytes or a size string.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	var n json.Number
	if err := json.Unmarshal(data, &n); err == nil {
		v, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("size %s: want a whole number of bytes or a string such as \"512M\"", data)
		}
		*b = Bytes(v)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("size %s: want a number of bytes or a string such as \"512M\"", data)
	}
	v, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Duration is a time.Duration; in JSON a number of seconds or a Go
// duration string ("300s", "5m").
type Duration time.Duration

// MarshalJSON writes the duration as a string ("5m0s").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads seconds or a duration string.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var secs float64
	if err := json.Unmarshal(data, &secs); err == nil {
		if !finite(secs) || secs < 0 || secs > math.MaxInt64/float64(time.Second) {
			return fmt.Errorf("duration %s: out of range", data)
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("duration %s: want seconds or a string such as \"5m\"", data)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("duration %q: want a string such as \"300s\" or \"5m\"", s)
	}
	*d = Duration(v)
	return nil
}
