package guest

import (
	"archive/tar"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type tarEnt struct {
	name, body, link string
	dir              bool
	mode             int64
}

func tarOf2(t *testing.T, ents ...tarEnt) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: time.Unix(1600000000, 0)}
		switch {
		case e.dir:
			h.Typeflag = tar.TypeDir
		case e.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return b.Bytes()
}

// upload runs UploadScript; stream must end with the entry "END".
func upload(t *testing.T, dir, top string, stream []byte) error {
	t.Helper()
	cmd := exec.Command("sh", "-c", UploadScript, "sh", dir, top, ".sandbox-mcp-up-test", "END")
	cmd.Stdin = bytes.NewReader(stream)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if err != nil {
		t.Logf("stderr: %s", errb.String())
	}
	if _, serr := os.Lstat(filepath.Join(dir, ".sandbox-mcp-up-test")); serr == nil {
		t.Fatal("the staging directory was left")
	}
	return err
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// An upload lands whole: merged into an existing directory file by file,
// a new tree or a file by one rename; a stream cut short changes nothing.
func TestUploadLandsWhole(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "proj", "src"), 0o755)
	os.WriteFile(filepath.Join(dir, "proj", "keep.txt"), []byte("mine"), 0o644)
	os.WriteFile(filepath.Join(dir, "proj", "src", "a.go"), []byte("old a"), 0o644)
	os.Symlink("/nowhere", filepath.Join(dir, "proj", "link"))

	full := tarOf2(t,
		tarEnt{name: "proj/", dir: true, mode: 0o750},
		tarEnt{name: "proj/src/", dir: true, mode: 0o755},
		tarEnt{name: "proj/src/a.go", body: "new a"},
		tarEnt{name: "proj/src/b/", dir: true, mode: 0o700},
		tarEnt{name: "proj/src/b/c.go", body: "c"},
		tarEnt{name: "proj/link", body: "a file where a link was"},
		tarEnt{name: "proj/big", body: strings.Repeat("x", 100000)},
		tarEnt{name: "END"},
	)
	// Cut inside the big file's data, and between two entries (which GNU
	// tar takes for a whole stream): nothing changes.
	if err := upload(t, dir, "proj", full[:len(full)-60000]); err == nil {
		t.Fatal("a stream cut short was taken")
	}
	cut := tarOf2(t, tarEnt{name: "proj/", dir: true, mode: 0o750}, tarEnt{name: "proj/src/a.go", body: "new a"})
	if err := upload(t, dir, "proj", cut[:len(cut)-1024]); err == nil {
		t.Fatal("a stream cut between entries was taken")
	}
	if read(t, filepath.Join(dir, "proj", "src", "a.go")) != "old a" {
		t.Fatal("a stream cut between entries changed a file")
	}
	if read(t, filepath.Join(dir, "proj", "src", "a.go")) != "old a" {
		t.Fatal("a stream cut short changed a file")
	}
	if _, err := os.Lstat(filepath.Join(dir, "proj", "big")); err == nil {
		t.Fatal("a stream cut short left a piece")
	}

	if err := upload(t, dir, "proj", full); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"keep.txt": "mine", "src/a.go": "new a", "src/b/c.go": "c", "link": "a file where a link was"} {
		if got := read(t, filepath.Join(dir, "proj", p)); got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "proj")); fi.Mode().Perm() != 0o750 || !fi.ModTime().Equal(time.Unix(1600000000, 0)) {
		t.Errorf("proj: %v %v, want the upload's mode and time", fi.Mode().Perm(), fi.ModTime())
	}
	if fi, _ := os.Stat(filepath.Join(dir, "proj", "src", "b")); fi.Mode().Perm() != 0o700 {
		t.Errorf("a new directory's mode %v", fi.Mode().Perm())
	}

	// A file, new and over an existing one.
	one := tarOf2(t, tarEnt{name: "notes.txt", body: "v1"}, tarEnt{name: "END"})
	if err := upload(t, dir, "notes.txt", one); err != nil || read(t, filepath.Join(dir, "notes.txt")) != "v1" {
		t.Fatalf("a new file: %v", err)
	}
	if err := upload(t, dir, "notes.txt", tarOf2(t, tarEnt{name: "notes.txt", body: "v2"}, tarEnt{name: "END"})); err != nil || read(t, filepath.Join(dir, "notes.txt")) != "v2" {
		t.Fatalf("over a file: %v", err)
	}
	// A file never lands inside a directory of its name.
	if err := upload(t, dir, "proj", tarOf2(t, tarEnt{name: "proj", body: "x"}, tarEnt{name: "END"})); err == nil {
		t.Fatal("a file replaced a directory")
	}
	if _, err := os.Stat(filepath.Join(dir, "proj", "proj")); err == nil {
		t.Fatal("a file landed inside the directory")
	}
}
