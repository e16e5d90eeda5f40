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
// Layout (schema version 2; version 1 files, which lack the jobs bucket,
// are upgraded in place on first write):
//
//	meta      "schema" -> "2"
//	history   <sandbox name> -> JSON []Entry, newest last, bounded
//	jobs      <sandbox name> NUL <job name> -> JSON Job
//	sandboxes <sandbox name> -> JSON Sandbox (profile in use, last boot)
//
// A file that cannot be opened as bbolt, or that faults when read, is
// moved aside (renamed with a ".corrupt-<time>" suffix) and reported,
// never truncated in place.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the layout this package writes.
const SchemaVersion = "2"

// upgradable lists older layouts this package upgrades in place: each
// later version only added buckets.
var upgradable = map[string]bool{"1": true}

var (
	bucketMeta    = []byte("meta")
	bucketHistory = []byte("history")
	bucketJobs    = []byte("jobs")
	bucketSandbox = []byte("sandboxes")
	keySchema     = []byte("schema")
)

// ErrLocked means another process held the state file for longer than the
// lock timeout.
var ErrLocked = errors.New("state file is locked by another process")

// Store is the state file at one path.
type Store struct {
	Path string
	// LockTimeout bounds waiting for another process; 0 means 2 s.
	LockTimeout time.Duration
	// OnCorrupt, if set, is told where a corrupt file was moved.
	OnCorrupt func(movedTo string, err error)
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
// lock; errNoFile when there is nothing to read yet).
func (s *Store) open(write bool) (*bolt.DB, error) {
	timeout := s.LockTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	if !write {
		// bbolt would try to initialise an empty file, which a read-only
		// open cannot; an empty file is one a writer is creating.
		if info, err := os.Stat(s.Path); errors.Is(err, os.ErrNotExist) || err == nil && info.Size() == 0 {
			return nil, errNoFile
		}
	}
	opts := &bolt.Options{Timeout: timeout, ReadOnly: !write}
	db, err := bolt.Open(s.Path, 0o600, opts)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w (%s, waited %s); if no other sandbox-mcp is running, a stuck process may hold it", ErrLocked, s.Path, timeout)
	case err != nil && s.unreadable(err):
		if merr := s.moveAside(err); merr != nil {
			return nil, merr
		}
		db, err = bolt.Open(s.Path, 0o600, opts)
	}
	if !write && errors.Is(err, os.ErrNotExist) {
		return nil, errNoFile
	}
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", s.Path, err)
	}
	return db, nil
}

// unreadable reports whether an open error means the file exists but is
// not a usable bbolt file (truncated, overwritten, wrong version), rather
// than a lock or permission problem or a file not there.
func (s *Store) unreadable(err error) bool {
	if errors.Is(err, os.ErrPermission) || errors.Is(err, berrors.ErrTimeout) || errors.Is(err, os.ErrNotExist) {
		return false
	}
	info, statErr := os.Stat(s.Path)
	return statErr == nil && info.Size() > 0
}

// moveAside renames the unreadable state file out of the way (never
// truncating it, so it can be inspected or recovered) and reports it.
func (s *Store) moveAside(why error) error {
	moved := fmt.Sprintf("%s.corrupt-%s", s.Path, time.Now().UTC().Format("20060102T150405.000Z"))
	if err := os.Rename(s.Path, moved); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("state file %s is unreadable (%v) and could not be moved aside: %w", s.Path, why, err)
	}
	if s.OnCorrupt != nil {
		s.OnCorrupt(moved, why)
	}
	return nil
}

// errFault is a state file damaged in a way bbolt does not check before
// reading: it panics on the bad page, or faults reading past the end of a
// truncated file it has mapped into memory.
var errFault = errors.New("state file is damaged")

// withDB opens the file (read-only unless write), runs fn on it under the
// fault guard and closes it. A file damaged so that reading it faults is
// moved aside and the operation retried once, on a fresh file for a write
// or on no file for a read.
func (s *Store) withDB(write bool, fn func(db *bolt.DB) error) error {
	err := s.guarded(write, fn)
	if errors.Is(err, errFault) {
		if merr := s.moveAside(err); merr != nil {
			return merr
		}
		err = s.guarded(write, fn)
	}
	return err
}

func (s *Store) guarded(write bool, fn func(db *bolt.DB) error) (err error) {
	// Turn SIGBUS/SIGSEGV on the mapping into a panic, and bbolt's panics
	// on damaged pages into errFault, instead of a crashed server. Only
	// bbolt and the small record codecs run in here.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errFault, r)
		}
	}()
	db, err := s.open(write)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(db)
}

// view runs fn in a read-only transaction. A file that does not exist is
// not created: fn sees a transaction with no buckets.
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	err := s.withDB(false, func(db *bolt.DB) error {
		return db.View(func(tx *bolt.Tx) error {
			if meta := tx.Bucket(bucketMeta); meta != nil {
				if err := s.checkSchema(meta.Get(keySchema)); err != nil {
					return err
				}
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
// schema.
func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	return s.withDB(true, func(db *bolt.DB) error {
		return db.Update(func(tx *bolt.Tx) error {
			meta, err := tx.CreateBucketIfNotExists(bucketMeta)
			if err != nil {
				return err
			}
			v := meta.Get(keySchema)
			if err := s.checkSchema(v); err != nil {
				return err
			}
			if string(v) != SchemaVersion {
				if err := meta.Put(keySchema, []byte(SchemaVersion)); err != nil {
					return err
				}
			}
			return fn(tx)
		})
	})
}

// checkSchema fails for a schema this package neither writes nor upgrades.
func (s *Store) checkSchema(v []byte) error {
	if v == nil || upgradable[string(v)] || string(v) == SchemaVersion {
		return nil
	}
	return fmt.Errorf("state %s has schema %s; this sandbox-mcp understands %s", s.Path, v, SchemaVersion)
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
