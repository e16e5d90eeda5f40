package state

import "time"

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
