package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// storeEngine writes a CLI whose `info` names root as its store (driver
// overlay, the given graph options) and whose `image inspect` answers
// what the file idFile holds; it records every call but `info` in calls.
func storeEngine(t *testing.T, f Flavor, root, options string) (bin, idFile, calls string) {
	t.Helper()
	dir := t.TempDir()
	bin, idFile, calls = filepath.Join(dir, string(f)), filepath.Join(dir, "id"), filepath.Join(dir, "calls")
	info := root + `\toverlay\t` + filepath.Join(root, "volumes") + `\t` + options
	if f == Docker {
		info = root + `\toverlay2\t\t`
	}
	script := fmt.Sprintf(`#!/bin/sh
if [ "$1" = info ]; then printf '%s\n'; exit 0; fi
echo "$*" >> %q
if [ "$1 $2" = "image inspect" ]; then cat %q; exit 0; fi
exit 125
`, info, calls, idFile)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, idFile, calls
}

// learned waits until d knows its engine's store, starting the learn.
func learned(t *testing.T, d *Dialect) hostStore {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if s, ok := d.storeNow(); ok {
			return s
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the store was not learned within a minute")
	return hostStore{}
}

// writeAtomically replaces path as the engines do: a new file renamed
// over the old one.
func writeAtomically(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func countCalls(t *testing.T, calls string) int {
	t.Helper()
	b, err := os.ReadFile(calls)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestImageIDAnsweredFromTheStoreUntilItChanges: once an image's ID was
// read through the CLI, the same ref is answered without a CLI call while
// the engine's image names file stays as it was; a rewrite of that file
// (a rebuild, a tag) sends the next look to the CLI again, which then
// tells the new ID. A file that does not list the ID is not trusted.
func TestImageIDAnsweredFromTheStoreUntilItChanges(t *testing.T) {
	for _, f := range []Flavor{Podman, Docker} {
		t.Run(string(f), func(t *testing.T) {
			root := t.TempDir()
			names := filepath.Join(root, "overlay-images", "images.json")
			if f == Docker {
				names = filepath.Join(root, "image", "overlay2", "repositories.json")
			}
			writeAtomically(t, names, `[{"id":"aaaa1111","names":["localhost/img:latest"]}]`)
			bin, idFile, calls := storeEngine(t, f, root, "{}")
			writeAtomically(t, idFile, "aaaa1111\n")
			d := New(Options{Flavor: f, Binary: bin})
			d.store.learnDelay = 0
			ctx := context.Background()
			id := func() string {
				t.Helper()
				got, err := d.ImageID(ctx, "img")
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			if got := id(); got != "aaaa1111" {
				t.Fatalf("first look: %q", got)
			}
			if s := learned(t, d); s.images != names {
				t.Fatalf("the image names file: %q, want %q", s.images, names)
			}
			id() // read with the file known: kept
			before := countCalls(t, calls)
			for range 3 {
				if got := id(); got != "aaaa1111" {
					t.Fatalf("an unchanged store: %q", got)
				}
			}
			if n := countCalls(t, calls) - before; n != 0 {
				t.Fatalf("%d CLI calls for an image whose store did not change", n)
			}
			// Rebuilt under the same name.
			writeAtomically(t, idFile, "bbbb2222\n")
			writeAtomically(t, names, `[{"id":"bbbb2222","names":["localhost/img:latest"]},{"id":"aaaa1111","names":[]}]`)
			if got := id(); got != "bbbb2222" {
				t.Fatalf("after the rebuild: %q, want the new ID", got)
			}
			if got := id(); got != "bbbb2222" {
				t.Fatalf("after the rebuild, again: %q", got)
			}
			// A file that does not list what the CLI says is not where
			// this engine keeps it: every look asks the CLI.
			writeAtomically(t, idFile, "cccc3333\n")
			writeAtomically(t, names, `[]`)
			before = countCalls(t, calls)
			for range 2 {
				if got := id(); got != "cccc3333" {
					t.Fatalf("with a file that does not list it: %q", got)
				}
			}
			if n := countCalls(t, calls) - before; n != 2 {
				t.Fatalf("%d CLI calls for 2 looks with a file that does not list the image, want 2", n)
			}
		})
	}
}

// TestStoreNotUsedWhereImagesLiveElsewhere: podman with an image store of
// its own, or read-only ones beside the graph root, lists images the file
// there does not: nothing is read from the host.
func TestStoreNotUsedWhereImagesLiveElsewhere(t *testing.T) {
	for _, opts := range []string{`{"overlay.imagestore":"/srv/images"}`, `{"overlay.additionalImageStores":"/nfs/images"}`} {
		if _, err := parseStore(Podman, "/var/lib/containers/storage\toverlay\t/var/lib/containers/storage/volumes\t"+opts); err == nil {
			t.Errorf("graph options %s: the store was used", opts)
		}
	}
	for _, line := range []string{"relative\toverlay\t/v\t{}", "/root\t../x\t/v\t{}", "/root\toverlay", ""} {
		if _, err := parseStore(Podman, line); err == nil {
			t.Errorf("info %q: taken", line)
		}
	}
}

// TestVolumeOnHost: a volume is there when its directory is; a name
// that could reach outside the volumes directory, or an entry that is no
// directory, is left to the CLI; so is everything before the store is
// known.
func TestVolumeOnHost(t *testing.T) {
	root := t.TempDir()
	vols := filepath.Join(root, "volumes")
	if err := os.MkdirAll(filepath.Join(vols, "smt-ws-a", "_data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vols, "afile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(vols, "smt-ws-a"), filepath.Join(vols, "alink")); err != nil {
		t.Fatal(err)
	}
	bin, _, _ := storeEngine(t, Podman, root, "{}")
	d := New(Options{Flavor: Podman, Binary: bin})
	d.store.learnDelay = 0
	if _, known := d.VolumeOnHost("smt-ws-a"); known {
		t.Fatal("known before the store was learned")
	}
	learned(t, d)
	for _, c := range []struct {
		name          string
		exists, known bool
	}{
		{"smt-ws-a", true, true},
		{"smt-ws-b", false, true},
		{"afile", false, false},
		{"alink", false, false},
		{"../volumes/smt-ws-a", false, false},
		{"..", false, false},
		{"", false, false},
	} {
		if exists, known := d.VolumeOnHost(c.name); exists != c.exists || known != c.known {
			t.Errorf("%q: exists %v known %v, want %v %v", c.name, exists, known, c.exists, c.known)
		}
	}
}
