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
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// csiEnv is a namespace of the test cluster with its CSI storage running
// and its own kubelet stand-in, a runtime on it that makes claims of
// class and snapshots them, and a state store and directories that the
// servers of a test (its Managers) share.
type csiEnv struct {
	csi                      *kubetest.CSI
	ns, token                string
	admin                    kubernetes.Interface
	rt                       *Runtime
	store                    *state.Store
	snapDir, lockDir, prefix string
}

func newCSIEnv(t *testing.T, class string, opts ...func(*Options)) *csiEnv {
	t.Helper()
	if cluster == nil {
		t.Skip(skipWhy)
	}
	e := &csiEnv{csi: cluster.RunCSI(t)}
	e.ns, e.token, e.admin = namespace(t)
	kl := standIn(t, e.ns)
	opt := Options{Namespace: e.ns, StartTimeout: 2 * time.Minute, VolumeSize: "64Mi",
		StorageClass: class, SnapshotClass: kubetest.CSISnapshotClass}
	for _, o := range opts {
		o(&opt)
	}
	if opt.SandboxCRD {
		cluster.RunAgentSandbox(t)
	}
	var err error
	e.rt, err = New(cluster.Config(e.token), opt)
	if err != nil {
		t.Fatal(err)
	}
	if e.store, err = state.New(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	e.snapDir, e.lockDir, e.prefix = t.TempDir(), t.TempDir(), kl.Node[:8]
	return e
}

// manager is a server of the test: a Manager over the shared runtime,
// store and directories.
func (e *csiEnv) manager() *sandbox.Manager { return e.managerOf(e.rt) }

// managerOf is manager over rt (e.rt, or one that wraps it).
func (e *csiEnv) managerOf(rt sandbox.Runtime) *sandbox.Manager {
	return sandbox.NewManager(rt, sandbox.Config{Prefix: e.prefix, Defaults: sandbox.Profile{Image: testImage},
		Snapshots: e.store, SnapshotDir: e.snapDir, Intents: e.store, Sandboxes: e.store, LockDir: e.lockDir})
}

// workspace is the name of sandbox name's workspace as the runtime's
// sandboxes first get it.
func (e *csiEnv) workspace(name string) string { return sandbox.ContainerName(e.prefix+"-ws", name) }

// driverSnapshotsGone waits, up to a minute, until the CSI driver holds
// no snapshot.
func (e *csiEnv) driverSnapshotsGone(t *testing.T, after string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	until(ctx, t, "the driver's snapshots to go after "+after, func() (bool, error) {
		_, snaps, err := e.csi.Driver.Count()
		return err == nil && snaps == 0, nil // a count that fails is tried again
	})
}

// runIn runs cmd in sandbox name of m, failing the test unless it exits
// 0; it returns its stdout and what the call was told of its boot.
func runIn(ctx context.Context, t *testing.T, m *sandbox.Manager, name, cmd string) (stdout, told string) {
	t.Helper()
	var out, errOut bytes.Buffer
	res, err := m.Exec(ctx, name, shell.Request{Command: cmd, Stdout: &out, Stderr: &errOut, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s in %s: %v %+v %q", cmd, name, err, res, errOut.String())
	}
	return out.String(), res.Boot.Recovered
}

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
	e := newCSIEnv(t, kubetest.CSILateStorageClass)
	rt, ns, admin, store, snapDir := e.rt, e.ns, e.admin, e.store, e.snapDir
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if d := sandbox.DescribeClones(ctx, rt); !strings.Contains(d, "by the storage") {
		t.Fatalf("doctor's clones line with a snapshot class: %s", d)
	}
	plain, err := New(cluster.Config(e.token), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if d := sandbox.DescribeClones(ctx, plain); !strings.Contains(d, "tar through the server") || !strings.Contains(d, "--kube-snapshot-class") {
		t.Fatalf("doctor's clones line without a snapshot class: %s", d)
	}
	m := e.manager()
	t.Cleanup(func() {
		for _, n := range []string{"default", "copy"} {
			_, _ = m.Destroy(context.Background(), n)
		}
		m.Close()
	})
	tool := toolsOf(t, m)
	run := func(name, cmd string) string {
		t.Helper()
		out, _ := runIn(ctx, t, m, name, cmd)
		return out
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
	claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, objectName(e.workspace("copy")), metav1.GetOptions{})
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
	e.driverSnapshotsGone(t, "the clone")
	if leftover, _ := filepath.Glob(filepath.Join(snapDir, ".clone-*")); len(leftover) != 0 {
		t.Fatalf("the clone left a tar: %v", leftover)
	}
	if in, err := store.Intents(); err != nil || len(in) != 0 {
		t.Fatalf("records of operations under way after the clone: %+v %v", in, err)
	}
	// The next server finds a whole clone, and keeps it.
	m2 := e.manager()
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
	var out bytes.Buffer
	if res, err := m.Exec(ctx, "default", shell.Request{Command: "echo ws >/workspace/w.txt", Timeout: time.Minute}); err != nil || res.ExitCode != 0 {
		t.Fatalf("fill the source: %v %+v", err, res)
	}
	src := e.workspace("default")
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
	half := e.workspace("half")
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
