package loopdisk

import (
	"errors"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// attachFree attaches the image open as f to a free loop device through
// /dev/loop-control, with no process started. The device gets an open
// file of its own (a new open of f's inode, through /proc): one holding
// Make's lock would keep the image locked as long as it is attached. ok
// is false where it did not attach it (no /dev/loop-control, no /proc,
// the free device's node missing, a refusal, free devices taken by
// others 16 times over): losetup then serves.
func attachFree(f *os.File) (dev string, ok bool) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer ctl.Close()
	own, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer own.Close()
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", false
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		lo, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", false
		}
		err = unix.IoctlSetInt(int(lo.Fd()), unix.LOOP_SET_FD, int(own.Fd()))
		lo.Close()
		if errors.Is(err, unix.EBUSY) {
			continue // another process took it first
		}
		if err != nil {
			return "", false // losetup tries, and says what fails
		}
		return dev, true
	}
	return "", false // taken under it each time: losetup tries
}
