package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// reads lists every read of the store, each reporting how many records it
// saw.
var reads = []struct {
	name string
	read func(s *Store) (int, error)
}{
	{"History", func(s *Store) (int, error) { h, err := s.History("box"); return len(h), err }},
	{"Job", func(s *Store) (int, error) {
		_, ok, err := s.Job("box", "web")
		if ok {
			return 1, err
		}
		return 0, err
	}},
	{"Jobs", func(s *Store) (int, error) { j, err := s.Jobs("box"); return len(j), err }},
	{"JobSandboxes", func(s *Store) (int, error) { n, err := s.JobSandboxes(); return len(n), err }},
	{"Sandboxes", func(s *Store) (int, error) { sb, err := s.Sandboxes(); return len(sb), err }},
}

// writes lists every write of the store.
var writes = []struct {
	name  string
	write func(s *Store) error
}{
	{"AppendHistory", func(s *Store) error {
		return s.AppendHistory(map[string][]json.RawMessage{"box": {raw("x")}}, 10)
	}},
	{"DeleteHistory", func(s *Store) error { return s.DeleteHistory("box") }},
	{"PutJob", func(s *Store) error { return s.PutJob(Job{Sandbox: "box", Name: "web", PID: 1}) }},
	{"DeleteJobs", func(s *Store) error { return s.DeleteJobs("box") }},
	{"PutSandbox", func(s *Store) error { return s.PutSandbox(Sandbox{Name: "box", IdleTTL: "0s"}) }},
	{"DeleteSandbox", func(s *Store) error { return s.DeleteSandbox("box") }},
}

// fill stores one record of each kind, for sandbox "box".
func fill(t *testing.T, s *Store) {
	t.Helper()
	if err := s.AppendHistory(map[string][]json.RawMessage{"box": {raw("1")}}, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.PutJob(Job{Sandbox: "box", Name: "web", PID: 42}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSandbox(Sandbox{Name: "box", Container: "c", IdleTTL: "0s"}); err != nil {
		t.Fatal(err)
	}
}

func TestReadsDoNotCreateTheFile(t *testing.T) {
	for _, r := range reads {
		t.Run(r.name, func(t *testing.T) {
			s, _ := New(t.TempDir())
			s.OnCorrupt = func(r Repair) { t.Errorf("moved aside: %s %v", r.MovedTo, r.Why) }
			n, err := r.read(s)
			if err != nil || n != 0 {
				t.Fatalf("read of no file: %d %v", n, err)
			}
			if _, err := os.Stat(s.Path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("read created the file: %v", err)
			}
			// An empty file is one a writer is creating: empty, and left alone.
			if err := os.WriteFile(s.Path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if n, err := r.read(s); err != nil || n != 0 {
				t.Fatalf("read of an empty file: %d %v", n, err)
			}
			if fi, err := os.Stat(s.Path); err != nil || fi.Size() != 0 {
				t.Fatalf("empty file touched: %v %v", fi, err)
			}
		})
	}
}

func TestReadsAfterWrites(t *testing.T) {
	s, _ := New(t.TempDir())
	fill(t, s)
	before, _ := os.ReadFile(s.Path)
	for _, r := range reads {
		if n, err := r.read(s); err != nil || n != 1 {
			t.Errorf("%s: %d %v", r.name, n, err)
		}
	}
	if after, _ := os.ReadFile(s.Path); !bytes.Equal(before, after) {
		t.Error("reads changed the file")
	}
}

// TestReadsShareTheFile: reads take a shared lock, so they run alongside
// each other and alongside a reader that holds the file open, but wait for
// a writer.
func TestReadsShareTheFile(t *testing.T) {
	s, _ := New(t.TempDir())
	s.LockTimeout = 5 * time.Second
	fill(t, s)
	holder, err := bolt.Open(s.Path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8*len(reads))
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for _, r := range reads {
				if n, err := r.read(s); err != nil || n != 1 {
					errs <- fmt.Errorf("%s: %d %v", r.name, n, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestReadsAndWritesTogether(t *testing.T) {
	s, _ := New(t.TempDir())
	s.LockTimeout = 10 * time.Second
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; i < 10; i++ {
				if err := s.PutJob(Job{Sandbox: "box", Name: fmt.Sprintf("j%d-%d", g, i)}); err != nil {
					errs <- err
				}
				if _, err := s.Jobs("box"); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if jobs, err := s.Jobs("box"); err != nil || len(jobs) != 40 {
		t.Fatalf("%d jobs, %v", len(jobs), err)
	}
}

// TestLockedFileIsAClearErrorForBoth: a read waits for a writer holding
// the file, and a write for a reader, up to the lock timeout.
func TestLockedFileIsAClearErrorForBoth(t *testing.T) {
	for _, tc := range []struct {
		name       string
		holderRO   bool
		op         func(s *Store) error
		wantLocked bool
	}{
		{"read while a writer holds it", false, func(s *Store) error { _, err := s.Jobs("box"); return err }, true},
		{"write while a writer holds it", false, func(s *Store) error { return s.PutJob(Job{Sandbox: "box", Name: "x"}) }, true},
		{"write while a reader holds it", true, func(s *Store) error { return s.PutJob(Job{Sandbox: "box", Name: "x"}) }, true},
		{"read while a reader holds it", true, func(s *Store) error { _, err := s.Jobs("box"); return err }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := New(t.TempDir())
			fill(t, s)
			s.LockTimeout = 200 * time.Millisecond
			holder, err := bolt.Open(s.Path, 0o600, &bolt.Options{ReadOnly: tc.holderRO})
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			err = tc.op(s)
			if got := errors.Is(err, ErrLocked); got != tc.wantLocked {
				t.Fatalf("err = %v, want locked %v", err, tc.wantLocked)
			}
		})
	}
}

// TestReadOfDamagedFile: a read moves a damaged file aside like a write
// does, and then sees empty state without creating a file.
func TestReadOfDamagedFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, s *Store)
	}{
		{"not bbolt", func(t *testing.T, s *Store) {
			if err := os.WriteFile(s.Path, []byte(strings.Repeat("not a bolt file ", 500)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, s *Store) {
			for i := 0; i < 200; i++ {
				if err := s.PutJob(Job{Sandbox: "box", Name: fmt.Sprintf("job-%d", i), Command: strings.Repeat("x", 500)}); err != nil {
					t.Fatal(err)
				}
			}
			info, _ := os.Stat(s.Path)
			if err := os.Truncate(s.Path, info.Size()/2); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := New(t.TempDir())
			tc.damage(t, s)
			var moved string
			s.OnCorrupt = func(r Repair) { moved = r.MovedTo }
			if jobs, err := s.Jobs("box"); err != nil || len(jobs) != 0 {
				t.Fatalf("read of a damaged file: %v %v", jobs, err)
			}
			if moved == "" {
				t.Fatal("not moved aside")
			}
			if _, err := os.Stat(moved); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(s.Path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("read created a file: %v", err)
			}
		})
	}
}
