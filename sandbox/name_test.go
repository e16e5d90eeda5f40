package sandbox

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	good := []string{"default", "a", "web-1", "My_box.2", strings.Repeat("x", 63), "0lead"}
	bad := []string{"", "../x", "--rm", "-x", ".hidden", "_x", "a b", "a/b", "héllo", "ünï", strings.Repeat("x", 64), "a\x00b", "a\nb", "x;rm"}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("%q rejected: %v", n, err)
		}
	}
	for _, n := range bad {
		if err := ValidateName(n); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q accepted (err %v)", n, err)
		}
	}
}

func TestContainerName(t *testing.T) {
	if got := ContainerName("sandbox-mcp", "default"); got != "sandbox-mcp-default" {
		t.Fatalf("got %q", got)
	}
	long := strings.Repeat("n", 63)
	a, b := ContainerName("sandbox-mcp", long), ContainerName("sandbox-mcp", long[:62]+"m")
	if len(a) > MaxNameLen || a == b || ValidateName(a) != nil {
		t.Fatalf("long names: %q %q", a, b)
	}
	if a != ContainerName("sandbox-mcp", long) {
		t.Fatal("not deterministic")
	}
}

func TestParseProfileSpec(t *testing.T) {
	p, err := ParseProfileSpec("image=alpine,cpus=1.5,memory=2G,virtualization=true,network=none")
	if err != nil || !reflect.DeepEqual(p, Profile{Image: "alpine", CPUs: 1.5, Memory: "2G", Virtualization: true, Network: "none"}) {
		t.Fatalf("%+v %v", p, err)
	}
	p, err = ParseProfileSpec("network=allowlist,presets=packages+git,allow=*.example.com,allow=10.0.0.0/8:5432")
	if err != nil || !reflect.DeepEqual(p, Profile{Network: "allowlist", Presets: []string{"packages", "git"}, Allow: []string{"*.example.com", "10.0.0.0/8:5432"}}) {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err := ParseProfileSpec("presets=none"); err != nil || p.Presets == nil || len(p.Presets) != 0 {
		t.Fatalf("presets=none: %#v %v", p.Presets, err)
	}
	merged := Profile{Image: "a", Network: "allowlist", Presets: []string{"packages", "git"}}.Merge(Profile{Presets: []string{}, Allow: []string{"x.test"}})
	if len(merged.Presets) != 0 || len(merged.Allow) != 1 || merged.Network != "allowlist" {
		t.Fatalf("merge: %+v", merged)
	}
	for _, bad := range []string{"cpus=x", "bogus=1", "image", "network=wide", "allow=a b", "presets=everything", "allow=host:0"} {
		if _, err := ParseProfileSpec(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, bad := range []Profile{{}, {Image: "--privileged"}, {Image: "a", Memory: "lots"}, {Image: "a", Network: "host"}, {Image: "a", Allow: []string{"*."}}, {Image: "a", Presets: []string{"nope"}}} {
		if bad.Validate() == nil {
			t.Errorf("%+v valid", bad)
		}
	}
}
