package docker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

func TestRunArgsLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec sandbox.RunSpec
		want string // the limit flags, in order
	}{
		{"none", sandbox.RunSpec{}, ""},
		{"pids", sandbox.RunSpec{PidsLimit: 64}, "--pids-limit 64"},
		{"rootfs", sandbox.RunSpec{StorageSize: "20G"}, "--storage-opt size=20G"},
		{"both", sandbox.RunSpec{PidsLimit: 1024, StorageSize: "1G"}, "--pids-limit 1024 --storage-opt size=1G"},
	} {
		tc.spec.Name, tc.spec.Image = "box", "img"
		for _, f := range []Flavor{Docker, Podman} {
			args := RunArgs(f, tc.spec)
			var got []string
			for i, a := range args {
				if a == "--pids-limit" || a == "--storage-opt" {
					got = append(got, a, args[i+1])
				}
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("%s/%s: limit flags %q, want %q (argv %q)", tc.name, f, got, tc.want, args)
			}
			if i := slices.Index(args, "--"); i < 0 || args[i+1] != "img" {
				t.Errorf("%s: image not after --: %q", tc.name, args)
			}
		}
	}
}

func TestStorageOptSupported(t *testing.T) {
	for _, tc := range []struct {
		driver, backing string
		want            bool
	}{
		{"overlay", "extfs", false},
		{"overlay", "xfs", true},
		{"overlay2", "xfs", true},
		{"btrfs", "", true},
		{"vfs", "xfs", false},
		{"overlay", "", false},
	} {
		if got := StorageOptSupported(tc.driver, tc.backing); got != tc.want {
			t.Errorf("%s on %s: %v", tc.driver, tc.backing, got)
		}
	}
}

func TestRootlessV1Note(t *testing.T) {
	if RootlessV1Note(true, "v1") == "" {
		t.Error("rootless on cgroup v1 is degraded")
	}
	for _, c := range []struct {
		rootless bool
		v        string
	}{{false, "v1"}, {true, "v2"}, {false, "v2"}} {
		if n := RootlessV1Note(c.rootless, c.v); n != "" {
			t.Errorf("%v %s: %q", c.rootless, c.v, n)
		}
	}
}

// TestDiskSupportRootlessVFS: rootless podman on cgroup v1 with vfs, as a
// fresh Debian 12 user gets it: no pids limit, no cgroup of the sandbox's
// own (so stats cannot read its CPU and memory), no watchable root
// filesystem, and a warning that says how to get overlay.
func TestDiskSupportRootlessVFS(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "podman")
	script := "#!/bin/sh\n[ \"$1\" = info ] && echo 'true|v1|vfs|extfs|/home/u/.local/share/containers/storage'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ds := New(Options{Flavor: Podman, Binary: bin}).DiskSupport(context.Background())
	notes := strings.Join(ds.Notes, "\n")
	if ds.Pids || ds.SharedCgroup == "" || ds.RootfsUnwatchable == "" || ds.RootfsSize ||
		!strings.Contains(notes, "vfs") || !strings.Contains(notes, "scripts/setup-engine.sh") || !strings.Contains(notes, "DEGRADED") {
		t.Errorf("%+v", ds)
	}
}

// TestDiskSupportAsksTheEngineOnce: `podman info` costs several ordinary
// engine commands, so the Dialects of one engine in a process share its
// answer; another engine (another binary) is asked for its own.
func TestDiskSupportAsksTheEngineOnce(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	fake := func(name string) string {
		bin := filepath.Join(dir, name, "podman")
		script := "#!/bin/sh\necho \"$1\" >>" + calls + "\n[ \"$1\" = info ] && echo 'false|v2|overlay|extfs|/var/lib/containers/storage'\n"
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return bin
	}
	a, b := fake("a"), fake("b")
	for range 3 {
		if ds := New(Options{Flavor: Podman, Binary: a}).DiskSupport(context.Background()); !ds.Pids {
			t.Fatalf("%+v", ds)
		}
	}
	New(Options{Flavor: Podman, Binary: b}).DiskSupport(context.Background())
	out, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), "info\n"); n != 2 {
		t.Fatalf("the engines were asked %d times (%q); want once each", n, out)
	}
}

// TestFormatLeftOnlyFormatsOwnImages: a volume found on an image with no
// filesystem has it formatted only when the image is one of this engine's
// workspace images; an image elsewhere (a volume made by hand on a disk
// of the user's) is left as it is, its device never written.
func TestFormatLeftOnlyFormatsOwnImages(t *testing.T) {
	dir := t.TempDir()
	d := &Dialect{disk: &sandbox.DiskSupport{VolumeSize: true}, disksDir: filepath.Join(dir, "sandbox-mcp-disks"), diskTag: "engine-0123456789ab"}
	if err := os.MkdirAll(filepath.Join(dir, "sandbox-mcp-disks", "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{
		filepath.Join(dir, "vm.raw"),
		filepath.Join(dir, "sandbox-mcp-disks", "ws.1234.engine-ffffffffffff.ext4"), // another engine's
		filepath.Join(dir, "elsewhere", "ws.1234.engine-0123456789ab.ext4"),
		// Not clean: through a link, ".." leads elsewhere.
		dir + "/sandbox-mcp-disks/sub/../ws.1234.engine-0123456789ab.ext4",
		dir + "/sandbox-mcp-disks//ws.1234.engine-0123456789ab.ext4",
		"sandbox-mcp-disks/ws.1234.engine-0123456789ab.ext4",
		// Untagged, but not named for the volume removed ("ws").
		filepath.Join(dir, "sandbox-mcp-disks", "other.0a1b2c3d.ext4"),
		filepath.Join(dir, "sandbox-mcp-disks", "ws.0a1b2c3.ext4"),
		filepath.Join(dir, "elsewhere", "ws.0a1b2c3d.ext4"),
	} {
		err := d.formatLeft(context.Background(), img, "/dev/loop-nonexistent")
		if err == nil || !strings.Contains(err.Error(), "left as it is") {
			t.Errorf("%s: %v, want it left as it is", img, err)
		}
		if !filepath.IsAbs(img) {
			continue
		}
		// Nor is it deleted with its volume.
		if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(img, []byte("kept"), 0o600); err != nil {
			t.Fatal(err)
		}
		d.removeImage(context.Background(), "ws", volumeJSON{Labels: map[string]string{LabelDiskImage: img}})
		if _, err := os.Stat(img); err != nil {
			t.Errorf("%s: removed with its volume: %v", img, err)
		}
		_ = os.Remove(img)
	}
	// This engine's own go with their volume; so does one made for the
	// volume before images carried their engine's tag.
	for _, img := range []string{
		filepath.Join(dir, "sandbox-mcp-disks", "ws.1234.engine-0123456789ab.ext4"),
		filepath.Join(dir, "sandbox-mcp-disks", "ws.0a1b2c3d.ext4"),
	} {
		if err := os.WriteFile(img, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		d.removeImage(context.Background(), "ws", volumeJSON{Labels: map[string]string{LabelDiskImage: img}})
		if _, err := os.Stat(img); !os.IsNotExist(err) {
			t.Errorf("%s: not removed with its volume: %v", img, err)
		}
	}
}
