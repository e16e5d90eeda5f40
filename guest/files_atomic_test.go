package guest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// runWrite runs a write script with stdin and returns its status.
func runWrite(t *testing.T, path string, appendTo bool, n int64, stdin string) (WriteStatus, int) {
	t.Helper()
	script, err := WriteFileScript(path, appendTo, n, false, ".sandbox-mcp-wtest")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdin = bytes.NewReader([]byte(stdin))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	st, ok := ParseWriteStatus(out.Bytes())
	if !ok {
		t.Fatalf("no status: %q %q", out.String(), errb.String())
	}
	return st, code
}

// A replacing write is all or nothing: content that arrives whole
// replaces the file and keeps its mode; content cut short (the server
// died part way) leaves the file as it was, or no file where there was
// none; no temporary file stays either way.
func TestWriteFileIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f.txt")
	os.WriteFile(f, []byte("old content"), 0o640)

	if st, code := runWrite(t, f, false, 3, "new"); code != 0 || st.Code != 0 || st.Before != 0 || st.After != 3 {
		t.Fatalf("a whole write: %+v exit %d", st, code)
	}
	if b, _ := os.ReadFile(f); string(b) != "new" {
		t.Fatalf("content %q", b)
	}
	if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want the file's own 0640", fi.Mode().Perm())
	}

	st, code := runWrite(t, f, false, 10, "cut")
	if code != ExitCutShort || st.Code != ExitCutShort || st.After != st.Before {
		t.Fatalf("a write cut short: %+v exit %d", st, code)
	}
	if b, _ := os.ReadFile(f); string(b) != "new" {
		t.Fatalf("a write cut short changed the file: %q", b)
	}
	fresh := filepath.Join(dir, "sub", "fresh.txt")
	if _, code := runWrite(t, fresh, false, 10, "cut"); code != ExitCutShort {
		t.Fatalf("a new file cut short: exit %d", code)
	}
	if _, err := os.Lstat(fresh); err == nil {
		t.Fatal("a new file cut short was left in place")
	}

	// Through a symlink to the file it names; the link stays a link.
	link := filepath.Join(dir, "link")
	os.Symlink("f.txt", link)
	if _, code := runWrite(t, link, false, 7, "through"); code != 0 {
		t.Fatalf("through a link: exit %d", code)
	}
	if b, _ := os.ReadFile(f); string(b) != "through" {
		t.Fatalf("the link's file: %q", b)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the link was replaced by a file")
	}

	// An append stays an append.
	if st, code := runWrite(t, f, true, 2, "++"); code != 0 || st.Before != 7 || st.After != 9 {
		t.Fatalf("an append: %+v exit %d", st, code)
	}
	for _, d := range []string{dir, filepath.Join(dir, "sub")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if len(e.Name()) > 13 && e.Name()[:14] == ".sandbox-mcp-w" {
				t.Fatalf("temporary file left: %s", e.Name())
			}
		}
	}
}
