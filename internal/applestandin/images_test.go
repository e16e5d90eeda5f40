package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// fakeApp is the stand-in driving a fake podman, the shell script given.
func fakeApp(t *testing.T, script string) *app {
	t.Helper()
	fake := filepath.Join(t.TempDir(), "podman")
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	return &app{v: MustVersion("1.5.0"), eng: &engine{bin: fake}, stdout: &out, stderr: &errb}
}

// listsMcpDevAlone fails unless a's image list is mcp-dev (aaa) alone.
func listsMcpDevAlone(t *testing.T, a *app) {
	t.Helper()
	imgs, err := a.listImages()
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[0].img.ID != "aaa" {
		t.Fatalf("images %+v, want mcp-dev (aaa) alone", imgs)
	}
}

// listsWsDefaultAlone fails unless a's volume list is ws-default alone.
func listsWsDefaultAlone(t *testing.T, a *app) {
	t.Helper()
	vols, err := a.eng.listVolumes()
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 || vols[0].Name != "ws-default" {
		t.Fatalf("volumes %+v, want ws-default alone", vols)
	}
}

// TestImageListSurvivesARemovalWhileReading: podman fails an inspect of
// several images as a whole, printing none of them, when one is removed
// while it reads them. The stand-in's list must read again, not report
// that no image exists (the server then says the default image is
// missing).
func TestImageListSurvivesARemovalWhileReading(t *testing.T) {
	// Image bbb is being removed: the first inspect of both fails, after
	// which the listing no longer has it.
	script := `#!/bin/sh
d=$(dirname "$0")
case "$1 $2" in
"images -q") echo aaa; [ -e "$d/gone" ] || echo bbb;;
"image inspect") shift 2
  if [ "$*" = aaa ]; then echo '[{"Id":"aaa","RepoTags":["localhost/mcp-dev:latest"]}]'; exit 0; fi
  touch "$d/gone"
  echo 'Error: retrieving label for image "bbb": you may need to remove the image to resolve the error: image not known' >&2
  exit 125;;
*) exit 1;;
esac
`
	listsMcpDevAlone(t, fakeApp(t, script))
}

// TestImageListLeavesOutAnImageThatNeverInspects: an image podman lists
// but cannot inspect (a damaged one) is left out of the list after the
// retries, rather than failing every list.
func TestImageListLeavesOutAnImageThatNeverInspects(t *testing.T) {
	script := `#!/bin/sh
case "$1 $2" in
"images -q") echo aaa; echo bbb;;
"image inspect") shift 2
  if [ "$*" = aaa ]; then echo '[{"Id":"aaa","RepoTags":["localhost/mcp-dev:latest"]}]'; exit 0; fi
  echo 'Error: retrieving label for image "bbb": you may need to remove the image to resolve the error: image not known' >&2
  exit 125;;
*) exit 1;;
esac
`
	listsMcpDevAlone(t, fakeApp(t, script))
}

// TestVolumeListSurvivesARemovalWhileListing: podman's `volume ls` fails
// when another client removes a volume while it lists. The stand-in's
// list (and with it `volume delete`, which lists first) must list again,
// not fail with podman's words, which no Apple CLI prints.
func TestVolumeListSurvivesARemovalWhileListing(t *testing.T) {
	script := `#!/bin/sh
d=$(dirname "$0")
case "$1 $2" in
"volume ls") if [ ! -e "$d/gone" ]; then touch "$d/gone"
    echo 'Error: no volume with name "ws-other" found in database: no such volume' >&2; exit 125; fi
  echo ws-default;;
"volume inspect") echo '[{"Name":"ws-default","Labels":{}}]';;
*) exit 1;;
esac
`
	listsWsDefaultAlone(t, fakeApp(t, script))
}

// TestVolumeListSurvivesARemovalWhileInspecting: podman looks up every
// volume an inspect names before it reads them, and fails the inspect as
// a whole, printing none, when one is removed between the two. The
// stand-in's list must still hold the volumes that stay: a list without
// them tells the server (and prune) that a workspace is gone.
func TestVolumeListSurvivesARemovalWhileInspecting(t *testing.T) {
	script := `#!/bin/sh
d=$(dirname "$0")
case "$1 $2" in
"volume ls") echo ws-default; [ -e "$d/gone" ] || echo ws-other;;
"volume inspect") shift 2
  case "$*" in
  ws-default) echo '[{"Name":"ws-default","Labels":{}}]';;
  ws-other) echo '[]'; echo 'Error: inspecting object: no such volume ws-other' >&2; exit 125;;
  *) touch "$d/gone"
    echo 'Error: no volume with name "ws-other" found in database: no such volume' >&2; exit 125;;
  esac;;
*) exit 1;;
esac
`
	listsWsDefaultAlone(t, fakeApp(t, script))
}
