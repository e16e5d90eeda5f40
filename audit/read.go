package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Filter picks records: those of one sandbox (all when empty) and from a
// time on (all when zero).
type Filter struct {
	Sandbox string
	Since   time.Time
}

func (f Filter) match(r Record) bool {
	return (f.Sandbox == "" || r.Sandbox == f.Sandbox) && !r.Time.Before(f.Since)
}

// Read calls fn with each record in dir that f picks, oldest first: the
// files moved aside, then the one being written. It returns how many
// lines did not read as a record (cut by a full disk or a kill, or too
// long), which it skips.
func Read(dir string, f Filter, fn func(Record)) (bad int, err error) {
	// The file being written is opened first, then the files moved aside
	// listed: one moved in between is in the listing (and read once).
	cur, curInfo, err := openCurrent(dir)
	if err != nil {
		return 0, err
	}
	if cur != nil {
		defer cur.Close()
	}
	bad, err = readAside(dir, nil, curInfo, f, fn)
	if err != nil {
		return bad, err
	}
	if cur != nil {
		var s scanner
		bad += s.feed(cur, f, fn, true)
	}
	return bad, nil
}

// openCurrent opens the file being written in dir, with what it is; nil
// when there is none.
func openCurrent(dir string) (*os.File, os.FileInfo, error) {
	fh, err := openRegular(filepath.Join(dir, File))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, nil, err
	}
	return fh, fi, nil
}

// readAside reads whole the files moved aside in dir that came after the
// file after (all of them when after is nil, or gone: the oldest go
// first), but cur, the file being written when it was opened (it may have
// been moved aside since). A file pruned meanwhile is skipped; one that
// cannot be opened is skipped too, and the first such error returned
// once the others are read. It returns the lines that were not records.
func readAside(dir string, after, cur os.FileInfo, f Filter, fn func(Record)) (bad int, err error) {
	files, err := Aside(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	from := 0
	if after != nil {
		for i, p := range files {
			if fi, err := os.Stat(p); err == nil && os.SameFile(fi, after) {
				from = i + 1
			}
		}
	}
	var first error
	for _, p := range files[from:] {
		fh, err := openRegular(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && first == nil {
				first = err
			}
			continue
		}
		if fi, err := fh.Stat(); err == nil && (cur == nil || !os.SameFile(fi, cur)) {
			var s scanner
			bad += s.feed(fh, f, fn, true)
		}
		fh.Close()
	}
	return bad, first
}

// Follow reads as Read does, then goes on with the records appended after,
// through the moves aside, until ctx ends, looking every interval.
func Follow(ctx context.Context, dir string, f Filter, interval time.Duration, fn func(Record)) error {
	path := filepath.Join(dir, File)
	// The file being written is opened first, then the files moved aside
	// are read (but that one, if it was moved meanwhile): nothing falls
	// between the two.
	fh, cur, err := openCurrent(dir)
	if err != nil {
		return err
	}
	defer func() {
		if fh != nil {
			fh.Close()
		}
	}()
	if _, err := readAside(dir, nil, cur, f, fn); err != nil {
		return err
	}
	var s scanner
	var (
		prev      *os.File
		prevS     scanner
		prevUntil time.Time
	)
	defer func() {
		if prev != nil {
			prev.Close()
		}
	}()
	for {
		if prev != nil {
			final := time.Now().After(prevUntil)
			prevS.feed(prev, f, fn, final)
			if final {
				prev.Close()
				prev = nil
			}
		}
		if fh == nil {
			if g, err := openRegular(path); err == nil {
				fh, s = g, scanner{}
			}
		}
		if fh != nil {
			s.feed(fh, f, fn, false)
			held, err1 := fh.Stat()
			now, err2 := os.Stat(path)
			if err1 == nil && (err2 != nil || !os.SameFile(held, now)) {
				// Moved aside: read the rest of it, then the files moved
				// aside after it (more than one move may have come
				// between two looks), then go on in the new file, opened
				// before the listing so that none falls between.
				// Another server may append to it for up to its recheck
				// yet: it is read a while longer.
				if prev != nil {
					prevS.feed(prev, f, fn, true)
					prev.Close()
				}
				prev, prevS, prevUntil = fh, s, time.Now().Add(5*recheck)
				var next os.FileInfo
				fh, next, _ = openCurrent(dir)
				s = scanner{}
				_, _ = readAside(dir, held, next, f, fn) // one that cannot be read is passed over, as it goes on
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// openRegular opens path for reading, refusing a symlink or anything but
// a regular file.
func openRegular(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New(path + " is not a regular file")
	}
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
}

// scanner turns what is read from a file into records, keeping a line
// not ended yet for the next read.
type scanner struct {
	rest []byte
}

// feed reads r to its end, calling fn with each whole line's record that
// f picks; with final, a last line without its end counts too. It returns
// the lines that did not read as records.
func (s *scanner) feed(r io.Reader, f Filter, fn func(Record), final bool) (bad int) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(s.rest)+len(chunk) > maxLine {
			// Too long to be a record: drop up to its end.
			s.rest = s.rest[:0]
			for errors.Is(err, bufio.ErrBufferFull) {
				chunk, err = br.ReadSlice('\n')
			}
			if err == nil {
				bad++
			}
			if err != nil {
				return bad
			}
			continue
		}
		s.rest = append(s.rest, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !final {
			return bad // the line is not ended yet
		}
		if line := bytes.TrimSpace(s.rest); len(line) > 0 {
			var rec Record
			if json.Unmarshal(line, &rec) == nil && rec.Tool != "" {
				if f.match(rec) {
					fn(rec)
				}
			} else {
				bad++
			}
		}
		s.rest = s.rest[:0]
		if err != nil {
			return bad
		}
	}
}
