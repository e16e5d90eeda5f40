package mcpserver

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/syncer"
)

// recSyncs records the sandbox directories sync_start hands the sync
// manager.
type recSyncs struct{ dirs []string }

func (r *recSyncs) StartBooted(ctx context.Context, b syncer.Booter, sandbox, localDir, sandboxDir string, _ []string) (syncer.Status, error) {
	if _, err := b.Boot(ctx, sandbox); err != nil {
		return syncer.Status{}, err
	}
	r.dirs = append(r.dirs, sandboxDir)
	var st syncer.Status
	st.ID, st.Sandbox, st.LocalDir, st.SandboxDir = "sync-1", sandbox, localDir, sandboxDir
	return st, nil
}
func (r *recSyncs) Stop(string) (syncer.Status, error) { return syncer.Status{}, nil }
func (r *recSyncs) List() []syncer.Status              { return nil }

// A live sync mirrors: what the host lacks is removed from the sandbox
// directory. "/" in any spelling is refused; other paths arrive cleaned.
func TestSyncStartRefusesTheRootInAnySpelling(t *testing.T) {
	dir := t.TempDir()
	for _, sdir := range []string{"/", "/workspace/..", "//", "/.", "/tmp/../..", "workspace"} {
		rs := &recSyncs{}
		s := connect(t, &fake{}, Options{Toolsets: []string{"all"}, AllowDirs: []string{dir}, Syncs: rs})
		r := s.call("sync_start", map[string]any{"local_dir": dir, "sandbox_dir": sdir})
		if !r.isError || len(rs.dirs) > 0 || !strings.Contains(r.text, "absolute path below /") {
			t.Errorf("sandbox_dir %q: error %v, synced into %q: %s", sdir, r.isError, rs.dirs, r.text)
		}
	}
	rs := &recSyncs{}
	s := connect(t, &fake{}, Options{Toolsets: []string{"all"}, AllowDirs: []string{dir}, Syncs: rs})
	if r := s.call("sync_start", map[string]any{"local_dir": dir, "sandbox_dir": "/workspace/./app/"}); r.isError || len(rs.dirs) != 1 || rs.dirs[0] != "/workspace/app" {
		t.Fatalf("a clean path: error %v, synced into %q: %s", r.isError, rs.dirs, r.text)
	}
}

// The name a download lands under, inside an existing host directory,
// comes from the sandbox. One that is not a single entry ("." would be the
// directory itself) fails, and the directory keeps its files.
func TestDownloadRefusesATopThatIsNotAnEntry(t *testing.T) {
	for _, top := range []string{".", "..", "", "a/b", `a\b`} {
		root := t.TempDir()
		dest := filepath.Join(root, "project")
		if err := os.MkdirAll(dest, 0o755); err != nil {
			t.Fatal(err)
		}
		precious := filepath.Join(dest, "precious.txt")
		if err := os.WriteFile(precious, []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755})
		_ = tw.WriteHeader(&tar.Header{Name: "./x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
		_, _ = tw.Write([]byte("x"))
		_ = tw.Close()
		s := connect(t, &fake{download: buf.Bytes(), downloadTop: top}, Options{Toolsets: []string{"all"}, AllowDirs: []string{root}})
		r := s.call("download", map[string]any{"sandbox_path": "/workspace/out", "local_path": dest, "overwrite": true})
		if !r.isError || !strings.Contains(r.text, "cannot name a host file") {
			t.Errorf("top %q: error %v: %s", top, r.isError, r.text)
		}
		if b, err := os.ReadFile(precious); err != nil || string(b) != "keep me" {
			t.Errorf("top %q: the directory's own file is gone or changed: %q %v", top, b, err)
		}
	}
}
