package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Sync is a live sync job: its definition, which any server may resume,
// and the last status its runner wrote.
type Sync struct {
	ID         string    `json:"id"`
	Sandbox    string    `json:"sandbox"`
	LocalDir   string    `json:"local_dir"`
	SandboxDir string    `json:"sandbox_dir"`
	Ignore     []string  `json:"ignore"`
	Created    time.Time `json:"created"`

	// Status, written by the server that runs the job.
	State     string    `json:"state"`
	Files     int64     `json:"files"`
	Bytes     int64     `json:"bytes"`
	Removed   int64     `json:"removed"`
	LastSync  time.Time `json:"last_sync,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	Polled    int       `json:"polled_dirs,omitempty"`
	RunnerPID int       `json:"runner_pid,omitempty"`
}

// ErrNoSync marks a sync job that is not recorded.
var ErrNoSync = errors.New("no such sync job")

// PutSync stores or replaces a sync record.
func (s *Store) PutSync(j Sync) error {
	return s.putRecord(bucketSyncs, []byte(j.ID), j)
}

// UpdateSync changes a recorded sync with fn; a record that is gone
// (stopped meanwhile) gives ErrNoSync and is not written back.
func (s *Store) UpdateSync(id string, fn func(*Sync)) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSyncs)
		if b == nil {
			return ErrNoSync
		}
		v := b.Get([]byte(id))
		if v == nil {
			return ErrNoSync
		}
		var j Sync
		if err := json.Unmarshal(v, &j); err != nil {
			return fmt.Errorf("sync %s: %w", id, err)
		}
		fn(&j)
		data, err := json.Marshal(j)
		if err != nil {
			return err
		}
		return b.Put([]byte(id), data)
	})
}

// Syncs returns every sync record, in id order; unreadable ones are skipped.
func (s *Store) Syncs() ([]Sync, error) {
	return listRecords[Sync](s, bucketSyncs, "sync")
}

// DeleteSync forgets a sync job; it reports whether there was one.
func (s *Store) DeleteSync(id string) (bool, error) {
	return s.deleteRecord(bucketSyncs, []byte(id))
}
