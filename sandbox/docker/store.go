package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// The engine's store as the host sees it. Each CLI call costs the
// engine's start (about 0.1 s of CPU for podman), which a new sandbox's
// first command pays for every look it needs. Two looks can be answered
// from the host's files instead, where the engine keeps them there and the
// server can read them:
//
//   - which image a name refers to: the engine rewrites one file (podman's
//     <graph root>/<driver>-images/images.json, docker's
//     <root>/image/<driver>/repositories.json) whenever an image is
//     tagged, untagged, built, pulled or removed, each time under a new
//     inode. ImageID answers from what the CLI said last while that file is
//     the one it was then;
//   - whether a volume exists: each volume of the local driver is a
//     directory named after it under the engine's volume path.
//
// Where was learned from one `info` call, made in the background a moment
// after the first use; until then, and wherever the files are not there,
// not readable, or not what they should be, every look goes to the CLI as
// before.

// hostStore is where the engine keeps images and volumes on the host.
type hostStore struct {
	images  string // the file of image names; "" when not usable
	volumes string // the directory of volumes; "" when not usable
}

// storeLearnDelay is how long after the first use the store is learned:
// the first use is a boot, whose engine calls the `info` call would slow.
const storeLearnDelay = time.Second

// storeLearnRetry is how long after a failed learn (an engine not up yet)
// the next use tries again.
const storeLearnRetry = 30 * time.Second

// storeCache is a Dialect's knowledge of its engine's host store and the
// image IDs it read through the CLI.
type storeCache struct {
	mu         sync.Mutex
	learnDelay time.Duration // storeLearnDelay; less in tests
	learning   bool
	learned    bool
	failedAt   time.Time
	store      hostStore
	ids        map[string]cachedID // by image ref
}

// cachedID is an image ID the CLI gave while the image names file had
// version (fileVersion).
type cachedID struct {
	id, version string
}

// storeNow returns what is known of the host store, and has it learned
// in the background if it is not known yet.
func (d *Dialect) storeNow() (hostStore, bool) {
	c := &d.store
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.learned {
		return c.store, true
	}
	if !c.learning && (c.failedAt.IsZero() || time.Since(c.failedAt) > storeLearnRetry) {
		c.learning = true
		time.AfterFunc(c.learnDelay, d.learnStore)
	}
	return hostStore{}, false
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
		if d.cli.Logger != nil {
			d.cli.Logger.Debug("engine store not read from the host", "err", err)
		}
		return
	}
	c.learned, c.store = true, s
}

// askStore is learnStore's `info` call and its checks.
func (d *Dialect) askStore(ctx context.Context) (hostStore, error) {
	format := "{{.DockerRootDir}}\t{{.Driver}}\t\t"
	if d.flavor == Podman {
		format = "{{.Store.GraphRoot}}\t{{.Store.GraphDriverName}}\t{{.Store.VolumePath}}\t{{json .Store.GraphOptions}}"
	}
	out, err := d.cli.Output(ctx, nil, "info", "--format", format)
	if err != nil {
		return hostStore{}, err
	}
	return parseStore(d.flavor, strings.TrimRight(string(out), "\n"))
}

// parseStore reads askStore's answer: root, driver, volume path and (for
// podman) the driver's options as JSON.
func parseStore(f Flavor, line string) (hostStore, error) {
	parts := strings.Split(line, "\t")
	if len(parts) != 4 {
		return hostStore{}, fmt.Errorf("engine info: unexpected answer %q", line)
	}
	root, driver, volumes, opts := parts[0], parts[1], parts[2], parts[3]
	if !filepath.IsAbs(root) || driver == "" || strings.ContainsAny(driver, `/\`) || driver == "." || driver == ".." {
		return hostStore{}, fmt.Errorf("engine info: root %q, driver %q", root, driver)
	}
	var s hostStore
	if f == Podman {
		// An image store of its own, or read-only ones beside it, keep
		// images the file under the graph root does not list.
		if strings.Contains(strings.ToLower(opts), "imagestore") {
			return hostStore{}, errors.New("the engine keeps images outside its graph root")
		}
		s.images = filepath.Join(root, driver+"-images", "images.json")
	} else {
		s.images = filepath.Join(root, "image", driver, "repositories.json")
		volumes = filepath.Join(root, "volumes")
	}
	if _, err := fileVersion(s.images); err != nil {
		s.images = ""
	}
	if fi, err := os.Stat(volumes); err == nil && fi.IsDir() && filepath.IsAbs(volumes) {
		s.volumes = volumes
	}
	return s, nil
}

// fileVersion names the file at path as it is now: another inode, size or
// time once it is rewritten.
func fileVersion(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", path)
	}
	return fmt.Sprintf("%d:%d:%d:%d", uint64(st.Dev), uint64(st.Ino), fi.Size(), fi.ModTime().UnixNano()), nil
}

// cachedImageID is ref's ID as the CLI said it while the image names
// file was as it is now, and the file's version now ("" when the file
// cannot say: the CLI is asked and nothing is kept).
func (d *Dialect) cachedImageID(ref string) (id, version string) {
	s, ok := d.storeNow()
	if !ok || s.images == "" {
		return "", ""
	}
	v, err := fileVersion(s.images)
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
// file had version, if the file lists that ID (else the file is not where
// the engine keeps this image's name, and nothing is kept).
func (d *Dialect) keepImageID(ref, id, version string) {
	s, ok := d.storeNow()
	if !ok || s.images == "" || version == "" || id == "" {
		return
	}
	b, err := os.ReadFile(s.images)
	if err != nil || !bytes.Contains(b, []byte(strings.TrimPrefix(id, "sha256:"))) {
		return
	}
	c := &d.store
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = map[string]cachedID{}
	}
	if len(c.ids) > 64 {
		clear(c.ids) // refs come from profiles: a few
	}
	c.ids[ref] = cachedID{id: id, version: version}
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
