package apple

import (
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestBuilds: what the argv builders make for a version is what Builds
// says the dialect may build for it, and not for versions whose choices
// differ.
func TestBuilds(t *testing.T) {
	v := func(s string) Version { x, _ := ParseVersion(s); return x }
	old, mid, newest := FeaturesOf(v("0.8.0")), FeaturesOf(v("0.10.0")), FeaturesOf(v("1.2.2"))
	spec := sandbox.RunSpec{Name: "web1", Image: "img", Init: true}
	for _, f := range []Features{old, mid, newest} {
		args, err := RunArgs(f, spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range []Features{old, mid, newest} {
			if want := !f.Init || g.Init; Builds(g, args) != want {
				t.Errorf("%s run %q on %s: want %v", f.Version, args, g.Version, want)
			}
		}
	}
	for _, c := range []struct {
		argv []string
		ok   []Features
		not  []Features
	}{
		{[]string{"system", "status", "--format", "json"}, []Features{mid, newest}, []Features{old}},
		{[]string{"system", "status"}, []Features{old}, []Features{mid, newest}},
		{[]string{"image", "delete", "--force", "img"}, []Features{mid, newest}, []Features{old}},
		{[]string{"image", "delete", "img"}, []Features{old}, []Features{mid}},
		{[]string{"cp", "a", "web1:/b"}, []Features{newest}, []Features{old, mid}},
		{[]string{"export", "-o", "f", "web1"}, []Features{newest, FeaturesOf(v("0.11.0"))}, []Features{old, mid}},
		{[]string{"system", "property", "list", "--format", "json"}, []Features{newest}, []Features{old, mid}},
		{[]string{"system", "property", "get", "registry.domain"}, []Features{old, mid}, []Features{newest}},
		{[]string{"stop", "-t", "5", "web1"}, []Features{old, mid, newest}, nil},
		{ExecArgs("web1", sandbox.ExecSpec{Argv: []string{"true"}}), []Features{old, mid, newest}, nil},
	} {
		for _, f := range c.ok {
			if !Builds(f, c.argv) {
				t.Errorf("%q on %s: want built", c.argv, f.Version)
			}
		}
		for _, f := range c.not {
			if Builds(f, c.argv) {
				t.Errorf("%q on %s: want not built", c.argv, f.Version)
			}
		}
	}
}
