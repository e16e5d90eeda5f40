package sandbox_test

import (
	"errors"
	"fmt"
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

// TestEveryAppleRelease takes a sandbox through its common life on the
// stand-in at a release of each set of features that the full suites do
// not run (enginetest.StandInReleases): boot and warm exec, files, an
// upload and a download, a stop behind the server's back, a snapshot and
// its restore where the release can export, a reset and a destroy that
// leaves no container and no volume. The stand-in refuses every argument
// its release's table refuses, so a call the dialect makes wrongly for
// that release fails here with the CLI's own text.
//
// The releases run side by side, as many at once as -parallel allows: a
// top-level parallel test runs after the package's sequential tests have
// ended, so one after another they were a tail of their own at the end of
// the package's run, with the machine otherwise idle.
func TestEveryAppleRelease(t *testing.T) {
	targets := enginetest.StandInReleases(t)
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel() // each release's life is its own: prefix, state, snapshots
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			store, err := state.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			// The small image: a release's life is the same calls whatever
			// the image, and from 0.11.0 its snapshot exports the whole
			// root filesystem and builds an image of it, 1.5 GB on mcp-dev,
			// through podman beneath the stand-in.
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: enginetest.SmallImage},
				LockDir: t.TempDir(), Snapshots: store, SnapshotDir: t.TempDir()})
			t.Cleanup(m.Close)
			ctx := guardedSequence(t)
			const box = "rel"

			o := run(t, m, box, shell.Request{Command: "cat; echo err >&2; cd /workspace && pwd", Stdin: []byte("in\n")})
			if o.stdout != "in\n/workspace\n" || o.stderr != "err\n" || !o.res.Boot.Created {
				t.Fatalf("first exec: %q %q %+v", o.stdout, o.stderr, o.res.Boot)
			}
			if o = run(t, m, box, shell.Request{Command: "pwd; exit 3"}); o.stdout != "/workspace\n" || o.res.ExitCode != 3 {
				t.Fatalf("warm exec: %q exit %d", o.stdout, o.res.ExitCode)
			}

			if _, err := m.WriteFile(ctx, box, sandbox.WriteRequest{Path: "/workspace/w.txt", Data: []byte("written\n")}); err != nil {
				t.Fatal(err)
			}
			if b, err := m.ReadFile(ctx, box, "/workspace/w.txt", 0, 0); err != nil || string(b) != "written\n" {
				t.Fatalf("ReadFile: %q %v", b, err)
			}

			host := t.TempDir()
			if err := os.MkdirAll(filepath.Join(host, "up", "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(host, "up", "sub", "f"), []byte("up\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			root, err := os.OpenRoot(host)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			if _, err := m.Upload(ctx, box, sandbox.UploadRequest{Dest: "/workspace", Base: "up", Dir: true, Pack: func(w io.Writer, top string) error {
				_, err := transfer.Pack(root, "up", top, w, transfer.PackOptions{})
				return err
			}}); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Download(ctx, box, "/workspace/up", func(r io.Reader, top string, _ sandbox.HostCap, finish func() error) error {
				_, err := transfer.Unpack(root, "down", r, transfer.UnpackOptions{Top: top, BeforeCommit: finish})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(host, "down", "sub", "f")); err != nil || string(b) != "up\n" {
				t.Fatalf("downloaded: %q %v", b, err)
			}

			// Stopped behind the server's back: the next exec starts it again,
			// and the workspace is still there.
			if err := rt.Stop(ctx, m.ContainerFor(box), 0); err != nil {
				t.Fatal(err)
			}
			enginetest.WaitFor(t, "the server to see the stop", func() error {
				if in, err := m.Status(ctx, box); err != nil || in.State != sandbox.StateStopped {
					return fmt.Errorf("state %s, %v", in.State, err)
				}
				return nil
			})
			if o = run(t, m, box, shell.Request{Command: "cat /workspace/w.txt /workspace/up/sub/f"}); o.stdout != "written\nup\n" {
				t.Fatalf("after a restart: %q", o.stdout)
			}

			run(t, m, box, shell.Request{Command: "echo root > /etc/rel-marker"})
			_, err = m.Snapshot(ctx, box, sandbox.SnapshotRequest{Name: "rel1", IncludeWorkspace: true})
			switch {
			case errors.Is(err, sandbox.ErrUnsupported):
				t.Logf("no snapshots on %s: %v", tg.Name, err)
			case err != nil:
				t.Fatal(err)
			default:
				run(t, m, box, shell.Request{Command: "rm /etc/rel-marker /workspace/w.txt"})
				if _, _, err := m.Restore(ctx, "rel1", box); err != nil {
					t.Fatal(err)
				}
				if o = run(t, m, box, shell.Request{Command: "cat /etc/rel-marker /workspace/w.txt"}); o.stdout != "root\nwritten\n" {
					t.Fatalf("after the restore: %q", o.stdout)
				}
				if _, err := m.DeleteSnapshot(ctx, "rel1"); err != nil {
					t.Fatal(err)
				}
			}

			if _, err := m.Reset(ctx, box, true); err != nil {
				t.Fatal(err)
			}
			if o = run(t, m, box, shell.Request{Command: "ls -A /workspace | grep -vx lost+found; test -e /etc/rel-marker && echo kept"}); o.stdout != "" {
				t.Fatalf("after a reset that wipes: %q", o.stdout)
			}

			if existed, err := m.Destroy(ctx, box); err != nil || !existed {
				t.Fatalf("Destroy = %v, %v", existed, err)
			}
			cs, err := rt.List(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				if strings.HasPrefix(c.Name, prefix) {
					t.Errorf("container %s outlived the destroy", c.Name)
				}
			}
			if vl, ok := rt.(sandbox.VolumeLister); ok {
				vols, err := vl.VolumeNames(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if i := slices.IndexFunc(vols, func(v string) bool { return strings.HasPrefix(v, prefix) }); i >= 0 {
					t.Errorf("volume %s outlived the destroy", vols[i])
				}
			}
		})
	}
}
