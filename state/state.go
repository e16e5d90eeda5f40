// Package state keeps what the container engine cannot: the profile each
// sandbox was booted with, background job records and each sandbox's
// command history (the engine, through labels,
// stays the truth for which sandboxes exist). It is a bbolt file that is
// opened per operation with a lock timeout and never held between
// operations, so several server processes (one per MCP client session)
// share it. Reads open it read-only (a shared lock, no fsync, and a file
// that does not exist yet is read as empty, not created); writes open it
// read-write (an exclusive lock).
//
// # Layout
//
//	meta      "schema"     -> layout version that wrote the file, decimal ("2")
//	          "min_reader" -> oldest layout version that may read and write it ("2")
//	history   <sandbox name> -> JSON []Entry, newest last, bounded
//	jobs      <sandbox name> NUL <job name> -> JSON Job
//	sandboxes <sandbox name> -> JSON Sandbox (profile in use, last boot)
//	intents   <sandbox name> -> JSON Intent (a restore or clone under way)
//
// # Versioning
//
// "schema" is the layout version of the server that last upgraded the
// file; "min_reader" is the oldest layout version whose servers may read
// and write it. Both are bumped only for incompatible changes: a key
// format or a field's meaning changed, a bucket renamed or removed, or a
// new bucket an older writer would leave inconsistent with an old one.
// Then the new server sets schema to its version and raises min_reader
// (to schema, or lower if older servers stay safe). New buckets, new meta
// keys and new JSON fields are compatible additions and bump nothing:
// readers ignore what they do not know. A new JSON field must be
// optional, since an older server that rewrites the record drops it.
//
// A server of layout version V (SchemaVersion) opening a file:
//
//   - no meta or no "schema" (a new file): its first write records
//     schema V and min_reader MinReaderVersion.
//   - schema <= V without min_reader (1 or 2, from before this rule; 1
//     lacks the jobs and sandboxes buckets): read as it is; the first
//     write upgrades meta in place to schema V, min_reader
//     MinReaderVersion.
//   - min_reader <= V, whatever the schema (a newer server whose changes
//     were compatible): read and written as usual. Unknown buckets, meta
//     keys and fields are ignored and kept (except fields of a record it
//     rewrites), and meta is never lowered or overwritten.
//   - min_reader > V, schema > V without min_reader, or a value that is
//     not a decimal number: every read and write fails, without touching
//     the file, with an *IncompatibleError (errors.Is ErrIncompatible)
//     that names the file's versions and this one and says to upgrade
//     sandbox-mcp or point --state-dir at another directory.
//
// Servers from before this rule compare schema exactly; files written
// here keep schema "2", so servers of layout 2 still share them.
//
// A file that cannot be opened as bbolt, or that faults when read, is
// moved aside (kept under a ".corrupt-<time>" name, never truncated in
// place), what can be read of it is copied into a fresh file, bucket by
// bucket, and what was kept and lost is reported (OnCorrupt) and written
// beside it (".report"). Callers that find the same damage at once repair
// it once, under a lock on the state directory.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

const (
	// SchemaVersion is the layout this package writes and understands.
	// Bump it only for an incompatible change (see the package comment),
	// never for a new bucket, meta key or JSON field.
	SchemaVersion = 2
	// MinReaderVersion is the oldest layout whose servers may read and
	// write a file written here. Raise it to SchemaVersion only for an
	// incompatible change.
	MinReaderVersion = 2
)

var (
	bucketMeta     = []byte("meta")
	bucketHistory  = []byte("history")
	bucketJobs     = []byte("jobs")
	bucketSandbox  = []byte("sandboxes")
	bucketSyncs    = []byte("syncs")
	bucketForwards = []byte("forwards")
	bucketSnaps    = []byte("snapshots")
	bucketChildren = []byte("children")
	bucketSpawned  = []byte("spawned")
	keySchema      = []byte("schema")
	keyMinReader   = []byte("min_reader")
)

// ErrLocked means another process held the state file for longer than the
// lock timeout.
var ErrLocked = errors.New("state file is locked by another process")

// ErrIncompatible means the state file was written by a newer sandbox-mcp
// that declared it unusable by this one.
var ErrIncompatible = errors.New("state file needs a newer sandbox-mcp")

// IncompatibleError is a state file this version must not read or write.
type IncompatibleError struct {
	Path string
	// Schema and MinReader are the file's meta values as stored ("" when
	// absent).
	Schema, MinReader string
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("state %s was written with layout schema %s and needs a sandbox-mcp that understands layout %s or later; this one understands layout %d. Try: upgrade sandbox-mcp, or point --state-dir at another directory",
		e.Path, orNone(e.Schema), orNone(e.MinReader), SchemaVersion)
}

