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
	info := root + `\toverlay\t` + filepath.Join(root, "volumes") + `\t` + options + `\t`
	if f == Docker {
		info = root + `\toverlay2\t\t\t`
	}
	script := fmt.Sprintf(`#!/bin/sh
if [ "$1" = info ]; then printf '%s\n'; exit 0; fi
if [ "$1 $2" = "context show" ]; then echo default; exit 0; fi
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

// namesFile is an image names file in f's format: each image ID with
// its names.
func namesFile(f Flavor, images ...[2]string) string {
	if f == Podman {
		var parts []string
		for _, im := range images {
			names := "[]"
			if im[1] != "" {
				names = `["localhost/` + im[1] + `"]`
			}
			parts = append(parts, `{"id":"`+im[0]+`","names":`+names+`}`)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	repos := map[string][]string{}
	for _, im := range images {
		if im[1] != "" {
			repo, _, _ := strings.Cut(im[1], ":")
			repos[repo] = append(repos[repo], `"`+im[1]+`":"sha256:`+im[0]+`"`)
		}
	}
	var parts []string
	for repo, tags := range repos {
		parts = append(parts, `"`+repo+`":{`+strings.Join(tags, ",")+`}`)
	}
	return `{"Repositories":{` + strings.Join(parts, ",") + `}}`
}

// TestImageIDAnsweredFromTheStoreUntilItChanges: once an image's ID was
// read through the CLI, the same ref is answered without a CLI call while
// the engine's image names file holds what it held then; a change to it
// (a rebuild, a tag) sends the next look to the CLI again, which then
// tells the new ID. A file that does not give the ref that ID, or gives
// its name to two images, is not trusted.
func TestImageIDAnsweredFromTheStoreUntilItChanges(t *testing.T) {
	for _, f := range []Flavor{Podman, Docker} {
		t.Run(string(f), func(t *testing.T) {
			root := t.TempDir()
			names := filepath.Join(root, "overlay-images", "images.json")
			if f == Docker {
				names = filepath.Join(root, "image", "overlay2", "repositories.json")
			}
			idOf := func(hex string) string {
				if f == Docker {
					return "sha256:" + hex
				}
				return hex
			}
			writeAtomically(t, names, namesFile(f, [2]string{"aaaa1111", "img:latest"}))
			bin, idFile, calls := storeEngine(t, f, root, "{}")
			writeAtomically(t, idFile, idOf("aaaa1111")+"\n")
			d := New(Options{Flavor: f, Binary: bin})
			d.store.learnDelay = 0
			ctx := context.Background()
			id := func(ref string) string {
				t.Helper()
				got, err := d.ImageID(ctx, ref)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			// looks counts the CLI calls n looks at ref make, each
			// answered want.
			looks := func(ref string, n int, want string) int {
				t.Helper()
				before := countCalls(t, calls)
				for range n {
					if got := id(ref); got != idOf(want) {
						t.Fatalf("%s: %q, want %q", ref, got, idOf(want))
					}
				}
				return countCalls(t, calls) - before
			}
			if got := id("img"); got != idOf("aaaa1111") {
				t.Fatalf("first look: %q", got)
			}
			if s := learned(t, d); s.images != names {
				t.Fatalf("the image names file: %q, want %q", s.images, names)
			}
			id("img") // read with the file known: kept
			if n := looks("img", 3, "aaaa1111"); n != 0 {
				t.Fatalf("%d CLI calls for an image whose store did not change", n)
			}
			// Rebuilt under the same name: the old image loses it.
			writeAtomically(t, idFile, idOf("bbbb2222")+"\n")
			writeAtomically(t, names, namesFile(f, [2]string{"bbbb2222", "img:latest"}, [2]string{"aaaa1111", ""}))
			if n := looks("img", 3, "bbbb2222"); n != 1 {
				t.Fatalf("%d CLI calls for 3 looks after the rebuild, want 1", n)
			}
			// The same size, another content: another version.
			writeAtomically(t, idFile, idOf("cccc3333")+"\n")
			writeAtomically(t, names, namesFile(f, [2]string{"cccc3333", "img:latest"}, [2]string{"aaaa1111", ""}))
			if n := looks("img", 2, "cccc3333"); n != 1 {
				t.Fatalf("%d CLI calls for 2 looks after a change of the same size, want 1", n)
			}
			// A file that does not give the ref what the CLI says is not
			// where this engine keeps it: every look asks the CLI.
			writeAtomically(t, idFile, idOf("dddd4444")+"\n")
			writeAtomically(t, names, namesFile(f, [2]string{"dddd4444", "other:latest"}))
			if n := looks("img", 2, "dddd4444"); n != 2 {
				t.Fatalf("%d CLI calls for 2 looks with a file that does not name the image, want 2", n)
			}
			// Nor is a ref by digest answered from it.
			writeAtomically(t, names, namesFile(f, [2]string{"dddd4444", "img:latest"}))
			if n := looks("img@sha256:dddd4444", 2, "dddd4444"); n != 2 {
				t.Fatalf("%d CLI calls for 2 looks by digest, want 2", n)
			}
			if f == Podman {
				// Two images that a short name may stand for (two
				// registries' of the same path): the CLI decides.
				writeAtomically(t, names, `[{"id":"eeee5555","names":["docker.io/library/img:latest"]},{"id":"dddd4444","names":["localhost/img:latest"]}]`)
				if n := looks("img", 2, "dddd4444"); n != 2 {
					t.Fatalf("%d CLI calls for 2 looks at an ambiguous short name, want 2", n)
				}
			}
		})
	}
}

// TestStoreNotUsedWhereImagesLiveElsewhere: podman with an image store of
// its own, or read-only ones beside the graph root (in its driver's
// options, its storage configuration or STORAGE_OPTS), lists images the
// file there does not: nothing is read from the host. Nor from a docker
// whose context is not the default one, nor from an engine reached over a
// connection.
func TestStoreNotUsedWhereImagesLiveElsewhere(t *testing.T) {
	line := func(opts, conf string) string {
		return "/var/lib/containers/storage\toverlay\t/var/lib/containers/storage/volumes\t" + opts + "\t" + conf
	}
	for _, opts := range []string{`{"overlay.imagestore":"/srv/images"}`, `{"overlay.additionalImageStores":"/nfs/images"}`} {
		if _, err := parseStore(Podman, line(opts, "")); err == nil {
			t.Errorf("graph options %s: the store was used", opts)
		}
	}
	conf := filepath.Join(t.TempDir(), "storage.conf")
	if err := os.WriteFile(conf, []byte("[storage]\ndriver = \"overlay\"\n# imagestore = \"/commented\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseStore(Podman, line("{}", conf)); err != nil {
		t.Errorf("a configuration without an image store (one commented out): %v", err)
	}
	if err := os.WriteFile(conf, []byte("[storage]\nimagestore = \"/srv/images\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseStore(Podman, line("{}", conf)); err == nil {
		t.Error("a configuration with an image store of its own: the store was used")
	}
	t.Setenv("STORAGE_OPTS", "--storage-opt=overlay.imagestore=/srv/images")
	if _, err := parseStore(Podman, line("{}", "")); err == nil {
		t.Error("STORAGE_OPTS with an image store: the store was used")
	}
	t.Setenv("STORAGE_OPTS", "")
	for _, l := range []string{"relative\toverlay\t/v\t{}\t", "/root\t../x\t/v\t{}\t", "/root\toverlay", ""} {
		if _, err := parseStore(Podman, l); err == nil {
			t.Errorf("info %q: taken", l)
		}
	}
	root := t.TempDir()
	bin, _, _ := storeEngine(t, Docker, root, "")
	t.Setenv("DOCKER_CONTEXT", "remote-box")
	if _, err := New(Options{Flavor: Docker, Binary: bin}).askStore(context.Background()); err == nil {
		t.Error("docker with another context: the store was used")
	}
	t.Setenv("DOCKER_CONTEXT", "")
	if _, err := New(Options{Flavor: Docker, Binary: bin, Env: []string{"DOCKER_HOST=tcp://10.0.0.9:2376"}}).askStore(context.Background()); err == nil {
		t.Error("docker over TCP: the store was used")
	}
	if _, err := New(Options{Flavor: Docker, Binary: bin}).askStore(context.Background()); err != nil {
		t.Errorf("a local docker: %v", err)
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
