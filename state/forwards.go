package state

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Forward is a port forward: any server may serve it, one at a time.
type Forward struct {
	Sandbox  string    `json:"sandbox"`
	Port     int       `json:"port"`
	HostPort int       `json:"host_port"`
	Created  time.Time `json:"created"`
}

func forwardKey(sandbox string, port int) []byte {
	return []byte(sandbox + "\x00" + strconv.Itoa(port))
}

// PutForward stores or replaces a forward record.
func (s *Store) PutForward(f Forward) error {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketForwards)
		if err != nil {
			return err
		}
		return b.Put(forwardKey(f.Sandbox, f.Port), data)
	})
}

// DeleteForward forgets a forward; it reports whether there was one.
func (s *Store) DeleteForward(sandbox string, port int) (bool, error) {
	found := false
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketForwards)
		if b == nil || b.Get(forwardKey(sandbox, port)) == nil {
			return nil
		}
		found = true
		return b.Delete(forwardKey(sandbox, port))
	})
	return found, err
}

// Forwards returns every forward record, by sandbox and port; unreadable
// ones are skipped.
func (s *Store) Forwards() ([]Forward, error) {
	var out []Forward
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketForwards)
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, v []byte) error {
			var f Forward
			if json.Unmarshal(v, &f) == nil {
				out = append(out, f)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read forward records: %w", err)
	}
	return out, nil
}
