package sandbox

import (
	"context"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// TestSpareNames: a spare's container and volume names can never be a
// sandbox's, and what the engine reports back about a claimed spare is
// read by its container's name, never by a label a spare may carry.
func TestSpareNames(t *testing.T) {
	st, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "smtspare"
	m := NewManager(staleListing{}, Config{Prefix: prefix, Sandboxes: st, LockDir: t.TempDir()})
	t.Cleanup(m.Close)
	id := "0123456789abcdef"
	if n := m.spareName(id); !m.isSpareName(n) || n == m.ContainerFor("spare_"+id) || n == m.ContainerFor("_spare_"+id) {
		t.Fatalf("spare name %q", n)
	}
	for _, bad := range []string{m.ContainerFor("x"), prefix + "_spare_0123", prefix + "_spare_0123456789ABCDEF", prefix + "_spare_0123456789abcdef0", "other_spare_" + id} {
		if m.isSpareName(bad) {
			t.Errorf("%q taken for a spare's name", bad)
		}
	}
	if v := m.spareVolume(id); !m.validSpareVolume(v) || v == m.volumeFor("ws_spare_"+id) {
		t.Fatalf("spare volume %q", v)
	}
	for _, bad := range []string{m.volumeFor("x"), "/etc", "../" + m.spareVolume(id), m.spareVolume(id) + "x", "other-ws_spare_" + id} {
		if m.validSpareVolume(bad) {
			t.Errorf("%q taken for a spare's volume", bad)
		}
	}

	spare := func(name string, labels map[string]string) Container {
		l := map[string]string{LabelOwner: prefix, LabelRole: RoleSpare, LabelVolume: m.spareVolume(id)}
		for k, v := range labels {
			l[k] = v
		}
		return Container{Name: name, Labels: l}
	}
	cases := []struct {
		c    Container
		name string // "" when it is no sandbox
	}{
		{spare(m.spareName(id), nil), ""},                                         // waiting: no sandbox's
		{spare(m.ContainerFor("web"), nil), "web"},                                // claimed for web
		{spare(m.ContainerFor("web"), map[string]string{LabelName: "db"}), "web"}, // the name, never the label
		{spare(m.trashName(), nil), ""},                                           // moved aside by a reset
		{spare(m.ContainerFor("web"), map[string]string{LabelOwner: "other"}), ""},
		{Container{Name: m.ContainerFor("db"), Labels: map[string]string{LabelOwner: prefix, LabelName: "db", LabelRole: "primary"}}, "db"},
		{Container{Name: m.ContainerFor("db"), Labels: map[string]string{LabelOwner: prefix, LabelName: "web", LabelRole: "primary"}}, ""},
	}
	for _, c := range cases {
		got, ok := m.sandboxOf(c.c)
		if got != c.name || ok != (c.name != "") {
			t.Errorf("%s %v: sandbox %q %v, want %q", c.c.Name, c.c.Labels, got, ok, c.name)
		}
		if c.name != "" && m.foreign(c.c, c.name) != nil {
			t.Errorf("%s refused for %q: %v", c.c.Name, c.name, m.foreign(c.c, c.name))
		}
		if m.foreign(c.c, "other") == nil {
			t.Errorf("%s accepted for another sandbox", c.c.Name)
		}
	}
	if v := m.volumeOf("web", spare(m.ContainerFor("web"), nil)); v != m.spareVolume(id) {
		t.Errorf("a claimed spare's workspace: %q", v)
	}
	if v := m.volumeOf("web", spare(m.ContainerFor("web"), map[string]string{LabelVolume: "/var/lib/x"})); v != m.volumeFor("web") {
		t.Errorf("a workspace label that is no spare's volume was used: %q", v)
	}
}

// TestSpareKey: a spare is taken only by a name that boots as it was
// booted.
func TestSpareKey(t *testing.T) {
	p := Profile{Image: "mcp-dev", CPUs: 2, Memory: "1G", Disk: "20G", Pids: 1024}
	k := spareKey(p, DefaultIdleTTL, "allowlist", "")
	if k != spareKey(p, DefaultIdleTTL, "allowlist", "") {
		t.Fatal("the key is not stable")
	}
	q := p
	q.Memory = "2G"
	for _, other := range []string{spareKey(q, DefaultIdleTTL, "allowlist", ""), spareKey(p, 0, "allowlist", ""), spareKey(p, DefaultIdleTTL, "open", ""),
		spareKey(p, DefaultIdleTTL, "allowlist", "big")} {
		if other == k {
			t.Error("a spare booted otherwise, or for a named profile, has the same key")
		}
	}
	if spareKey(p, DefaultIdleTTL, "allowlist", "big") == spareKey(p, DefaultIdleTTL, "allowlist", "small") {
		t.Error("the spares of two named profiles that boot alike have the same key")
	}
}

// hostVolumesRT is a Runtime whose volumes the host sees as onHost says
// (known false: it cannot tell) and the engine as engine says, counting
// the engine's looks.
type hostVolumesRT struct {
	fakeRT
	onHost map[string]bool
	known  bool
	engine map[string]bool
	asked  *int
}

func (r hostVolumesRT) VolumeOnHost(name string) (bool, bool) { return r.onHost[name], r.known }

func (r hostVolumesRT) VolumeSize(_ context.Context, name string) (int64, bool, error) {
	*r.asked++
	if !r.engine[name] {
		return 0, false, ErrNotFound
	}
	return 1 << 30, true, nil
}

// TestVolumeAbsent: whether a name has a workspace is read from the
// host only where the host's view shows a volume known to exist (a
// spare's); otherwise, or when the host cannot tell, the engine is asked,
// and its answer stands even where the host's view differs.
func TestVolumeAbsent(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		what          string
		onHost        map[string]bool
		known         bool
		control       string
		engine        map[string]bool
		absent, asked bool
	}{
		{"host sees the spare's, not the name's", map[string]bool{"ws_spare_1": true}, true, "ws_spare_1", map[string]bool{"ws-a": true}, true, false},
		{"host sees the name's", map[string]bool{"ws_spare_1": true, "ws-a": true}, true, "ws_spare_1", nil, false, false},
		{"host does not see the spare's: its view is not the engine's", map[string]bool{}, true, "ws_spare_1", map[string]bool{"ws-a": true}, false, true},
		{"no spare's to check the view with", map[string]bool{}, true, "", map[string]bool{"ws-a": true}, false, true},
		{"host cannot tell", map[string]bool{"ws_spare_1": true}, false, "ws_spare_1", map[string]bool{}, true, true},
	} {
		asked := 0
		m := &Manager{rt: hostVolumesRT{onHost: c.onHost, known: c.known, engine: c.engine, asked: &asked}}
		if got := m.volumeAbsent(ctx, "ws-a", c.control); got != c.absent || (asked > 0) != c.asked {
			t.Errorf("%s: absent %v (engine asked %d times), want %v (asked %v)", c.what, got, asked, c.absent, c.asked)
		}
	}
}
