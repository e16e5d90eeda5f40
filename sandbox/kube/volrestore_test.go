//go:build linux

package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// claimGone waits, up to two minutes, until the claim of workspace vol
// is gone (or going: the protection controller keeps it while a pod that
// goes holds it).
func claimGone(t *testing.T, ctx context.Context, admin kubernetes.Interface, ns, vol string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	until(ctx, t, "the claim of "+vol+" to go", func() (bool, error) {
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, objectName(vol), metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && c.DeletionTimestamp != nil), nil // another error is tried again
	})
}

// TestSnapshotRestoreByVolumeSnapshot: with a VolumeSnapshotClass set,
// a snapshot keeps the workspace as a VolumeSnapshot (no tar on the
// host), with only the rights rbac.yaml grants; a restore gives the
// sandbox a new claim made from it, with the files as they were when
// snapshotted, and removes the claim it replaced, again and again; the
// next server finds the restored workspace; a snapshot whose
// VolumeSnapshot is gone from the cluster is refused and the sandbox
// left as it was; delete_snapshot removes the VolumeSnapshot and the
// driver's copy; destroy removes the claim.
func TestSnapshotRestoreByVolumeSnapshot(t *testing.T) {
	e := newCSIEnv(t, kubetest.CSILateStorageClass)
	rt, ns, admin, store, snapDir := e.rt, e.ns, e.admin, e.store, e.snapDir
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	newManager := e.manager
	m := newManager()
	t.Cleanup(func() {
		_, _ = m.Destroy(context.Background(), "default")
		m.Close()
	})
	tool := toolsOf(t, m)
	run := func(m *sandbox.Manager, cmd string) string {
		t.Helper()
		out, _ := runIn(ctx, t, m, "default", cmd)
		return out
	}
	run(m, "echo v1 >/workspace/w.txt && mkdir -p /workspace/d && printf deep >/workspace/d/f && ln -s d/f /workspace/link")

	text, data, isErr := tool("snapshot", map[string]any{"snapshot_name": "s1"})
	if isErr || !strings.Contains(text, "volume snapshot") || data["volume_snapshot"] == nil || data["workspace_only"] != true {
		t.Fatalf("snapshot: %s %v", text, data)
	}
	// Where it lives: a server in another namespace or cluster refuses it.
	if want := "kubernetes namespace " + ns + ", id "; !strings.HasPrefix(fmt.Sprint(data["engine"]), want) || data["engine"] != "kubernetes "+rt.Scope() {
		t.Fatalf("the snapshot's engine %v, want %s…", data["engine"], want)
	}
	// The namespace's marker made again (another identity): the snapshot
	// reads as made elsewhere, but its VolumeSnapshot is found here, so
	// it is restored (below) and deleted all the same.
	if err := admin.CoreV1().ConfigMaps(ns).Delete(ctx, namespaceMarker, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rt.scopeMu.Lock()
	rt.scopeUID = ""
	rt.scopeMu.Unlock()
	if now := "kubernetes " + rt.Scope(); now == data["engine"] || !strings.Contains(now, ", id ") {
		t.Fatalf("the scope after the marker was made again: %s (the snapshot's %v)", now, data["engine"])
	}
	if _, err := m.ForgetSnapshot(ctx, "s1"); err == nil || !strings.Contains(err.Error(), "reaches it") {
		t.Fatalf("forget a snapshot whose VolumeSnapshot is here: %v", err)
	}
	if tars, _ := filepath.Glob(filepath.Join(snapDir, "*")); len(tars) != 0 {
		t.Fatalf("a snapshot kept by the storage left files on the host: %v", tars)
	}
	if names, err := rt.VolumeSnapshotNames(ctx); err != nil || len(names) != 1 || names[0] != data["volume_snapshot"] {
		t.Fatalf("volume snapshots after the snapshot: %v %v", names, err)
	}
	const probe = "cat /workspace/w.txt /workspace/link; echo; ls /workspace | tr '\\n' ' '"
	first := e.workspace("default")
	for i := range 2 {
		run(m, "echo v2 >/workspace/w.txt && touch /workspace/new && rm /workspace/link")
		text, data, isErr = tool("restore", map[string]any{"snapshot_name": "s1"})
		if isErr || data["fresh_base"] == nil {
			t.Fatalf("restore %d: %s %v", i, text, data)
		}
		if out := run(m, probe); out != "v1\ndeep\nd link w.txt " {
			t.Fatalf("the workspace after restore %d: %q", i, out)
		}
		rec, ok, err := store.Sandbox("default")
		if err != nil || !ok || rec.Volume == "" || rec.Volume == first {
			t.Fatalf("the sandbox's record after restore %d: %+v %v %v", i, rec, ok, err)
		}
		claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, objectName(rec.Volume), metav1.GetOptions{})
		if err != nil || claim.Spec.DataSource == nil || claim.Spec.DataSource.Kind != "VolumeSnapshot" {
			t.Fatalf("the restored claim: %v %+v", err, claim)
		}
		claimGone(t, ctx, admin, ns, first) // the workspace the restore replaced
		first = rec.Volume
		if in, err := store.Intents(); err != nil || len(in) != 0 {
			t.Fatalf("records of operations under way after restore %d: %+v %v", i, in, err)
		}
	}
	// The next server finds the restored workspace.
	m2 := newManager()
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if out := run(m2, "cat /workspace/w.txt"); out != "v1\n" {
		t.Fatalf("the restored workspace on the next server: %q", out)
	}
	m2.Close()

	// A snapshot whose VolumeSnapshot is gone: refused, nothing moved.
	run(m, "echo v3 >/workspace/w.txt")
	if _, err := m.Snapshot(ctx, "default", sandbox.SnapshotRequest{Name: "s2", IncludeWorkspace: true}); err != nil {
		t.Fatal(err)
	}
	s2, _, _ := store.Snapshot("s2")
	if err := rt.RemoveVolumeSnapshot(ctx, s2.VolumeSnapshot); err != nil {
		t.Fatal(err)
	}
	run(m, "echo v4 >/workspace/w.txt")
	text, _, isErr = tool("restore", map[string]any{"snapshot_name": "s2"})
	if !isErr || !strings.Contains(text, "gone from the cluster") || !strings.Contains(text, "delete_snapshot") {
		t.Fatalf("restore of a snapshot whose volume snapshot is gone: %s", text)
	}
	if out := run(m, "cat /workspace/w.txt"); out != "v4\n" {
		t.Fatalf("the sandbox after a refused restore: %q", out)
	}
	if rec, _, _ := store.Sandbox("default"); rec.Volume != first {
		t.Fatalf("the sandbox's workspace after a refused restore: %q, was %q", rec.Volume, first)
	}

	for _, s := range []string{"s1", "s2"} {
		if text, _, isErr := tool("delete_snapshot", map[string]any{"snapshot_name": s}); isErr {
			t.Fatalf("delete_snapshot %s: %s", s, text)
		}
	}
	if names, err := rt.VolumeSnapshotNames(ctx); err != nil || len(names) != 0 {
		t.Fatalf("volume snapshots after delete_snapshot: %v %v", names, err)
	}
	e.driverSnapshotsGone(t, "delete_snapshot")
	if _, err := m.Destroy(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	claimGone(t, ctx, admin, ns, first)
}

// TestKilledVolumeSnapshotRestore: what a server killed in a snapshot or
// a restore by volume snapshot leaves, the next server finishes or
// undoes: a VolumeSnapshot it made but did not record goes (one recorded
// stays); a restore killed before the sandbox ran on the new claim is
// undone (the claim goes, the workspace is as it was); one killed after
// is finished (the claim it replaced goes); the next call is told which.
func TestKilledVolumeSnapshotRestore(t *testing.T) {
	e := newCSIEnv(t, kubetest.CSIStorageClass)
	rt, ns, admin, store, snapDir, lockDir, prefix := e.rt, e.ns, e.admin, e.store, e.snapDir, e.lockDir, e.prefix
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	newManager := e.manager
	m := newManager()
	t.Cleanup(func() {
		_, _ = m.Destroy(context.Background(), "default")
		m.Close()
	})
	exec := func(m *sandbox.Manager, cmd string) (string, string) {
		t.Helper()
		return runIn(ctx, t, m, "default", cmd)
	}
	exec(m, "echo kept >/workspace/w.txt")
	if _, err := m.Snapshot(ctx, "default", sandbox.SnapshotRequest{Name: "whole", IncludeWorkspace: true}); err != nil {
		t.Fatal(err)
	}
	whole, _, _ := store.Snapshot("whole")
	ws := e.workspace("default")
	// Killed in a snapshot: its VolumeSnapshot made, not recorded.
	half := ".vsnap-half-0123456789abcdef"
	if _, err := rt.SnapshotVolume(ctx, ws, half, map[string]string{sandbox.LabelOwner: prefix}); err != nil {
		t.Fatal(err)
	}
	dead := prefix + "-server-0123456789abcdef"
	if err := os.WriteFile(filepath.Join(lockDir, dead+".lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	listed := filepath.Join(snapDir, half) + "\x00" + filepath.Join(snapDir, whole.VolumeSnapshot) + "\x00"
	if err := os.WriteFile(filepath.Join(lockDir, dead+".staging"), []byte(listed), 0o600); err != nil {
		t.Fatal(err)
	}
	// Killed in a restore after it made the new claim, before the
	// sandbox ran on it.
	made := prefix + "-ws_spare_00112233445566aa"
	if err := rt.VolumeFromSnapshot(ctx, made, whole.VolumeSnapshot, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: "default"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := store.PutIntent(state.Intent{Sandbox: "default", Op: "restore", Snapshot: "whole", Phase: "begun",
		Volume: made, OldVolume: ws, Trash: prefix + "-trash-0123456789ab", Began: time.Now()}); err != nil {
		t.Fatal(err)
	}
	m.Close() // the server that was killed

	m2 := newManager()
	defer m2.Close()
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	names, err := rt.VolumeSnapshotNames(ctx)
	if err != nil || len(names) != 1 || names[0] != whole.VolumeSnapshot {
		t.Fatalf("volume snapshots after the next server started: %v %v (want only the recorded %s)", names, err, whole.VolumeSnapshot)
	}
	claimGone(t, ctx, admin, ns, made)
	out, said := exec(m2, "cat /workspace/w.txt")
	if out != "kept\n" || !strings.Contains(said, "undone") {
		t.Fatalf("after an interrupted restore, begun: %q, told %q", out, said)
	}
	if in, err := store.Intents(); err != nil || len(in) != 0 {
		t.Fatalf("records of operations under way after the next server started: %+v %v", in, err)
	}

	// Killed in a restore after the sandbox ran on the new claim: its
	// old claim is left.
	exec(m2, "echo new >/workspace/w.txt")
	old := prefix + "-ws_spare_00112233445566bb"
	if err := rt.VolumeFromSnapshot(ctx, old, whole.VolumeSnapshot, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: "default"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := store.PutIntent(state.Intent{Sandbox: "default", Op: "restore", Snapshot: "whole", Phase: "staged",
		Volume: ws, OldVolume: old, Began: time.Now()}); err != nil {
		t.Fatal(err)
	}
	m2.Close()
	m3 := newManager()
	defer m3.Close()
	if err := m3.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	claimGone(t, ctx, admin, ns, old)
	out, said = exec(m3, "cat /workspace/w.txt")
	if out != "new\n" || !strings.Contains(said, "finished") {
		t.Fatalf("after an interrupted restore, staged: %q, told %q", out, said)
	}
	if in, err := store.Intents(); err != nil || len(in) != 0 {
		t.Fatalf("records of operations under way after the third server started: %+v %v", in, err)
	}
	// A restore whose old workspace could not be removed, left recorded
	// on a sandbox that runs here: the next operation on it (a destroy)
	// removes that workspace first, rather than forget it.
	left := prefix + "-ws_spare_00112233445566cc"
	if err := rt.VolumeFromSnapshot(ctx, left, whole.VolumeSnapshot, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: "default"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := store.PutIntent(state.Intent{Sandbox: "default", Op: "restore", Snapshot: "whole", Phase: "staged",
		Volume: ws, OldVolume: left, Stage: ".sandbox-mcp-restore-0123456789cc", Began: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := m3.DeleteSnapshot(ctx, "whole"); err != nil {
		t.Fatal(err)
	}
	if _, err := m3.Destroy(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	claimGone(t, ctx, admin, ns, left)
	claimGone(t, ctx, admin, ns, ws)
}

// TestFailedVolumeRestore: a restore by volume snapshot whose sandbox
// does not boot (its base image is gone) leaves the sandbox as it was:
// in pod mode and in sandbox mode the old pod (or Sandbox), moved aside,
// is put back; on a runtime that cannot rename (pod mode with its Rename
// hidden) the old pod is gone, and the next command boots one afresh on
// the old workspace. The claim made from the snapshot goes, the
// sandbox's record names its old workspace, and no record of the restore
// is left.
func TestFailedVolumeRestore(t *testing.T) {
	for _, mode := range []string{"pods", "sandboxes", "no rename"} {
		t.Run(mode, func(t *testing.T) {
			e := newCSIEnv(t, kubetest.CSIStorageClass, func(o *Options) { o.SandboxCRD, o.StartTimeout = mode == "sandboxes", 30*time.Second })
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			var rt sandbox.Runtime = e.rt
			if mode == "no rename" {
				rt = withoutRename{Runtime: e.rt}
				if _, ok := sandbox.RenamerOf(rt); ok {
					t.Fatal("the wrapped runtime still renames")
				}
			}
			m := e.managerOf(rt)
			t.Cleanup(func() {
				_, _ = m.Destroy(context.Background(), "default")
				m.Close()
			})
			run := func(cmd string) string {
				t.Helper()
				out, _ := runIn(ctx, t, m, "default", cmd)
				return out
			}
			run("echo kept >/workspace/w.txt")
			if _, err := m.Snapshot(ctx, "default", sandbox.SnapshotRequest{Name: "s", IncludeWorkspace: true}); err != nil {
				t.Fatal(err)
			}
			run("echo changed >/workspace/w.txt")
			// The snapshot's base image is gone: its sandbox cannot boot.
			rec, _, _ := e.store.Snapshot("s")
			if _, err := e.store.DeleteSnapshot("s"); err != nil {
				t.Fatal(err)
			}
			rec.BaseImage = "localhost/sandbox-mcp-no-such-image:latest"
			if err := e.store.AddSnapshot(rec); err != nil {
				t.Fatal(err)
			}
			_, _, err := m.Restore(ctx, "s", "default")
			want := "put back as it was"
			if mode == "no rename" {
				want = "has no container now"
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("a restore whose sandbox does not boot: %v (want %q)", err, want)
			}
			if out := run("cat /workspace/w.txt"); out != "changed\n" {
				t.Fatalf("the workspace after a failed restore: %q", out)
			}
			claims, err := e.admin.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range claims.Items {
				if c.Annotations[annName] != e.workspace("default") {
					claimGone(t, ctx, e.admin, e.ns, c.Annotations[annName])
				}
			}
			if r, _, _ := e.store.Sandbox("default"); r.Volume != "" {
				t.Fatalf("the sandbox's record names workspace %q after a failed restore", r.Volume)
			}
			if in, err := e.store.Intents(); err != nil || len(in) != 0 {
				t.Fatalf("records of operations under way after a failed restore: %+v %v", in, err)
			}
		})
	}
}

// withoutRename is a runtime as r is, less its Rename: the method of
// both embedded fields at one depth is promoted from neither.
type withoutRename struct {
	*Runtime
	noRename
}

type noRename struct{}

// Rename only hides the runtime's.
func (noRename) Rename() {}
