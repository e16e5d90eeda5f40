package sandbox_test

import (
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/diskguard"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// exactTree makes, in /workspace, what an exact copy must keep: owners the
// image does not know, a directory's owner, a mode and a time, a user
// xattr, an ACL (whose mask shows as the group bits: 0660) (written as its xattr: the image has no setfacl), a
// sparse file, a fifo, a hard link and a symlink.
const exactTree = `cd /workspace && rm -rf ./* && echo hi > f && chown 1234:5678 f && chmod 0640 f && touch -d @1600000000 f &&
python3 - <<'PY'
import os, struct
os.setxattr("f", "user.note", b"kept")
ents = [(1, 6, 0xffffffff), (2, 6, 4242), (4, 4, 0xffffffff), (0x10, 6, 0xffffffff), (0x20, 0, 0xffffffff)]
os.setxattr("f", "system.posix_acl_access", struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in ents))
PY
truncate -s 64M sparse && printf x | dd of=sparse bs=1 seek=1000000 conv=notrunc 2>/dev/null &&
mkfifo fifo && ln -s f link && ln f hard && mkdir d && chown 4321:8765 d && chmod 0710 d && touch -d @1500000000 d`

// exactPrint describes the workspace for comparison: every entry's owner,
// mode, time, kind, link target and link count; f's xattrs; whether the
// sparse file kept its holes.
const exactPrint = `cd /workspace && find . -path ./lost+found -prune -o ! -name . -printf '%p %U:%G %m %T@ %y %l %n\n' | sort &&
python3 -c 'import os; print(sorted(os.listxattr("f")), os.getxattr("f", "user.note"), os.getxattr("f", "system.posix_acl_access").hex())' &&
if [ "$(stat -c %b sparse)" -le 256 ]; then echo sparse kept; else echo "sparse filled: $(stat -c %b sparse) blocks"; fi`

// TestExactRestoreAndCloneOnEngine: a restore and a clone bring the
// workspace back exactly: owners by number, modes, times, links, fifos,
// xattrs, ACLs, and sparse files sparse.
func TestExactRestoreAndCloneOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		tg := tg.Slim() // python3 without the toolbox: a snapshot on the stand-in copies the whole root filesystem
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			store, err := state.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: enginetest.Prefix(t, rt), Defaults: sandbox.Profile{Image: tg.Image},
				LockDir: t.TempDir(), Snapshots: store, SnapshotDir: t.TempDir()})
			t.Cleanup(m.Close)
			ctx := guardedSequence(t)
			if o := run(t, m, "ex", shell.Request{Command: exactTree}); o.res.ExitCode != 0 {
				t.Skipf("the workspace here cannot hold the tree (%s): %s", o.stderr, o.stdout)
			}
			want := run(t, m, "ex", shell.Request{Command: exactPrint})
			if want.res.ExitCode != 0 || !strings.Contains(want.stdout, "sparse kept") || !strings.Contains(want.stdout, "./f 1234:5678 660 1600000000") {
				t.Fatalf("before: %q %q", want.stdout, want.stderr)
			}
			if _, err := m.Snapshot(ctx, "ex", sandbox.SnapshotRequest{Name: "ex1", IncludeWorkspace: true}); errors.Is(err, sandbox.ErrUnsupported) {
				t.Skipf("no snapshots here: %v", err)
			} else if err != nil {
				t.Fatal(err)
			}
			run(t, m, "ex", shell.Request{Command: "cd /workspace && rm -rf ./* && echo other > other"})
			if _, _, err := m.Restore(ctx, "ex1", "ex"); err != nil {
				t.Fatal(err)
			}
			if got := run(t, m, "ex", shell.Request{Command: exactPrint}); got.stdout != want.stdout {
				t.Fatalf("after the restore:\n%s\nwant:\n%s", got.stdout+got.stderr, want.stdout)
			}
			if _, err := m.CloneSandbox(ctx, "ex", "ex-copy", nil); err != nil {
				t.Fatal(err)
			}
			if got := run(t, m, "ex-copy", shell.Request{Command: exactPrint}); got.stdout != want.stdout {
				t.Fatalf("in the clone:\n%s\nwant:\n%s", got.stdout+got.stderr, want.stdout)
			}
		})
	}
}

// hostileTar replaces the sandbox's tar with one that answers --version
// as GNU's and otherwise writes what python3 prints.
func hostileTar(py string) string {
	return `mkdir -p /usr/local/bin && cat > /usr/local/bin/tar <<'SH'
#!/bin/sh
case "$*" in *--version*) echo "tar (GNU tar) 1.34"; exit 0 ;; esac
exec python3 -c '` + py + `'
SH
chmod +x /usr/local/bin/tar && hash -r`
}

