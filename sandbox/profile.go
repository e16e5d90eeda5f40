package sandbox

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Profile is how a sandbox is booted: its image and resources.
type Profile struct {
	Image          string  `json:"image,omitempty"`
	CPUs           float64 `json:"cpus,omitempty"`
	Memory         string  `json:"memory,omitempty"` // e.g. "512M", "2G"
	Virtualization bool    `json:"virtualization,omitempty"`
	// Network is "" for the engine's default network or "none".
	Network string `json:"network,omitempty"`
	// IdleTTL stops the sandbox after this long without commands, even with
	// no server running ("30m", "2h"; "off" never). Unset: 30 minutes, except
	// for the sandbox named default, which only a profile of its own reaps.
	IdleTTL string `json:"idle_ttl,omitempty"`
}

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
	if o.IdleTTL != "" {
		p.IdleTTL = o.IdleTTL
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
	if p.Network != "" && p.Network != "none" {
		return fmt.Errorf("profile: network must be empty or \"none\", not %q", p.Network)
	}
	if p.IdleTTL != "" {
		if _, err := ParseIdleTTL(p.IdleTTL); err != nil {
			return err
		}
	}
	return nil
}

// ParseProfileSpec parses "key=value,key=value" (keys image, cpus, memory,
// virtualization, network, idle_ttl) into a profile, as used by --profile NAME:SPEC.
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
			p.Network = v
		case "idle_ttl":
			if _, err := ParseIdleTTL(v); err != nil {
				return p, err
			}
			p.IdleTTL = v
		default:
			return p, fmt.Errorf("profile: unknown key %q (want image, cpus, memory, virtualization, network, idle_ttl)", k)
		}
	}
	return p, nil
}
