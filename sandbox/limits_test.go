package sandbox

import (
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"64M": 64 << 20, "512m": 512 << 20, "20G": 20 << 30, "1T": 1 << 40, "1048576K": 1 << 30, "134217728": 128 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1", "63M", "1.5G", "-1G", "1GB", "G", "1 G", "99999999999999T", "1P"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestProfileDiskPids(t *testing.T) {
	p, err := ParseProfileSpec("disk=1G,pids=64")
	if err != nil || p.Disk != "1G" || p.Pids != 64 {
		t.Fatalf("got %+v, %v", p, err)
	}
	for _, bad := range []string{"disk=1", "disk=lots", "pids=0", "pids=-1", "pids=x", "pids=2000000"} {
		if _, err := ParseProfileSpec(bad); err == nil {
			t.Errorf("ParseProfileSpec(%q) accepted", bad)
		}
	}
	base := Profile{Image: "img", Disk: "20G", Pids: 1024}
	m := base.Merge(Profile{Disk: "1G"})
	if m.Disk != "1G" || m.Pids != 1024 {
		t.Fatalf("merge: %+v", m)
	}
	if m := base.Merge(Profile{Pids: 64}); m.Disk != "20G" || m.Pids != 64 {
		t.Fatalf("merge: %+v", m)
	}
	for _, bad := range []Profile{{Image: "i", Disk: "1"}, {Image: "i", Pids: -1}, {Image: "i", Pids: MaxPids + 1}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", bad)
		}
	}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
}

// fakeRT is a Runtime with the optional capabilities chosen per test.
type fakeRT struct{ Runtime }

type fakeSized struct {
	fakeRT
	SizedVolumeCreator
	UsageDirs
}

type fakeWatchable struct {
	fakeRT
	UsageDirs
}

func TestPlanLimits(t *testing.T) {
	prof := Profile{Disk: "1G", Pids: 64}
	for _, tc := range []struct {
		name string
		ds   DiskSupport
		rt   Runtime
		want Limits
	}{
		{"all native", DiskSupport{RootfsSize: true, VolumeSize: true, Pids: true}, fakeSized{},
			Limits{Disk: "1G", Pids: 64, Workspace: MechVolumeSize, Rootfs: MechStorageOpt}},
		{"root on ext4", DiskSupport{VolumeSize: true, Pids: true}, fakeSized{},
			Limits{Disk: "1G", Pids: 64, Workspace: MechVolumeSize, Rootfs: MechWatcher}},
		{"rootless", DiskSupport{Pids: true}, fakeWatchable{},
			Limits{Disk: "1G", Pids: 64, Workspace: MechWatcher, Rootfs: MechWatcher}},
		// vfs keeps no upper directory: the root filesystem is not watched,
		// and not reported as if it were.
		{"rootless on vfs", DiskSupport{Pids: true, RootfsUnwatchable: "vfs"}, fakeWatchable{},
			Limits{Disk: "1G", Pids: 64, Workspace: MechWatcher, Rootfs: MechNone}},
		{"apple", DiskSupport{VolumeSize: true}, struct {
			fakeRT
			SizedVolumeCreator
		}{},
			Limits{Disk: "1G", Workspace: MechVolumeSize, Rootfs: MechNone}},
		{"nothing", DiskSupport{}, fakeRT{}, Limits{Disk: "1G", Workspace: MechNone, Rootfs: MechNone}},
	} {
		got := planLimits(tc.ds, tc.rt, prof)
		if got != tc.want {
			t.Errorf("%s: got %+v want %+v", tc.name, got, tc.want)
		}
		back, ok := parseLimitsLabel(got.encode())
		if !ok || back != got {
			t.Errorf("%s: label round trip %q -> %+v", tc.name, got.encode(), back)
		}
	}
}

func TestLimitsOf(t *testing.T) {
	prof := Profile{Disk: "20G", Pids: 1024}
	old := limitsOf(Container{Labels: map[string]string{}}, prof)
	if !strings.Contains(old.Note, "reset to apply") || !strings.Contains(old.String(), "reset to apply") {
		t.Fatalf("container without the label: %+v", old)
	}
	lim := Limits{Disk: "20G", Pids: 1024, Workspace: MechVolumeSize, Rootfs: MechWatcher}
	c := Container{Labels: map[string]string{LabelLimits: lim.encode()}}
	if got := limitsOf(c, prof); got != lim {
		t.Fatalf("got %+v", got)
	}
	if got := limitsOf(c, Profile{Disk: "1G", Pids: 1024}); !strings.Contains(got.Note, "reset to apply") {
		t.Fatalf("changed profile: %+v", got)
	}
	if got := limitsOf(Container{}, Profile{}); got.Note != "" {
		t.Fatalf("no limits asked: %+v", got)
	}
	if s := lim.String(); s != "disk 20G (workspace volume-size, rootfs watcher), pids 1024" {
		t.Fatalf("String: %q", s)
	}
}

// TestLimitsLabelForm: the label's value holds no '=' (Apple's `run -l`
// refuses a label whose value has one, so every boot failed there), and
// the "disk=…" form that older servers wrote is still read.
func TestLimitsLabelForm(t *testing.T) {
	lim := Limits{Disk: "20G", Pids: 1024, Workspace: MechVolumeSize, Rootfs: MechWatcher}
	got := lim.encode()
	if got != "disk:20G,pids:1024,workspace:volume-size,rootfs:watcher" || strings.Contains(got, "=") {
		t.Fatalf("encode: %q", got)
	}
	for _, old := range []string{
		"disk=20G,pids=1024,workspace=volume-size,rootfs=watcher",
		"disk:20G,pids:1024,workspace:volume-size,rootfs:watcher",
	} {
		back, ok := parseLimitsLabel(old)
		if !ok || back != lim {
			t.Errorf("parseLimitsLabel(%q) = %+v, %v", old, back, ok)
		}
	}
	if back, ok := parseLimitsLabel("disk=,pids=0,workspace=,rootfs="); !ok || back != (Limits{}) {
		t.Errorf("empty old form: %+v %v", back, ok)
	}
}

type fakeStartBounded struct {
	fakeRT
	start time.Duration
}

func (f fakeStartBounded) StartTimeout() time.Duration { return f.start }

// TestBootTimeoutFollowsTheRuntime: a boot is bounded by two minutes, or,
// on a runtime whose own start waits longer (a Kubernetes pod's image
// pull), by that wait and a minute more; a bound set in the config wins.
func TestBootTimeoutFollowsTheRuntime(t *testing.T) {
	for _, c := range []struct {
		name string
		rt   Runtime
		set  time.Duration
		want time.Duration
	}{
		{"local engine", fakeRT{}, 0, 2 * time.Minute},
		{"a runtime that waits 5 minutes for a start", fakeStartBounded{start: 5 * time.Minute}, 0, 6 * time.Minute},
		{"a runtime that waits 10 seconds", fakeStartBounded{start: 10 * time.Second}, 0, 2 * time.Minute},
		{"set in the config", fakeStartBounded{start: 5 * time.Minute}, 30 * time.Second, 30 * time.Second},
	} {
		m := NewManager(c.rt, Config{Prefix: "smtb", BootTimeout: c.set})
		got := m.cfg.BootTimeout
		m.Close()
		if got != c.want {
			t.Errorf("%s: boot timeout %s, want %s", c.name, got, c.want)
		}
	}
}