// TestSnapshotCostsTheHostNoMoreThanTheQuota: a sandbox whose tar writes
// an archive far larger than its disk holds (10 GiB claimed and sent), one
// that lies about its size, and a host near its free-space floor: the
// snapshot stops with a clear error at the sandbox's disk limit plus tar's
// overhead, and leaves nothing in the state directory.
func TestSnapshotCostsTheHostNoMoreThanTheQuota(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		tg := tg.Slim() // python3 without the toolbox: a snapshot on the stand-in copies the whole root filesystem
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			store, err := state.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			snapDir := t.TempDir()
			var lowHost atomic.Bool
			free := func(dir string) (int64, int64, error) {
				if lowHost.Load() {
					return diskguard.Floor(100<<30) + 1<<20, 100 << 30, nil
				}
				return 50 << 30, 100 << 30, nil
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: enginetest.Prefix(t, rt), Defaults: sandbox.Profile{Image: tg.Image, Disk: "64M"},
				LockDir: t.TempDir(), Snapshots: store, SnapshotDir: snapDir, HostFree: free})
			t.Cleanup(m.Close)
			ctx := guardedSequence(t)
			nothingKept := func(t *testing.T) {
				t.Helper()
				if ents, _ := os.ReadDir(snapDir); len(ents) != 0 {
					t.Fatalf("left in the snapshot directory: %v", ents)
				}
				if list, _ := store.Snapshots(); len(list) != 0 {
					t.Fatalf("recorded: %+v", list)
				}
			}

			run(t, m, "hog", shell.Request{Command: hostileTar(
				`import sys, tarfile; o = sys.stdout.buffer; ti = tarfile.TarInfo("./big"); ti.size = 10 << 30; o.write(ti.tobuf(tarfile.GNU_FORMAT)); z = bytes(1 << 20)
for _ in range(10 << 10): o.write(z)`)})
			_, err = m.Snapshot(ctx, "hog", sandbox.SnapshotRequest{Name: "huge", IncludeWorkspace: true})
			if errors.Is(err, sandbox.ErrUnsupported) {
				t.Skipf("no snapshots here: %v", err)
			}
			// 64M + 64M/16 + 32M: 100 MiB.
			// (The why is the volume's size where the engine tells it.)
			if !errors.Is(err, diskguard.ErrOverLimit) || !strings.Contains(err.Error(), "passed 100.0 MiB") ||
				!(strings.Contains(err.Error(), "64M disk limit") || strings.Contains(err.Error(), "workspace volume (64.0 MiB)")) {
				t.Fatalf("a 10 GiB tar from a 64M sandbox: %v", err)
			}
			nothingKept(t)

			run(t, m, "hog", shell.Request{Command: hostileTar(
				`import sys, tarfile; o = sys.stdout.buffer; ti = tarfile.TarInfo("./short"); ti.size = 1 << 20; o.write(ti.tobuf(tarfile.GNU_FORMAT)); o.write(b"only this")`)})
			if _, err := m.Snapshot(ctx, "hog", sandbox.SnapshotRequest{Name: "short", IncludeWorkspace: true}); err == nil || !strings.Contains(err.Error(), "tar stream") {
				t.Fatalf("a tar that ends inside an entry: %v", err)
			}
			nothingKept(t)

			run(t, m, "hog", shell.Request{Command: "rm -f /usr/local/bin/tar && hash -r && head -c 40M /dev/urandom > /workspace/data"})
			lowHost.Store(true)
			if _, err := m.Snapshot(ctx, "hog", sandbox.SnapshotRequest{Name: "full", IncludeWorkspace: true}); !errors.Is(err, diskguard.ErrHostFull) {
				t.Fatalf("a host at its floor: %v", err)
			}
			nothingKept(t)
			lowHost.Store(false)
			rec, err := m.Snapshot(ctx, "hog", sandbox.SnapshotRequest{Name: "fine", IncludeWorkspace: true})
			if err != nil || rec.WorkspaceBytes < 40<<20 || rec.WorkspaceBytes > 41<<20 {
				t.Fatalf("a real 40 MiB workspace: %+v %v", rec, err)
			}
			if fi, err := os.Stat(snapDir + "/" + rec.WorkspaceFile); err != nil || fi.Size() != rec.WorkspaceBytes {
				t.Fatalf("the size reported is not the host's: %v %v", fi, err)
			}
			m.DeleteSnapshot(ctx, "fine")
		})
	}
}
