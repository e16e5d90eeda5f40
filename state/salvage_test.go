package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// testLockTimeout is the lock timeout of the stores the concurrent tests
// use: callers queue on the file and on its repair, and a loaded machine
// must not turn that queue into ErrLocked.
const testLockTimeout = 30 * time.Second

// pageSize reads the page size of the bbolt file whose bytes are data from
// its first meta page (4 KiB on most machines, 16 KiB on Apple silicon).
func pageSize(t *testing.T, data []byte) int {
	t.Helper()
	if len(data) < 32 {
		t.Fatal("not a bbolt file")
	}
	// The page header is 16 bytes; the meta's magic, version, page size.
	return int(binary.LittleEndian.Uint32(data[16+8:]))
}

// damagePage overwrites with 0xff the first page of the file at path that
// pick selects (given its bytes and id), and fails the test if none does.
func damagePage(t *testing.T, path string, pick func(page []byte, id int) bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := pageSize(t, data)
	for off := 2 * page; off+page <= len(data); off += page {
		if pick(data[off:off+page], off/page) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(bytes.Repeat([]byte{0xff}, page), int64(off)); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("no page to damage")
}

// jobsLeaf picks a leaf page (bbolt's page flag 0x02) holding job records.
func jobsLeaf(p []byte, _ int) bool {
	return binary.LittleEndian.Uint16(p[8:]) == 0x02 && bytes.Contains(p, []byte("job-150"))
}

// TestRepairLosesNoAcknowledgedWrite: writers that keep writing, to a part
// of the file the damage does not touch, while a reader finds the damage
// and repairs it, lose nothing they were told was written: each write
// lands in the damaged file before the copy is made, or in the fresh one.
func TestRepairLosesNoAcknowledgedWrite(t *testing.T) {
	for round := 0; round < 5; round++ {
		dir := t.TempDir()
		s, _ := New(dir)
		fillPages(t, s)
		damagePage(t, s.Path, jobsLeaf)
		var repairs atomic.Int32
		onCorrupt := func(Repair) { repairs.Add(1) }
		var mu sync.Mutex
		written := map[string]bool{}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st := &Store{Path: s.Path, OnCorrupt: onCorrupt, LockTimeout: testLockTimeout}
				for i := range 15 {
					key := fmt.Sprintf("w%d-%d", w, i)
					if err := st.AppendHistory(map[string][]json.RawMessage{key: {json.RawMessage(`"x"`)}}, 10); err != nil {
						t.Errorf("write %s: %v", key, err)
						continue
					}
					mu.Lock()
					written[key] = true
					mu.Unlock()
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &Store{Path: s.Path, OnCorrupt: onCorrupt, LockTimeout: testLockTimeout}
			for repairs.Load() == 0 {
				if _, err := r.Jobs("box"); err != nil {
					t.Errorf("read: %v", err)
					return
				}
			}
		}()
		wg.Wait()
		if n := repairs.Load(); n != 1 {
			t.Fatalf("round %d: %d repairs, want 1", round, n)
		}
		for key := range written {
			if h, err := s.History(key); err != nil || len(h) != 1 {
				t.Errorf("round %d: write %s was acknowledged but is not in the state file (%v)", round, key, err)
			}
		}
	}
}

// TestDamagedFreelistIsSalvaged: a damaged freelist faults inside bbolt's
// own open of the file for writing; the file is let go of (bbolt leaves
// it locked) and salvaged, every record kept, and the write lands.
func TestDamagedFreelistIsSalvaged(t *testing.T) {
	dir := t.TempDir()
	s, _ := New(dir)
	fillPages(t, s)
	data, err := os.ReadFile(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	// The meta page with the newer transaction names the freelist's page.
	var txid, freelist uint64
	for _, off := range []int{0, pageSize(t, data)} {
		meta := data[off+16:]
		if id := binary.LittleEndian.Uint64(meta[48:]); id >= txid {
			txid, freelist = id, binary.LittleEndian.Uint64(meta[32:])
		}
	}
	damagePage(t, s.Path, func(_ []byte, id int) bool { return uint64(id) == freelist })
	var got *Repair
	s.OnCorrupt = func(r Repair) { got = &r }
	if err := s.PutJob(Job{Sandbox: "box", Name: "new"}); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got == nil {
		t.Skip("bbolt opened the file without reading the damaged freelist")
	}
	t.Log(got.Summary())
	jobs, err := s.Jobs("box")
	if err != nil || len(jobs) != 301 {
		t.Fatalf("the fresh file has %d jobs (%v), want the 300 salvaged and the new one", len(jobs), err)
	}
}
