package enginetest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The disk-limit tests fill the host's disk as fast as it goes (about a
// gigabyte per mechanism, then sync). While they do, fsync can stall for
// seconds, longer than the state file's lock timeout, so tests that assert
// what the state file does would fail for a reason that is not theirs.
// Such tests take the disk lock shared; the tests that fill the disk take
// it exclusively. It is a flock on a file of the user's in the temp
// directory, so it holds across the test binaries go test runs in
// parallel.

// QuietDisk waits until no test fills the disk and keeps it so until t ends.
func QuietDisk(t testing.TB) { holdDisk(t, unix.LOCK_SH) }

// FillsDisk waits until no other test needs a quiet disk or fills it, and
// keeps them waiting until t ends.
func FillsDisk(t testing.TB) { holdDisk(t, unix.LOCK_EX) }

func holdDisk(t testing.TB, how int) {
	t.Helper()
	// One per user: a file another user made (root's, from an earlier
	// run) could not be opened, and their tests fill other disks' quotas.
	f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("sandbox-mcp-test-disk-%d.lock", os.Getuid())), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}
