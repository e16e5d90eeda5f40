package transfer

import (
	"archive/tar"
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox/diskguard"
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
	// MaxBytes and MaxEntries bound the stream; 0: the defaults. MaxWhy
	// says where MaxBytes comes from, for its error.
	MaxBytes   int64
	MaxWhy     string
	MaxEntries int
	// Free reports the free and total bytes of the filesystem holding
	// dir; default statfs. The unpack stops before the host's free space
	// falls under the floor the disk watcher keeps (diskguard.Floor).
	Free func(dir string) (free, total int64, err error)
	// BeforeCommit, when set, runs once the stream was read whole and
	// before anything is moved into place; its error aborts the unpack
	// (the sender failed part way).
	BeforeCommit func() error
	// OnStaging, when set, is told the host path of the staging directory
	// before it is made; its error aborts the unpack. A caller lists it so
	// that a later process removes it if this one is killed part way.
	OnStaging func(path string) error
}

// StagingPrefix begins the base name of the staging directory Unpack
// makes beside its target.
const StagingPrefix = ".sandbox-mcp-incoming-"

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
//
// Its memory does not grow with the stream: whether an entry lies under a
// symlink is checked on the staged tree itself (nothing but the stream
// writes there), and directories' times wait for the end in a file of
// the staging directory, not in memory.
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
	staging := filepath.Join(parent, StagingPrefix+randomHex())
	if opt.OnStaging != nil {
		if err := opt.OnStaging(filepath.Join(root.Name(), staging)); err != nil {
			return c, fmt.Errorf("list the staging directory for cleaning up: %w", err)
		}
	}
	if err := root.Mkdir(staging, 0o700); err != nil {
		return c, fmt.Errorf("create staging directory in %s: %w", filepath.Join(root.Name(), parent), hostErr(err))
	}
	u := &unpacker{root: root, staging: staging, c: &c, maxBytes: maxBytes, maxWhy: opt.MaxWhy, buf: make([]byte, 1<<20),
		room: &diskguard.Writer{Dir: root.Name(), What: "the download", Free: opt.Free}}
	err := u.startDirTimes()
	if err == nil {
		err = u.run(tar.NewReader(r), opt.Top, maxEntries)
	}
	if err == nil && opt.BeforeCommit != nil {
		err = opt.BeforeCommit()
	}
	if err == nil {
		err = u.commit(dest, opt.Overwrite)
	}
	if u.times != nil {
		u.times.Close() // a second Close after commit's is harmless
	}
	if err != nil {
		_ = root.RemoveAll(staging)
		return c, err
	}
	_ = root.RemoveAll(staging) // with what the download replaced
	return c, nil
}

type unpacker struct {
	root     *os.Root
	staging  string
	c        *Counts
	maxBytes int64
	maxWhy   string
	sawTop   bool
	buf      []byte // the copy buffer: large writes on the host
	// room passes file data on while the host keeps its free floor.
	room *diskguard.Writer
	// clean is the last staged directory found to lie under no symlink;
	// entries come grouped by directory, so most need no walk.
	clean string
	// times holds each directory's staged path and time, written as they
	// come and set at the end (creating entries in a directory moves its
	// time).
	times  *os.File
	timesW *bufio.Writer
}

// timesFile is the name, in the staging directory, of the file that keeps
// directories' times until the end; each record takes timesRecord bytes
// and the path.
const (
	timesFile   = "dirtimes"
	timesRecord = 12
)

// hostEntryCost is what the host spends on an entry besides its data: an
// inode, a block for a directory. Counted against the bounds, so a stream
// of empty directories or links costs what it takes.
const hostEntryCost = 4096

// maxHost bounds what the download costs the host in all, data and
// entries: MaxBytes, but no less than 64 MiB, so that a small bound on
// the data still lets its files and directories be made.
func (u *unpacker) maxHost() int64 { return max(u.maxBytes, 64<<20) }

// charge counts n bytes the host spends on entry name against the
// download's bound and the host's free floor.
func (u *unpacker) charge(n int64, name string) error {
	if n > u.maxHost()-u.room.N() {
		return u.tooLarge()
	}
	if err := u.room.Reserve(n); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// tooLarge is the error of a download past its bound.
func (u *unpacker) tooLarge() error {
	if u.maxWhy != "" {
		return fmt.Errorf("%w: it would take more than %d bytes on the host, %s", ErrTooLarge, u.maxBytes, u.maxWhy)
	}
	return fmt.Errorf("%w: it would take more than %d bytes on the host", ErrTooLarge, u.maxBytes)
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
	if why := u.underSymlink(filepath.Dir(staged)); why != "" {
		return "", why
	}
	if fi, err := u.root.Lstat(staged); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return "", "replaces a symlink the stream created"
	}
	return staged, ""
}