func orNone(v string) string {
	if v == "" {
		return "(none)"
	}
	if _, err := strconv.Atoi(v); err != nil {
		return strconv.Quote(v)
	}
	return v
}

// Is makes errors.Is(err, ErrIncompatible) hold.
func (e *IncompatibleError) Is(target error) bool { return target == ErrIncompatible }

// Store is the state file at one path.
type Store struct {
	Path string
	// LockTimeout bounds waiting for another process; 0 means 2 s.
	LockTimeout time.Duration
	// OnCorrupt, if set, is told what became of a damaged file: where it
	// was moved and what of it was recovered into a fresh one.
	OnCorrupt func(r Repair)
}

// New returns the store at dir/state.db, creating dir with mode 0700.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &Store{Path: filepath.Join(dir, "state.db")}, nil
}

// errNoFile is a read of a state file that does not exist yet (or was
// created but not yet initialised): the read sees empty state.
var errNoFile = errors.New("no state file")

// open opens the file, read-write (creating it) or read-only (a shared
// lock; errNoFile when there is nothing to read yet). A file bbolt cannot
// open is moved aside (moveAside) and what is then in its place opened.
// opened is set, as soon as bbolt has opened a file (even if it then
// faults reading it), to that file's identity. An operation repairs at
// most once (repaired says whether it has).
func (s *Store) open(write bool, opened *os.FileInfo, repaired *bool) (*bolt.DB, error) {
	timeout := s.lockTimeout()
	for attempt := 0; ; attempt++ {
		// What is at the path before the open is what a failed open
		// failed on, unless a repair replaced it meanwhile; the repair
		// checks which.
		seen, statErr := os.Stat(s.Path)
		// bbolt would try to initialise an empty file, which a read-only
		// open cannot; an empty file is one a writer is creating.
		if !write && (errors.Is(statErr, os.ErrNotExist) || statErr == nil && seen.Size() == 0) {
			return nil, errNoFile
		}
		*opened = nil
		db, err := openBolt(s.Path, timeout, !write, opened)
		switch {
		case err == nil:
			// bbolt holds its lock on the file it opened, and a repair
			// replaces the file only while holding a lock that excludes
			// writers: if the path names this file now, it is the state
			// file until it is closed. If not, a repair replaced it
			// between the open and the lock.
			if now, err := os.Stat(s.Path); err == nil && *opened != nil && os.SameFile(*opened, now) {
				return db, nil
			}
			db.Close()
			if attempt < maxAttempts {
				continue
			}
			return nil, fmt.Errorf("open state %s: the file was replaced each time it was opened", s.Path)
		case errors.Is(err, berrors.ErrTimeout):
			return nil, fmt.Errorf("%w (%s, waited %s); if no other sandbox-mcp is running, a stuck process may hold it", ErrLocked, s.Path, timeout)
		case !write && errors.Is(err, os.ErrNotExist):
			return nil, errNoFile
		case attempt < maxAttempts && !*repaired && statErr == nil && unreadable(err, seen):
			if merr := s.moveAside(err, seen); merr != nil {
				return nil, merr
			}
			*repaired = true
		default:
			return nil, fmt.Errorf("open state %s: %w", s.Path, err)
		}
	}
}

// maxAttempts bounds how often one operation opens the file again after
// a repair (its own or another's): a file damaged again at once, or
// replaced each time, is an error to report, not a loop.
const maxAttempts = 3

func (s *Store) lockTimeout() time.Duration {
	if s.LockTimeout <= 0 {
		return 2 * time.Second
	}
	return s.LockTimeout
}

// openBolt opens the bbolt file at path, setting opened to the identity
// of the file bbolt opened. bbolt leaves a file it faults on while
// opening it (a damaged freelist page) open, locked and mapped: the lock
// is let go of and the file closed before the fault goes on (the mapping,
// which bbolt keeps no handle to, stays until the process ends: one per
// damaged file).
func openBolt(path string, timeout time.Duration, readOnly bool, opened *os.FileInfo) (db *bolt.DB, err error) {
	var file *os.File
	opts := &bolt.Options{Timeout: timeout, ReadOnly: readOnly, OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, mode)
		if err == nil {
			file = f
			*opened, _ = f.Stat()
		}
		return f, err
	}}
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				_ = syscall.Flock(int(file.Fd()), syscall.LOCK_UN)
				file.Close()
			}
			panic(r)
		}
	}()
	return bolt.Open(path, 0o600, opts)
}

