package guest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// The transfer scripts run here on the host, on a real ext4 filesystem
// (mkfs.ext4 on a loop device, root only) and on a plain directory, as a
// user other than root when setpriv can switch to one: the volume's
// lost+found is root's, mode 0700, as in a sandbox whose user is not root.

// ext4Root mounts a fresh ext4 filesystem and returns its root directory,
// or skips t.
func ext4Root(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting an ext4 image needs root")
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("no loop devices here")
	}
	dir := tempDir(t)
	img, mnt := filepath.Join(dir, "ws.ext4"), filepath.Join(dir, "ws")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	// mount -o loop detaches the loop device itself at umount.
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount -o loop: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	if fi, err := os.Stat(filepath.Join(mnt, "lost+found")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the fresh filesystem's lost+found: %v %v", fi, err)
	}
	return mnt
}

// sh runs script with args as the unprivileged user (when root can switch
// to one) with stdin, and returns stdout.
func sh(t *testing.T, script string, stdin []byte, args ...string) ([]byte, error) {
	t.Helper()
	argv := append([]string{"sh", "-c", script, "sh"}, args...)
	if os.Geteuid() == 0 {
		if p, err := exec.LookPath("setpriv"); err == nil {
			argv = append([]string{p, "--reuid=65534", "--regid=65534", "--clear-groups", "--"}, argv...)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		t.Logf("stderr: %s", errb.String())
	}
	return out.Bytes(), err
}

// tarNames lists a tar stream's names.
func tarNames(t *testing.T, data []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("tar stream: %v", err)
		}
		names = append(names, h.Name)
	}
	sort.Strings(names)
	return names
}

// tarOf builds a tar stream of directories (names ending in /) and files.
func tarOf(t *testing.T, names ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		h := &tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(n))}
		if strings.HasSuffix(n, "/") {
			h = &tar.Header{Name: n, Mode: 0o755, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = tw.Write([]byte(n))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// fill makes the user's files in dir: a.txt and sub/lost+found/keep.
func fill(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "sub", "lost+found"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.txt", "sub/lost+found/keep"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	// Every entry but the volume's lost+found is the user's, the
	// workspace itself too.
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		switch {
		case err != nil:
			return nil
		case p == filepath.Join(dir, "lost+found"):
			return filepath.SkipDir
		}
		return os.Chown(p, 65534, 65534)
	})
}

