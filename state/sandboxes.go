package state

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Sandbox records what a server booted or adopted a sandbox with, for the
// servers that come later: the profile in use and when. The engine stays
// the truth for whether the sandbox exists.
type Sandbox struct {
	Name      string          `json:"name"`
	Container string          `json:"container"`
	Profile   json.RawMessage `json:"profile"`
	// IdleTTL is the idle time after which the sandbox's watchdog stops it
	// (a Go duration; "0s" never).
	IdleTTL  string    `json:"idle_ttl"`
	Created  time.Time `json:"created,omitzero"`
	LastBoot time.Time `json:"last_boot"`
}

// PutSandbox stores or replaces a sandbox record.
func (s *Store) PutSandbox(sb Sandbox) error {
	data, err := json.Marshal(sb)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketSandbox)
		if err != nil {
			return err
		}
		return b.Put([]byte(sb.Name), data)
	})
}

// Sandboxes returns every sandbox record, in name order; unreadable
// records are skipped.
func (s *Store) Sandboxes() ([]Sandbox, error) {
	var out []Sandbox
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSandbox)
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var sb Sandbox
			if json.Unmarshal(v, &sb) == nil {
				out = append(out, sb)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read sandbox records: %w", err)
	}
	return out, nil
}

// DeleteSandbox forgets a sandbox's record.
func (s *Store) DeleteSandbox(name string) error {
	return s.update(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketSandbox); b != nil {
			return b.Delete([]byte(name))
		}
		return nil
	})
}
