package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Job is the record of a background job, kept so that any server process
// (a later one included) can read its log or end it. What the job is doing
// right now is read from the sandbox; the record keeps how to find it.
type Job struct {
	Sandbox string `json:"sandbox"`
	Name    string `json:"name"`
	ID      string `json:"id"`
	// Command is what was asked for, with secrets redacted.
	Command string `json:"command"`
	Workdir string `json:"workdir,omitempty"`
	// PID leads the job's process group inside the sandbox.
	PID int `json:"pid"`
	// Dir holds the job's log and exit status inside the sandbox.
	Dir string `json:"dir"`
	// Container is the container the job ran in; a reset replaces it.
	Container string    `json:"container"`
	Started   time.Time `json:"started"`
	// Ended and ExitCode are set once the job is seen to have ended.
	Ended    *time.Time `json:"ended,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"`
	// Damaged, never stored, is set on a record Jobs could not decode:
	// only Sandbox and Name are known, and Damaged says what was wrong.
	Damaged string `json:"-"`
}

func jobKey(sandbox, name string) []byte {
	return append(append([]byte(sandbox), 0), name...)
}

// PutJob stores or replaces a job record.
func (s *Store) PutJob(j Job) error { return s.PutJobs(j) }

// PutJobs stores or replaces several job records in one write.
func (s *Store) PutJobs(jobs ...Job) error {
	data := make([][]byte, len(jobs))
	for i, j := range jobs {
		var err error
		if data[i], err = json.Marshal(j); err != nil {
			return err
		}
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketJobs)
		if err != nil {
			return err
		}
		for i, j := range jobs {
			if err := b.Put(jobKey(j.Sandbox, j.Name), data[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// Job returns one job record; ok is false when there is none.
func (s *Store) Job(sandbox, name string) (j Job, ok bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		j, ok = Job{}, false // a read retried after a repair starts over
		b := tx.Bucket(bucketJobs)
		if b == nil {
			return nil
		}
		v := b.Get(jobKey(sandbox, name))
		if v == nil {
			return nil
		}
		ok = true
		if err := json.Unmarshal(v, &j); err != nil {
			return fmt.Errorf("job %s/%s: unreadable record: %w", sandbox, name, err)
		}
		return nil
	})
	return j, ok, err
}

// Jobs returns a sandbox's job records in name order. A record that cannot
// be decoded comes back with only its sandbox and name and Damaged set, so
// that one bad record hides no other and is still named.
func (s *Store) Jobs(sandbox string) ([]Job, error) {
	var out []Job
	err := s.view(func(tx *bolt.Tx) error {
		out = out[:0] // a read retried after a repair starts over
		b := tx.Bucket(bucketJobs)
		if b == nil {
			return nil
		}
		prefix := jobKey(sandbox, "")
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var j Job
			if err := json.Unmarshal(v, &j); err != nil {
				j = Job{Sandbox: sandbox, Name: string(k[len(prefix):]), Damaged: err.Error()}
			}
			out = append(out, j)
		}
		return nil
	})
	return out, err
}

// DeleteJobs forgets every job of a sandbox, or only the named ones.
func (s *Store) DeleteJobs(sandbox string, names ...string) error {
	return s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketJobs)
		if b == nil {
			return nil
		}
		if len(names) > 0 {
			for _, n := range names {
				if err := b.Delete(jobKey(sandbox, n)); err != nil {
					return err
				}
			}
			return nil
		}
		prefix := jobKey(sandbox, "")
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			keys = append(keys, append([]byte(nil), k...))
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// JobSandboxes returns the names of the sandboxes that have job records.
func (s *Store) JobSandboxes() ([]string, error) {
	var out []string
	err := s.view(func(tx *bolt.Tx) error {
		out = out[:0] // a read retried after a repair starts over
		b := tx.Bucket(bucketJobs)
		if b == nil {
			return nil
		}
		last := ""
		return b.ForEach(func(k, _ []byte) error {
			if i := bytes.IndexByte(k, 0); i > 0 && string(k[:i]) != last {
				last = string(k[:i])
				out = append(out, last)
			}
			return nil
		})
	})
	return out, err
}
