package state

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// fillPages writes records into several buckets, enough to span many pages.
func fillPages(t *testing.T, s *Store) {
	t.Helper()
	for i := range 300 {
		if err := s.PutJob(Job{Sandbox: "box", Name: fmt.Sprintf("job-%03d", i), Command: strings.Repeat("x", 300)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if err := s.AppendHistory(map[string][]json.RawMessage{fmt.Sprintf("sb%02d", i): {json.RawMessage(`"cmd"`)}}, 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutSandbox(Sandbox{Name: "keep", Container: "p-keep"}); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedFileIsSalvaged: a state file with pages zeroed or cut off is
// moved aside, what can be read of it is copied into a fresh file (the
// records on good pages are still there), and a report says what was kept
// and what was lost, for the log, the agent and doctor.
func TestDamagedFileIsSalvaged(t *testing.T) {
	const page = 4096
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, size int64)
		// some: records must be recovered; lost: something must be named lost.
		some, lost bool
	}{
		{"data pages zeroed", func(t *testing.T, path string, size int64) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for off := int64(6 * page); off < size-4*page; off += 9 * page {
				f.WriteAt(make([]byte, page), off)
			}
		}, true, true},
		{"cut short", func(t *testing.T, path string, size int64) {
			if err := os.Truncate(path, size/2); err != nil {
				t.Fatal(err)
			}
		}, false, true},
		{"both meta pages zeroed", func(t *testing.T, path string, size int64) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.WriteAt(make([]byte, 2*page), 0)
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := New(dir)
			fillPages(t, s)
			info, _ := os.Stat(s.Path)
			tc.damage(t, s.Path, info.Size())
			var got *Repair
			s.OnCorrupt = func(r Repair) { got = &r }
			// Reading every bucket finds the damage wherever it is.
			jobs, _ := s.Jobs("box")
			_, _ = s.Sandboxes()
			if got == nil {
				t.Skipf("bbolt read the damaged file without a fault (%d jobs): nothing to salvage", len(jobs))
			}
			if _, err := os.Stat(got.MovedTo); err != nil {
				t.Fatalf("the damaged file is not kept: %v", err)
			}
			total := 0
			for _, n := range got.Kept {
				total += n
			}
			t.Logf("%s", got.Summary())
			if tc.some && total == 0 {
				t.Errorf("nothing recovered: %s", got.Summary())
			}
			if tc.lost && len(got.Lost) == 0 {
				t.Errorf("nothing named lost: %s", got.Summary())
			}
			if total > 0 {
				after, err := s.Jobs("box")
				if err != nil || len(after) != got.Kept["jobs"] {
					t.Errorf("the fresh file has %d jobs (%v), the repair says %d", len(after), err, got.Kept["jobs"])
				}
			}
			if data, err := os.ReadFile(got.Report); err != nil || !strings.Contains(string(data), got.MovedTo) {
				t.Errorf("report %s: %q %v", got.Report, data, err)
			}
			if reps := Repairs(dir); len(reps) != 1 || reps[0] != got.Report {
				t.Errorf("Repairs: %v", reps)
			}
			// The fresh file takes writes.
			if err := s.PutJob(Job{Sandbox: "box", Name: "after"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
