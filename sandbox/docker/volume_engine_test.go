package docker_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/loopdisk"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
)

// TestSizedVolumeOfAFreshName: a sized workspace created for a name said
// to be fresh is made; asked again for that name (a fresh name that was
// not: a volume a crash left without a record), the volume in place is
// kept as it is, its image too, and no second image is left behind.
func TestSizedVolumeOfAFreshName(t *testing.T) {
	eachSizedDialect(t, func(t *testing.T, ctx context.Context, prefix string, d *docker.Dialect, cli func(...string) string) {
		name := prefix + "-ws-fresh"
		t.Cleanup(func() { _ = d.VolumeRemove(context.Background(), name) })
		image := func() string {
			return cli("volume", "inspect", "--format", `{{index .Labels "`+docker.LabelDiskImage+`"}}`, name)
		}
		labels := map[string]string{sandbox.LabelOwner: prefix}
		for i := range 2 {
			sized, err := d.VolumeCreateSized(ctx, name, labels, 256<<20, true)
			if err != nil || !sized {
				t.Fatalf("create %d: sized %v, %v", i, sized, err)
			}
		}
		img := image()
		if img == "" {
			t.Fatal("the volume has no image")
		}
		left, _ := filepath.Glob(filepath.Join(filepath.Dir(img), name+".*.ext4"))
		if len(left) != 1 || left[0] != img {
			t.Fatalf("images of the volume: %q, want only %q", left, img)
		}
		if size, ok, err := d.VolumeSize(ctx, name); err != nil || !ok || size != 256<<20 {
			t.Fatalf("size %d %v %v", size, ok, err)
		}
	})
}

// TestUnformattedWorkspaceIsFormatted: a sized volume is created while
// its image's filesystem is written, so a server killed in between leaves
// a volume on an image without one (here: its superblock zeroed before
// any container used it). The next look at the name formats it, and a
// container then writes to it.
func TestUnformattedWorkspaceIsFormatted(t *testing.T) {
	eachSizedDialect(t, func(t *testing.T, ctx context.Context, prefix string, d *docker.Dialect, cli func(...string) string) {
		name := prefix + "-ws-unformatted"
		t.Cleanup(func() { _ = d.VolumeRemove(context.Background(), name) })
		labels := map[string]string{sandbox.LabelOwner: prefix}
		if sized, err := d.VolumeCreateSized(ctx, name, labels, 64<<20, true); err != nil || !sized {
			t.Fatalf("create: sized %v, %v", sized, err)
		}
		img := cli("volume", "inspect", "--format", `{{index .Labels "`+docker.LabelDiskImage+`"}}`, name)
		dev := cli("volume", "inspect", "--format", `{{index .Options "device"}}`, name)
		if ok, err := loopdisk.Formatted(img); err != nil || !ok {
			t.Fatalf("a new workspace image: formatted %v, %v", ok, err)
		}
		// What a kill mid-format leaves, through the device as the format
		// writes.
		f, err := os.OpenFile(dev, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteAt(make([]byte, 4096), 0)
		if err == nil {
			err = f.Sync()
		}
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := loopdisk.Formatted(img); ok {
			t.Fatal("the zeroed image still reads as formatted")
		}
		for _, fresh := range []bool{true, false} {
			if sized, err := d.VolumeCreateSized(ctx, name, labels, 64<<20, fresh); err != nil || !sized {
				t.Fatalf("look again (fresh %v): sized %v, %v", fresh, sized, err)
			}
		}
		if ok, err := loopdisk.Formatted(img); err != nil || !ok {
			t.Fatalf("after the look: formatted %v, %v", ok, err)
		}
		out := cli("run", "--rm", "--mount", "type=volume,source="+name+",target=/w", enginetest.SmallImage, "sh", "-c", "echo kept >/w/f && cat /w/f && ls /w")
		if !strings.Contains(out, "kept") || !strings.Contains(out, "lost+found") {
			t.Fatalf("a container on the formatted workspace: %q", out)
		}
	})
}

// TestStartAfterAKilledMount: a podman run or start killed between its
// mount of a workspace and its record of it leaves the filesystem mounted
// at the volume's data directory while podman counts it unmounted, and
// every start then fails ("already mounted on"). Start unmounts it (no
// running container uses the volume) and starts the container.
func TestStartAfterAKilledMount(t *testing.T) {
	eachSizedDialect(t, func(t *testing.T, ctx context.Context, prefix string, d *docker.Dialect, cli func(...string) string) {
		if d.Kind() != "podman" {
			t.Skip("podman's volume mounts")
		}
		vol, ctr := prefix+"-ws-killedmount", prefix+"-killedmount"
		t.Cleanup(func() {
			_ = d.Remove(context.Background(), ctr)
			_ = d.VolumeRemove(context.Background(), vol)
		})
		if sized, err := d.VolumeCreateSized(ctx, vol, map[string]string{sandbox.LabelOwner: prefix}, 64<<20, true); err != nil || !sized {
			t.Fatalf("create: sized %v, %v", sized, err)
		}
		cli("create", "--name", ctr, "--label", sandbox.LabelOwner+"="+prefix, "--mount", "type=volume,source="+vol+",target=/w", enginetest.SmallImage, "sleep", "infinity")
		dev := cli("volume", "inspect", "--format", `{{index .Options "device"}}`, vol)
		at := cli("volume", "inspect", "--format", "{{.Mountpoint}}", vol)
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-o", "nosuid,nodev", dev, at).CombinedOutput(); err != nil {
			t.Fatalf("mount: %v: %s", err, out)
		}
		if err := d.Start(ctx, ctr); err != nil {
			exec.Command("umount", at).Run()
			t.Fatalf("start with the workspace left mounted: %v", err)
		}
		out := cli("exec", ctr, "sh", "-c", "echo kept >/w/f && cat /w/f")
		if out != "kept" {
			t.Fatalf("the started container's workspace: %q", out)
		}
	})
}

