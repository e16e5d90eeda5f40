// Package version says which build of sandbox-mcp is running.
package version

import (
	"runtime/debug"
	"strings"
)

// Set is set at build time with -ldflags "-X .../internal/version.Set=v1.2.3";
// when empty, the version comes from the build information Go records.
var Set string

// String is the version: the one set at build time, else the module
// version (`go install …@v1.2.3`), else the VCS revision of a checkout
// build ("dev-<12 hex digits>", "-dirty" with uncommitted changes), else
// "dev".
func String() string {
	if Set != "" {
		return Set
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" && !strings.Contains(v, "+dirty") {
		return v
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		return "dev"
	}
	v := "dev-" + rev[:min(12, len(rev))]
	if dirty {
		v += "-dirty"
	}
	return v
}
