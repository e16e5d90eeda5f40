package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func rec(i int, pad int) Record {
	return Record{Time: time.Now(), Tool: "exec", Sandbox: "box", Status: "ok", Args: map[string]any{"n": float64(i), "pad": strings.Repeat("x", pad)}}
}

func readAll(t *testing.T, dir string, f Filter) ([]Record, int) {
	t.Helper()
	var out []Record
	bad, err := Read(dir, f, func(r Record) { out = append(out, r) })
	if err != nil {
		t.Fatal(err)
	}
	return out, bad
}

// TestRecordsComeBackInOrder: what is appended reads back whole, in the
// order written, and the filter picks by sandbox and time.
func TestRecordsComeBackInOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	l, err := Open(dir, DefaultCap, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	for i := range 10 {
		r := rec(i, 0)
		if i%2 == 1 {
			r.Sandbox = "other"
		}
		r.Client, r.Status, r.Error, r.ResultBytes, r.DurationMS = "claude-code 2.1", "error", "boom", 12, 3.5
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	got, bad := readAll(t, dir, Filter{})
	if len(got) != 10 || bad != 0 {
		t.Fatalf("%d records, %d bad", len(got), bad)
	}
	for i, r := range got {
		if r.Args["n"] != float64(i) || r.Client != "claude-code 2.1" || r.Error != "boom" || r.ResultBytes != 12 || r.DurationMS != 3.5 {
			t.Fatalf("record %d: %+v", i, r)
		}
	}
	if got, _ := readAll(t, dir, Filter{Sandbox: "other"}); len(got) != 5 {
		t.Fatalf("sandbox filter: %d records", len(got))
	}
	if got, _ := readAll(t, dir, Filter{Since: start.Add(time.Hour)}); len(got) != 0 {
		t.Fatalf("time filter: %d records", len(got))
	}
	for _, p := range []string{dir, filepath.Join(dir, File)} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Fatalf("%s: %v %v: not private to the user", p, fi.Mode(), err)
		}
	}
}

