package loopdisk

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// attachFree attaches the image open as f to a free loop device through
// /dev/loop-control, with no process started. The device gets an open
// file of its own (a new open of f's inode, through /proc): one holding
// Make's lock would keep the image locked as long as it is attached. ok
// is false, with no error, where it cannot (no /dev/loop-control, no
// /proc, the free device's node missing): losetup then serves.
func attachFree(f *os.File) (dev string, ok bool, err error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false, nil
	}
	defer ctl.Close()
	own, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false, nil
	}
	defer own.Close()
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", false, nil
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		lo, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", false, nil
		}
		err = unix.IoctlSetInt(int(lo.Fd()), unix.LOOP_SET_FD, int(own.Fd()))
		lo.Close()
		if errors.Is(err, unix.EBUSY) {
			continue // another process took it first
		}
		if err != nil {
			return "", true, fmt.Errorf("attach to %s: %w", dev, err)
		}
		return dev, true, nil
	}
	return "", false, nil
}
