package sandbox

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
)

// Profile is how a sandbox is booted: its image and resources.
type Profile struct {
	Image          string  `json:"image,omitempty"`
	CPUs           float64 `json:"cpus,omitempty"`
	Memory         string  `json:"memory,omitempty"` // e.g. "512M", "2G"
	Virtualization bool    `json:"virtualization,omitempty"`
	// Network is the egress mode: "open" (the engine's network, a route
	// out), "allowlist" (no route out; the host's proxy connects to what
	// Allow and Presets allow) or "none" (loopback only). "" leaves it to
	// the defaults, and is "open" where nothing sets it.
	Network string `json:"network,omitempty"`
	// Allow are patterns an allowlist sandbox may connect to (see
	// egress.ParseRule); Presets name lists of them (egress.Presets). Set
	// (even empty), each replaces the list it merges over.
	Allow   []string `json:"allow,omitempty"`
	Presets []string `json:"presets,omitempty"`
	// Intercept names the HTTPS hosts whose connections the proxy may
	// open (under the host's CA, which allowlist sandboxes trust) to put
	// secrets set with env's hosts into their requests.
	Intercept []string `json:"intercept,omitempty"`
	// IdleTTL stops the sandbox after this long without commands, even with
	// no server running ("30m", "2h"; "off" never). Unset: 30 minutes, except
	// for the sandbox named default, which only a profile of its own reaps.
	IdleTTL string `json:"idle_ttl,omitempty"`
	// Disk bounds what the sandbox may write, /workspace and its root
	// filesystem each ("512M", "20G"); "" leaves it unbounded. How it is
	// enforced depends on the engine and host (see DiskLimits).
	Disk string `json:"disk,omitempty"`
	// Pids bounds how many processes and threads the sandbox may run at
	// once; 0 leaves it to the engine.
	Pids int `json:"pids,omitempty"`
	// Spares is how many warm spares of this profile the server keeps
	// booted for its name while the name has no sandbox: 0 or 1 (a
	// named profile serves one name). The defaults' count is the
	// server's --spares, not this key.
	Spares int `json:"spares,omitempty"`
}

// Defaults of the disk and pids limits.
const (
	DefaultDisk = "20G"
	DefaultPids = 1024
)

// MaxPids is the largest pids limit a profile may ask for.
const MaxPids = 1 << 20

// ParseSize reads a disk size such as 512M or 20G (K, M, G, T suffixes are
// powers of 1024; no suffix is bytes) and returns it in bytes.
func ParseSize(s string) (int64, error) {
	if !sizeRE.MatchString(s) {
		return 0, fmt.Errorf("profile: disk %q must look like 512M or 20G", s)
	}
	num, unit := s, byte(0)
	if c := s[len(s)-1]; c < '0' || c > '9' {
		num, unit = s[:len(s)-1], c|0x20
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("profile: disk %q: %w", s, err)
	}
	shift := map[byte]uint{0: 0, 'k': 10, 'm': 20, 'g': 30, 't': 40}[unit]
	if n > (1<<62)>>shift {
		return 0, fmt.Errorf("profile: disk %q is too large", s)
	}
	n <<= shift
	if n < minDisk {
		return 0, fmt.Errorf("profile: disk %q is below the minimum of 64M", s)
	}
	return n, nil
}

// minDisk is the smallest disk a profile may ask for: below it a fresh
// filesystem has little room for anything.
const minDisk = 64 << 20

var sizeRE = regexp.MustCompile(`^[0-9]{1,15}[KMGTkmgt]?$`)

// DefaultIdleTTL is the idle time after which a sandbox stops by default.
const DefaultIdleTTL = 30 * time.Minute

// ParseIdleTTL reads an idle_ttl value: a Go duration of at least one
// second, or "off" / "0" for never.
func ParseIdleTTL(s string) (time.Duration, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "0", "never":
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("profile: idle_ttl %q must be a duration such as 30m or 2h (at least 1s), or off", s)
	}
	return d, nil
}

// Merge returns p with every field set in o taking precedence.
func (p Profile) Merge(o Profile) Profile {
	if o.Image != "" {
		p.Image = o.Image
	}
	if o.CPUs != 0 {
		p.CPUs = o.CPUs
	}
	if o.Memory != "" {
		p.Memory = o.Memory
	}
	if o.Virtualization {
		p.Virtualization = true
	}
	if o.Network != "" {
		p.Network = o.Network
	}
	if o.Allow != nil {
		p.Allow = o.Allow
	}
	if o.Presets != nil {
		p.Presets = o.Presets
	}
	if o.Intercept != nil {
		p.Intercept = o.Intercept
	}
	if o.IdleTTL != "" {
		p.IdleTTL = o.IdleTTL
	}
	if o.Disk != "" {
		p.Disk = o.Disk
	}
	if o.Pids != 0 {
		p.Pids = o.Pids
	}
	if o.Spares != 0 {
		p.Spares = o.Spares
	}
	return p
}

