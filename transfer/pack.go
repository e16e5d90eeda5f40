package transfer

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// Skipped is an entry a transfer left out (or changed), and why.
type Skipped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Counts say what a transfer moved.
type Counts struct {
	Files    int64     `json:"files"`
	Dirs     int64     `json:"dirs"`
	Symlinks int64     `json:"symlinks"`
	Bytes    int64     `json:"bytes"`
	Skipped  []Skipped `json:"skipped,omitempty"`
}

// maxSkipped bounds the skipped entries a result lists; the rest are
// counted in the last one.
const maxSkipped = 50

func (c *Counts) skip(p, reason string) {
	switch {
	case len(c.Skipped) < maxSkipped:
		c.Skipped = append(c.Skipped, Skipped{Path: p, Reason: reason})
	case len(c.Skipped) == maxSkipped:
		c.Skipped = append(c.Skipped, Skipped{Path: "…", Reason: "more entries were skipped"})
	}
}

// PackOptions tune Pack.
type PackOptions struct {
	// Ignore reports whether an entry (by its base name) is left out,
	// with everything under it.
	Ignore func(name string) bool
	// Only, when set, limits a directory walk to these paths (relative
	// to the packed directory, slash-separated) and their contents.
	Only []string
}

// Pack writes the host file or directory rel (under the open root) to w
// as a tar stream whose names start with top. Regular files, directories
// and symlinks (as links, never followed) are packed with their modes and
// mtimes; sockets, devices and fifos are skipped and listed. Reading goes
// through root, so nothing outside it is read even if the tree changes
// meanwhile.
func Pack(root *os.Root, rel, top string, w io.Writer, opt PackOptions) (Counts, error) {
	var c Counts
	tw := tar.NewWriter(w)
	fi, err := root.Lstat(rel)
	if err != nil {
		return c, hostErr(err)
	}
	p := &packer{root: root, tw: tw, c: &c, opt: opt}
	if err := p.entry(rel, top, fi); err != nil {
		return c, err
	}
	return c, tw.Close()
}

type packer struct {
	root *os.Root
	tw   *tar.Writer
	c    *Counts
	opt  PackOptions
}

func (p *packer) entry(rel, name string, fi fs.FileInfo) error {
	hdr := &tar.Header{Name: name, ModTime: fi.ModTime(), Mode: int64(fi.Mode().Perm()), Format: tar.FormatPAX}
	if fi.Mode()&fs.ModeSticky != 0 {
		hdr.Mode |= 01000
	}
	switch {
	case fi.Mode().IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		f, err := p.root.Open(rel)
		if err != nil {
			p.c.skip(name, "cannot read: "+errText(err))
			return nil
		}
		defer f.Close()
		if err := p.tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("pack %s: %w", name, err)
		}
		n, err := io.CopyN(p.tw, f, fi.Size())
		p.c.Bytes += n
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("pack %s: the file shrank while it was read (%d of %d bytes): try again once it is written", name, n, fi.Size())
			}
			return fmt.Errorf("pack %s: %w", name, err)
		}
		p.c.Files++
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := p.root.Readlink(rel)
		if err != nil {
			p.c.skip(name, "cannot read link: "+errText(err))
			return nil
		}
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, target, 0o777
		if err := p.tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("pack %s: %w", name, err)
		}
		p.c.Symlinks++
		return nil
	case fi.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		if err := p.tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("pack %s: %w", name, err)
		}
		p.c.Dirs++
		return p.dir(rel, name)
	}
	p.c.skip(name, "not a regular file, directory or symlink ("+fi.Mode().Type().String()+")")
	return nil
}

func (p *packer) dir(rel, name string) error {
	f, err := p.root.Open(rel)
	if err != nil {
		p.c.skip(name, "cannot list: "+errText(err))
		return nil
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		p.c.skip(name, "cannot list: "+errText(err))
		return nil
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		if p.opt.Ignore != nil && p.opt.Ignore(e.Name()) {
			continue
		}
		childRel := filepath.Join(rel, e.Name())
		if !p.wanted(childRel) {
			continue
		}
		fi, err := p.root.Lstat(childRel)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // gone meanwhile: nothing to send
				p.c.skip(path.Join(name, e.Name()), errText(err))
			}
			continue
		}
		if err := p.entry(childRel, path.Join(name, e.Name()), fi); err != nil {
			return err
		}
	}
	return nil
}

// wanted reports whether rel is on the way to, or under, one of Only.
func (p *packer) wanted(rel string) bool {
	if p.opt.Only == nil {
		return true
	}
	r := filepath.ToSlash(rel)
	for _, o := range p.opt.Only {
		if r == o || Within(o, r) || Within(r, o) {
			return true
		}
	}
	return false
}

func hostErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("host path %s does not exist", pe.Path)
		case errors.Is(err, fs.ErrPermission):
			return fmt.Errorf("host path %s: permission denied", pe.Path)
		}
	}
	if isEscape(err) {
		return fmt.Errorf("%w: a symlink on the way leads out of the root (%v)", ErrOutsideRoots, err)
	}
	return err
}

func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// isEscape reports whether err is os.Root's refusal of a path that leaves it.
func isEscape(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent"
}