// unreadable reports whether an open error means the file (seen just
// before the open) exists but is not a bbolt file bbolt can use: cut
// short, overwritten, of another version. Other errors (memory, I/O,
// descriptors, locks, permissions) say nothing of the file, which is
// left as it is.
func unreadable(err error, seen os.FileInfo) bool {
	return seen.Mode().IsRegular() && seen.Size() > 0 && damaged(err)
}

// damaged reports whether err is bbolt finding a file it cannot use, or
// faulting on one.
func damaged(err error) bool {
	return errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrChecksum) ||
		errors.Is(err, berrors.ErrVersionMismatch) || errors.Is(err, errFault) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "file size too small")
}

// moveAside keeps the damaged file seen at the path under a
// ".corrupt-<time>" name (never changing it, so it can be inspected),
// puts a fresh file with what could be read of it (salvage) in its place
// and reports it.
//
// A repair holds a lock on the state directory, so that callers (in this
// process or another) that find the same damage at once repair it once,
// and it moves only the file its caller found damaged: if the path names
// another file now (another caller repaired it first, and writes may have
// landed in the fresh file), nothing is moved and the caller opens what is
// there. From that check until the fresh file is in place it holds a
// shared lock on the damaged file, which keeps writers out of it (bbolt's
// writers lock it exclusively): a write either landed before, and is
// copied, or waits, finds the path replaced and opens the fresh file. The
// path names a file throughout (the damaged one, then the fresh one), so
// no caller can make an empty file there meanwhile.
func (s *Store) moveAside(why error, seen os.FileInfo) error {
	timeout := s.lockTimeout()
	unlock, err := lockDir(filepath.Dir(s.Path), timeout)
	switch {
	case errors.Is(err, ErrLocked):
		return fmt.Errorf("state file %s is unreadable (%v) and is being repaired: %w", s.Path, why, err)
	case err != nil:
		// Without the lock two repairs could replace each other's fresh
		// file (and the writes in it): the file is left as it is.
		return fmt.Errorf("state file %s is unreadable (%v) and was not repaired, since the directory cannot be locked (%v): move it aside by hand", s.Path, why, err)
	}
	defer unlock()
	hold, err := os.Open(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state file %s is unreadable (%v): %w", s.Path, why, err)
	}
	defer hold.Close()
	if now, err := hold.Stat(); err != nil || !os.SameFile(seen, now) {
		return nil
	}
	if err := flockWait(hold, syscall.LOCK_SH, timeout); err != nil {
		return fmt.Errorf("state file %s is unreadable (%v) and could not be repaired: %w", s.Path, why, err)
	}
	stamp := time.Now().UTC().Format("20060102T150405.000Z")
	moved := s.Path + ".corrupt-" + stamp
	for n := 2; ; n++ { // two repairs in one millisecond must not share a name
		_, err := os.Lstat(moved)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil || n > 1000 {
			return fmt.Errorf("state file %s is unreadable (%v) and no name was free to keep it under (%s): %v", s.Path, why, moved, err)
		}
		moved = fmt.Sprintf("%s.corrupt-%s-%d", s.Path, stamp, n)
	}
	r := s.salvage(moved, why)
	if s.OnCorrupt != nil && r.MovedTo != "" {
		s.OnCorrupt(r)
	}
	if r.placeErr != nil {
		return fmt.Errorf("state file %s is unreadable (%v) and could not be repaired: %w", s.Path, why, r.placeErr)
	}
	return nil
}

// errFault is a state file damaged in a way bbolt does not check before
// reading: it panics on the bad page, or faults reading past the end of a
// truncated file it has mapped into memory.
var errFault = errors.New("state file is damaged")

// withDB opens the file (read-only unless write), runs fn on it under the
// fault guard and closes it. A file damaged so that reading it faults is
// moved aside once and the operation tried again, on the fresh file or,
// for a read of a file nothing could be recovered from, on no file. fn
// may run more than once: it must start from nothing each time.
func (s *Store) withDB(write bool, fn func(db *bolt.DB) error) error {
	repaired := false
	for attempt := 0; ; attempt++ {
		opened, err := s.guarded(write, &repaired, fn)
		if !errors.Is(err, errFault) || repaired || opened == nil || attempt == maxAttempts {
			return err
		}
		if merr := s.moveAside(err, opened); merr != nil {
			return merr
		}
		repaired = true
	}
}

