// Package loopdisk makes ext4 filesystems in sparse image files attached
// to loop devices, for volumes with a real size: a full filesystem is
// ENOSPC for the writer, and the host loses at most the image's size. The
// docker/podman dialect makes sized workspace volumes so, and the stand-in
// for Apple's container CLI makes every volume so, as Apple's are ext4
// images. mkfs.ext4 puts a lost+found (root's, mode 0700) in each, as
// Apple's formatter does.
//
// It needs root, losetup and mkfs.ext4 on PATH and /dev/loop-control
// (Unavailable says which is missing).
package loopdisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Unavailable says why images cannot be made and attached to loop devices
// on this host, or "" when they can.
func Unavailable() string {
	if os.Geteuid() != 0 {
		return "not running as root (loop devices need it)"
	}
	for _, p := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(p); err != nil {
			return p + " is not installed"
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return "no /dev/loop-control"
	}
	return ""
}

// Make creates a sparse ext4 image of size bytes at img (which must not
// exist), with filesystem label label (none when ""), and attaches it to
// a free loop device, which it returns. On failure it leaves nothing
// behind. The image is held (an exclusive flock) from its creation until
// release is called, which Sweep respects: the caller releases it once
// the image is named where Sweep's caller looks (a volume's label), or
// removed. A process killed meanwhile releases it with its death.
func Make(ctx context.Context, img string, size int64, label string) (dev string, release func(), err error) {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", nil, err
	}
	release = func() { f.Close() }
	defer func() {
		if err != nil {
			release()
		}
	}()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	if err == nil {
		err = f.Truncate(size)
	}
	if err == nil {
		// -m 0: no blocks reserved for root, the volume's user gets the
		// whole size. Lazy init writes no inode tables or journal now
		// (the kernel zeroes them later without filling the sparse file).
		args := []string{"-q", "-F", "-m", "0", "-E", "root_owner=0:0,lazy_itable_init=1,lazy_journal_init=1"}
		if label != "" {
			args = append(args, "-L", label)
		}
		err = run(ctx, "mkfs.ext4", append(args, img)...)
	}
	if err == nil {
		var out []byte
		out, err = exec.CommandContext(ctx, "losetup", "--find", "--show", img).Output()
		dev = strings.TrimSpace(string(out))
		if err == nil && !strings.HasPrefix(dev, "/dev/loop") {
			err = fmt.Errorf("losetup printed %q", dev)
		}
	}
	if err != nil {
		Detach(img)
		return "", nil, fmt.Errorf("make an ext4 image: %w", err)
	}
	return dev, release, nil
}

// Sweep detaches and deletes the images in dir whose names end in suffix
// that a process killed while it made them left: those unchanged for
// grace, that no Make holds, and that referenced, asked once they are
// held here, does not name. It returns the images it removed. A failed
// referenced removes nothing.
func Sweep(dir, suffix string, grace time.Duration, referenced func() (map[string]bool, error)) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	held := map[string]*os.File{}
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), suffix) || e.Name() == suffix {
			continue
		}
		img := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(img, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() || time.Since(fi.ModTime()) < grace ||
			syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		held[img] = f
	}
	if len(held) == 0 {
		return nil, nil
	}
	refs, err := referenced()
	if err != nil {
		return nil, err
	}
	var gone []string
	for img := range held {
		if !refs[img] {
			Detach(img)
			gone = append(gone, img)
		}
	}
	slices.Sort(gone)
	return gone, nil
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Backing is the file behind a loop device, or "".
func Backing(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Reattach attaches img to the loop device dev again (after a reboot).
func Reattach(dev, img string) error {
	if out, err := exec.Command("losetup", dev, img).CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Detach detaches every loop device backed by img and deletes img.
func Detach(img string) {
	out, _ := exec.Command("losetup", "--associated", img).Output()
	for _, line := range strings.Split(string(out), "\n") {
		if dev, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(dev, "/dev/loop") && Backing(dev) == img {
			_ = exec.Command("losetup", "--detach", dev).Run()
		}
	}
	os.Remove(img)
}
