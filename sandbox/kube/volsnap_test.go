//go:build linux

package kube

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// TestCloneByVolumeSnapshot: with a VolumeSnapshotClass set and a CSI
// driver that snapshots (the test cluster's: csihost, with the real
// external-provisioner and external-snapshotter), a clone's workspace is
// a VolumeSnapshot of the source's claim and a claim made from it, with
// only the rights rbac.yaml grants, on a class that binds a claim once its
// first pod is scheduled: the clone holds the source's files as they
// were, the two are apart after, the result says how the workspace was
// copied, no snapshot (object or the driver's) nor tar nor record of the
// clone is left, and the next server keeps the clone.
func TestCloneByVolumeSnapshot(t *testing.T) {
	if cluster == nil {
		t.Skip(skipWhy)
	}
	csi := cluster.RunCSI(t)
	ns, token, admin := namespace(t)
	kl := standIn(t, ns)
	rt, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: 2 * time.Minute, VolumeSize: "64Mi",
		StorageClass: kubetest.CSILateStorageClass, SnapshotClass: kubetest.CSISnapshotClass})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if d := sandbox.DescribeClones(ctx, rt); !strings.Contains(d, "by the storage") {
		t.Fatalf("doctor's clones line with a snapshot class: %s", d)
	}
	plain, err := New(cluster.Config(token), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if d := sandbox.DescribeClones(ctx, plain); !strings.Contains(d, "tar through the server") || !strings.Contains(d, "--kube-snapshot-class") {
		t.Fatalf("doctor's clones line without a snapshot class: %s", d)
	}
	store, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	snapDir := t.TempDir()
	m := sandbox.NewManager(rt, sandbox.Config{Prefix: kl.Node[:8], Defaults: sandbox.Profile{Image: testImage},
		Snapshots: store, SnapshotDir: snapDir, Intents: store, LockDir: t.TempDir()})
	t.Cleanup(func() {
		for _, n := range []string{"default", "copy"} {
			_, _ = m.Destroy(context.Background(), n)
		}
		m.Close()
	})
	tool := toolsOf(t, m)
	run := func(name, cmd string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		res, err := m.Exec(ctx, name, shell.Request{Command: cmd, Stdout: &out, Stderr: &errOut, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s in %s: %v %+v %q", cmd, name, err, res, errOut.String())
		}
		return out.String()
	}
	run("default", "echo ws1 >/workspace/w.txt && mkdir -p /workspace/d && printf deep >/workspace/d/f && ln -s d/f /workspace/link")

	text, data, isErr := tool("clone", map[string]any{"source": "default", "target": "copy"})
	if isErr || !strings.Contains(text, "volume snapshot") || data["workspace_copy"] == nil {
		t.Fatalf("clone: %s %v", text, data)
	}
	const probe = "cat /workspace/w.txt /workspace/link; echo; ls /workspace | tr '\\n' ' '"
	if out := run("copy", probe); out != "ws1\ndeep\nd link w.txt " {
		t.Fatalf("the clone's workspace: %q", out)
	}
	// The clone's claim was made from the snapshot by the driver.
	claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, objectName(sandbox.ContainerName(kl.Node[:8]+"-ws", "copy")), metav1.GetOptions{})
	if err != nil || claim.Spec.DataSource == nil || claim.Spec.DataSource.Kind != "VolumeSnapshot" {
		t.Fatalf("the clone's claim: %v %+v", err, claim)
	}
	// Apart from here on.
	run("copy", "echo mine >/workspace/w.txt")
	run("default", "echo theirs >/workspace/d/f")
	if out := run("default", "cat /workspace/w.txt"); out != "ws1\n" {
		t.Fatalf("the source after its clone wrote: %q", out)
	}
	if out := run("copy", "cat /workspace/d/f"); out != "deep" {
		t.Fatalf("the clone after its source wrote: %q", out)
	}
	// Nothing of the copy is left behind.
	if names, err := rt.VolumeSnapshotNames(ctx); err != nil || len(names) != 0 {
		t.Fatalf("volume snapshots after the clone: %v %v", names, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, snaps, err := csi.Driver.Count()
		if err == nil && snaps == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver's snapshots after the clone: %d %v", snaps, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if leftover, _ := filepath.Glob(filepath.Join(snapDir, ".clone-*")); len(leftover) != 0 {
		t.Fatalf("the clone left a tar: %v", leftover)
	}
	if in, err := store.Intents(); err != nil || len(in) != 0 {
		t.Fatalf("records of operations under way after the clone: %+v %v", in, err)
	}
	// The next server finds a whole clone, and keeps it.
	m2 := sandbox.NewManager(rt, sandbox.Config{Prefix: kl.Node[:8], Defaults: sandbox.Profile{Image: testImage},
		Snapshots: store, SnapshotDir: snapDir, Intents: store, LockDir: t.TempDir()})
	defer m2.Close()
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if res, err := m2.Exec(ctx, "copy", shell.Request{Command: "cat /workspace/w.txt", Stdout: &out, Timeout: time.Minute}); err != nil || res.ExitCode != 0 || out.String() != "mine\n" {
		t.Fatalf("the clone on the next server: %q %v %+v", out.String(), err, res)
	}
}

// TestKilledVolumeSnapshotClone: what a server killed in a clone by
// volume snapshot leaves is removed by the next server: the snapshot of
// the source's workspace (named in the killed server's staging list), and
// a clone's claim made from one whose sandbox never booted (its record
// says the clone had begun). The source is left as it was.
func TestKilledVolumeSnapshotClone(t *testing.T) {
	if cluster == nil {
		t.Skip(skipWhy)
	}
	cluster.RunCSI(t)
	ns, token, admin := namespace(t)
	kl := standIn(t, ns)
	rt, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: 2 * time.Minute, VolumeSize: "64Mi",
		StorageClass: kubetest.CSIStorageClass, SnapshotClass: kubetest.CSISnapshotClass})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	store, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	snapDir, lockDir, prefix := t.TempDir(), t.TempDir(), kl.Node[:8]
	newManager := func() *sandbox.Manager {
		return sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: testImage},
			Snapshots: store, SnapshotDir: snapDir, Intents: store, LockDir: lockDir})
	}
	m := newManager()
	t.Cleanup(func() {
		_, _ = m.Destroy(context.Background(), "default")
		m.Close()
	})
	var out bytes.Buffer
	if res, err := m.Exec(ctx, "default", shell.Request{Command: "echo ws >/workspace/w.txt", Timeout: time.Minute}); err != nil || res.ExitCode != 0 {
		t.Fatalf("fill the source: %v %+v", err, res)
	}
	src := sandbox.ContainerName(prefix+"-ws", "default")
	labels := map[string]string{sandbox.LabelOwner: prefix}

	// Killed after it snapshotted the source, and after it made the
	// clone's claim: each key is in its staging list, as CloneSandbox
	// lists it first.
	var listed []byte
	for _, key := range []string{".clone-copy-0123456789abcdef", ".clone-half-fedcba9876543210"} {
		if _, err := rt.SnapshotVolume(ctx, src, key, labels); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(key))
		listed = append(listed, filepath.Join(snapDir, key+"-"+hex.EncodeToString(sum[:4])+".workspace.tar")+"\x00"...)
	}
	half := sandbox.ContainerName(prefix+"-ws", "half")
	if err := rt.VolumeFromSnapshot(ctx, half, ".clone-half-fedcba9876543210", map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: "half"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := store.PutIntent(state.Intent{Sandbox: "half", Op: "clone", Snapshot: "default", Phase: "begun", Began: time.Now()}); err != nil {
		t.Fatal(err)
	}
	dead := prefix + "-server-0123456789abcdef"
	if err := os.WriteFile(filepath.Join(lockDir, dead+".lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lockDir, dead+".staging"), listed, 0o600); err != nil {
		t.Fatal(err)
	}

	m2 := newManager()
	defer m2.Close()
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if names, err := rt.VolumeSnapshotNames(ctx); err != nil || len(names) != 0 {
		t.Fatalf("volume snapshots after the next server started: %v %v", names, err)
	}
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, objectName(half), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the half-made clone's claim after the next server started: %v", err)
	}
	if in, err := store.Intents(); err != nil || len(in) != 0 {
		t.Fatalf("records of operations under way after the next server started: %+v %v", in, err)
	}
	if res, err := m2.Exec(ctx, "default", shell.Request{Command: "cat /workspace/w.txt", Stdout: &out, Timeout: time.Minute}); err != nil || res.ExitCode != 0 || out.String() != "ws\n" {
		t.Fatalf("the source after the next server started: %q %v %+v", out.String(), err, res)
	}
}
