package state

import (
	"strconv"
	"time"
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
	return s.putRecord(bucketForwards, forwardKey(f.Sandbox, f.Port), f)
}

// DeleteForward forgets a forward; it reports whether there was one.
func (s *Store) DeleteForward(sandbox string, port int) (bool, error) {
	return s.deleteRecord(bucketForwards, forwardKey(sandbox, port))
}

// Forwards returns every forward record, by sandbox and port; unreadable
// ones are skipped.
func (s *Store) Forwards() ([]Forward, error) {
	return listRecords[Forward](s, bucketForwards, "forward")
}