var memoryRE = regexp.MustCompile(`^[0-9]+[KMGkmg]?$`)

// Validate checks the profile's values before they reach a CLI.
func (p Profile) Validate() error {
	if p.Image == "" {
		return fmt.Errorf("profile: no image")
	}
	if strings.HasPrefix(p.Image, "-") || strings.ContainsAny(p.Image, " \t\n\x00") {
		return fmt.Errorf("profile: invalid image reference %q", p.Image)
	}
	if p.CPUs < 0 || p.CPUs > 256 {
		return fmt.Errorf("profile: cpus %v out of range", p.CPUs)
	}
	if p.Memory != "" && !memoryRE.MatchString(p.Memory) {
		return fmt.Errorf("profile: memory %q must look like 512M or 2G", p.Memory)
	}
	if p.Network != "" && !egress.ValidMode(p.Network) {
		return fmt.Errorf("profile: network must be open, allowlist or none, not %q", p.Network)
	}
	if _, err := egress.NewPolicy(egress.ModeAllowlist, p.Presets, p.Allow); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if len(p.Intercept) > 0 {
		if _, err := egress.ParseSecretHosts(p.Intercept); err != nil {
			return fmt.Errorf("profile: intercept: %w", err)
		}
	}
	if p.IdleTTL != "" {
		if _, err := ParseIdleTTL(p.IdleTTL); err != nil {
			return err
		}
	}
	if p.Disk != "" {
		if _, err := ParseSize(p.Disk); err != nil {
			return err
		}
	}
	if p.Pids < 0 || p.Pids > MaxPids {
		return fmt.Errorf("profile: pids %d must be between 1 and %d", p.Pids, MaxPids)
	}
	if p.Spares < 0 || p.Spares > 1 {
		return fmt.Errorf("profile: spares %d must be 0 or 1 (a profile serves the one sandbox of its name)", p.Spares)
	}
	return nil
}

// EgressMode is the profile's egress mode ("" is open).
func (p Profile) EgressMode() string {
	if p.Network == "" {
		return egress.ModeOpen
	}
	return p.Network
}

// EgressPolicy is the profile's network policy.
func (p Profile) EgressPolicy() (egress.Policy, error) {
	return egress.NewPolicy(p.EgressMode(), p.Presets, p.Allow)
}

// ParseProfileSpec parses "key=value,key=value" (keys image, cpus, memory,
// virtualization, network, allow, presets, intercept, idle_ttl, disk, pids, spares) into a
// profile, as used by --profile NAME:SPEC. allow may be repeated, each
// adding a pattern; presets takes names joined by '+' ("packages+git"), or
// none.
func ParseProfileSpec(spec string) (Profile, error) {
	var p Profile
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return p, fmt.Errorf("profile: %q is not key=value", kv)
		}
		switch k {
		case "image":
			p.Image = v
		case "cpus":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return p, fmt.Errorf("profile: cpus %q: %w", v, err)
			}
			p.CPUs = f
		case "memory":
			p.Memory = v
		case "virtualization":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return p, fmt.Errorf("profile: virtualization %q: %w", v, err)
			}
			p.Virtualization = b
		case "network":
			if !egress.ValidMode(v) {
				return p, fmt.Errorf("profile: network %q: want open, allowlist or none", v)
			}
			p.Network = v
		case "allow":
			if _, err := egress.ParseRule(v); err != nil {
				return p, fmt.Errorf("profile: %w", err)
			}
			p.Allow = append(p.Allow, v)
		case "intercept":
			if _, err := egress.ParseSecretHosts([]string{v}); err != nil {
				return p, fmt.Errorf("profile: intercept: %w", err)
			}
			p.Intercept = append(p.Intercept, v)
		case "presets":
			p.Presets = []string{}
			if v != "none" && v != "" {
				p.Presets = strings.Split(v, "+")
			}
			if _, err := egress.NewPolicy(egress.ModeAllowlist, p.Presets, nil); err != nil {
				return p, fmt.Errorf("profile: %w", err)
			}
		case "idle_ttl":
			if _, err := ParseIdleTTL(v); err != nil {
				return p, err
			}
			p.IdleTTL = v
		case "disk":
			if _, err := ParseSize(v); err != nil {
				return p, err
			}
			p.Disk = v
		case "pids":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxPids {
				return p, fmt.Errorf("profile: pids %q must be a number between 1 and %d", v, MaxPids)
			}
			p.Pids = n
		case "spares":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1 {
				return p, fmt.Errorf("profile: spares %q must be 0 or 1 (a profile serves the one sandbox of its name)", v)
			}
			if n == 0 {
				// Merged key by key, 0 would leave a file's 1 as it is.
				return p, fmt.Errorf("profile: spares=0 is what a profile has without the key; a file's spares: 1 is turned off in the file")
			}
			p.Spares = n
		default:
			return p, fmt.Errorf("profile: unknown key %q (want image, cpus, memory, virtualization, network, allow, presets, intercept, idle_ttl, disk, pids, spares)", k)
		}
	}
	return p, nil
}
