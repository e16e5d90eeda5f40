package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/loopdisk"
)

// TestVolumeImages: `volume create` makes an ext4 image of the size asked
// (512 GiB, sparse, without -s) on a loop device, as Apple's volumes are:
// a container sees the formatter's lost+found and the size, inspect
// reports the image's size, and `volume delete` detaches and deletes it.
func TestVolumeImages(t *testing.T) {
	s := newStandin(t)
	if why := loopdisk.Unavailable(); why != "" {
		t.Skipf("volumes are plain podman volumes here: %s", why)
	}
	name := uniqueName(t)
	sized, dflt := name+"-sized", name+"-default"
	t.Cleanup(func() {
		// Through the stand-in, which detaches the images.
		_ = s.run(t, nil, "", "volume", "delete", sized)
		_ = s.run(t, nil, "", "volume", "delete", dflt)
	})
	s.must(t, nil, "volume", "create", "-s", "64M", sized)
	s.must(t, nil, "volume", "create", dflt)

	images := map[string]string{}
	for vol, size := range map[string]int64{sized: 64 << 20, dflt: 512 << 30} {
		var got []struct {
			Configuration struct {
				SizeInBytes int64 `json:"sizeInBytes"`
			} `json:"configuration"`
		}
		if err := json.Unmarshal([]byte(s.must(t, nil, "volume", "inspect", vol)), &got); err != nil || len(got) != 1 {
			t.Fatalf("inspect %s: %v %+v", vol, err, got)
		}
		if got[0].Configuration.SizeInBytes != size {
			t.Errorf("%s: sizeInBytes %d, want %d", vol, got[0].Configuration.SizeInBytes, size)
		}
		out, err := podman("volume", "inspect", "--format", "{{index .Labels \""+labelVolImage+"\"}} {{.Options.device}}", vol)
		img, dev, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
		if err != nil || img == "" || loopdisk.Backing(dev) != img {
			t.Fatalf("%s: image %q on %q (%s %v)", vol, img, dev, out, err)
		}
		images[vol] = img
		fi, err := os.Stat(img)
		if err != nil || fi.Size() != size {
			t.Fatalf("%s: image %v %v", vol, fi, err)
		}
	}

	// In a container: an ext4 root with lost+found, of the volume's size.
	r := s.run(t, nil, "", "run", "--rm", "-v", sized+":/data", "mcp-dev",
		"sh", "-c", "stat -c '%a %U' /data/lost+found && stat -f -c %T /data && df -Pk /data | tail -1 | awk '{print $2}'")
	lines := strings.Fields(r.stdout)
	if r.code != 0 || len(lines) != 4 || lines[0] != "700" || lines[1] != "root" || lines[2] != "ext2/ext3" {
		t.Fatalf("the volume in a container: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	// 64 MiB less what the filesystem keeps for itself.
	if kb, err := strconv.Atoi(lines[3]); err != nil || kb > 64<<10 || kb < 48<<10 {
		t.Errorf("df: %s KiB", lines[3])
	}

	s.must(t, nil, "volume", "delete", sized, dflt)
	for vol, img := range images {
		if _, err := os.Stat(img); !os.IsNotExist(err) {
			t.Errorf("%s: image %s left after delete (%v)", vol, img, err)
		}
		if out, _ := exec.Command("losetup", "--associated", img).Output(); len(out) > 0 {
			t.Errorf("%s: still attached: %s", vol, out)
		}
	}
}
