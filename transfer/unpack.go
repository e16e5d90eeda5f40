package transfer

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// ErrExists marks a host target that exists when overwrite was not asked.
var ErrExists = errors.New("host path exists")

// ErrTooLarge marks a stream past its byte or entry bound.
var ErrTooLarge = errors.New("transfer too large")

// Default bounds of one download.
const (
	DefaultMaxBytes   = 8 << 30
	DefaultMaxEntries = 1_000_000
)

// UnpackOptions tune Unpack.
type UnpackOptions struct {
	// Top is the stream's first name component: the base name of what was
	// packed. Entries not under it are skipped.
	Top string
	// Overwrite replaces an existing dest (a directory as a whole).
	Overwrite bool
	// MaxBytes and MaxEntries bound the stream; 0: the defaults.
	MaxBytes   int64
	MaxEntries int
	// BeforeCommit, when set, runs once the stream was read whole and
	// before anything is moved into place; its error aborts the unpack
	// (the sender failed part way).
	BeforeCommit func() error
}

// CheckTarget refuses dest when it exists and overwrite is not set, so a
// caller can fail before any data moves.
func CheckTarget(root *os.Root, dest string, overwrite bool) error {
	fi, err := root.Lstat(dest)
	switch {
	case err == nil && !overwrite:
		kind := "file"
		if fi.IsDir() {
			kind = "directory"
		}
		return fmt.Errorf("%w: %s is an existing %s; pass overwrite=true to replace it, or name a new path", ErrExists, filepath.Join(root.Name(), dest), kind)
	case err == nil, errors.Is(err, fs.ErrNotExist):
		return nil
	}
	return hostErr(err)
}

// Unpack extracts the tar stream r into root as dest: the entry named Top
// becomes dest, everything under it lands under dest. The stream is
// untrusted: it is written into a fresh staging directory beside dest and
// renamed into place only once it was read whole, so a failure leaves the
// host as it was. Names with "..", absolute names, entries under a symlink
// the stream created, hard links, devices and fifos are skipped and
// listed; set-id bits are dropped.
func Unpack(root *os.Root, dest string, r io.Reader, opt UnpackOptions) (Counts, error) {
	var c Counts
	if err := CheckTarget(root, dest, opt.Overwrite); err != nil {
		return c, err
	}
	maxBytes, maxEntries := opt.MaxBytes, opt.MaxEntries
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	parent := filepath.Dir(dest)
	if err := root.MkdirAll(parent, 0o755); err != nil {
		return c, fmt.Errorf("create %s: %w", filepath.Join(root.Name(), parent), hostErr(err))
	}
	staging := filepath.Join(parent, ".sandbox-mcp-incoming-"+randomHex())
	if err := root.Mkdir(staging, 0o700); err != nil {
		return c, fmt.Errorf("create staging directory in %s: %w", filepath.Join(root.Name(), parent), hostErr(err))
	}
	u := &unpacker{root: root, staging: staging, c: &c, links: map[string]bool{}, maxBytes: maxBytes, buf: make([]byte, 1<<20)}
	err := u.run(tar.NewReader(r), opt.Top, maxEntries)
	if err == nil && opt.BeforeCommit != nil {
		err = opt.BeforeCommit()
	}
	if err == nil {
		err = u.commit(dest, opt.Overwrite)
	}
	if err != nil {
		_ = root.RemoveAll(staging)
		return c, err
	}
	_ = root.Remove(staging)
	return c, nil
}

type unpacker struct {
	root     *os.Root
	staging  string
	c        *Counts
	links    map[string]bool // staged paths of symlinks the stream created
	dirs     []dirMeta
	maxBytes int64
	sawTop   bool
	buf      []byte // the copy buffer: large writes on the host
}

type dirMeta struct {
	path  string
	mode  fs.FileMode
	mtime time.Time
}

func (u *unpacker) run(tr *tar.Reader, top string, maxEntries int) error {
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if !u.sawTop {
				return errors.New("the sandbox sent no entry for the path")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the sandbox's tar stream: %w", err)
		}
		if n >= maxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, maxEntries)
		}
		if err := u.entry(tr, hdr, top); err != nil {
			return err
		}
	}
}

