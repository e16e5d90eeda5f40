package applecli

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a release of Apple's container CLI (major.minor.patch).
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

// CodeErrors reports whether the release prints a thrown
// ContainerizationError as `code: "message"`: before 0.10.0, whose
// containerization (< 0.26) did not make it a LocalizedError.
func (v Version) CodeErrors() bool { return v.Before("0.10.0") }

// Releases are the release lines the tables cover, oldest first: one
// version per line whose argument grammar differs from its neighbours'
// or that samples were captured on. 0.12.0–0.12.3 declare the same
// arguments (0.12.3 stands for them); 1.3.1, 1.4.1 and 1.5.0 are not in
// the source snapshot (newest tag 1.2.2): they get the 1.2.2 rows, and
// what their captured samples show is checked against those (Samples).
var Releases = []Version{
	{0, 8, 0}, {0, 9, 0}, {0, 10, 0}, {0, 11, 0}, {0, 12, 3},
	{1, 0, 0}, {1, 1, 0}, {1, 2, 0}, {1, 2, 1}, {1, 2, 2},
	{1, 3, 1}, {1, 4, 1}, {1, 5, 0},
}

// Oldest is the oldest release the tables describe.
var Oldest = Version{0, 8, 0}

// NewestSource is the newest tag in the source the rows were read from;
// newer releases are described by its rows and by samples.
var NewestSource = Version{1, 2, 2}

// sourceTags are the tags of apple/container from 0.8.0 on.
var sourceTags = []Version{
	{0, 8, 0}, {0, 9, 0}, {0, 10, 0}, {0, 11, 0}, {0, 12, 0}, {0, 12, 1}, {0, 12, 2}, {0, 12, 3},
	{1, 0, 0}, {1, 1, 0}, {1, 2, 0}, {1, 2, 1}, {1, 2, 2},
}

// SourceTag is the tag of apple/container whose source describes v: the
// newest tag not newer than v, and "1.2.2+samples" past the source.
func SourceTag(v Version) string {
	if v.Cmp(NewestSource) > 0 {
		return NewestSource.String() + "+samples"
	}
	tag := sourceTags[0]
	for _, t := range sourceTags {
		if t.Cmp(v) <= 0 {
			tag = t
		}
	}
	return tag.String()
}
