package state

import (
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Work ties a sandbox to a repository on the host: the sandbox holds a
// clone of it, and its work lands on the branch sandbox/<name> there.
type Work struct {
	Sandbox string `json:"sandbox"`
	// Repo is the top of the repository's work tree on the host; Path the
	// clone in the sandbox.
	Repo string `json:"repo"`
	Path string `json:"path"`
	// Ref is the revision the user named, Base the commit it was.
	Ref  string `json:"ref"`
	Base string `json:"base"`
	// Taken is the last commit taken onto the host's branch, at TakenAt.
	Taken   string    `json:"taken,omitempty"`
	TakenAt time.Time `json:"taken_at,omitzero"`
	Created time.Time `json:"created"`
	// FollowError is why the last record made on its own (after the
	// sandbox's commands) failed, until one succeeds.
	FollowError string `json:"follow_error,omitempty"`
	// TakenBytes adds up the bundles taken from the sandbox: records made
	// on their own stop at a budget of it (work.DefaultMaxTaken).
	TakenBytes int64 `json:"taken_bytes,omitempty"`
}

var bucketWork = []byte("work")

// PutWork stores or replaces a sandbox's tie to a repository.
func (s *Store) PutWork(w Work) error {
	return s.putRecord(bucketWork, []byte(w.Sandbox), w)
}

// Work returns a sandbox's tie to a repository; ok is false when it has
// none.
func (s *Store) Work(sandbox string) (Work, bool, error) {
	return getRecord[Work](s, bucketWork, []byte(sandbox))
}

// Works returns every sandbox's tie to a repository.
func (s *Store) Works() ([]Work, error) {
	return listRecords[Work](s, bucketWork, "work")
}

// DeleteWork removes a sandbox's tie to a repository.
func (s *Store) DeleteWork(sandbox string) error {
	_, err := s.deleteRecord(bucketWork, []byte(sandbox))
	return err
}

// UpdateWork replaces the tie of w.Sandbox only while it is the one made
// at w.Created: a tie removed (its sandbox destroyed) or made again
// meanwhile is left as it is, and ok is false.
func (s *Store) UpdateWork(w Work) (ok bool, err error) {
	data, err := json.Marshal(w)
	if err != nil {
		return false, err
	}
	err = s.update(func(tx *bolt.Tx) error {
		ok = false // a write retried after a repair starts over
		b := tx.Bucket(bucketWork)
		if b == nil {
			return nil
		}
		old := b.Get([]byte(w.Sandbox))
		if old == nil {
			return nil
		}
		var cur Work
		if err := json.Unmarshal(old, &cur); err != nil || !cur.Created.Equal(w.Created) {
			return nil
		}
		ok = true
		return b.Put([]byte(w.Sandbox), data)
	})
	return ok, err
}
