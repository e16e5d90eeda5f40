package state

import (
	"strconv"
	"time"
)

// Forward is a port forward: any server may serve it, one at a time.
type Forward struct {
	Sandbox  string `json:"sandbox"`
	Port     int    `json:"port"`
	HostPort int    `json:"host_port"`
	// Bind is the address the forward listens on; "" in records made
	// before it was kept, which listened on 127.0.0.1.
	Bind    string    `json:"bind,omitempty"`
	Created time.Time `json:"created"`
}

// BindAddr is the address f listens on.
func (f Forward) BindAddr() string {
	if f.Bind == "" {
		return "127.0.0.1"
	}
	return f.Bind
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