// underSymlink says why dir cannot hold an entry: one of it and its
// parents below the staging directory is a symlink (only the stream makes
// anything there, so the stream made it). A directory not made yet is
// fine: mkParents makes it a directory.
func (u *unpacker) underSymlink(dir string) string {
	if dir == u.clean {
		return ""
	}
	top := filepath.Join(u.staging, "t")
	exists := false
	for p := dir; len(p) >= len(top); p = filepath.Dir(p) {
		if p == u.clean || (u.clean != "" && strings.HasPrefix(u.clean, p+string(filepath.Separator))) {
			break // p is, or holds, a directory already found clean
		}
		fi, err := u.root.Lstat(p)
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "under a symlink the stream created"
		}
		if p == dir {
			exists = err == nil && fi.IsDir()
		}
		if p == top {
			break
		}
	}
	// Only a directory that exists is remembered: a name not made yet may
	// still become a symlink (its entry skipped, a symlink entry after).
	if exists {
		u.clean = dir
	}
	return ""
}

// madeSymlink forgets the clean directory when the symlink just made at
// staged is it or one of its parents (which the checks above make
// impossible, but a wrong cache would let an entry through a link).
func (u *unpacker) madeSymlink(staged string) {
	if u.clean == staged || strings.HasPrefix(u.clean, staged+string(filepath.Separator)) {
		u.clean = ""
	}
}

func (u *unpacker) entry(tr *tar.Reader, hdr *tar.Header, top string) error {
	err := u.entryIn(tr, hdr, top)
	if errors.Is(err, errParentNotDir) {
		u.c.skip(hdr.Name, errParentNotDir.Error())
		return nil
	}
	return err
}

func (u *unpacker) entryIn(tr *tar.Reader, hdr *tar.Header, top string) error {
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
		// A directory costs the host a block, and its note for the end.
		if err := u.charge(hostEntryCost+timesRecord+int64(len(staged)), hdr.Name); err != nil {
			return err
		}
		err := u.root.Mkdir(staged, 0o700)
		if errors.Is(err, fs.ErrNotExist) {
			err = u.mkParents(staged)
			if err == nil {
				err = u.root.Mkdir(staged, 0o700)
			}
		}
		if errors.Is(err, syscall.ENOTDIR) {
			return errParentNotDir
		}
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create directory %s: %w", hdr.Name, hostErr(err))
		}
		if fi, err := u.root.Lstat(staged); err != nil || !fi.IsDir() {
			u.c.skip(hdr.Name, "a directory entry over an entry of another kind")
			return nil
		}
		// The user must be able to remove what they downloaded: the
		// owner keeps rwx. Changing a mode moves no time.
		if err := u.root.Chmod(staged, mode|0o700); err != nil {
			return fmt.Errorf("chmod %s: %w", hdr.Name, hostErr(err))
		}
		if err := u.noteTime(staged, hdr.ModTime); err != nil {
			return err
		}
		u.c.Dirs++
	case tar.TypeReg, tar.TypeRegA:
		if err := u.mkParents(staged); err != nil {
			return err
		}
		if err := u.charge(hostEntryCost, hdr.Name); err != nil {
			return err
		}
		if hdr.Size > u.maxBytes-u.c.Bytes || hdr.Size > u.maxHost()-u.room.N() {
			return u.tooLarge()
		}
		f, err := u.root.OpenFile(staged, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			u.c.skip(hdr.Name, "named twice in the stream")
			return nil
		}
		if err != nil {
			return fmt.Errorf("create %s: %w", hdr.Name, hostErr(err))
		}
		u.room.W = f
		before := u.room.N()
		_, err = io.CopyBuffer(u.room, tr, u.buf)
		u.c.Bytes += u.room.N() - before
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
		if err := u.charge(hostEntryCost+int64(len(hdr.Linkname)), hdr.Name); err != nil {
			return err
		}
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
		u.madeSymlink(staged)
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

