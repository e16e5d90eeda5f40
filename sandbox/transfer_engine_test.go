package sandbox_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/transfer"
)

// TestTransferOnEngine: an upload into a full disk fails and says so;
// 10,000 small files go up and come back whole; a 1 GiB file streams
// both ways (on the first target only: the host's disk holds it).
func TestTransferOnEngine(t *testing.T) {
	for i, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			m := filesManager(t, tg)
			const box = "xfer"
			host := t.TempDir()
			root, err := os.OpenRoot(host)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()

			t.Run("full disk", func(t *testing.T) {
				os.WriteFile(filepath.Join(host, "two.bin"), bytes.Repeat([]byte("x"), 2<<20), 0o644)
				_, err := m.Upload(guarded(t), box, sandbox.UploadRequest{Dest: "/data/two.bin", Base: "two.bin", Pack: func(w io.Writer, top string) error {
					_, err := transfer.Pack(root, "two.bin", top, w, transfer.PackOptions{})
					return err
				}})
				if err == nil || !strings.Contains(err.Error(), "no space left") || !strings.Contains(err.Error(), "failed") {
					t.Fatalf("upload into a full tmpfs: %v", err)
				}
			})

			t.Run("10,000 small files", func(t *testing.T) {
				for d := range 100 {
					dir := filepath.Join(host, "many", fmt.Sprintf("d%02d", d))
					os.MkdirAll(dir, 0o755)
					for f := range 100 {
						os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", f)), []byte(fmt.Sprintf("%d/%d", d, f)), 0o644)
					}
				}
				var c transfer.Counts
				land, err := m.Upload(guarded(t), box, sandbox.UploadRequest{Dest: "/workspace", Base: "many", Dir: true, Pack: func(w io.Writer, top string) error {
					var err error
					c, err = transfer.Pack(root, "many", top, w, transfer.PackOptions{})
					return err
				}})
				if err != nil || c.Files != 10000 || land.Path != "/workspace/many" {
					t.Fatalf("%+v %+v %v", land, c, err)
				}
				o := run(t, m, box, shell.Request{Command: "find /workspace/many -type f | wc -l; cat /workspace/many/d42/f07"})
				if o.stdout != "10000\n42/7" {
					t.Fatalf("in the sandbox: %q", o.stdout)
				}
				_, err = m.Download(guarded(t), box, "/workspace/many", func(r io.Reader, top string, _ sandbox.HostCap, finish func() error) error {
					c, err = transfer.Unpack(root, "back", r, transfer.UnpackOptions{Top: top, BeforeCommit: finish})
					return err
				})
				if b, _ := os.ReadFile(filepath.Join(host, "back", "d42", "f07")); err != nil || c.Files != 10000 || string(b) != "42/7" {
					t.Fatalf("download: %+v %v %q", c, err, b)
				}
			})

			t.Run("1 GiB each way", func(t *testing.T) {
				if i != 0 {
					t.Skip("the first target streams 1 GiB; one copy at a time is enough for the host's disk")
				}
				size := int64(1 << 30)
				var st unix.Statfs_t
				if unix.Statfs(host, &st) == nil && int64(st.Bavail)*int64(st.Bsize) < 3*size {
					size = 256 << 20 // a small CI disk: the same path with less
					t.Logf("host disk has under 3 GiB free: streaming %d MiB", size>>20)
				}
				_, err := m.Upload(context.Background(), box, sandbox.UploadRequest{Dest: "/workspace/huge", Base: "huge", Pack: func(w io.Writer, top string) error {
					tw := tar.NewWriter(w)
					if err := tw.WriteHeader(&tar.Header{Name: top, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
						return err
					}
					if _, err := io.Copy(tw, io.LimitReader(pattern{}, size)); err != nil {
						return err
					}
					return tw.Close()
				}})
				if err != nil {
					t.Fatal(err)
				}
				defer run(t, m, box, shell.Request{Command: "rm -f /workspace/huge"})
				o := run(t, m, box, shell.Request{Command: "wc -c </workspace/huge"})
				if strings.TrimSpace(o.stdout) != fmt.Sprint(size) {
					t.Fatalf("size in the sandbox: %q", o.stdout)
				}
				var got int64
				_, err = m.Download(context.Background(), box, "/workspace/huge", func(r io.Reader, top string, _ sandbox.HostCap, finish func() error) error {
					tr := tar.NewReader(r)
					if _, err := tr.Next(); err != nil {
						return err
					}
					n, err := io.Copy(io.Discard, tr)
					got = n
					if err != nil {
						return err
					}
					return finish()
				})
				if err != nil || got != size {
					t.Fatalf("download: %d bytes, %v", got, err)
				}
			})
		})
	}
}

// pattern is an endless reader of a repeating byte pattern.
type pattern struct{}

func (pattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i % 251)
	}
	return len(p), nil
}
