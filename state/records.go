package state

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Records of one kind (sandboxes, snapshots, syncs, forwards) are JSON
// values in a bucket of their own, under a key that names them.

// putRecord stores v under key in bucket, replacing what was there.
func (s *Store) putRecord(bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		return b.Put(key, data)
	})
}

// getRecord reads the record under key in bucket into a T.
func getRecord[T any](s *Store, bucket, key []byte) (v T, ok bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		var zero T
		v, ok = zero, false // a read retried after a repair starts over
		b := tx.Bucket(bucket)
		if b == nil {
			return nil
		}
		data := b.Get(key)
		if data == nil {
			return nil
		}
		ok = true
		return json.Unmarshal(data, &v)
	})
	return v, ok, err
}

// listRecords returns every record in bucket, in key order; records that
// do not decode (written by a newer schema, say) are skipped. what names
// the kind in errors.
func listRecords[T any](s *Store, bucket []byte, what string) ([]T, error) {
	var out []T
	err := s.view(func(tx *bolt.Tx) error {
		out = out[:0] // a read retried after a repair starts over
		b := tx.Bucket(bucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(_, data []byte) error {
			var v T
			if json.Unmarshal(data, &v) == nil {
				out = append(out, v)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read %s records: %w", what, err)
	}
	return out, nil
}

// deleteRecord removes the record under key in bucket and reports
// whether there was one.
func (s *Store) deleteRecord(bucket, key []byte) (bool, error) {
	found := false
	err := s.update(func(tx *bolt.Tx) error {
		found = false // a write retried after a repair starts over
		b := tx.Bucket(bucket)
		if b == nil || b.Get(key) == nil {
			return nil
		}
		found = true
		return b.Delete(key)
	})
	return found, err
}
