package guest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// listTree lists every path under dir with a file's content, for
// comparing two trees.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if info.Mode().IsRegular() {
			rel += "=" + read(t, p)
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func runScript(t *testing.T, script string, stdin []byte, args ...string) error {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if err != nil {
		t.Logf("stderr: %s", errb.String())
	}
	return err
}

// TestStageAndSwap: a workspace is replaced only by a stream that arrived
// whole, and the swap, killed at any step and run again, ends with the new
// workspace alone, hidden files included, and nothing of the old.
func TestStageAndSwap(t *testing.T) {
	const st, old = WorkspaceStagePrefix + "t", WorkspaceOldPrefix + "t"
	oldTree := func(t *testing.T) string {
		ws := t.TempDir()
		os.MkdirAll(filepath.Join(ws, "src", "deep"), 0o755)
		os.WriteFile(filepath.Join(ws, "src", "deep", "a"), []byte("old a"), 0o644)
		os.WriteFile(filepath.Join(ws, ".hidden"), []byte("old hidden"), 0o644)
		os.WriteFile(filepath.Join(ws, "-dash"), []byte("old dash"), 0o644)
		os.WriteFile(filepath.Join(ws, "only-old"), []byte("x"), 0o644)
		return ws
	}
	stream := tarOf2(t, tarEnt{name: "./", dir: true}, tarEnt{name: "./src/", dir: true}, tarEnt{name: "./src/b", body: "new b"},
		tarEnt{name: "./.env", body: "new env"}, tarEnt{name: "./-dash", body: "new dash"}, tarEnt{name: "END"})
	want := "-dash=new dash .env=new env src src/b=new b"

	t.Run("cut short", func(t *testing.T) {
		ws := oldTree(t)
		before := listTree(t, ws)
		cut := tarOf2(t, tarEnt{name: "./", dir: true}, tarEnt{name: "./src/", dir: true}, tarEnt{name: "./src/b", body: "new b"})
		if err := runScript(t, StageScript, cut, ws, st, "END", "", Exact); err == nil {
			t.Fatal("a stream without its end mark was taken")
		}
		if got := listTree(t, ws); got != before {
			t.Fatalf("the workspace changed:\n%s\nwant\n%s", got, before)
		}
	})
	t.Run("whole", func(t *testing.T) {
		ws := oldTree(t)
		if err := runScript(t, StageScript, stream, ws, st, "END", "", ""); err != nil {
			t.Fatal(err)
		}
		if got := listTree(t, filepath.Join(ws, st)); got != want {
			t.Fatalf("staged %s", got)
		}
		if err := runScript(t, SwapScript, nil, ws, st, old, ""); err != nil {
			t.Fatal(err)
		}
		if got := listTree(t, ws); got != want {
			t.Fatalf("after the swap: %s\nwant %s", got, want)
		}
	})
	// A swap killed part way: some old entries moved aside, or all of
	// them and some new ones moved in, or the stage gone and the old
	// directory half removed. Run again, each ends with the new workspace.
	for _, tc := range []struct {
		name string
		brk  func(ws string)
	}{
		{"while moving the old aside", func(ws string) {
			os.MkdirAll(filepath.Join(ws, old), 0o755)
			os.Rename(filepath.Join(ws, "src"), filepath.Join(ws, old, "src"))
		}},
		{"while moving the new in", func(ws string) {
			os.MkdirAll(filepath.Join(ws, old), 0o755)
			for _, e := range []string{"src", ".hidden", "-dash", "only-old"} {
				os.Rename(filepath.Join(ws, e), filepath.Join(ws, old, e))
			}
			os.WriteFile(filepath.Join(ws, old, ".sandbox-mcp-moved"), nil, 0o644)
			os.Rename(filepath.Join(ws, st, "src"), filepath.Join(ws, "src"))
		}},
		{"while removing the old", func(ws string) {
			os.MkdirAll(filepath.Join(ws, old), 0o755)
			for _, e := range []string{"src", ".hidden", "-dash", "only-old"} {
				os.Rename(filepath.Join(ws, e), filepath.Join(ws, old, e))
			}
			for _, e := range []string{"src", ".env", "-dash"} {
				os.Rename(filepath.Join(ws, st, e), filepath.Join(ws, e))
			}
			os.Remove(filepath.Join(ws, st))
			os.RemoveAll(filepath.Join(ws, old, "src"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := oldTree(t)
			if err := runScript(t, StageScript, stream, ws, st, "END", "", ""); err != nil {
				t.Fatal(err)
			}
			tc.brk(ws)
			if err := runScript(t, SwapScript, nil, ws, st, old, ""); err != nil {
				t.Fatal(err)
			}
			if got := listTree(t, ws); got != want {
				t.Fatalf("after the swap run again: %s\nwant %s", got, want)
			}
		})
	}
}

// TestHeldBatchSweptAfterItsServer: the files a batch held (and the
// directories it made) for a server that was killed before its commit
// are removed by the sweep for that server, and nothing else is; a
// committed batch puts each in place.
func TestHeldBatchSweptAfterItsServer(t *testing.T) {
	for _, shName := range []string{"dash", "busybox"} {
		t.Run(shName, func(t *testing.T) {
			argv := func(script string, args ...string) []string {
				if shName == "busybox" {
					return append([]string{"busybox", "sh", "-c", script, "sh"}, args...)
				}
				return append([]string{"dash", "-c", script, "sh"}, args...)
			}
			if _, err := exec.LookPath(shName); err != nil {
				t.Skipf("%s is not installed here", shName)
			}
			runIt := func(stdin string, a []string) {
				t.Helper()
				cmd := exec.Command(a[0], a[1:]...)
				cmd.Stdin = strings.NewReader(stdin)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%v: %s", err, out)
				}
			}
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "kept"), []byte("old"), 0o644)
			server := randomJobID(t)
			hold := func(id, path, content string) string {
				manifest := BatchManifest(server, id)
				script, err := HoldFileScript(path, int64(len(content)), false, ".sandbox-mcp-w"+id+filepath.Base(path), manifest)
				if err != nil {
					t.Fatal(err)
				}
				runIt(content, argv(script))
				t.Cleanup(func() { os.Remove(manifest) })
				return manifest
			}
			hold("a1", filepath.Join(dir, "kept"), "new")
			hold("a1", filepath.Join(dir, "made", "deep", "f"), "f")
			if got := listTree(t, dir); !strings.Contains(got, ".sandbox-mcp-wa1kept") || !strings.Contains(got, "kept=old") {
				t.Fatalf("held: %s", got)
			}
			sweep := exec.Command(argv(SweepScript, server)[0], argv(SweepScript, server)[1:]...)
			out, err := sweep.Output()
			if err != nil {
				t.Fatal(err)
			}
			if _, batches := ParseSweepAll(out); batches[server] != 1 {
				t.Errorf("the sweep reports %v dropped batches, want 1 of %s", batches, server)
			}
			if got := listTree(t, dir); got != "kept=old" {
				t.Fatalf("after the sweep: %s", got)
			}
			// A held copy removed before the commit (a clean step that
			// deletes dotfiles): nothing moves, nothing is emptied.
			m := hold("c3", filepath.Join(dir, "kept"), "new")
			hold("c3", filepath.Join(dir, "other"), "other")
			os.Remove(filepath.Join(dir, ".sandbox-mcp-wc3kept"))
			cmd := exec.Command(argv(CommitBatchScript, m)[0], argv(CommitBatchScript, m)[1:]...)
			if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "nothing was written") {
				t.Fatalf("commit with a held copy gone: %v %s", err, out)
			}
			runIt("", argv(DropBatchScript, m))
			if got := listTree(t, dir); got != "kept=old" {
				t.Fatalf("after a refused commit and its drop: %s", got)
			}
			m = hold("b2", filepath.Join(dir, "kept"), "new")
			hold("b2", filepath.Join(dir, "made", "g"), "g")
			runIt("", argv(CommitBatchScript, m))
			if got := listTree(t, dir); got != "kept=new made made/g=g" {
				t.Fatalf("after the commit: %s", got)
			}
			if _, err := os.Stat(m); err == nil {
				t.Error("the manifest is left")
			}
		})
	}
}

