package loopdisk

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
)

func TestMakeAndDetach(t *testing.T) {
	if why := Unavailable(); why != "" {
		t.Skip(why)
	}
	img := filepath.Join(t.TempDir(), "v.ext4")
	dev, release, err := Make(context.Background(), img, 64<<20, "test")
	if err != nil {
		t.Fatal(err)
	}
	release()
	t.Cleanup(func() { Detach(img) })
	if got := Backing(dev); got != img {
		t.Fatalf("%s is backed by %q, want %s", dev, got, img)
	}
	fi, err := os.Stat(img)
	if err != nil || fi.Size() != 64<<20 {
		t.Fatalf("image: %v %v", fi, err)
	}
	// Written through the device, the filesystem is in the image file on
	// return, where the host reads it (no unmounted writeback left).
	if ok, err := Formatted(img); err != nil || !ok {
		t.Fatalf("the new image: formatted %v, %v", ok, err)
	}
	bare := filepath.Join(t.TempDir(), "bare.ext4")
	if err := os.WriteFile(bare, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, err := Formatted(bare); err != nil || ok {
		t.Fatalf("a zeroed file: formatted %v, %v", ok, err)
	}
	// An ext4 filesystem with the formatter's lost+found.
	if out, err := exec.Command("debugfs", "-R", "stat /lost+found", img).CombinedOutput(); err == nil &&
		!strings.Contains(string(out), "Mode:  0700") {
		t.Errorf("lost+found: %s", out)
	}
	Detach(img)
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("the image is still there: %v", err)
	}
	if got := Backing(dev); got == img {
		t.Errorf("%s is still attached to the image", dev)
	}
	// A second image at a path that exists is refused, and the file kept.
	if err := os.WriteFile(img, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Make(context.Background(), img, 64<<20, "test"); err == nil {
		t.Fatal("Make over an existing file succeeded")
	}
	if b, err := os.ReadFile(img); err != nil || string(b) != "x" {
		t.Fatalf("the existing file: %q %v", b, err)
	}
}

// TestSweep: of the images in a directory, Sweep removes (detached and
// deleted) only those a killed maker left: old, held by no Make, named by
// no reference. An image being made, one in use, one just made, another
// engine's and a file that is not an image stay.
func TestSweep(t *testing.T) {
	if why := Unavailable(); why != "" {
		t.Skip(why)
	}
	dir := t.TempDir()
	long := time.Now().Add(-time.Hour)
	mk := func(name string, old bool) (string, string, func()) {
		t.Helper()
		img := filepath.Join(dir, name+".mine.ext4")
		dev, release, err := Make(context.Background(), img, 16<<20, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { release(); Detach(img) })
		if old {
			if err := os.Chtimes(img, long, long); err != nil {
				t.Fatal(err)
			}
		}
		return img, dev, release
	}
	left, leftDev, release := mk("left", true) // its maker was killed
	release()
	held, _, _ := mk("held", true) // its maker is slow: still held
	used, _, release := mk("used", true)
	release()
	young, _, release := mk("young", false)
	release()
	theirs, _, release := mk("theirs", true) // another engine's, which this one's references do not name
	release()
	if err := os.Rename(theirs, strings.TrimSuffix(theirs, ".mine.ext4")+".other.ext4"); err != nil {
		t.Fatal(err)
	}
	theirs = strings.TrimSuffix(theirs, ".mine.ext4") + ".other.ext4"
	t.Cleanup(func() { Detach(theirs) })
	other := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(other, long, long); err != nil {
		t.Fatal(err)
	}
	if _, err := Sweep(dir, ".mine.ext4", time.Minute, func() (map[string]bool, error) { return nil, errors.New("engine down") }); err == nil {
		t.Fatal("a sweep whose references could not be read said nothing")
	}
	if _, err := os.Stat(left); err != nil {
		t.Fatal("a sweep whose references could not be read removed an image")
	}
	gone, err := Sweep(dir, ".mine.ext4", time.Minute, func() (map[string]bool, error) { return map[string]bool{used: true}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gone, []string{left}) {
		t.Fatalf("swept %v, want only %s", gone, left)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("the left image is still there: %v", err)
	}
	if Backing(leftDev) == left {
		t.Errorf("%s is still attached to the left image", leftDev)
	}
	for _, f := range []string{held, used, young, theirs, other} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestHoldWaitsForTheMaker: an image being made (Start, until Release)
// cannot be held; once its maker lets it go, it can, and a replaced image
// is refused.
func TestHoldWaitsForTheMaker(t *testing.T) {
	if why := Unavailable(); why != "" {
		t.Skip(why)
	}
	img := filepath.Join(t.TempDir(), "h.ext4")
	d, err := Start(context.Background(), img, 16<<20, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Detach(img) })
	if _, err := Hold(context.Background(), img, 200*time.Millisecond); err == nil {
		t.Fatal("an image its maker still holds was held")
	}
	if err := d.Wait(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		release, err := Hold(context.Background(), img, time.Minute)
		if err == nil {
			release()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	d.Release()
	if err := <-done; err != nil {
		t.Fatalf("held after its maker let it go: %v", err)
	}
	if ok, err := Formatted(img); err != nil || !ok {
		t.Fatalf("formatted %v, %v", ok, err)
	}
}
