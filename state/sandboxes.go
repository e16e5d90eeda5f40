package state

import (
	"encoding/json"
	"time"
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
	IdleTTL string `json:"idle_ttl"`
	// Volume is the workspace volume, when it is not the one named after
	// the sandbox (a claimed warm spare's).
	Volume   string    `json:"volume,omitempty"`
	Created  time.Time `json:"created,omitzero"`
	LastBoot time.Time `json:"last_boot"`
}

// PutSandbox stores or replaces a sandbox record.
func (s *Store) PutSandbox(sb Sandbox) error {
	return s.putRecord(bucketSandbox, []byte(sb.Name), sb)
}

// Sandboxes returns every sandbox record, in name order; unreadable
// records are skipped.
func (s *Store) Sandboxes() ([]Sandbox, error) {
	return listRecords[Sandbox](s, bucketSandbox, "sandbox")
}

// Sandbox returns sandbox name's record, and whether there is one.
func (s *Store) Sandbox(name string) (Sandbox, bool, error) {
	return getRecord[Sandbox](s, bucketSandbox, []byte(name))
}

// DeleteSandbox forgets a sandbox's record.
func (s *Store) DeleteSandbox(name string) error {
	_, err := s.deleteRecord(bucketSandbox, []byte(name))
	return err
}
