package state

import (
	"encoding/json"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Child is a child sandbox: who spawned it, what it runs with, and when
// its life ends.
type Child struct {
	Name   string `json:"name"`
	Parent string `json:"parent"`
	Root   string `json:"root"`
	Image  string `json:"image"`
	// CPUs and Memory (bytes) are what it was given.
	CPUs    float64   `json:"cpus"`
	Memory  int64     `json:"memory"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	// Policy is what it may spawn under (package spawn's Policy), if
	// anything.
	Policy json.RawMessage `json:"policy,omitempty"`
	// Peers, PortForward, Reset and Snapshot are what its parent's policy
	// allows it.
	Peers       string `json:"peers,omitempty"`
	PortForward bool   `json:"port_forward,omitempty"`
	Reset       bool   `json:"reset,omitempty"`
	Snapshot    bool   `json:"snapshot,omitempty"`
	// Network and Allow are what its spawn asked for (ctl.SpawnParams):
	// a narrower network mode, and the only hosts it may reach.
	Network string   `json:"network,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	// Ready is set once it booted; a record without it is a spawn that
	// did not finish (its server died), whose container is removed.
	Ready bool `json:"ready,omitempty"`
}

// PutChild stores or replaces a child's record.
func (s *Store) PutChild(c Child) error { return s.putRecord(bucketChildren, []byte(c.Name), c) }

// Children returns every child record, by name.
func (s *Store) Children() ([]Child, error) {
	return listRecords[Child](s, bucketChildren, "child")
}

// DeleteChild forgets a child and its spawn count; it reports whether
// there was a record.
func (s *Store) DeleteChild(name string) (bool, error) {
	if _, err := s.deleteRecord(bucketSpawned, []byte(name)); err != nil {
		return false, err
	}
	return s.deleteRecord(bucketChildren, []byte(name))
}

// Spawned returns how many children each sandbox spawned over its life.
func (s *Store) Spawned() (map[string]int, error) {
	out := map[string]int{}
	err := s.view(func(tx *bolt.Tx) error {
		clear(out) // a read retried after a repair starts over
		b := tx.Bucket(bucketSpawned)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if n, err := strconv.Atoi(string(v)); err == nil {
				out[string(k)] = n
			}
			return nil
		})
	})
	return out, err
}

// AddSpawned counts one more child spawned by name and returns the count.
func (s *Store) AddSpawned(name string) (int, error) {
	n := 0
	err := s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketSpawned)
		if err != nil {
			return err
		}
		n, _ = strconv.Atoi(string(b.Get([]byte(name))))
		n++
		return b.Put([]byte(name), []byte(strconv.Itoa(n)))
	})
	return n, err
}

// ForgetSpawned drops name's count (a root that was destroyed starts
// again).
func (s *Store) ForgetSpawned(name string) error {
	_, err := s.deleteRecord(bucketSpawned, []byte(name))
	return err
}
