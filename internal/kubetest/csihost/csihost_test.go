//go:build linux

package csihost

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// start serves a driver on a socket in a new directory.
func start(t *testing.T) (*Driver, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the driver's node service bind-mounts volumes, which needs root")
	}
	dir := t.TempDir()
	d, err := New(filepath.Join(dir, "data"), "node-1")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "csi.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, sock) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return d, sock
}

// TestSanity runs csi-test's sanity suite, the CSI spec's checks of a
// driver, against this one: every call it serves, the refusals the spec
// asks for, idempotent creates and deletes, snapshots and volumes made
// from them.
func TestSanity(t *testing.T) {
	_, sock := start(t)
	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + sock
	work := t.TempDir()
	cfg.TargetPath = filepath.Join(work, "target")
	cfg.StagingPath = filepath.Join(work, "staging")
	cfg.TestVolumeSize = 64 << 20
	sanity.Test(t, cfg)
}

// TestSnapshotKeepsTheTree: a volume made from a snapshot holds what the
// source held when it was taken (owners, modes, a symlink, a hole), not
// what it holds later.
func TestSnapshotKeepsTheTree(t *testing.T) {
	d, sock := start(t)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	cc := csi.NewControllerClient(conn)
	mount := []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}
	v, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: mount})
	if err != nil {
		t.Fatal(err)
	}
	root := d.path(volumes, v.Volume.VolumeId)
	f := filepath.Join(root, "f")
	if err := os.WriteFile(f, []byte("one"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	sparse, err := os.Create(filepath.Join(root, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sparse.WriteAt([]byte("x"), 64<<20); err != nil {
		t.Fatal(err)
	}
	sparse.Close()
	s, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: v.Volume.VolumeId})
	if err != nil || !s.Snapshot.ReadyToUse {
		t.Fatalf("snapshot: %v %v", s, err)
	}
	if err := os.WriteFile(f, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	from, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: mount,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: s.Snapshot.SnapshotId}}}})
	if err != nil {
		t.Fatal(err)
	}
	copyRoot := d.path(volumes, from.Volume.VolumeId)
	got, err := os.ReadFile(filepath.Join(copyRoot, "f"))
	if err != nil || string(got) != "one" {
		t.Fatalf("the copy's f: %q %v", got, err)
	}
	st := statOf(t, filepath.Join(copyRoot, "f"))
	if st.Uid != 1234 || st.Gid != 5678 || st.Mode&0o777 != 0o640 {
		t.Fatalf("the copy's f: owner %d:%d mode %o", st.Uid, st.Gid, st.Mode&0o777)
	}
	if l, err := os.Readlink(filepath.Join(copyRoot, "link")); err != nil || l != "f" {
		t.Fatalf("the copy's link: %q %v", l, err)
	}
	if sp := statOf(t, filepath.Join(copyRoot, "sparse")); sp.Size != 64<<20+1 || sp.Blocks*512 > 1<<20 {
		t.Fatalf("the copy's sparse file: %d bytes in %d blocks", sp.Size, sp.Blocks)
	}
}

func statOf(t *testing.T, path string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}
