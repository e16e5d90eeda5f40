package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/loopdisk"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// How the dialect bounds disk on Linux:
//   - the workspace volume, when the server runs as root on the engine's own
//     host, is an ext4 filesystem in a sparse image file on a loop device
//     (`volume create --opt type=ext4 --opt device=/dev/loopN`): a full
//     workspace is ENOSPC for the writer, and the host loses at most the
//     size. The image lives in <engine data dir>/../sandbox-mcp-disks and is
//     detached and deleted with the volume.
//   - the writable rootfs gets `--storage-opt size=` when the storage is
//     overlay on xfs (which needs the pquota mount option) or btrfs.
//
// Elsewhere (rootless, overlay on ext4, a remote engine) the Manager's
// watcher polls usage instead.

var (
	_ sandbox.DiskLimiter        = (*Dialect)(nil)
	_ sandbox.SizedVolumeCreator = (*Dialect)(nil)
	_ sandbox.UsageDirs          = (*Dialect)(nil)
)

// LabelDiskImage on a volume names the image file backing it.
const LabelDiskImage = "io.sandbox-mcp.disk-image"

// DiskSupport implements sandbox.DiskLimiter. It asks the engine once and
// caches a successful answer, for this process: `podman info` costs
// several times an ordinary engine command (it asks the package manager
// for the version of each of podman's helpers), and the answer holds for
// every Dialect of the same engine.
func (d *Dialect) DiskSupport(ctx context.Context) sandbox.DiskSupport {
	d.diskMu.Lock()
	defer d.diskMu.Unlock()
	if d.disk != nil {
		return *d.disk
	}
	key := d.engineKey()
	if c, ok := diskCache.Load(key); ok {
		e := c.(diskAnswer)
		d.disk, d.disksDir, d.diskTag = &e.ds, e.disksDir, e.diskTag
		return e.ds
	}
	ds, err := d.detectDisk(ctx)
	if err == nil {
		d.disk = &ds
		diskCache.Store(key, diskAnswer{ds: ds, disksDir: d.disksDir, diskTag: d.diskTag})
	}
	return ds
}

// diskCache holds DiskSupport's answers by engineKey.
var diskCache sync.Map

// diskAnswer is one engine's DiskSupport answer, and where its workspace
// images live.
type diskAnswer struct {
	ds                sandbox.DiskSupport
	disksDir, diskTag string
}

// engineKey tells engines apart for diskCache: the flavor, the binary,
// and the environment that picks the engine and its storage.
func (d *Dialect) engineKey() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s", d.flavor, d.cli.Binary)
	for _, k := range []string{"DOCKER_HOST", "CONTAINER_HOST", "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "DOCKER_CONTEXT", "DOCKER_CONFIG"} {
		fmt.Fprintf(&b, "\x00%s=%s", k, os.Getenv(k))
	}
	for _, e := range d.cli.Env {
		fmt.Fprintf(&b, "\x00%s", e)
	}
	return b.String()
}

func (d *Dialect) detectDisk(ctx context.Context) (sandbox.DiskSupport, error) {
	ds := sandbox.DiskSupport{Pids: true}
	format := `{{.Host.Security.Rootless}}|{{.Host.CgroupsVersion}}|{{.Store.GraphDriverName}}|{{index .Store.GraphStatus "Backing Filesystem"}}|{{.Store.GraphRoot}}`
	if d.flavor == Docker {
		format = `{{range .SecurityOptions}}{{.}},{{end}}|v{{.CgroupVersion}}|{{.Driver}}|{{range .DriverStatus}}{{if eq (index . 0) "Backing Filesystem"}}{{index . 1}}{{end}}{{end}}|{{.DockerRootDir}}`
	}
	out, err := d.cli.Output(ctx, nil, "info", "--format", format)
	if err != nil {
		ds.Notes = append(ds.Notes, "engine info failed: "+err.Error())
		return ds, err
	}
	parts := strings.SplitN(strings.TrimSpace(string(out)), "|", 5)
	for len(parts) < 5 {
		parts = append(parts, "")
	}
	rootless := parts[0] == "true" || strings.Contains(parts[0], "name=rootless")
	if note := RootlessV1Note(rootless, parts[1]); note != "" {
		ds.Pids = false
		ds.SharedCgroup = "a rootless engine on cgroup v1 gives a sandbox no cgroup of its own"
		ds.Notes = append(ds.Notes, note)
	}
	driver, backing, root := parts[2], parts[3], parts[4]
	if driver == "vfs" {
		ds.RootfsUnwatchable = "the vfs storage driver has no upper directory to measure"
		ds.Notes = append(ds.Notes, VFSNote(d.flavor, rootless))
	}
	ds.RootfsSize = StorageOptSupported(driver, backing)
	if !ds.RootfsSize {
		ds.Notes = append(ds.Notes, fmt.Sprintf("rootfs: storage %s on %s has no size option (needs overlay on xfs with pquota, or btrfs)", driver, orUnknown(backing)))
	}
	if why := d.loopUnavailable(root); why != "" {
		ds.Notes = append(ds.Notes, "workspace: no sized volumes: "+why)
	} else {
		d.disksDir = filepath.Join(filepath.Dir(root), "sandbox-mcp-disks")
		// Engines whose data directories share a parent share the
		// directory: each image's name says its engine, and each sweeps
		// only its own (SweepDisks).
		sum := sha256.Sum256([]byte(string(d.flavor) + "\x00" + root))
		d.diskTag = "engine-" + hex.EncodeToString(sum[:6])
		ds.VolumeSize = true
	}
	return ds, nil
}

