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
	"io"
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
	d, err := Start(ctx, img, size, label)
	if err != nil {
		return "", nil, err
	}
	if err := d.Wait(); err != nil {
		Detach(img)
		d.Release()
		return "", nil, err
	}
	return d.Dev, d.Release, nil
}

// Disk is an image Start made and attached, whose filesystem is being
// written: its device can be named (in a volume's create, say) while the
// format runs, and mounted once Wait returned nil.
type Disk struct {
	// Dev is the loop device the image is attached to.
	Dev  string
	f    *os.File
	done chan struct{}
	err  error
}

// Start is Make's first half: it creates the sparse image at img (which
// must not exist), holds it as Make does, attaches it to a free loop
// device and starts writing an ext4 filesystem on that device in the
// background. The caller must call Wait before anything mounts the device
// and, if Wait fails, Detach img; and Release once the image is named
// where Sweep's caller looks, or removed. On failure Start leaves nothing
// behind.
func Start(ctx context.Context, img string, size int64, label string) (_ *Disk, err error) {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
			Detach(img)
			err = fmt.Errorf("make an ext4 image: %w", err)
		}
	}()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		return nil, err
	}
	dev, err := attach(ctx, f, img)
	if err != nil {
		return nil, err
	}
	d := &Disk{Dev: dev, f: f, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		d.err = Format(ctx, dev, label)
	}()
	return d, nil
}

// Wait waits for the format Start began and returns its error.
func (d *Disk) Wait() error {
	<-d.done
	if d.err != nil {
		return fmt.Errorf("make an ext4 image: %w", d.err)
	}
	return nil
}

// Release lets Sweep take the image (see Make); it waits for the format.
func (d *Disk) Release() {
	<-d.done
	d.f.Close()
}

// Format writes an ext4 filesystem, labelled label (none when ""), on the
// block device dev. -m 0: no blocks reserved for root, the volume's user
// gets the whole size. Lazy init writes no inode tables or journal now
// (the kernel zeroes them later without filling the sparse file), and no
// discard: the image is sparse already. It writes through the device,
// not the image file, so that what the kernel read of the device before
// (a udev probe of the new device, say) is not what a mount then finds.
func Format(ctx context.Context, dev, label string) error {
	args := []string{"-q", "-F", "-m", "0", "-E", "root_owner=0:0,lazy_itable_init=1,lazy_journal_init=1,nodiscard"}
	if label != "" {
		args = append(args, "-L", label)
	}
	if err := run(ctx, "mkfs.ext4", append(args, dev)...); err != nil {
		return err
	}
	// Through to the image now, not at the next writeback: the format is
	// then on disk before the volume that names the device is used, and
	// the image's time is that of its making (Sweep's grace).
	d, err := os.OpenFile(dev, os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Formatted reports whether the image file img holds an ext4 (or ext2/3)
// filesystem: the superblock's magic number, at byte 1080. An image a
// process killed before its format ended has none.
func Formatted(img string) (bool, error) {
	f, err := os.Open(img)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var magic [2]byte
	if _, err := f.ReadAt(magic[:], 1080); errors.Is(err, io.EOF) {
		return false, fmt.Errorf("%s is too short to hold a filesystem", img)
	} else if err != nil {
		return false, err
	}
	return magic == [2]byte{0x53, 0xef}, nil
}

// Hold takes the lock Make and Start hold on img while they make it (and
// Sweep while it removes it), waiting up to wait for it, and returns its
// release: a caller that would change an image it found half made waits
// so for its maker to be done. It fails if the lock stays taken, or if
// img was replaced meanwhile.
func Hold(ctx context.Context, img string, wait time.Duration) (release func(), err error) {
	f, err := os.OpenFile(img, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		err = fmt.Errorf("another process held it for %s", wait)
	}
	if err == nil {
		var held, now syscall.Stat_t
		if err = syscall.Fstat(int(f.Fd()), &held); err == nil {
			if err = syscall.Stat(img, &now); err == nil && (held.Ino != now.Ino || held.Dev != now.Dev) {
				err = errors.New("it was replaced while held")
			}
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("hold %s: %w", img, err)
	}
	return func() { f.Close() }, nil
}

// attach attaches the image open as f (img) to a free loop device
// through /dev/loop-control where the platform can (attachFree), or
// through losetup (where the device's node is not there to open, in a
// /dev without udev, losetup makes the node).
func attach(ctx context.Context, f *os.File, img string) (string, error) {
	if dev, ok := attachFree(f); ok {
		return dev, nil
	}
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", img).Output()
	dev := strings.TrimSpace(string(out))
	if err == nil && !strings.HasPrefix(dev, "/dev/loop") {
		err = fmt.Errorf("losetup printed %q", dev)
	}
	return dev, err
}

// Sweep detaches and deletes the images in dir whose names end in suffix
// that a process killed while it made them left: those unchanged for
// grace, that no Make or Start holds, and that referenced, asked once they are
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
