package docker

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The engine's store as the host sees it. Each CLI call costs the
// engine's start (about 0.1 s of CPU for podman), which a new sandbox's
// first command pays for every look it needs. Two looks can be answered
// from the host's files instead, where the engine keeps them there and the
// server can read them:
//
//   - which image a name refers to: the engine keeps its image names in one
//     file (podman's <graph root>/<driver>-images/images.json, docker's
//     <root>/image/<driver>/repositories.json), rewritten whenever an
//     image is tagged, untagged, built, pulled or removed. ImageID answers
//     from what the CLI said last for a ref while that file's content is
//     what it was then, and only where that content gives the ref that ID
//     and no other (imageNamed);
//   - whether a volume exists: each volume of the local driver is a
//     directory named after it under the engine's volume path.
//
// Where was learned from one `info` call, made in the background a moment
// after the first use and again every storeRelearn; until then, and
// wherever the files are not there, not readable, or not what they should
// be, every look goes to the CLI as before. An engine the server reaches
// over a connection (a remote host, a docker context other than the
// default) is never read from the host; nor is podman with images kept
// outside its graph root (an image store of its own, or read-only ones).

// hostStore is where the engine keeps images and volumes on the host.
type hostStore struct {
	images  string // the file of image names; "" when not usable
	volumes string // the directory of volumes; "" when not usable
}

const (
	// storeLearnDelay is how long after the first use the store is
	// learned: the first use is a boot, whose engine calls the `info`
	// call would slow.
	storeLearnDelay = time.Second
	// storeLearnRetry is how long after a failed learn (an engine not up
	// yet) the next use tries again.
	storeLearnRetry = 30 * time.Second
	// storeRelearn is how long what was learned stands before a use
	// learns it again (the engine reconfigured meanwhile).
	storeRelearn = 5 * time.Minute
	// maxNamesFile bounds the image names file read on each look; a
	// larger one is left to the CLI.
	maxNamesFile = 16 << 20
)

// storeCache is a Dialect's knowledge of its engine's host store and the
// image IDs it read through the CLI.
type storeCache struct {
	mu         sync.Mutex
	learnDelay time.Duration // storeLearnDelay; less in tests
	learning   bool
	learnedAt  time.Time // zero until learned
	failedAt   time.Time
	store      hostStore
	ids        map[string]cachedID // by image ref
}

// cachedID is an image ID the CLI gave while the image names file had
// content of hash version.
type cachedID struct {
	id, version string
}

// storeNow returns what is known of the host store, and has it learned
// in the background if it is not known yet or was learned storeRelearn
// ago.
func (d *Dialect) storeNow() (hostStore, bool) {
	c := &d.store
	c.mu.Lock()
	defer c.mu.Unlock()
	due := c.learnedAt.IsZero() || time.Since(c.learnedAt) > storeRelearn
	if due && !c.learning && (c.failedAt.IsZero() || time.Since(c.failedAt) > storeLearnRetry) {
		c.learning = true
		time.AfterFunc(c.learnDelay, d.learnStore)
	}
	return c.store, !c.learnedAt.IsZero()
}

// learnStore asks the engine where it keeps images and volumes.
func (d *Dialect) learnStore() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := d.askStore(ctx)
	c := &d.store
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learning = false
	if err != nil {
		c.failedAt = time.Now()
		c.learnedAt, c.store = time.Time{}, hostStore{}
		if d.cli.Logger != nil {
			d.cli.Logger.Debug("engine store not read from the host", "err", err)
		}
		return
	}
	if s.images != c.store.images {
		clear(c.ids)
	}
	c.learnedAt, c.store = time.Now(), s
}

// askStore is learnStore's `info` call and its checks.
func (d *Dialect) askStore(ctx context.Context) (hostStore, error) {
	if d.remote() || d.remoteClient() {
		return hostStore{}, errors.New("the engine is reached over a connection")
	}
	format := "{{.DockerRootDir}}\t{{.Driver}}\t\t\t"
	if d.flavor == Podman {
		format = "{{.Store.GraphRoot}}\t{{.Store.GraphDriverName}}\t{{.Store.VolumePath}}\t{{json .Store.GraphOptions}}\t{{.Store.ConfigFile}}"
	} else {
		// A docker context other than the default may be another host's
		// engine, whatever this host's files say.
		if v := os.Getenv("DOCKER_CONTEXT"); v != "" && v != "default" {
			return hostStore{}, fmt.Errorf("docker context %q", v)
		}
		out, err := d.cli.Output(ctx, nil, "context", "show")
		if err != nil {
			return hostStore{}, err
		}
		if name := strings.TrimSpace(string(out)); name != "default" {
			return hostStore{}, fmt.Errorf("docker context %q", name)
		}
	}
	out, err := d.cli.Output(ctx, nil, "info", "--format", format)
	if err != nil {
		return hostStore{}, err
	}
	return parseStore(d.flavor, strings.TrimRight(string(out), "\n"))
}

// parseStore reads askStore's answer: root, driver, volume path and (for
// podman) the driver's options as JSON and the storage configuration file.
func parseStore(f Flavor, line string) (hostStore, error) {
	parts := strings.Split(line, "\t")
	if len(parts) != 5 {
		return hostStore{}, fmt.Errorf("engine info: unexpected answer %q", line)
	}
	root, driver, volumes, opts, conf := parts[0], parts[1], parts[2], parts[3], parts[4]
	if !filepath.IsAbs(root) || !plainName(driver) {
		return hostStore{}, fmt.Errorf("engine info: root %q, driver %q", root, driver)
	}
	var s hostStore
	if f == Podman {
		// An image store of its own, or read-only ones beside it, keep
		// images the file under the graph root does not list (or lists
		// as they were).
		if imagesElsewhere(opts, conf) {
			return hostStore{}, errors.New("the engine keeps images outside its graph root")
		}
		s.images = filepath.Join(root, driver+"-images", "images.json")
	} else {
		s.images = filepath.Join(root, "image", driver, "repositories.json")
		volumes = filepath.Join(root, "volumes")
	}
	if fi, err := os.Stat(volumes); err == nil && fi.IsDir() && filepath.IsAbs(volumes) {
		s.volumes = volumes
	}
	return s, nil
}

