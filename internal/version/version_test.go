package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}
	dirty := append(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	for _, tc := range []struct {
		main     string
		settings []debug.BuildSetting
		want     string
	}{
		{"v1.4.0", nil, "v1.4.0"}, // go install …@v1.4.0
		{"v0.0.0-20261123150000-0123456789ab", rev, "v0.0.0-20261123150000-0123456789ab"}, // a pseudo-version
		{"(devel)", rev, "dev-0123456789ab"},                                              // a checkout build
		{"v1.4.1-0.20261123150000-0123456789ab+dirty", dirty, "dev-0123456789ab-dirty"},
		{"(devel)", nil, "dev"},
		{"", nil, "dev"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Version: tc.main}, Settings: tc.settings}
		if got := fromBuildInfo(bi); got != tc.want {
			t.Errorf("%q %v: %q, want %q", tc.main, tc.settings, got, tc.want)
		}
	}
	if String() == "" {
		t.Error("empty version")
	}
}
