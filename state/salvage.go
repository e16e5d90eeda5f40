package state

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Repair is what became of a damaged state file: it was moved aside
// (MovedTo, never changed) and what could be read of it copied into a
// fresh file in its place.
type Repair struct {
	// MovedTo is where the damaged file is kept; Why is what was wrong.
	MovedTo string
	Why     error
	// Kept counts the records copied, by bucket.
	Kept map[string]int
	// Lost names the buckets that could not be read, or not to their end
	// (with what of them was copied in Kept).
	Lost []string
	// Report is the file beside MovedTo that says all this for people
	// (and for doctor); "" if it could not be written.
	Report string

	// placeErr is why the damaged file could not be moved out of the way.
	placeErr error
}

// Summary says in one line what was kept and lost.
func (r Repair) Summary() string {
	names := make([]string, 0, len(r.Kept))
	for b := range r.Kept {
		names = append(names, b)
	}
	sort.Strings(names)
	var kept []string
	for _, b := range names {
		kept = append(kept, fmt.Sprintf("%d %s", r.Kept[b], b))
	}
	why := r.Why.Error()
	if errors.Is(r.Why, errFault) {
		why = "a page of it could not be read"
	}
	s := "the state file was damaged (" + why + "); it was moved to " + r.MovedTo
	if len(kept) > 0 {
		s += "; recovered from it: " + strings.Join(kept, ", ") + " records"
	} else {
		s += "; nothing could be recovered from it"
	}
	if len(r.Lost) > 0 {
		s += "; lost (unreadable): " + strings.Join(r.Lost, ", ")
	}
	return s
}

// salvage keeps the damaged file at s.Path under the name moved, copies
// what can be read of it into a fresh file (every bucket, record by
// record, each bucket under its own fault guard, so a bad page loses what
// lies on it and no more) and renames that over the damaged file, so the
// path always names a whole file. When nothing could be read, the path is
// removed instead: the next write makes a fresh file, and reads see empty
// state meanwhile. A repair that cannot be finished (the file unreadable
// for now, the fresh file not written) is undone: the damaged file stays
// in place and MovedTo is "". The caller holds the repair lock and keeps
// writers out of the damaged file (see moveAside).
func (s *Store) salvage(moved string, why error) Repair {
	r := Repair{MovedTo: moved, Why: why, Kept: map[string]int{}}
	// A second name for the damaged file; a copy where links cannot be
	// made.
	if err := os.Link(s.Path, moved); err != nil {
		if err := copyFile(s.Path, moved); err != nil {
			r.placeErr = fmt.Errorf("keep it as %s: %w", moved, err)
			r.MovedTo = ""
			return r
		}
	}
	data, lost, err := readAll(moved)
	if err != nil {
		// Not damage: the file could not be read for now. Undo, and leave
		// the repair to the next caller.
		os.Remove(moved)
		r.placeErr = err
		r.MovedTo = ""
		return r
	}
	r.Lost = lost
	total := 0
	for b, kvs := range data {
		r.Kept[b] = len(kvs)
		total += len(kvs)
	}
	if total > 0 {
		if err := s.writeSalvage(data); err != nil {
			// The records read could not be put in place (a full disk,
			// say): the damaged file stays where it is, with them, for a
			// later repair.
			os.Remove(moved)
			r.placeErr = fmt.Errorf("write the %d records read from it: %w", total, err)
			r.MovedTo = ""
			return r
		}
	} else if err := os.Remove(s.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.placeErr = err
	}
	syncDir(filepath.Dir(s.Path))
	r.Report = writeReport(moved, r)
	return r
}

// copyFile copies the file at from to a new file at to (mode 0600),
// durably.
func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if serr := dst.Sync(); err == nil {
		err = serr
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(to)
	}
	return err
}

// readAll reads every record of every bucket of the bbolt file at path,
// read-only; lost names the buckets (or the file) that faulted. err is
// for a file that could not be read for a reason that says nothing of its
// damage (locked, out of memory or descriptors).
func readAll(path string) (data map[string][][2][]byte, lost []string, err error) {
	data = map[string][][2][]byte{}
	var db *bolt.DB
	var opened os.FileInfo
	err = guard(func() error {
		var err error
		db, err = openBolt(path, time.Second, true, &opened)
		return err
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, nil, fmt.Errorf("%w (%s)", ErrLocked, path)
	case err != nil && !damaged(err):
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	case err != nil:
		return data, []string{"the whole file (" + err.Error() + ")"}, nil
	}
	defer db.Close()
	var names []string
	if err := guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				names = append(names, string(name))
				return nil
			})
		})
	}); err != nil {
		lost = append(lost, "the list of buckets, past "+fmt.Sprint(len(names))+" ("+err.Error()+")")
	}
	for _, name := range names {
		// Forward until a bad page, then backward from the end until one:
		// one damaged region loses only the records on it.
		seen := map[string]bool{}
		var kvs [][2][]byte
		walk := func(backward bool) error {
			return guard(func() error {
				return db.View(func(tx *bolt.Tx) error {
					b := tx.Bucket([]byte(name))
					if b == nil {
						return nil
					}
					c := b.Cursor()
					k, v := c.First()
					if backward {
						k, v = c.Last()
					}
					for ; k != nil; k, v = step(c, backward) {
						if v == nil || seen[string(k)] {
							continue // a nested bucket (none are made here), or read already
						}
						seen[string(k)] = true
						kvs = append(kvs, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v...)})
					}
					return nil
				})
			})
		}
		if err := walk(false); err != nil {
			before := len(kvs)
			_ = walk(true)
			lost = append(lost, fmt.Sprintf("%s (part: %d records read before the damage and %d after it; %v)", name, before, len(kvs)-before, err))
		}
		if len(kvs) > 0 {
			data[name] = kvs
		}
	}
	return data, lost, nil
}

func step(c *bolt.Cursor, backward bool) ([]byte, []byte) {
	if backward {
		return c.Prev()
	}
	return c.Next()
}

// guard runs fn, turning a fault on the mapping or a bbolt panic into an
// error.
func guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errFault, r)
		}
	}()
	return fn()
}

// writeSalvage writes data into a fresh file beside s.Path and renames it
// over the damaged file there.
func (s *Store) writeSalvage(data map[string][][2][]byte) error {
	var b [6]byte
	_, _ = rand.Read(b[:])
	tmp := s.Path + ".salvage-" + hex.EncodeToString(b[:])
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for name, kvs := range data {
			bk, err := tx.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				if err := bk.Put(kv[0], kv[1]); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.Path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// syncDir makes the renames and links in dir durable, as far as it can.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// writeReport writes what r says beside the damaged file, for people and
// doctor, and returns its path ("" if it could not be written).
func writeReport(moved string, r Repair) string {
	path := moved + ".report"
	if err := os.WriteFile(path, []byte(r.Summary()+"\n"), 0o600); err != nil {
		return ""
	}
	return path
}

// Repairs lists the reports of damaged state files found in dir (see
// Repair), newest last.
func Repairs(dir string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, "state.db.corrupt-*.report"))
	sort.Strings(paths)
	return paths
}