// tempDir is a t.TempDir that the unprivileged user can reach.
func tempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// checkVolumeLostFound fails unless dir's lost+found is the one mkfs made:
// root's, mode 0700, empty.
func checkVolumeLostFound(t *testing.T, dir string) {
	t.Helper()
	lf := filepath.Join(dir, "lost+found")
	fi, err := os.Lstat(lf)
	if err != nil {
		t.Fatalf("the volume's lost+found is gone: %v", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 || st.Uid != 0 {
		t.Fatalf("the volume's lost+found changed: %v uid %d", fi.Mode(), st.Uid)
	}
	if ents, _ := os.ReadDir(lf); len(ents) > 0 {
		t.Fatalf("the volume's lost+found holds %v", ents)
	}
}

func TestTarLeavesOutTheVolumesLostFound(t *testing.T) {
	ws := ext4Root(t)
	fill(t, ws)
	// A snapshot's tar: the workspace as ".".
	out, err := sh(t, TarScript, nil, ws, ".", SkipLostFound)
	if err != nil {
		t.Fatalf("tar of the workspace: %v", err)
	}
	want := []string{"./", "./a.txt", "./sub/", "./sub/lost+found/", "./sub/lost+found/keep"}
	if got := tarNames(t, out); !slices.Equal(got, want) {
		t.Errorf("snapshot tar: %q, want %q", got, want)
	}
	// A download of the workspace: its base name, from its parent.
	out, err = sh(t, TarScript, nil, filepath.Dir(ws), filepath.Base(ws), SkipLostFound)
	if err != nil {
		t.Fatalf("download tar: %v", err)
	}
	want = []string{"./ws/", "./ws/a.txt", "./ws/sub/", "./ws/sub/lost+found/", "./ws/sub/lost+found/keep"}
	if got := tarNames(t, out); !slices.Equal(got, want) {
		t.Errorf("download tar: %q, want %q", got, want)
	}
	// Without the flag (a download of another directory) nothing is left
	// out: as a user other than root, tar cannot read lost+found.
	if out, err := sh(t, TarScript, nil, ws, "."); err == nil && !slices.Contains(tarNames(t, out), "./lost+found/") {
		t.Errorf("tar without %s left lost+found out", SkipLostFound)
	}
}

func TestTarKeepsTheUsersLostFound(t *testing.T) {
	// A plain directory (not a filesystem's root): its lost+found is the
	// user's, flag or not.
	ws := filepath.Join(tempDir(t), "ws")
	if err := os.MkdirAll(filepath.Join(ws, "lost+found"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "lost+found", "mine"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	_ = filepath.Walk(ws, func(p string, _ os.FileInfo, _ error) error { return os.Chown(p, 65534, 65534) })
	out, err := sh(t, TarScript, nil, ws, ".", SkipLostFound)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"./", "./lost+found/", "./lost+found/mine"}
	if got := tarNames(t, out); !slices.Equal(got, want) {
		t.Errorf("tar: %q, want %q", got, want)
	}
	// A restore replaces it like any other entry.
	if err := restoreInto(t, ws, tarOf(t, "./", "./b.txt", "END")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "lost+found")); err == nil {
		t.Error("a restore kept the user's lost+found")
	}
}

// An old snapshot, or one of a workspace where lost+found was the user's,
// holds lost+found: restoring it leaves the volume's as it was.
func TestRestoreLeavesTheVolumesLostFound(t *testing.T) {
	snap := tarOf(t, "./", "./lost+found/", "./lost+found/#12", "./b.txt", "lost+found/x", "./sub/", "./sub/lost+found/", "./sub/lost+found/k", "END")
	for name, load := range map[string]func(ws string) error{
		"restore": func(ws string) error { return restoreInto(t, ws, snap) },
		"untar":   func(ws string) error { _, err := sh(t, UntarScript, snap, ws, SkipLostFound); return err },
	} {
		t.Run(name, func(t *testing.T) {
			ws := ext4Root(t)
			fill(t, ws)
			if err := load(ws); err != nil {
				t.Fatalf("load: %v", err)
			}
			checkVolumeLostFound(t, ws)
			if _, err := os.Stat(filepath.Join(ws, "b.txt")); err != nil {
				t.Errorf("b.txt was not restored: %v", err)
			}
			if _, err := os.Stat(filepath.Join(ws, "sub", "lost+found", "k")); err != nil {
				t.Errorf("the user's sub/lost+found/k was not restored: %v", err)
			}
			_, err := os.Stat(filepath.Join(ws, "a.txt"))
			if replaced := name == "restore"; replaced != (err != nil) {
				t.Errorf("a.txt after the load: %v", err)
			}
		})
	}
}

func TestSyncLeavesTheVolumesLostFound(t *testing.T) {
	ws := ext4Root(t)
	fill(t, ws)
	list, err := SyncListScript(ws, []string{".git"}, true)
	if err != nil {
		t.Fatal(err)
	}
	out, err := sh(t, list, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	sort.Strings(got)
	want := []string{"./a.txt", "./sub", "./sub/lost+found", "./sub/lost+found/keep"}
	if !slices.Equal(got, want) {
		t.Errorf("sync listing %q, want %q", got, want)
	}
	// A mirror of a host directory that has its own lost+found, and a
	// batch that deletes it there.
	for _, remove := range [][]string{{"./a.txt"}, {"./lost+found", "./lost+found/h"}} {
		apply, err := SyncApplyScript(ws, remove, true, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sh(t, apply, tarOf(t, "./", "./lost+found/", "./lost+found/h", "./c.txt")); err != nil {
			t.Fatalf("apply %q: %v", remove, err)
		}
		checkVolumeLostFound(t, ws)
	}
	if _, err := os.Stat(filepath.Join(ws, "c.txt")); err != nil {
		t.Errorf("c.txt was not synced: %v", err)
	}
}

// restoreInto makes stream (ending with the entry END) the content of the
// workspace ws as a restore does: staged beside it, then swapped in.
func restoreInto(t *testing.T, ws string, stream []byte) error {
	t.Helper()
	const st, old = WorkspaceStagePrefix + "lf", WorkspaceOldPrefix + "lf"
	if _, err := sh(t, StageScript, stream, ws, st, "END", SkipLostFound, ""); err != nil {
		return err
	}
	_, err := sh(t, SwapScript, nil, ws, st, old, SkipLostFound)
	return err
}