// TestCapHoldsAndServersShareTheDirectory: two servers append at once to
// one directory past several moves aside; every record reads back once,
// none is torn, and the files stay within the cap.
func TestCapHoldsAndServersShareTheDirectory(t *testing.T) {
	dir := t.TempDir()
	const capBytes = 2 << 20
	var wg sync.WaitGroup
	for w := range 2 {
		l, err := Open(dir, capBytes, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				r := rec(w*1000+i, 1000)
				if err := l.Append(r); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got, bad := readAll(t, dir, Filter{})
	if bad != 0 {
		t.Fatalf("%d torn lines", bad)
	}
	seen := map[float64]int{}
	for _, r := range got {
		seen[r.Args["n"].(float64)]++
	}
	if len(seen) != 1000 || len(got) != 1000 {
		t.Fatalf("%d records, %d distinct; want 1000 each", len(got), len(seen))
	}
	aside, _ := Aside(dir)
	if len(aside) == 0 {
		t.Fatal("nothing was moved aside: the test did not reach the cap's files")
	}

	// Far past the cap: the oldest go, the total stays under it.
	l, _ := Open(dir, capBytes, nil)
	for i := range 5000 {
		if err := l.Append(rec(10000+i, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	var total int64
	files, _ := Aside(dir)
	for _, p := range append(files, filepath.Join(dir, File)) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
	}
	if total > capBytes+maxLine || len(files) > 3 {
		t.Fatalf("%d bytes in %d files moved aside, past the cap of %d", total, len(files), capBytes)
	}
	got, _ = readAll(t, dir, Filter{})
	if last := got[len(got)-1].Args["n"]; last != float64(10000+4999) {
		t.Fatalf("the newest record is %v", last)
	}
}

// TestAFullDiskLosesRecordsNotCalls: while writes fail (one leaving half
// a line), Append returns at once with an error, the owner hears of the
// loss once, and the first record written after says how many were lost;
// the half line reads as one bad line and nothing else is lost.
func TestAFullDiskLosesRecordsNotCalls(t *testing.T) {
	dir := t.TempDir()
	var told []error
	l, err := Open(dir, DefaultCap, func(err error) { told = append(told, err) })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append(rec(0, 0)); err != nil {
		t.Fatal(err)
	}
	full := errors.New("no space left on device")
	real := writeFile
	fails := 0
	writeFile = func(f *os.File, b []byte) (int, error) {
		if fails < 3 {
			fails++
			if fails == 1 {
				n, _ := f.Write(b[:len(b)/2])
				return n, full
			}
			return 0, full
		}
		return real(f, b)
	}
	defer func() { writeFile = real }()
	for i := 1; i <= 3; i++ {
		if err := l.Append(rec(i, 0)); err == nil {
			t.Fatalf("record %d: no error on a full disk", i)
		}
	}
	if err := l.Append(rec(4, 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(rec(5, 0)); err != nil {
		t.Fatal(err)
	}
	if len(told) != 1 {
		t.Fatalf("told of the loss %d times, want once", len(told))
	}
	got, bad := readAll(t, dir, Filter{})
	if bad != 1 || len(got) != 3 {
		t.Fatalf("%d records and %d bad lines, want 3 and 1", len(got), bad)
	}
	if got[1].Args["n"] != float64(4) || got[1].Lost != 3 || got[2].Lost != 0 {
		t.Fatalf("after the loss: %+v then %+v", got[1], got[2])
	}
}

// TestReadSkipsWhatIsNotARecord: garbage, binary and over-long lines are
// counted and skipped; a symlink in place of the file is not followed.
func TestReadSkipsWhatIsNotARecord(t *testing.T) {
	dir := t.TempDir()
	l, _ := Open(dir, DefaultCap, nil)
	l.Append(rec(1, 0))
	l.Close()
	f, _ := os.OpenFile(filepath.Join(dir, File), os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintf(f, "not json\n\x00\xff\xfe\n{\"tool\":\"exec\",\"args\":{\"pad\":\"%s\"}}\n{\"tool\":\"ok\"}\n", strings.Repeat("y", maxLine))
	f.Close()
	got, bad := readAll(t, dir, Filter{})
	if len(got) != 2 || bad != 3 {
		t.Fatalf("%d records, %d bad; want 2 and 3", len(got), bad)
	}

	other := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte(`{"tool":"leaked"}`+"\n"), 0o600)
	if err := os.Symlink(secret, filepath.Join(other, File)); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(other, Filter{}, func(Record) { t.Error("read through a symlink") }); err == nil {
		t.Fatal("a symlinked audit file was read")
	}
	l, _ = Open(other, DefaultCap, nil)
	defer l.Close()
	if err := l.Append(rec(1, 0)); err == nil {
		t.Fatal("appended through a symlink")
	}
}

// TestFollowSeesEveryRecordThroughMovesAside: a follower started midway
// sees what was there and every record appended after, once each, in
// order, across files moved aside, several of them between two of its
// looks.
func TestFollowSeesEveryRecordThroughMovesAside(t *testing.T) {
	dir := t.TempDir()
	l, _ := Open(dir, 100<<10, nil)
	defer l.Close()
	for i := range 5 {
		l.Append(rec(i, 100))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var got []float64
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, dir, Filter{}, 100*time.Millisecond, func(r Record) {
			mu.Lock()
			got = append(got, r.Args["n"].(float64))
			mu.Unlock()
		})
	}()
	for i := 5; i < 60; i++ {
		if err := l.Append(rec(i, 1000)); err != nil {
			t.Fatal(err)
		}
		if i == 30 {
			time.Sleep(300 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 60 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if aside, _ := Aside(dir); len(aside) == 0 {
		t.Fatal("nothing was moved aside: the test did not follow a move")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 60 {
		t.Fatalf("followed %d records, want 60: %v", len(got), got)
	}
	for i, n := range got {
		if n != float64(i) {
			t.Fatalf("record %d is %v: %v", i, n, got)
		}
	}
}

// BenchmarkAppend is what recording one call costs the call.
func BenchmarkAppend(b *testing.B) {
	l, err := Open(b.TempDir(), DefaultCap, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := Record{Time: time.Now(), Client: "claude-code 2.1.0", Session: "stdio", Tool: "exec", Sandbox: "default", Status: "ok",
		Args: map[string]any{"command": "cd /workspace && go test ./... 2>&1 | tail -20", "timeout": 120.0}, ResultBytes: 2048, DurationMS: 812.5}
	for b.Loop() {
		if err := l.Append(r); err != nil {
			b.Fatal(err)
		}
	}
}
