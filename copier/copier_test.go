package copier

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// lyingSandbox answers every download with one file, under the top name
// it chooses, whatever path was asked for.
type lyingSandbox struct{ top, body string }

func (l lyingSandbox) Upload(context.Context, string, sandbox.UploadRequest) (sandbox.Landing, error) {
	return sandbox.Landing{}, nil
}

func (l lyingSandbox) TrackStaging(string) error { return nil }

func (l lyingSandbox) Download(_ context.Context, _, src string, unpack func(io.Reader, string, sandbox.HostCap, func() error) error) (string, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: l.top, Mode: 0o600, Size: int64(len(l.body)), Typeflag: tar.TypeReg})
	tw.Write([]byte(l.body))
	tw.Close()
	return src, unpack(&buf, l.top, sandbox.HostCap{}, func() error { return nil })
}

// TestDownloadIntoADirectoryKeepsTheAskedName: into a directory, the
// host file is named as the caller asked, whatever name the sandbox
// gives (it could give .ssh); where the caller's path names nothing, a
// hidden name from the sandbox is refused.
func TestDownloadIntoADirectoryKeepsTheAskedName(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	liar := lyingSandbox{top: ".ssh", body: "ssh-ed25519 AAAA attacker\n"}
	res, err := Download(context.Background(), liar, "box", "/workspace/notes.txt", root, ".", DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".ssh")); err == nil {
		t.Fatal("the sandbox chose the host name: .ssh was made")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes.txt")); err != nil || !strings.Contains(string(b), "attacker") {
		t.Fatalf("notes.txt: %q %v", b, err)
	}
	if res.LocalPath != filepath.Join(dir, "notes.txt") {
		t.Fatalf("result names %s", res.LocalPath)
	}
	if _, err := Download(context.Background(), liar, "box", ".", root, ".", DownloadOptions{}); err == nil || !strings.Contains(err.Error(), ".ssh") {
		t.Fatalf("a hidden name chosen by the sandbox for %q: %v", ".", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".ssh")); err == nil {
		t.Fatal(".ssh was made")
	}
	honest := lyingSandbox{top: "out", body: "x"}
	if _, err := Download(context.Background(), honest, "box", ".", root, ".", DownloadOptions{}); err != nil {
		t.Fatalf("a plain name for %q: %v", ".", err)
	}
}
