package sandbox_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
	"github.com/sandbox-mcp/sandbox-mcp/transfer"
)

// volumeLostFound describes /workspace/lost+found: "volume" for the one
// the ext4 formatter made (a directory, mode 0700, root's, at the root of
// the filesystem, inode 2), with the names it holds.
const volumeLostFound = `cd /workspace && if [ "$(stat -c %i .)" = 2 ] && [ -d lost+found ]; then ` +
	`echo "volume $(stat -c '%a %u' lost+found) $(ls -A lost+found | tr '\n' ' ')"; ` +
	`elif [ -e lost+found ]; then echo other; else echo none; fi`

// TestWorkspaceLostFoundOnEngine: a workspace that is an ext4 volume (a
// sized one on Linux as root, every one of Apple's) holds the formatter's
// lost+found. A download of the workspace, a snapshot of it, a sync's
// listing and a clone leave it out; a restore leaves it in place, also
// from a snapshot whose tar holds a lost+found; a lost+found of the user's
// deeper in the tree goes everywhere like any other directory.
func TestWorkspaceLostFoundOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			store, err := state.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			snapDir := t.TempDir()
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image, Disk: "1G"},
				LockDir: t.TempDir(), Snapshots: store, SnapshotDir: snapDir})
			t.Cleanup(m.Close)
			ctx := guardedSequence(t)
			// Something in the volume's lost+found (root can write there) that
			// must go nowhere, and the user's own lost+found deeper.
			o := run(t, m, "lf", shell.Request{Command: "echo a > /workspace/a.txt && mkdir -p /workspace/sub/lost+found && " +
				"echo k > /workspace/sub/lost+found/keep && { echo s > /workspace/lost+found/stray; true; } && " + volumeLostFound})
			if !strings.HasPrefix(o.stdout, "volume ") {
				in, _ := m.Status(ctx, "lf")
				t.Skipf("the workspace is no ext4 volume's root here (%q; limits %s)", o.stdout, in.Limits)
			}
			if o.stdout != "volume 700 0 stray \n" {
				t.Fatalf("the volume's lost+found: %q", o.stdout)
			}

			t.Run("download", func(t *testing.T) {
				root, err := os.OpenRoot(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				defer root.Close()
				_, err = m.Download(ctx, "lf", "/workspace", func(r io.Reader, top string, _ sandbox.HostCap, finish func() error) error {
					_, err := transfer.Unpack(root, "ws", r, transfer.UnpackOptions{Top: top, BeforeCommit: finish})
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				got := hostTree(t, filepath.Join(root.Name(), "ws"))
				if want := []string{"a.txt", "sub", "sub/lost+found", "sub/lost+found/keep"}; !slices.Equal(got, want) {
					t.Fatalf("downloaded %q, want %q", got, want)
				}
			})

			t.Run("sync listing", func(t *testing.T) {
				got, err := m.SyncList(ctx, "lf", "/workspace", nil)
				if err != nil {
					t.Fatal(err)
				}
				slices.Sort(got)
				if want := []string{"./a.txt", "./sub", "./sub/lost+found", "./sub/lost+found/keep"}; !slices.Equal(got, want) {
					t.Fatalf("listed %q, want %q", got, want)
				}
				// A mirror of a host directory without lost+found removes
				// what the host lacks, and the volume's lost+found stays.
				if err := m.SyncApply(ctx, "lf", "/workspace", []string{"./lost+found"}, 0, nil); err != nil {
					t.Fatal(err)
				}
				if o := run(t, m, "lf", shell.Request{Command: volumeLostFound}); o.stdout != "volume 700 0 stray \n" {
					t.Fatalf("after the sync: %q", o.stdout)
				}
			})

			t.Run("snapshot and restore", func(t *testing.T) {
				rec, err := m.Snapshot(ctx, "lf", sandbox.SnapshotRequest{Name: "lf1", IncludeWorkspace: true})
				if errors.Is(err, sandbox.ErrUnsupported) {
					t.Skipf("no snapshots here: %v", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				tarFile := filepath.Join(snapDir, rec.WorkspaceFile)
				names := tarFileNames(t, tarFile)
				if want := []string{"./", "./a.txt", "./sub/", "./sub/lost+found/", "./sub/lost+found/keep"}; !slices.Equal(names, want) {
					t.Fatalf("the snapshot's workspace tar holds %q, want %q", names, want)
				}
				run(t, m, "lf", shell.Request{Command: "rm -rf /workspace/a.txt /workspace/sub && echo b > /workspace/b.txt"})
				if _, _, err := m.Restore(ctx, "lf1", "lf"); err != nil {
					t.Fatal(err)
				}
				o := run(t, m, "lf", shell.Request{Command: "cd /workspace && ls -A sub/lost+found && ls -A && " + volumeLostFound})
				if want := "keep\na.txt\nlost+found\nsub\nvolume 700 0 stray \n"; o.stdout != want {
					t.Fatalf("after the restore: %q, want %q", o.stdout, want)
				}

				// Bad input: a snapshot whose tar holds lost+found (saved before
				// it was left out, or where lost+found was the user's).
				var b bytes.Buffer
				tw := tar.NewWriter(&b)
				for _, h := range []*tar.Header{
					{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
					{Name: "./lost+found/", Typeflag: tar.TypeDir, Mode: 0o755},
					{Name: "./lost+found/#12", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
					{Name: "./c.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
				} {
					if err := tw.WriteHeader(h); err != nil {
						t.Fatal(err)
					}
					if h.Size > 0 {
						_, _ = tw.Write([]byte("x"))
					}
				}
				if err := tw.Close(); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(tarFile, b.Bytes(), 0o600); err != nil {
					t.Fatal(err)
				}
				if _, _, err := m.Restore(ctx, "lf1", "lf"); err != nil {
					t.Fatalf("restore of a tar holding lost+found: %v", err)
				}
				o = run(t, m, "lf", shell.Request{Command: "cd /workspace && ls -A && " + volumeLostFound})
				if want := "c.txt\nlost+found\nvolume 700 0 stray \n"; o.stdout != want {
					t.Fatalf("after restoring a tar holding lost+found: %q, want %q", o.stdout, want)
				}
			})

			t.Run("clone", func(t *testing.T) {
				run(t, m, "lf", shell.Request{Command: "echo d > /workspace/d.txt"})
				_, err := m.CloneSandbox(ctx, "lf", "lf2", nil)
				if errors.Is(err, sandbox.ErrUnsupported) {
					t.Skipf("no clones here: %v", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				o := run(t, m, "lf2", shell.Request{Command: "cd /workspace && ls -A && " + volumeLostFound})
				if !strings.Contains(o.stdout, "d.txt\n") || !strings.HasSuffix(o.stdout, "lost+found\nvolume 700 0 \n") {
					t.Fatalf("the clone's workspace: %q", o.stdout)
				}
			})
		})
	}
}

// hostTree lists the paths under dir, slash-separated and sorted.
func hostTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// tarFileNames lists the names in a tar file, sorted.
func tarFileNames(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	slices.Sort(names)
	return names
}