// errParentNotDir marks an entry under a name the stream made something
// other than a directory.
var errParentNotDir = errors.New("under an entry that is not a directory")

// mkParents creates the directories above staged that the stream did not
// list (0700 until the stream's own entry for them, if any, sets a mode).
func (u *unpacker) mkParents(staged string) error {
	// Each directory made here costs the host a block, as a listed one.
	missing := 0
	for p := filepath.Dir(staged); len(p) > len(u.staging); p = filepath.Dir(p) {
		if _, err := u.root.Lstat(p); err == nil {
			break
		}
		missing++
	}
	if err := u.charge(int64(missing)*hostEntryCost, staged); err != nil {
		return err
	}
	if err := u.root.MkdirAll(filepath.Dir(staged), 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTDIR) {
			return errParentNotDir
		}
		return fmt.Errorf("create %s: %w", filepath.Dir(staged), hostErr(err))
	}
	return nil
}

// startDirTimes opens the file that keeps directories' times.
func (u *unpacker) startDirTimes() error {
	f, err := u.root.OpenFile(filepath.Join(u.staging, timesFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", filepath.Join(u.root.Name(), u.staging, timesFile), hostErr(err))
	}
	u.times, u.timesW = f, bufio.NewWriterSize(f, 64<<10)
	return nil
}

// noteTime records directory staged's time for the end: the nanoseconds,
// the path's length, the path.
func (u *unpacker) noteTime(staged string, t time.Time) error {
	var rec [timesRecord]byte
	binary.LittleEndian.PutUint64(rec[:8], uint64(t.UnixNano()))
	binary.LittleEndian.PutUint32(rec[8:], uint32(len(staged)))
	_, _ = u.timesW.Write(rec[:])
	if _, err := u.timesW.WriteString(staged); err != nil {
		return fmt.Errorf("note a directory's time: %w", hostErr(err))
	}
	return nil
}

// setDirTimes sets the directories' times noted, in the order they came
// (setting one directory's times moves no other's), and removes the file.
func (u *unpacker) setDirTimes() error {
	defer func() {
		u.times.Close()
		_ = u.root.Remove(filepath.Join(u.staging, timesFile))
	}()
	if err := u.timesW.Flush(); err != nil {
		return fmt.Errorf("note directories' times: %w", hostErr(err))
	}
	if _, err := u.times.Seek(0, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(u.times, 64<<10)
	var rec [timesRecord]byte
	name := make([]byte, 0, 256)
	for {
		if _, err := io.ReadFull(r, rec[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read directories' times: %w", err)
		}
		n := binary.LittleEndian.Uint32(rec[8:])
		if n > 1<<20 {
			return errors.New("read directories' times: a record is damaged")
		}
		name = slices.Grow(name[:0], int(n))[:n]
		if _, err := io.ReadFull(r, name); err != nil {
			return fmt.Errorf("read directories' times: %w", err)
		}
		t := time.Unix(0, int64(binary.LittleEndian.Uint64(rec[:8])))
		_ = u.root.Chtimes(string(name), t, t)
	}
}

// commit sets the directories' times and renames the result into place.
func (u *unpacker) commit(dest string, overwrite bool) error {
	if err := u.setDirTimes(); err != nil {
		return err
	}
	// On disk before it is in place: a crash of the host after the rename
	// finds the whole download, not a renamed file of holes.
	syncFS(u.root, u.staging)
	if overwrite {
		// What is replaced is moved aside into the staging directory first
		// (one rename), the download moved in (another), and only then
		// removed: no moment without one or the other at dest but the
		// instant between the two renames.
		if _, err := u.root.Lstat(dest); err == nil {
			aside := filepath.Join(u.staging, "old")
			if err := u.root.Rename(dest, aside); err != nil {
				return fmt.Errorf("replace %s: %w", dest, hostErr(err))
			}
			if err := u.root.Rename(filepath.Join(u.staging, "t"), dest); err != nil {
				if berr := u.root.Rename(aside, dest); berr != nil {
					return fmt.Errorf("move the download into place at %s: %w; and putting back what was there failed: %v (it is in %s)", dest, hostErr(err), berr, filepath.Join(u.root.Name(), aside))
				}
				return fmt.Errorf("move the download into place at %s: %w; nothing was replaced", dest, hostErr(err))
			}
			return nil // the staging directory, with what was replaced, is removed by the caller
		} else if !errors.Is(err, fs.ErrNotExist) {
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
