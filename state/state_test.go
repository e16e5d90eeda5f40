package state

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	if took := time.Since(start); took > time.Second {
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
	s.OnCorrupt = func(to string, _ error) { moved = to }
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