// TestRemoveAfterAKilledMount: a workspace that a killed `podman run`
// left mounted at its data directory (podman's record says it is not) is
// removed whole: no mount, no loop device, no image left, and a volume of
// the same name can be made again.
func TestRemoveAfterAKilledMount(t *testing.T) {
	eachSizedDialect(t, func(t *testing.T, ctx context.Context, prefix string, d *docker.Dialect, cli func(...string) string) {
		if d.Kind() != "podman" {
			t.Skip("podman's volume mounts")
		}
		vol := prefix + "-ws-killedrm"
		if sized, err := d.VolumeCreateSized(ctx, vol, map[string]string{sandbox.LabelOwner: prefix}, 64<<20, true); err != nil || !sized {
			t.Fatalf("create: sized %v, %v", sized, err)
		}
		t.Cleanup(func() { _ = d.VolumeRemove(context.Background(), vol) })
		dev := cli("volume", "inspect", "--format", `{{index .Options "device"}}`, vol)
		at := cli("volume", "inspect", "--format", "{{.Mountpoint}}", vol)
		img := cli("volume", "inspect", "--format", `{{index .Labels "`+docker.LabelDiskImage+`"}}`, vol)
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-o", "nosuid,nodev", dev, at).CombinedOutput(); err != nil {
			t.Fatalf("mount: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", at).Run() })
		real := at
		if r, err := filepath.EvalSymlinks(at); err == nil {
			real = r // mountinfo names the resolved path
		}
		mounted := func() bool {
			mounts, _ := os.ReadFile("/proc/self/mountinfo")
			return strings.Contains(string(mounts), " "+real+" ")
		}
		// While a container (created, not running) names the volume, it
		// stays as it is: in use.
		ctr := prefix + "-killedrm"
		cli("create", "--name", ctr, "--label", sandbox.LabelOwner+"="+prefix, "--mount", "type=volume,source="+vol+",target=/w", enginetest.SmallImage, "sleep", "infinity")
		if err := d.VolumeRemove(ctx, vol); !errors.Is(err, sandbox.ErrInUse) || !mounted() {
			t.Fatalf("remove while a container names the volume: %v (still mounted: %v), want it in use and left", err, mounted())
		}
		if err := d.Remove(ctx, ctr); err != nil {
			t.Fatal(err)
		}
		if err := d.VolumeRemove(ctx, vol); err != nil {
			t.Fatalf("remove: %v", err)
		}
		if mounted() {
			t.Errorf("%s is still mounted", at)
		}
		if b := loopdisk.Backing(dev); strings.HasPrefix(b, img) {
			t.Errorf("%s is still attached to the image: %s", dev, b)
		}
		if _, err := os.Stat(img); !os.IsNotExist(err) {
			t.Errorf("the image is still there: %v", err)
		}
		if sized, err := d.VolumeCreateSized(ctx, vol, map[string]string{sandbox.LabelOwner: prefix}, 64<<20, true); err != nil || !sized {
			t.Fatalf("create again: sized %v, %v", sized, err)
		}
	})
}

