package apple

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Version is a container CLI release, e.g. 1.2.1.
type Version struct {
	Major, Minor, Patch int
}

// String formats v as MAJOR.MINOR.PATCH.
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v is o or newer.
func (v Version) AtLeast(o Version) bool {
	if v.Major != o.Major {
		return v.Major > o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor > o.Minor
	}
	return v.Patch >= o.Patch
}

// IsZero reports whether v is unknown.
func (v Version) IsZero() bool { return v == Version{} }

// Releases that changed what the dialect may use.
var (
	// MinVersion is the oldest CLI this dialect drives. 0.7.x hung on exec
	// stdin larger than a pipe buffer (64 KiB), which the persistent shell
	// and file writes send routinely; 0.8.0 also settled the ipv4Address
	// JSON the parsers expect first.
	MinVersion = Version{0, 8, 0}
	// v0_9 added `image delete --force` (ignore images not found).
	v0_9 = Version{0, 9, 0}
	// v0_10 added `run --init`, `system status --format json` and the
	// `Error: <message>` error form.
	v0_10 = Version{0, 10, 0}
	// v0_11 made `container export` write a tar of the root filesystem.
	v0_11 = Version{0, 11, 0}
	// v1_0 added `container cp` and errors on `inspect` of a missing id.
	v1_0 = Version{1, 0, 0}
	// v1_1 made host unix sockets mounted with -v usable in the guest.
	v1_1 = Version{1, 1, 0}
	// v1_2_1 allowed `container export` of a running container.
	v1_2_1 = Version{1, 2, 1}
)

var versionRE = regexp.MustCompile(`(\d+)\.(\d+)(?:\.(\d+))?`)

// ParseVersion reads the version from `container --version` output such as
// "container CLI version 1.2.0 (build: release, commit: 6e65319)" or a bare
// "0.10.0-27-g9fd15f0".
func ParseVersion(s string) (Version, error) {
	const marker = "version "
	rest := s
	if i := strings.Index(s, marker); i >= 0 {
		rest = s[i+len(marker):]
	}
	m := versionRE.FindStringSubmatch(rest)
	if m == nil {
		return Version{}, fmt.Errorf("no version number in %q", s)
	}
	var v Version
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	if m[3] != "" {
		v.Patch, _ = strconv.Atoi(m[3])
	}
	return v, nil
}

// Features are what the detected CLI version allows.
type Features struct {
	Version Version
	// Init: `run --init` (0.10.0).
	Init bool
	// StatusJSON: `system status --format json` (0.10.0).
	StatusJSON bool
	// Copy: `container cp` (1.0.0).
	Copy bool
	// SocketMounts: a host unix socket mounted with -v works in the guest (1.1.0).
	SocketMounts bool
	// TarExport: `container export` writes a tar of the rootfs (0.11.0).
	TarExport bool
	// LiveExport: `container export` of a running container (1.2.1).
	LiveExport bool
	// ImageDeleteForce: `image delete --force` ignores images not found
	// (Image/ImageDelete.swift, 0.9.0).
	ImageDeleteForce bool
	// HostCPUs is the number of CPUs of the host the CLI runs on, 0 when
	// unknown. A VM cannot have more: before 0.12.0 a `run -c` above it
	// fails to boot (Virtualization.framework refuses the configuration),
	// from 0.12.0 the VM gets the host's count and the container's
	// configuration still shows the count asked for.
	HostCPUs int
}

// FeaturesOf returns the features of version v.
func FeaturesOf(v Version) Features {
	return Features{
		Version:      v,
		Init:         v.AtLeast(v0_10),
		StatusJSON:   v.AtLeast(v0_10),
		Copy:         v.AtLeast(v1_0),
		SocketMounts: v.AtLeast(v1_1),
		TarExport:    v.AtLeast(v0_11),
		LiveExport:   v.AtLeast(v1_2_1),

		ImageDeleteForce: v.AtLeast(v0_9),
	}
}
