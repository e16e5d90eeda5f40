package state

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// writeRaw builds a state file with bbolt directly, as another version of
// sandbox-mcp would have.
func writeRaw(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// putMeta stores meta key/value pairs; a nil value leaves the key out.
func putMeta(tx *bolt.Tx, kv map[string][]byte) error {
	m, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	for k, v := range kv {
		if v != nil {
			if err := m.Put([]byte(k), v); err != nil {
				return err
			}
		}
	}
	return nil
}

// readMeta returns the file's meta bucket as strings.
func readMeta(t *testing.T, path string) map[string]string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	_ = db.View(func(tx *bolt.Tx) error {
		if m := tx.Bucket(bucketMeta); m != nil {
			return m.ForEach(func(k, v []byte) error { out[string(k)] = string(v); return nil })
		}
		return nil
	})
	return out
}

// TestNewerCompatibleFile: a file from a newer server that declares this
// version may use it is read and written, and what this version does not
// know (meta, a bucket) is kept.
func TestNewerCompatibleFile(t *testing.T) {
	s, _ := New(t.TempDir())
	writeRaw(t, s.Path, func(tx *bolt.Tx) error {
		if err := putMeta(tx, map[string][]byte{
			"schema":     []byte("99"),
			"min_reader": []byte(strconv.Itoa(SchemaVersion)),
			"future_key": []byte("kept"),
		}); err != nil {
			return err
		}
		f, err := tx.CreateBucket([]byte("future"))
		if err != nil {
			return err
		}
		if err := f.Put([]byte("k"), []byte("v")); err != nil {
			return err
		}
		j, err := tx.CreateBucket(bucketJobs)
		if err != nil {
			return err
		}
		return j.Put(jobKey("box", "web"), []byte(`{"sandbox":"box","name":"web","pid":42,"cgroup":"/future","labels":{"a":1}}`))
	})
	meta := readMeta(t, s.Path)

	j, ok, err := s.Job("box", "web")
	if err != nil || !ok || j.PID != 42 {
		t.Fatalf("read of a job with an unknown field: %+v %v %v", j, ok, err)
	}
	if names, err := s.JobSandboxes(); err != nil || len(names) != 1 {
		t.Fatalf("JobSandboxes: %v %v", names, err)
	}
	for _, w := range writes {
		if err := w.write(s); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
	}
	fill(t, s)
	for _, r := range reads {
		if n, err := r.read(s); err != nil || n != 1 {
			t.Errorf("%s after writes: %d %v", r.name, n, err)
		}
	}

	if got := readMeta(t, s.Path); fmt.Sprint(got) != fmt.Sprint(meta) {
		t.Errorf("meta changed: %v, was %v", got, meta)
	}
	db, err := bolt.Open(s.Path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("future")); b == nil || string(b.Get([]byte("k"))) != "v" {
			t.Error("unknown bucket not kept")
		}
		return nil
	})
}

// TestIncompatibleFileIsRefused: a file that declares it needs a newer
// server is neither read nor written, and is left byte for byte.
func TestIncompatibleFileIsRefused(t *testing.T) {
	next := []byte(strconv.Itoa(SchemaVersion + 1))
	for _, tc := range []struct {
		name              string
		schema, minReader []byte
		wantInMessage     []string
	}{
		{"min_reader above this version", []byte("99"), next, []string{"schema 99", "layout " + string(next) + " or later"}},
		{"newer schema from before min_reader", next, nil, []string{"schema " + string(next), "layout " + string(next) + " or later"}},
		{"schema not a number", []byte("two"), nil, []string{`schema "two"`}},
		{"min_reader not a number", []byte("2"), []byte("x"), []string{`layout "x" or later`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := New(t.TempDir())
			writeRaw(t, s.Path, func(tx *bolt.Tx) error {
				if err := putMeta(tx, map[string][]byte{"schema": tc.schema, "min_reader": tc.minReader}); err != nil {
					return err
				}
				h, err := tx.CreateBucket(bucketHistory)
				if err != nil {
					return err
				}
				return h.Put([]byte("box"), []byte(`["old"]`))
			})
			before, err := os.ReadFile(s.Path)
			if err != nil {
				t.Fatal(err)
			}
			check := func(op string, err error) {
				t.Helper()
				var ie *IncompatibleError
				if !errors.Is(err, ErrIncompatible) || !errors.As(err, &ie) {
					t.Fatalf("%s: err = %v, want incompatible", op, err)
				}
				msg := err.Error()
				want := append([]string{s.Path, "understands layout " + strconv.Itoa(SchemaVersion), "upgrade sandbox-mcp", "--state-dir"}, tc.wantInMessage...)
				for _, w := range want {
					if !strings.Contains(msg, w) {
						t.Errorf("%s: message %q lacks %q", op, msg, w)
					}
				}
			}
			for _, r := range reads {
				_, err := r.read(s)
				check(r.name, err)
			}
			for _, w := range writes {
				check(w.name, w.write(s))
			}
			after, err := os.ReadFile(s.Path)
			if err != nil || !bytes.Equal(before, after) {
				t.Fatalf("file changed (%v)", err)
			}
		})
	}
}

// TestOlderFilesAreUpgraded: files from before min_reader (schema 1
// without the jobs bucket, schema 2) are read as they are and upgraded in
// place by the first write.
func TestOlderFilesAreUpgraded(t *testing.T) {
	for _, schema := range []string{"1", "2", ""} {
		t.Run("schema "+schema, func(t *testing.T) {
			s, _ := New(t.TempDir())
			writeRaw(t, s.Path, func(tx *bolt.Tx) error {
				var v []byte // "": a meta bucket without the key
				if schema != "" {
					v = []byte(schema)
				}
				if err := putMeta(tx, map[string][]byte{"schema": v}); err != nil {
					return err
				}
				h, err := tx.CreateBucket(bucketHistory)
				if err != nil {
					return err
				}
				return h.Put([]byte("box"), []byte(`["old"]`))
			})
			before, _ := os.ReadFile(s.Path)
			if h, err := s.History("box"); err != nil || len(h) != 1 {
				t.Fatalf("read before upgrade: %s %v", h, err)
			}
			if jobs, err := s.Jobs("box"); err != nil || len(jobs) != 0 {
				t.Fatalf("jobs before upgrade: %v %v", jobs, err)
			}
			if after, _ := os.ReadFile(s.Path); !bytes.Equal(before, after) {
				t.Fatal("a read upgraded the file")
			}
			if err := s.PutJob(Job{Sandbox: "box", Name: "j"}); err != nil {
				t.Fatal(err)
			}
			if h, err := s.History("box"); err != nil || len(h) != 1 {
				t.Fatalf("history kept: %s %v", h, err)
			}
			want := map[string]string{"schema": strconv.Itoa(SchemaVersion), "min_reader": strconv.Itoa(MinReaderVersion)}
			if got := readMeta(t, s.Path); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("meta %v, want %v", got, want)
			}
		})
	}
}

// TestNewFileMeta: the first write records this layout.
func TestNewFileMeta(t *testing.T) {
	s, _ := New(t.TempDir())
	fill(t, s)
	want := map[string]string{"schema": strconv.Itoa(SchemaVersion), "min_reader": strconv.Itoa(MinReaderVersion)}
	if got := readMeta(t, s.Path); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("meta %v, want %v", got, want)
	}
}