// local maps a stream name to its path under the staging directory, or
// says why it is refused.
func (u *unpacker) local(name, top string) (string, string) {
	if strings.HasPrefix(name, "/") {
		return "", "absolute name"
	}
	clean := strings.TrimPrefix(path.Clean(strings.TrimPrefix(name, "./")), "./")
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", "name holds \"..\""
		}
	}
	first, rest, _ := strings.Cut(clean, "/")
	if first != top {
		return "", "not under " + top
	}
	if rest != "" && !filepath.IsLocal(filepath.FromSlash(rest)) {
		return "", "not a local name"
	}
	staged := filepath.Join(u.staging, "t", filepath.FromSlash(rest))
	// Never follow a symlink the stream made: no entry may lie under one.
	for p := filepath.Dir(staged); p != u.staging && len(p) > len(u.staging); p = filepath.Dir(p) {
		if u.links[p] {
			return "", "under a symlink the stream created"
		}
	}
	if u.links[staged] {
		return "", "replaces a symlink the stream created"
	}
	return staged, ""
}

func (u *unpacker) entry(tr *tar.Reader, hdr *tar.Header, top string) error {
	staged, why := u.local(hdr.Name, top)
	if why != "" {
		u.c.skip(hdr.Name, why)
		return nil
	}
	mode := fs.FileMode(hdr.Mode).Perm()
	if hdr.Mode&0o6000 != 0 {
		u.c.skip(hdr.Name, "set-user-id or set-group-id bit dropped")
	}
	if staged == filepath.Join(u.staging, "t") {
		u.sawTop = true
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		err := u.root.Mkdir(staged, 0o700)
		if errors.Is(err, fs.ErrNotExist) {
			err = u.mkParents(staged)
			if err == nil {
				err = u.root.Mkdir(staged, 0o700)
			}
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create directory %s: %w", hdr.Name, hostErr(err))
		}
		if fi, err := u.root.Lstat(staged); err != nil || !fi.IsDir() {
			u.c.skip(hdr.Name, "a directory entry over an entry of another kind")
			return nil
		}
		u.dirs = append(u.dirs, dirMeta{path: staged, mode: mode, mtime: hdr.ModTime})
		u.c.Dirs++
	case tar.TypeReg, tar.TypeRegA:
		if err := u.mkParents(staged); err != nil {
			return err
		}
		if hdr.Size > u.maxBytes-u.c.Bytes {
			return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, u.maxBytes)
		}
		f, err := u.root.OpenFile(staged, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			u.c.skip(hdr.Name, "named twice in the stream")
			return nil
		}
		if err != nil {
			return fmt.Errorf("create %s: %w", hdr.Name, hostErr(err))
		}
		n, err := io.CopyBuffer(struct{ io.Writer }{f}, tr, u.buf)
		u.c.Bytes += n
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", hdr.Name, err)
		}
		if err := u.root.Chmod(staged, mode); err != nil {
			return fmt.Errorf("chmod %s: %w", hdr.Name, err)
		}
		_ = u.root.Chtimes(staged, hdr.ModTime, hdr.ModTime)
		u.c.Files++
	case tar.TypeSymlink:
		if err := u.mkParents(staged); err != nil {
			return err
		}
		if err := u.root.Symlink(hdr.Linkname, staged); err != nil {
			if errors.Is(err, fs.ErrExist) {
				u.c.skip(hdr.Name, "named twice in the stream")
				return nil
			}
			return fmt.Errorf("create symlink %s: %w", hdr.Name, hostErr(err))
		}
		u.links[staged] = true
		u.c.Symlinks++
	case tar.TypeLink:
		u.c.skip(hdr.Name, "hard link (never created on the host)")
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		u.c.skip(hdr.Name, "device or fifo (never created on the host)")
	default:
		u.c.skip(hdr.Name, fmt.Sprintf("entry of type %q", hdr.Typeflag))
	}
	return nil
}

// mkParents creates the directories above staged that the stream did not
// list (0700 until the stream's own entry for them, if any, sets a mode).
func (u *unpacker) mkParents(staged string) error {
	if err := u.root.MkdirAll(filepath.Dir(staged), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(staged), hostErr(err))
	}
	return nil
}

// commit sets the directories' modes and times (deepest first, so setting
// one does not move another's mtime) and renames the result into place.
func (u *unpacker) commit(dest string, overwrite bool) error {
	for i := len(u.dirs) - 1; i >= 0; i-- {
		d := u.dirs[i]
		_ = u.root.Chmod(d.path, d.mode|0o700) // the user must be able to remove what they downloaded
		_ = u.root.Chtimes(d.path, d.mtime, d.mtime)
	}
	if overwrite {
		if err := u.root.RemoveAll(dest); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replace %s: %w", dest, hostErr(err))
		}
	}
	if err := u.root.Rename(filepath.Join(u.staging, "t"), dest); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s appeared while downloading; nothing was replaced", ErrExists, dest)
		}
		return fmt.Errorf("move the download into place at %s: %w", dest, hostErr(err))
	}
	return nil
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