// guarded opens the file and runs fn on it under the fault guard; opened
// is the file bbolt opened (nil if none).
func (s *Store) guarded(write bool, repaired *bool, fn func(db *bolt.DB) error) (opened os.FileInfo, err error) {
	// Turn SIGBUS/SIGSEGV on the mapping into a panic, and bbolt's panics
	// on damaged pages into errFault, instead of a crashed server. Only
	// bbolt and the small record codecs run in here.
	err = guard(func() error {
		db, err := s.open(write, &opened, repaired)
		if err != nil {
			return err
		}
		defer db.Close()
		return fn(db)
	})
	return opened, err
}

// view runs fn in a read-only transaction. A file that does not exist is
// not created: fn sees a transaction with no buckets.
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	err := s.withDB(false, func(db *bolt.DB) error {
		return db.View(func(tx *bolt.Tx) error {
			if _, _, err := s.checkMeta(tx.Bucket(bucketMeta)); err != nil {
				return err
			}
			return fn(tx)
		})
	})
	if errors.Is(err, errNoFile) {
		return nil
	}
	return err
}

// update runs fn in a write transaction, first upgrading an older file's
// meta to this layout. A newer, compatible file's meta is left alone.
func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	return s.withDB(true, func(db *bolt.DB) error {
		return db.Update(func(tx *bolt.Tx) error {
			meta, err := tx.CreateBucketIfNotExists(bucketMeta)
			if err != nil {
				return err
			}
			schema, minReader, err := s.checkMeta(meta)
			if err != nil {
				return err
			}
			if schema < SchemaVersion {
				if err := meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion))); err != nil {
					return err
				}
			}
			if schema <= SchemaVersion && minReader < MinReaderVersion {
				if err := meta.Put(keyMinReader, []byte(strconv.Itoa(MinReaderVersion))); err != nil {
					return err
				}
			}
			return fn(tx)
		})
	})
}

// checkMeta returns the file's schema and min_reader (0 when absent: a new
// file, or min_reader on a file from before it existed) and fails with an
// *IncompatibleError when this version must not use the file.
func (s *Store) checkMeta(meta *bolt.Bucket) (schema, minReader int, err error) {
	if meta == nil {
		return 0, 0, nil
	}
	rawSchema, rawMin := meta.Get(keySchema), meta.Get(keyMinReader)
	incompatible := &IncompatibleError{Path: s.Path, Schema: string(rawSchema), MinReader: string(rawMin)}
	if rawSchema != nil {
		if schema, err = strconv.Atoi(string(rawSchema)); err != nil || schema < 0 {
			return 0, 0, incompatible
		}
	}
	floor := schema // a file from before min_reader: its schema exactly
	if rawMin != nil {
		if minReader, err = strconv.Atoi(string(rawMin)); err != nil || minReader < 0 {
			return 0, 0, incompatible
		}
		floor = minReader
	}
	if floor > SchemaVersion {
		if rawMin == nil {
			incompatible.MinReader = incompatible.Schema
		}
		return 0, 0, incompatible
	}
	return schema, minReader, nil
}

// AppendHistory appends entries to each sandbox's history, keeping the
// newest limit per sandbox.
func (s *Store) AppendHistory(batch map[string][]json.RawMessage, limit int) error {
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketHistory)
		if err != nil {
			return err
		}
		for name, add := range batch {
			var list []json.RawMessage
			if v := b.Get([]byte(name)); v != nil {
				if err := json.Unmarshal(v, &list); err != nil {
					list = nil // an unreadable record is replaced, not fatal
				}
			}
			list = append(list, add...)
			if len(list) > limit {
				list = list[len(list)-limit:]
			}
			data, err := json.Marshal(list)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(name), data); err != nil {
				return err
			}
		}
		return nil
	})
}

// History returns a sandbox's stored history, oldest first.
func (s *Store) History(name string) ([]json.RawMessage, error) {
	var list []json.RawMessage
	err := s.view(func(tx *bolt.Tx) error {
		list = nil // a read retried after a repair starts over
		b := tx.Bucket(bucketHistory)
		if b == nil {
			return nil
		}
		if v := b.Get([]byte(name)); v != nil {
			// Copy out: v is valid only inside the transaction.
			return json.Unmarshal(append([]byte(nil), v...), &list)
		}
		return nil
	})
	return list, err
}

// DeleteHistory forgets a sandbox's history.
func (s *Store) DeleteHistory(name string) error {
	return s.update(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketHistory); b != nil {
			return b.Delete([]byte(name))
		}
		return nil
	})
}