// TestSweepDisksOnEngine: the image of a volume whose server was killed
// before the volume was made (here: the volume removed behind the
// dialect's back, which leaves its image as such a kill does) is
// detached and deleted by the next sweep; the image of a volume that
// exists stays, however old.
func TestSweepDisksOnEngine(t *testing.T) {
	eachSizedDialect(t, func(t *testing.T, ctx context.Context, prefix string, d *docker.Dialect, cli func(...string) string) {
		long := time.Now().Add(-time.Hour)
		images := map[string]string{}
		for _, v := range []string{"kept", "left"} {
			name := prefix + "-ws-" + v
			t.Cleanup(func() { _ = d.VolumeRemove(context.Background(), name) })
			if sized, err := d.VolumeCreateSized(ctx, name, map[string]string{sandbox.LabelOwner: prefix}, 64<<20, true); err != nil || !sized {
				t.Fatalf("create %s: sized %v, %v", name, sized, err)
			}
			images[v] = cli("volume", "inspect", "--format", `{{index .Labels "`+docker.LabelDiskImage+`"}}`, name)
			if err := os.Chtimes(images[v], long, long); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { loopdisk.Detach(images["left"]) })
		cli("volume", "rm", prefix+"-ws-left")
		gone, err := d.SweepDisks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(gone, images["left"]) || slices.Contains(gone, images["kept"]) {
			t.Fatalf("swept %v; want %s, not %s", gone, images["left"], images["kept"])
		}
		if _, err := os.Stat(images["left"]); !os.IsNotExist(err) {
			t.Errorf("the left image is still there: %v", err)
		}
		if out, _ := exec.Command("losetup", "--associated", images["left"]).Output(); len(out) > 0 {
			t.Errorf("the left image is still attached: %s", out)
		}
		if _, err := os.Stat(images["kept"]); err != nil {
			t.Errorf("the image of a volume that exists: %v", err)
		}
		if size, ok, err := d.VolumeSize(ctx, prefix+"-ws-kept"); err != nil || !ok || size != 64<<20 {
			t.Errorf("the kept volume: size %d %v %v", size, ok, err)
		}
	})
}

// eachSizedDialect runs test, in parallel, for each docker or podman
// target whose dialect makes sized volumes here, with a prefix of its
// own and cli, which runs the engine's CLI and fails the test when it
// fails.
func eachSizedDialect(t *testing.T, test func(t *testing.T, ctx context.Context, prefix string, d *docker.Dialect, cli func(...string) string)) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Runtime != "docker" && tg.Runtime != "podman" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
			defer cancel()
			prefix := enginetest.Prefix(t, tg.New())
			d := docker.New(docker.Options{Flavor: docker.Flavor(tg.Runtime), Env: tg.Env})
			if ds := d.DiskSupport(ctx); !ds.VolumeSize {
				t.Skipf("sized volumes are not available here: %v", ds.Notes)
			}
			cli := func(args ...string) string {
				t.Helper()
				cmd := exec.CommandContext(ctx, tg.Runtime, args...)
				cmd.Env = append(os.Environ(), tg.Env...)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v: %s", args, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			test(t, ctx, prefix, d, cli)
		})
	}
}
