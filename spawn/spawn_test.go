package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func policy(edit func(*Policy)) *Policy {
	p := DefaultPolicy()
	if edit != nil {
		edit(&p)
	}
	return &p
}

// family is a root "default" with the default policy, an unlisted root
// "other", and children given as name:parent:cpus:memory.
func family(children ...string) Family {
	f := Family{"default": {Name: "default", Policy: policy(nil)}, "other": {Name: "other"}}
	for _, c := range children {
		var name, parent string
		var cpus float64
		var mem string
		parts := strings.Split(c, ":")
		name, parent = parts[0], parts[1]
		fmt.Sscan(parts[2], &cpus)
		mem = parts[3]
		b, _ := ParseBytes(mem)
		f[name] = Member{Name: name, Parent: parent, CPUs: cpus, Memory: b, Expires: t0.Add(time.Minute)}
		p := f[parent]
		p.Spawned++
		f[parent] = p
	}
	return f
}

func codeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestDecide(t *testing.T) {
	validName := func(s string) error {
		if s == "" || len(s) > 63 || strings.ContainsAny(s, "/ ") {
			return errors.New("bad name")
		}
		return nil
	}
	for _, tc := range []struct {
		name string
		f    Family
		req  Request
		want Code // "" for allowed
		// checks on an allowed decision
		check func(t *testing.T, d Decision)
	}{
		{name: "defaults", f: family(), req: Request{Parent: "default"}, check: func(t *testing.T, d Decision) {
			if d.Name != "default-child-0001" || d.Image != "mcp-dev" || d.CPUs != 2 || d.Memory != 512<<20 ||
				!d.Expires.Equal(t0.Add(300*time.Second)) || d.Depth != 1 || d.Root != "default" || d.Peers != PeersFamily || d.Policy != nil {
				t.Errorf("%+v", d)
			}
		}},
		{name: "asked for less", f: family(), req: Request{Parent: "default", Name: "default-w1", CPUs: 0.5, Memory: "128M"}, check: func(t *testing.T, d Decision) {
			if d.Name != "default-w1" || d.CPUs != 0.5 || d.Memory != 128<<20 || len(d.Notes) != 0 {
				t.Errorf("%+v", d)
			}
		}},
		{name: "huge is lowered and said", f: family(), req: Request{Parent: "default", CPUs: 1e9, Memory: "1T"}, check: func(t *testing.T, d Decision) {
			if d.CPUs != 2 || d.Memory != 512<<20 || len(d.Notes) != 2 {
				t.Errorf("%+v", d)
			}
		}},
		{name: "next free default name", f: family("default-child-0001:default:1:64M"), req: Request{Parent: "default"}, check: func(t *testing.T, d Decision) {
			if d.Name != "default-child-0002" {
				t.Errorf("%+v", d)
			}
		}},
		{name: "unknown parent", f: family(), req: Request{Parent: "nosuch"}, want: NotFound},
		{name: "unlisted parent", f: family(), req: Request{Parent: "other"}, want: PermissionDenied},
		{name: "image outside the list", f: family(), req: Request{Parent: "default", Image: "alpine"}, want: PermissionDenied},
		{name: "negative cpus", f: family(), req: Request{Parent: "default", CPUs: -1}, want: InvalidRequest},
		{name: "NaN cpus", f: family(), req: Request{Parent: "default", CPUs: math.NaN()}, want: InvalidRequest},
		{name: "infinite cpus", f: family(), req: Request{Parent: "default", CPUs: math.Inf(1)}, want: InvalidRequest},
		{name: "memory below 64M", f: family(), req: Request{Parent: "default", Memory: "63M"}, want: InvalidRequest},
		{name: "memory unparsable", f: family(), req: Request{Parent: "default", Memory: "lots"}, want: InvalidRequest},
		{name: "memory negative", f: family(), req: Request{Parent: "default", Memory: "-5M"}, want: InvalidRequest},
		{name: "a sibling's name", f: family("default-a:default:1:64M"), req: Request{Parent: "default", Name: "default-a"}, want: InvalidRequest},
		{name: "a name outside the parent's", f: family(), req: Request{Parent: "default", Name: "web"}, want: InvalidRequest},
		{name: "the bare prefix", f: family(), req: Request{Parent: "default", Name: "default-"}, want: InvalidRequest},
		{name: "tiny cpus", f: family(), req: Request{Parent: "default", CPUs: 1e-9}, want: InvalidRequest},
		{name: "its parent's name", f: family(), req: Request{Parent: "default", Name: "default"}, want: InvalidRequest},
		{name: "a bad name", f: family(), req: Request{Parent: "default", Name: "../x"}, want: InvalidRequest},
		{name: "three live already", f: family("a:default:0.5:64M", "b:default:0.5:64M", "c:default:0.5:64M"), req: Request{Parent: "default", CPUs: 0.5, Memory: "64M"}, want: LimitReached},
		{name: "cpu budget", f: family("a:default:2:64M", "b:default:2:64M"), req: Request{Parent: "default", CPUs: 2.5}, check: func(t *testing.T, d Decision) {
			if d.CPUs != 2 {
				t.Errorf("%+v", d)
			}
		}},
		{name: "cpu budget spent", f: family("a:default:2:64M", "b:default:2:64M"), req: Request{Parent: "default", CPUs: 2, Memory: "64M"}, check: nil},
		{name: "cpu budget over", f: family("a:default:2:64M", "b:default:2.5:64M"), req: Request{Parent: "default", CPUs: 2}, want: LimitReached},
		{name: "memory with junk", f: family(), req: Request{Parent: "default", Memory: "512M+1"}, want: InvalidRequest},
		{name: "memory budget spent", f: family("a:default:1:512M", "b:default:1:768M"), req: Request{Parent: "default", Memory: "512M"}, want: LimitReached},
		{name: "a grandchild may not spawn", f: withPolicies(family("c:default:1:64M", "g:c:1:64M"), map[string]*Policy{"c": policy(func(p *Policy) { p.ChildCanSpawn = true })}),
			req: Request{Parent: "g"}, want: PermissionDenied},
		{name: "a child without a derived policy", f: family("c:default:1:64M"), req: Request{Parent: "c"}, want: PermissionDenied},
		{name: "a child with a policy of its own", f: withPolicies(family("c:default:1:64M"), map[string]*Policy{"c": policy(func(p *Policy) { p.ChildMaxCPUs = 0.5 })}),
			req: Request{Parent: "c"}, check: func(t *testing.T, d Decision) {
				if d.Depth != 2 || d.Root != "default" || d.CPUs != 0.5 || !d.Expires.Equal(t0.Add(time.Minute)) {
					t.Errorf("%+v", d)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decide(tc.f, tc.req, t0, validName)
			if got := codeOf(err); got != tc.want {
				t.Fatalf("code %q (%v), want %q", got, err, tc.want)
			}
			if err == nil && tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

func withPolicies(f Family, ps map[string]*Policy) Family {
	for n, p := range ps {
		m := f[n]
		m.Policy = p
		f[n] = m
	}
	return f
}

// TestLifetimeCount: max_total counts spawns over the parent's life, not
// the live children.
func TestLifetimeCount(t *testing.T) {
	f := family()
	m := f["default"]
	m.Spawned = 10
	f["default"] = m
	if _, err := Decide(f, Request{Parent: "default"}, t0, nil); codeOf(err) != LimitReached {
		t.Fatalf("the 11th spawn: %v", err)
	}
}

// TestGrandchildren: a child whose parent's policy lets it spawn gets a
// halved policy and a life bounded by its own; its children stay inside
// the root's envelope however they are spread.
func TestGrandchildren(t *testing.T) {
	root := policy(func(p *Policy) { p.ChildCanSpawn = true; p.ChildTTL = Duration(time.Hour) })
	f := Family{"default": {Name: "default", Policy: root}}
	d, err := Decide(f, Request{Parent: "default", Name: "default-c"}, t0, nil)
	if err != nil || d.Policy == nil {
		t.Fatalf("child: %+v %v", d, err)
	}
	dp := d.Policy
	if dp.MaxConcurrent != 1 || dp.MaxTotal != 5 || dp.TotalChildCPUs != 3 || dp.ChildMaxCPUs != 1 || dp.TotalChildMemory != 768<<20 ||
		dp.ChildMaxMemory != 256<<20 || dp.ChildCanSpawn || !dp.InjectCtl || dp.ChildAllowPortForward || time.Duration(dp.ChildTTL) != time.Hour {
		t.Fatalf("derived policy %+v", dp)
	}
	f["default-c"] = Member{Name: "default-c", Parent: "default", CPUs: d.CPUs, Memory: d.Memory, Expires: t0.Add(10 * time.Minute), Policy: dp}
	g, err := Decide(f, Request{Parent: "default-c", Name: "default-c-g"}, t0, nil)
	if err != nil || g.Depth != 2 || g.Root != "default" || g.Policy != nil || !g.Expires.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("grandchild: %+v %v", g, err)
	}
	// The root's budget is 6 cpus: two children of 2 and a grandchild of
	// 1 leave 1; a second child's grandchild of 1 fits, a third does not.
	f["default-c2"] = Member{Name: "default-c2", Parent: "default", CPUs: 2, Memory: 64 << 20, Expires: t0.Add(time.Hour), Policy: dp}
	f["default-c-g"] = Member{Name: "default-c-g", Parent: "default-c", CPUs: 1, Memory: 64 << 20, Expires: g.Expires}
	if _, err := Decide(f, Request{Parent: "default-c2", Name: "default-c2-g2", Memory: "128M"}, t0, nil); err != nil {
		t.Fatalf("g2: %v", err)
	}
	f["default-c2-g2"] = Member{Name: "default-c2-g2", Parent: "default-c2", CPUs: 1, Memory: 128 << 20, Expires: t0.Add(time.Hour)}
	if _, err := Decide(f, Request{Parent: "default-c", Name: "default-c-g3", CPUs: 0.5, Memory: "64M"}, t0, nil); codeOf(err) != LimitReached {
		t.Fatalf("over the root's envelope: %v", err)
	}
	// A child of the root counts the grandchildren too: its children use
	// 4 of the 6 cpus, but the family all 6.
	if _, err := Decide(f, Request{Parent: "default", Name: "default-c3", CPUs: 0.5, Memory: "64M"}, t0, nil); codeOf(err) != LimitReached {
		t.Fatalf("a child over the family's envelope: %v", err)
	}
	// A child's life ends: it may not spawn any more.
	if _, err := Decide(f, Request{Parent: "default-c"}, t0.Add(11*time.Minute), nil); codeOf(err) != PermissionDenied {
		t.Fatalf("an expired parent: %v", err)
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Policy){
		"no images":        func(p *Policy) { p.AllowedImages = nil },
		"flag image":       func(p *Policy) { p.AllowedImages = []string{"--privileged"} },
		"zero counts":      func(p *Policy) { p.MaxTotal = 0 },
		"live over total":  func(p *Policy) { p.MaxConcurrent = 20 },
		"child over total": func(p *Policy) { p.ChildMaxCPUs = 7 },
		"tiny memory":      func(p *Policy) { p.ChildMaxMemory = 1 << 20 },
		"NaN cpus":         func(p *Policy) { p.TotalChildCPUs = math.NaN() },
		"bad peers":        func(p *Policy) { p.ChildNetworkPeers = "friends" },
		"no ttl":           func(p *Policy) { p.ChildTTL = 0 },
	} {
		if err := policy(edit).Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

func TestPolicyJSON(t *testing.T) {
	var p Policy
	err := json.Unmarshal([]byte(`{"max_concurrent":2,"max_total":4,"total_child_cpus":4,"total_child_memory":"1G","child_max_cpus":1,
		"child_max_memory":268435456,"allowed_images":["mcp-dev","alpine"],"child_ttl":"10m","child_network_peers":"none"}`), &p)
	if err != nil || p.TotalChildMemory != 1<<30 || p.ChildMaxMemory != 256<<20 || time.Duration(p.ChildTTL) != 10*time.Minute || p.Validate() != nil {
		t.Fatalf("%+v %v", p, err)
	}
	out, _ := json.Marshal(p)
	var back Policy
	if err := json.Unmarshal(out, &back); err != nil || back.TotalChildMemory != p.TotalChildMemory || back.ChildTTL != p.ChildTTL {
		t.Fatalf("round trip %s: %+v %v", out, back, err)
	}
	for _, bad := range []string{`{"child_ttl":"soon"}`, `{"child_ttl":-1}`, `{"total_child_memory":"1Q"}`, `{"total_child_memory":-3}`, `{"child_ttl":1e300}`} {
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]Bytes{"512M": 512 << 20, "512m": 512 << 20, "2G": 2 << 30, "512MB": 512 << 20, "1048576": 1 << 20, "1k": 1024, "8T": 8 << 40} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "-1M", "+1M", "1.5G", "512Mi", "99999999999999999999", "9000000T", "1 M", "0x10"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("%q: accepted as %d", in, got)
		}
	}
	if s := Bytes(1536 << 20).String(); s != "1536M" {
		t.Errorf("String: %s", s)
	}
}
