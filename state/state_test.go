package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func raw(s string) json.RawMessage { return json.RawMessage(`"` + s + `"`) }

func TestHistoryRoundTripAndBound(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AppendHistory(map[string][]json.RawMessage{"a": {raw("1"), raw("2")}}, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendHistory(map[string][]json.RawMessage{"a": {raw("3"), raw("4")}, "b": {raw("x")}}, 3); err != nil {
		t.Fatal(err)
	}
	got, err := s.History("a")
	if err != nil || len(got) != 3 || string(got[0]) != `"2"` || string(got[2]) != `"4"` {
		t.Fatalf("%s %v", got, err)
	}
	if err := s.DeleteHistory("a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.History("a"); len(got) != 0 {
		t.Fatalf("after delete: %s", got)
	}
	info, err := os.Stat(s.Path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v %v", info.Mode(), err)
	}
}

func TestLockedFileIsAClearError(t *testing.T) {
	s, _ := New(t.TempDir())
	s.LockTimeout = 200 * time.Millisecond
	holder, err := bolt.Open(s.Path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	start := time.Now()
	_, err = s.History("a")
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("err = %v", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("waited %v", took)
	}
}

func TestCorruptFileIsMovedAside(t *testing.T) {
	dir := t.TempDir()
	s, _ := New(dir)
	if err := os.WriteFile(s.Path, []byte(strings.Repeat("not a bolt file ", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	var moved string
	s.OnCorrupt = func(r Repair) { moved = r.MovedTo }
	if err := s.AppendHistory(map[string][]json.RawMessage{"a": {raw("1")}}, 10); err != nil {
		t.Fatal(err)
	}
	if moved == "" || filepath.Dir(moved) != dir {
		t.Fatalf("not moved aside: %q", moved)
	}
	if data, err := os.ReadFile(moved); err != nil || !strings.HasPrefix(string(data), "not a bolt file") {
		t.Fatalf("corrupt file not kept intact: %v", err)
	}
	if got, _ := s.History("a"); len(got) != 1 {
		t.Fatalf("fresh file: %s", got)
	}
}

func TestJobsRoundTrip(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Job("box", "web"); ok || err != nil {
		t.Fatalf("empty store: %v %v", ok, err)
	}
	started := time.Now().UTC().Truncate(time.Second)
	for _, j := range []Job{
		{Sandbox: "box", Name: "web", ID: "a1", Command: "python3 -m http.server", PID: 42, Started: started},
		{Sandbox: "box", Name: "build", ID: "a2", PID: 43},
		{Sandbox: "box2", Name: "web", ID: "b1", PID: 7},
		{Sandbox: "bo", Name: "x", ID: "c1"}, // a name that prefixes another must not leak into it
	} {
		if err := s.PutJob(j); err != nil {
			t.Fatal(err)
		}
	}
	j, ok, err := s.Job("box", "web")
	if err != nil || !ok || j.PID != 42 || !j.Started.Equal(started) || j.ExitCode != nil {
		t.Fatalf("Job: %+v %v %v", j, ok, err)
	}
	code := 3
	j.ExitCode = &code
	if err := s.PutJob(j); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.Jobs("box")
	if err != nil || len(jobs) != 2 || jobs[0].Name != "build" || jobs[1].ExitCode == nil || *jobs[1].ExitCode != 3 {
		t.Fatalf("Jobs: %+v %v", jobs, err)
	}
	if err := s.DeleteJobs("box", "build"); err != nil {
		t.Fatal(err)
	}
	if jobs, _ := s.Jobs("box"); len(jobs) != 1 {
		t.Fatalf("after deleting one: %+v", jobs)
	}
	if err := s.DeleteJobs("box"); err != nil {
		t.Fatal(err)
	}
	if jobs, _ := s.Jobs("box"); len(jobs) != 0 {
		t.Fatalf("after deleting all: %+v", jobs)
	}
	if jobs, _ := s.Jobs("box2"); len(jobs) != 1 {
		t.Fatalf("other sandbox touched: %+v", jobs)
	}
}

// TestTruncatedFileIsMovedAside: a file cut short (bbolt would fault
// reading past its end) is moved aside and a fresh one used, without a
// crash.
func TestTruncatedFileIsMovedAside(t *testing.T) {
	dir := t.TempDir()
	s, _ := New(dir)
	var moved string
	s.OnCorrupt = func(r Repair) { moved = r.MovedTo }
	for i := 0; i < 200; i++ { // grow the file past its first pages
		if err := s.PutJob(Job{Sandbox: "box", Name: fmt.Sprintf("job-%d", i), Command: strings.Repeat("x", 500)}); err != nil {
			t.Fatal(err)
		}
	}
	info, _ := os.Stat(s.Path)
	if err := os.Truncate(s.Path, info.Size()/2); err != nil {
		t.Fatal(err)
	}
	if err := s.PutJob(Job{Sandbox: "box", Name: "after"}); err != nil {
		t.Fatalf("write after truncation: %v", err)
	}
	if moved == "" {
		t.Fatal("the truncated file was not reported")
	}
	if fi, err := os.Stat(moved); err != nil || fi.Size() != info.Size()/2 {
		t.Fatalf("moved-aside file: %v %v", fi, err)
	}
	if jobs, err := s.Jobs("box"); err != nil || len(jobs) != 1 {
		t.Fatalf("fresh file: %v %v", jobs, err)
	}
}

func TestSandboxRecords(t *testing.T) {
	s, _ := New(t.TempDir())
	now := time.Now().UTC().Truncate(time.Second)
	for _, sb := range []Sandbox{
		{Name: "b", Container: "p-b", Profile: json.RawMessage(`{"image":"mcp-dev"}`), IdleTTL: "30m0s", LastBoot: now},
		{Name: "a", Container: "p-a", Profile: json.RawMessage(`{"image":"alpine","cpus":2}`), IdleTTL: "0s", LastBoot: now},
	} {
		if err := s.PutSandbox(sb); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.Sandboxes()
	if err != nil || len(all) != 2 || all[0].Name != "a" || string(all[0].Profile) != `{"image":"alpine","cpus":2}` || !all[1].LastBoot.Equal(now) {
		t.Fatalf("%+v %v", all, err)
	}
	if err := s.DeleteSandbox("a"); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.Sandboxes(); len(all) != 1 || all[0].Name != "b" {
		t.Fatalf("after delete: %+v", all)
	}
}

// TestUpdateWork: a tie is updated while it is the one made at its
// Created, and left alone once removed or made again.
func TestUpdateWork(t *testing.T) {
	st, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Second)
	w := Work{Sandbox: "a", Repo: "/r", Created: t0}
	if ok, err := st.UpdateWork(w); ok || err != nil {
		t.Fatalf("update of no tie: %v %v", ok, err)
	}
	if err := st.PutWork(w); err != nil {
		t.Fatal(err)
	}
	w.Taken = "abc"
	if ok, err := st.UpdateWork(w); !ok || err != nil {
		t.Fatalf("update: %v %v", ok, err)
	}
	if got, _, _ := st.Work("a"); got.Taken != "abc" {
		t.Fatalf("after update: %+v", got)
	}
	if err := st.PutWork(Work{Sandbox: "a", Repo: "/r", Created: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	w.Taken = "def"
	if ok, _ := st.UpdateWork(w); ok {
		t.Fatal("an old tie's update replaced a new tie")
	}
	if err := st.DeleteWork("a"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := st.UpdateWork(w); ok {
		t.Fatal("an update brought back a removed tie")
	}
	if _, ok, _ := st.Work("a"); ok {
		t.Fatal("the removed tie is back")
	}
}

// TestDamagedFileIsRepairedOnce: when several callers find the same
// damaged file at once, it is moved aside once and reported once; a caller
// that failed on the damaged file never moves aside the fresh file another
// caller put in its place (which would lose what was written to it since).
func TestDamagedFileIsRepairedOnce(t *testing.T) {
	for round := 0; round < 10; round++ {
		dir := t.TempDir()
		s, _ := New(dir)
		var repairs atomic.Int32
		s.OnCorrupt = func(Repair) { repairs.Add(1) }
		var old []Job
		for i := 0; i < 40; i++ {
			old = append(old, Job{Sandbox: "old", Name: fmt.Sprintf("job-%d", i), Command: strings.Repeat("x", 500)})
		}
		if err := s.PutJobs(old...); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(s.Path, int64(os.Getpagesize())+512); err != nil {
			t.Fatal(err)
		}
		const callers = 8
		var wg sync.WaitGroup
		errs := make(chan error, 2*callers)
		for i := 0; i < callers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each caller is its own Store, as another goroutine or
				// another server holds one.
				other := &Store{Path: s.Path, OnCorrupt: s.OnCorrupt, LockTimeout: testLockTimeout}
				if i%2 == 0 {
					if _, err := other.Jobs("box"); err != nil {
						errs <- fmt.Errorf("read: %w", err)
					}
				}
				if err := other.PutJob(Job{Sandbox: "box", Name: fmt.Sprintf("new-%d", i)}); err != nil {
					errs <- fmt.Errorf("write %d: %w", i, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		if n := repairs.Load(); n != 1 {
			moved, _ := filepath.Glob(s.Path + ".corrupt-*")
			t.Fatalf("round %d: %d repairs reported, want 1; moved aside: %v", round, n, moved)
		}
		if jobs, err := s.Jobs("box"); err != nil || len(jobs) != callers {
			t.Fatalf("round %d: %d of %d jobs written after the damage are in the file (%v)", round, len(jobs), callers, err)
		}
	}
}