// RootlessV1Note is the degraded-mode notice for a rootless engine on
// cgroup v1, where the kernel cannot delegate cgroups to a normal user:
// the engine ignores cpu, memory and pids limits. It is "" otherwise.
func RootlessV1Note(rootless bool, cgroupVersion string) string {
	if !rootless || cgroupVersion != "v1" {
		return ""
	}
	return "DEGRADED: a rootless engine on cgroup v1 cannot enforce cpu, memory or pids limits (the engine ignores them); " +
		"boot the host with cgroup v2 (systemd.unified_cgroup_hierarchy=1) or run the engine as root to get them"
}

// VFSNote is the warning for an engine on the vfs storage driver, with the
// fix.
func VFSNote(f Flavor, rootless bool) string {
	note := "SLOW: the engine stores containers with vfs, which copies the whole image for each sandbox " +
		"(a new sandbox's first command waits for the copy, and each sandbox takes the image's size on disk), " +
		"and the root filesystem's disk limit cannot be watched; "
	switch {
	case f == Podman && rootless:
		return note + "run scripts/setup-engine.sh as this user, which switches podman to overlay, " +
			"or set driver = \"overlay\" in ~/.config/containers/storage.conf and run `podman system reset` (it deletes this user's podman images and containers)"
	case f == Podman:
		return note + "set driver = \"overlay\" in /etc/containers/storage.conf and run `podman system reset` (it deletes podman's images and containers)"
	}
	return note + "set \"storage-driver\": \"overlay2\" in /etc/docker/daemon.json and restart dockerd"
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown filesystem"
	}
	return s
}

// StorageOptSupported reports whether `run --storage-opt size=` works on a
// storage driver and its backing filesystem as `info` names them. Overlay
// on xfs also needs the pquota mount option, which info does not show.
func StorageOptSupported(driver, backing string) bool {
	switch {
	case driver == "btrfs":
		return true
	case strings.HasPrefix(driver, "overlay") && strings.EqualFold(backing, "xfs"):
		return true
	}
	return false
}

// loopUnavailable says why workspace volumes cannot be ext4 images on loop
// devices here, or "" when they can.
func (d *Dialect) loopUnavailable(root string) string {
	if os.Geteuid() != 0 {
		return "the server does not run as root (loop devices need it)"
	}
	if d.remote() {
		return "the engine is remote"
	}
	if root == "" || !filepath.IsAbs(root) {
		return "the engine did not name its data directory"
	}
	return loopdisk.Unavailable()
}

// remote reports whether the CLI talks to an engine on another host.
func (d *Dialect) remote() bool {
	for _, kv := range append(os.Environ(), d.cli.Env...) {
		k, v, _ := strings.Cut(kv, "=")
		if (k == "DOCKER_HOST" || k == "CONTAINER_HOST") && v != "" && !strings.HasPrefix(v, "unix://") {
			return true
		}
	}
	return false
}

type volumeJSON struct {
	Mountpoint string            `json:"Mountpoint"`
	Labels     map[string]string `json:"Labels"`
	Options    map[string]string `json:"Options"`
}