// TestSyncStageLandsFilesWhole: a sync's stream lands file by file over
// the directory, keeping what it does not hold; one cut short changes
// nothing and leaves nothing.
func TestSyncStageLandsFilesWhole(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "src"), 0o755)
	os.WriteFile(filepath.Join(ws, "src", "a"), []byte("old a"), 0o644)
	os.WriteFile(filepath.Join(ws, "keep"), []byte("mine"), 0o644)
	before := listTree(t, ws)
	cut := tarOf2(t, tarEnt{name: "./", dir: true}, tarEnt{name: "./src/", dir: true}, tarEnt{name: "./src/a", body: "new a"})
	if err := runScript(t, SyncStageScript, cut, ws, ".sandbox-mcp-up-s", "END", ""); err == nil {
		t.Fatal("a stream without its end mark was taken")
	}
	if got := listTree(t, ws); got != before {
		t.Fatalf("after a cut stream: %s, want %s", got, before)
	}
	whole := tarOf2(t, tarEnt{name: "./", dir: true}, tarEnt{name: "./src/", dir: true}, tarEnt{name: "./src/a", body: "new a"},
		tarEnt{name: "./src/deep/", dir: true}, tarEnt{name: "./src/deep/b", body: "b"}, tarEnt{name: "END"})
	if err := runScript(t, SyncStageScript, whole, ws, ".sandbox-mcp-up-s", "END", ""); err != nil {
		t.Fatal(err)
	}
	if got, want := listTree(t, ws), "keep=mine src src/a=new a src/deep src/deep/b=b"; got != want {
		t.Fatalf("after the sync: %s, want %s", got, want)
	}
}
