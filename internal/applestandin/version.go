package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is an emulated Apple container CLI release (major.minor.patch).
type Version struct {
	Major, Minor, Patch int
}

// ParseVersion reads "X.Y.Z" (a missing minor or patch counts as 0).
func ParseVersion(s string) (Version, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	parts := strings.Split(s, ".")
	if len(parts) == 0 || len(parts) > 3 || parts[0] == "" {
		return Version{}, fmt.Errorf("invalid version %q", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 {
			return Version{}, fmt.Errorf("invalid version %q", s)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

// MustVersion is ParseVersion for constants; it panics on a malformed string.
func MustVersion(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

// Cmp returns -1, 0 or 1 as v is older than, equal to or newer than o.
func (v Version) Cmp(o Version) int {
	a := [3]int{v.Major, v.Minor, v.Patch}
	b := [3]int{o.Major, o.Minor, o.Patch}
	for i := range a {
		switch {
		case a[i] < b[i]:
			return -1
		case a[i] > b[i]:
			return 1
		}
	}
	return 0
}

// Before reports whether v is older than s ("X.Y.Z").
func (v Version) Before(s string) bool { return v.Cmp(MustVersion(s)) < 0 }

// AtLeast reports whether v is s or newer.
func (v Version) AtLeast(s string) bool { return !v.Before(s) }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Behaviour switches derived from the version, named after what they change.

// codeErrors: before 0.10.0 errors print as `code: "message"`.
func (v Version) codeErrors() bool { return v.Before("0.10.0") }

// oneX: the 1.x JSON shapes (sorted keys, ISO-8601 dates, nested status).
func (v Version) oneX() bool { return v.AtLeast("1.0.0") }

// escapeSlashes: Swift's JSONEncoder escaped "/" as "\/" until (at least) 1.2.x;
// the 1.4.1 and 1.5.0 captures no longer do. 0.x output escaped too (samples §1.10).
// reconstructed: the exact release that stopped escaping is unknown (1.3.x); 1.4.0 is used.
func (v Version) escapeSlashes() bool { return v.Before("1.4.0") }

// nestedStatus: `system status --format json` switched to the nested shape in 1.4.x.
func (v Version) nestedStatus() bool { return v.AtLeast("1.4.0") }