func (d *Dialect) volumeInspect(ctx context.Context, name string) (volumeJSON, error) {
	out, err := d.cli.Output(ctx, nil, "volume", "inspect", "--", name)
	if err != nil {
		return volumeJSON{}, err
	}
	var vs []volumeJSON
	if err := json.Unmarshal(out, &vs); err != nil {
		return volumeJSON{}, fmt.Errorf("parse volume inspect: %w", err)
	}
	if len(vs) == 0 {
		return volumeJSON{}, fmt.Errorf("volume %s: %w", name, sandbox.ErrNotFound)
	}
	return vs[0], nil
}

// VolumeCreateSized implements sandbox.SizedVolumeCreator with an ext4
// image on a loop device. It returns false when a volume of that name
// exists without a size (created before limits existed): it is kept.
// Podman refuses a second volume of one name, so a fresh name is created
// without a look first; docker's create would take the existing volume
// as made, so it always looks.
func (d *Dialect) VolumeCreateSized(ctx context.Context, name string, labels map[string]string, size int64, fresh bool) (bool, error) {
	if !d.DiskSupport(ctx).VolumeSize {
		return false, errors.New("sized volumes are not available on this host")
	}
	if !fresh || d.Kind() != "podman" {
		v, err := d.volumeInspect(ctx, name)
		if err == nil {
			return d.checkLoop(ctx, v)
		}
		if !errors.Is(err, sandbox.ErrNotFound) {
			return false, err
		}
	}
	if err := os.MkdirAll(d.disksDir, 0o700); err != nil {
		return false, err
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	img := filepath.Join(d.disksDir, name+"."+hex.EncodeToString(rnd[:])+"."+d.diskTag+".ext4")
	// The volume is created while the image's filesystem is written: it
	// only names the device, which nothing mounts before the volume's
	// first container, after this returns. A server killed before the
	// format ended leaves a volume on an image without a filesystem, which
	// the next look formats (checkLoop).
	disk, err := loopdisk.Start(ctx, img, size, "workspace")
	if err != nil {
		if fresh && d.Kind() == "podman" {
			// No look was made: a volume a crash left needs no new disk.
			if v, ierr := d.volumeInspect(ctx, name); ierr == nil {
				return d.checkLoop(ctx, v)
			}
		}
		return false, err
	}
	// Held until the volume names it (or it is gone): SweepDisks leaves it.
	defer disk.Release()
	args := []string{"volume", "create", "--label", LabelDiskImage + "=" + img}
	for _, k := range sortedKeys(labels) {
		args = append(args, "--label", k+"="+labels[k])
	}
	// nosuid,nodev: the volume is mounted on the host too, where a set-id
	// file or a device node a sandbox made there must mean nothing.
	args = append(args, "--opt", "type=ext4", "--opt", "device="+disk.Dev, "--opt", "o=nosuid,nodev", "--", name)
	_, err = d.cli.Output(ctx, nil, args...)
	ferr := disk.Wait()
	if err != nil {
		loopdisk.Detach(img)
		if errors.Is(err, sandbox.ErrAlreadyExists) { // another server won
			if v, err := d.volumeInspect(ctx, name); err == nil {
				return d.checkLoop(ctx, v)
			}
		}
		return false, err
	}
	if ferr != nil {
		// The volume names a device with no filesystem: it goes, with the
		// image.
		if rerr := d.VolumeRemove(context.WithoutCancel(ctx), name); rerr != nil {
			return false, fmt.Errorf("%w (and removing its volume %s failed: %v)", ferr, name, rerr)
		}
		loopdisk.Detach(img)
		return false, ferr
	}
	return true, nil
}

// diskSweepGrace is how long a workspace image goes unchanged before
// SweepDisks may take it for one a killed server left. Its maker holds it
// (loopdisk.Start) from a moment after its creation until its format ended
// and its volume names it: this only covers that moment.
const diskSweepGrace = time.Minute

// SweepDisks implements sandbox.DiskSweeper: it detaches and deletes the
// workspace images that no volume of this engine names, any prefix's,
// which a server killed between an image's making and its volume's left
// (loopdisk.Sweep). It returns the images removed.
func (d *Dialect) SweepDisks(ctx context.Context) ([]string, error) {
	if !d.DiskSupport(ctx).VolumeSize || d.disksDir == "" || d.diskTag == "" {
		return nil, nil
	}
	// Only this engine's (the tag in their names): an image another
	// engine made is named by that engine's volumes, which this one does
	// not list. Images made before names carried a tag are left alone.
	return loopdisk.Sweep(d.disksDir, "."+d.diskTag+".ext4", diskSweepGrace, func() (map[string]bool, error) {
		return d.diskImagesNamed(ctx)
	})
}

// diskImagesNamed is the set of images the engine's volumes name. A
// volume removed while it looks makes it look again.
func (d *Dialect) diskImagesNamed(ctx context.Context) (map[string]bool, error) {
	var err error
	for range 5 {
		var out []byte
		out, err = d.cli.Output(ctx, nil, "volume", "ls", "--quiet", "--filter", "label="+LabelDiskImage)
		if err != nil {
			if errors.Is(err, sandbox.ErrNotFound) {
				continue
			}
			return nil, err
		}
		names := strings.Fields(string(out))
		named := map[string]bool{}
		if len(names) == 0 {
			return named, nil
		}
		out, err = d.cli.Output(ctx, nil, append([]string{"volume", "inspect", "--"}, names...)...)
		if err != nil {
			if errors.Is(err, sandbox.ErrNotFound) {
				continue
			}
			return nil, err
		}
		var vs []volumeJSON
		if err := json.Unmarshal(out, &vs); err != nil {
			return nil, fmt.Errorf("parse volume inspect: %w", err)
		}
		if len(vs) != len(names) {
			return nil, fmt.Errorf("volume inspect of %d volumes described %d", len(names), len(vs))
		}
		for _, v := range vs {
			if img := v.Labels[LabelDiskImage]; img != "" {
				named[img] = true
			}
		}
		return named, nil
	}
	return nil, err
}

// checkLoop verifies that an existing volume's loop device is still backed
// by its image, re-attaching the image to the same device after a reboot,
// and that the image has a filesystem (formatLeft). It returns false for a
// volume that has no image (a plain volume).
func (d *Dialect) checkLoop(ctx context.Context, v volumeJSON) (bool, error) {
	img, dev := v.Labels[LabelDiskImage], v.Options["device"]
	if img == "" || dev == "" {
		return false, nil
	}
	if loopdisk.Backing(dev) != img {
		if _, err := os.Stat(img); err != nil {
			return false, fmt.Errorf("workspace image %s is gone: destroy or reset with wipe_workspace", img)
		}
		if err := loopdisk.Reattach(dev, img); err != nil {
			return false, fmt.Errorf("re-attach workspace image %s to %s: %v (destroy or reset with wipe_workspace)", img, dev, err)
		}
	}
	ok, err := loopdisk.Formatted(img)
	if err != nil {
		return false, fmt.Errorf("read workspace image %s: %w", img, err)
	}
	if !ok {
		if err := d.formatLeft(ctx, img, dev); err != nil {
			return false, err
		}
	}
	return true, nil
}

// formatLeftWait bounds how long formatLeft waits for an image's maker
// (its format and its volume's create) to let it go, and for a format a
// killed server left running to end.
const formatLeftWait = time.Minute

// formatLeft formats the image img on dev of a sized volume found with no
// filesystem: one whose server was killed while it formatted it, which
// nothing can have written to (nothing mounts it). It does so only for an
// image of this engine's in its images' directory, held (loopdisk.Hold)
// so that a maker still at work finishes first, and still without a
// filesystem then, on the device that image is attached to.
func (d *Dialect) formatLeft(ctx context.Context, img, dev string) error {
	if dir, tag := d.diskPlace(ctx); !ownDiskImage(img, dir, tag) {
		return fmt.Errorf("workspace image %s has no filesystem and is not one of this engine's workspace images: left as it is", img)
	}
	release, err := loopdisk.Hold(ctx, img, formatLeftWait)
	if err != nil {
		return fmt.Errorf("workspace image %s has no filesystem yet: %w", img, err)
	}
	defer release()
	if ok, err := loopdisk.Formatted(img); err != nil || ok {
		return err // its maker finished it
	}
	if loopdisk.Backing(dev) != img {
		return fmt.Errorf("workspace image %s is no longer attached to %s", img, dev)
	}
	err = loopdisk.Format(ctx, dev, "workspace")
	if err == nil || !strings.Contains(err.Error(), "in use") {
		return wrapFormatErr(img, err)
	}
	// mkfs opens the device exclusively: one a killed maker left running
	// (it outlives its server, which held the lock) makes this one refuse
	// ("apparently in use by the system"). Its end is waited for.
	deadline := time.Now().Add(formatLeftWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if ok, _ := loopdisk.Formatted(img); ok {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return wrapFormatErr(img, err)
}

// wrapFormatErr is formatLeft's error for img's format failing with err
// (nil for none).
func wrapFormatErr(img string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("format workspace image %s, left without a filesystem: %w", img, err)
}

// VolumeSize implements sandbox.VolumeSizer: the size of a sized volume's
// image file; false for a plain volume.
func (d *Dialect) VolumeSize(ctx context.Context, name string) (int64, bool, error) {
	v, err := d.volumeInspect(ctx, name)
	if err != nil {
		return 0, false, err
	}
	img := v.Labels[LabelDiskImage]
	if img == "" {
		return 0, false, nil
	}
	fi, err := os.Stat(img)
	if err != nil {
		return 0, false, err
	}
	return fi.Size(), true, nil
}

// removeImage deletes the image behind removed volume name, if it is one
// of this engine's workspace images (ownDiskImage), or one made for that
// volume before images carried their engine's tag (untaggedImage).
func (d *Dialect) removeImage(ctx context.Context, name string, v volumeJSON) {
	img := v.Labels[LabelDiskImage]
	if dir, tag := d.diskPlace(ctx); ownDiskImage(img, dir, tag) || untaggedImage(img, name, dir) {
		loopdisk.Detach(img)
	}
}

// diskPlace is the directory of this engine's workspace images and the
// tag their names carry ("" where it makes none), as DiskSupport learns
// them once.
func (d *Dialect) diskPlace(ctx context.Context) (dir, tag string) {
	d.DiskSupport(context.WithoutCancel(ctx))
	d.diskMu.Lock()
	defer d.diskMu.Unlock()
	return d.disksDir, d.diskTag
}

// ownDiskImage reports whether img names one of the workspace images of
// the engine whose images are in dir with tag in their names. Whatever
// else a volume's label names (a volume made by hand, another engine's
// image) is never formatted or deleted here.
func ownDiskImage(img, dir, tag string) bool {
	return dir != "" && tag != "" && filepath.IsAbs(img) && filepath.Clean(img) == img &&
		filepath.Dir(img) == dir && strings.HasSuffix(filepath.Base(img), "."+tag+".ext4")
}

// untaggedImage reports whether img is the name an image made for volume
// name had before images carried their engine's tag: <name>.<8 hex
// digits>.ext4 in dir.
func untaggedImage(img, name, dir string) bool {
	rest, ok := strings.CutPrefix(filepath.Base(img), name+".")
	hexPart, ok2 := strings.CutSuffix(rest, ".ext4")
	if !ok || !ok2 || len(hexPart) != 8 || dir == "" || img != filepath.Join(dir, filepath.Base(img)) {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

// RootfsDir implements sandbox.UsageDirs: overlay's upper directory.
func (d *Dialect) RootfsDir(ctx context.Context, name string) (string, error) {
	out, err := d.cli.Output(ctx, nil, "container", "inspect", "--format", "{{.GraphDriver.Data.UpperDir}}", "--", name)
	if err != nil {
		return "", err
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" || dir == "<no value>" || !filepath.IsAbs(dir) {
		return "", fmt.Errorf("container %s: the storage driver has no upper directory to measure", name)
	}
	return dir, nil
}

// InitPID implements sandbox.HostPIDs.
func (d *Dialect) InitPID(ctx context.Context, name string) (int, error) {
	out, err := d.cli.Output(ctx, nil, "container", "inspect", "--format", "{{.State.Pid}}", "--", name)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("container %s: no host PID (%q)", name, strings.TrimSpace(string(out)))
	}
	return pid, nil
}

// VolumeDir implements sandbox.UsageDirs.
func (d *Dialect) VolumeDir(ctx context.Context, volume string) (string, error) {
	v, err := d.volumeInspect(ctx, volume)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(v.Mountpoint) {
		return "", fmt.Errorf("volume %s has no local mountpoint", volume)
	}
	return v.Mountpoint, nil
}
