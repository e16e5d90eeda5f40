package loopdisk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestMakeAndDetach(t *testing.T) {
	if why := Unavailable(); why != "" {
		t.Skip(why)
	}
	img := filepath.Join(t.TempDir(), "v.ext4")
	dev, err := Make(context.Background(), img, 64<<20, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Detach(img) })
	if got := Backing(dev); got != img {
		t.Fatalf("%s is backed by %q, want %s", dev, got, img)
	}
	fi, err := os.Stat(img)
	if err != nil || fi.Size() != 64<<20 {
		t.Fatalf("image: %v %v", fi, err)
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
	if _, err := Make(context.Background(), img, 64<<20, "test"); err == nil {
		t.Fatal("Make over an existing file succeeded")
	}
	if b, err := os.ReadFile(img); err != nil || string(b) != "x" {
		t.Fatalf("the existing file: %q %v", b, err)
	}
}