// imagesElsewhere reports whether podman's driver options, its storage
// configuration file or STORAGE_OPTS name an image store: one of its own
// (`imagestore`) or read-only ones (`additionalimagestores`). A
// configuration file that cannot be read counts as naming one.
func imagesElsewhere(opts, conf string) bool {
	if strings.Contains(strings.ToLower(opts+os.Getenv("STORAGE_OPTS")), "imagestore") {
		return true
	}
	if conf == "" || conf == "<no value>" {
		return false // podman's built-in defaults
	}
	f, err := os.Open(conf)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "#") && strings.Contains(strings.ToLower(line), "imagestore") {
			return true
		}
	}
	return sc.Err() != nil
}

// readNames reads the image names file at path and returns its content and
// the hash of it.
func readNames(path string) ([]byte, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxNamesFile+1))
	if err != nil {
		return nil, "", err
	}
	if len(b) > maxNamesFile {
		return nil, "", fmt.Errorf("%s: larger than %d bytes", path, maxNamesFile)
	}
	sum := sha256.Sum256(b)
	return b, fmt.Sprintf("%x", sum), nil
}

// cachedImageID is ref's ID as the CLI said it while the image names
// file held what it holds now, and the hash of that content ("" when the
// file cannot say: the CLI is asked and nothing is kept).
func (d *Dialect) cachedImageID(ref string) (id, version string) {
	s, ok := d.storeNow()
	if !ok || s.images == "" {
		return "", ""
	}
	_, v, err := readNames(s.images)
	if err != nil {
		return "", ""
	}
	c := &d.store
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.ids[ref]; ok && e.version == v {
		return e.id, v
	}
	return "", v
}

// keepImageID keeps the ID the CLI gave for ref while the image names
// file's content had hash version, if it still has and gives ref that ID
// and no other (else the file is not where the engine keeps this image's
// name, or it changed meanwhile, and nothing is kept).
func (d *Dialect) keepImageID(ref, id, version string) {
	s, ok := d.storeNow()
	if !ok || s.images == "" || version == "" || id == "" {
		return
	}
	b, v, err := readNames(s.images)
	if err != nil || v != version || !imageNamed(d.flavor, b, ref, id) {
		return
	}
	c := &d.store
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.store.images != s.images {
		return // learned again meanwhile
	}
	if c.ids == nil {
		c.ids = map[string]cachedID{}
	}
	if len(c.ids) > 64 {
		clear(c.ids) // refs come from profiles: a few
	}
	c.ids[ref] = cachedID{id: id, version: version}
}

// WarmImageID implements sandbox.ImageIDWarmer: it looks ref up through the
// CLI, where that lets later looks be answered from the host, and does
// nothing elsewhere.
func (d *Dialect) WarmImageID(ctx context.Context, ref string) {
	if s, ok := d.storeNow(); ok && s.images != "" {
		_, _ = d.ImageID(ctx, ref)
	}
}

var _ sandbox.ImageIDWarmer = (*Dialect)(nil)

// imageNamed reports whether the image names file b gives ref the ID id,
// and no image but that one a name ref may stand for. Refs by digest are
// not answered from the file.
func imageNamed(f Flavor, b []byte, ref, id string) bool {
	want, ok := taggedRef(ref)
	if !ok {
		return false
	}
	if f == Podman {
		// A short name may stand for any registry's image of that path
		// (localhost/ first): one image must carry it.
		var images []struct {
			ID    string   `json:"id"`
			Names []string `json:"names"`
		}
		if json.Unmarshal(b, &images) != nil {
			return false
		}
		found := ""
		for _, img := range images {
			for _, n := range img.Names {
				if n == want || strings.HasSuffix(n, "/"+want) {
					if found != "" && found != img.ID {
						return false
					}
					found = img.ID
				}
			}
		}
		return found != "" && found == strings.TrimPrefix(id, "sha256:")
	}
	var repos struct {
		Repositories map[string]map[string]string `json:"Repositories"`
	}
	if json.Unmarshal(b, &repos) != nil {
		return false
	}
	familiar := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(want, "index.docker.io/"), "docker.io/"), "library/")
	for _, tags := range repos.Repositories {
		for _, name := range []string{want, familiar} {
			if got, ok := tags[name]; ok {
				return got == id
			}
		}
	}
	return false
}

// taggedRef is ref with ":latest" where it names no tag; false for a ref
// by digest.
func taggedRef(ref string) (string, bool) {
	if ref == "" || strings.Contains(ref, "@") {
		return "", false
	}
	if !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
		ref += ":latest"
	}
	return ref, true
}

var _ sandbox.HostVolumes = (*Dialect)(nil)

// VolumeOnHost implements sandbox.HostVolumes: whether volume name has
// its directory under the engine's volume path.
func (d *Dialect) VolumeOnHost(name string) (exists, known bool) {
	s, ok := d.storeNow()
	if !ok || s.volumes == "" || !plainName(name) {
		return false, false
	}
	fi, err := os.Lstat(filepath.Join(s.volumes, name))
	switch {
	case err == nil:
		return fi.IsDir(), fi.IsDir()
	case errors.Is(err, fs.ErrNotExist):
		return false, true
	default:
		return false, false
	}
}

// plainName reports whether name can only be one entry of a directory.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\\\x00")
}
