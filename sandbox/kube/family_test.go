package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestChildrenGoWithTheirParent: with the rights rbac.yaml grants, a
// child's record and workspace claim are owned by its parent's record,
// a grandchild's by the child's; a child whose parent has no record is
// refused with nothing made; a root sandbox takes back a claim an old
// parent owned. Then, with the cluster's garbage collector running, the
// parent's removal alone (no server deleting the family) takes the
// children, the grandchild, their pods and their claims, and leaves the
// root sandbox whole.
func TestChildrenGoWithTheirParent(t *testing.T) {
	ns, token, admin := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubetest.PlayKubelet(ctx, admin, ns)
	rt, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "smtf"
	run := func(name, parent string) (ctr, vol string) {
		t.Helper()
		ctr, vol = prefix+"-"+name, prefix+"-ws-"+name
		labels := map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: name, sandbox.LabelRole: "primary"}
		if parent != "" {
			labels[sandbox.LabelRole], labels[sandbox.LabelChildOf] = "child", parent
		}
		if err := rt.VolumeCreate(ctx, vol, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: name}); err != nil {
			t.Fatal(err)
		}
		_, err := rt.Run(ctx, sandbox.RunSpec{Name: ctr, Image: "localhost/mcp-dev:latest", Labels: labels,
			Mounts: []sandbox.Mount{{Volume: vol, Target: "/workspace"}}, Command: []string{"sleep", "infinity"}})
		if err != nil {
			t.Fatalf("run %s: %v", name, err)
		}
		return ctr, vol
	}
	parentCtr, parentVol := run("par", "")
	kidCtr, kidVol := run("kid.1", "par")
	_, _ = run("kid-2", "par")
	grandCtr, grandVol := run("grand", "kid.1")
	soloCtr, soloVol := run("solo", "")

	record := func(ctr string) *metav1.ObjectMeta {
		t.Helper()
		cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(ctr), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the record of %s: %v", ctr, err)
		}
		return &cm.ObjectMeta
	}
	claim := func(vol string) *metav1.ObjectMeta {
		t.Helper()
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, objectName(vol), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the claim %s: %v", vol, err)
		}
		return &c.ObjectMeta
	}
	ownedBy := func(what string, m *metav1.ObjectMeta, owner *metav1.ObjectMeta) {
		t.Helper()
		if owner == nil {
			if len(m.OwnerReferences) != 0 {
				t.Errorf("%s is owned by %+v, want no owner", what, m.OwnerReferences)
			}
			return
		}
		if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != owner.UID || m.OwnerReferences[0].Kind != "ConfigMap" {
			t.Errorf("%s is owned by %+v, want the record %s (%s)", what, m.OwnerReferences, owner.Name, owner.UID)
		}
	}
	par, kid := record(parentCtr), record(kidCtr)
	ownedBy("the child's record", kid, par)
	ownedBy("the child's claim", claim(kidVol), par)
	ownedBy("the grandchild's record", record(grandCtr), kid)
	ownedBy("the grandchild's claim", claim(grandVol), kid)
	ownedBy("the parent's record", par, nil)
	ownedBy("the parent's claim", claim(parentVol), nil)

	// A child of a sandbox with no record: refused, nothing made.
	_, err = rt.Run(ctx, sandbox.RunSpec{Name: prefix + "-orphan", Image: "localhost/mcp-dev:latest",
		Labels: map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: "orphan", sandbox.LabelChildOf: "nobody"}})
	if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), `parent "nobody"`) {
		t.Fatalf("a child without a parent: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(prefix+"-orphan"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused child's record: %v", err)
	}
	// Another server's sandbox of the same name is not a parent.
	_, err = rt.Run(ctx, sandbox.RunSpec{Name: "other-kid", Image: "localhost/mcp-dev:latest",
		Labels: map[string]string{sandbox.LabelOwner: "other", sandbox.LabelName: "kid", sandbox.LabelChildOf: "par"}})
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a child of another server's sandbox: %v", err)
	}

	// A claim an old parent owned (a destroy cut before the claim's
	// removal) is the root sandbox's alone once it runs on it.
	if err := rt.Remove(ctx, soloCtr); err != nil {
		t.Fatal(err)
	}
	c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, objectName(soloVol), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.OwnerReferences = []metav1.OwnerReference{recordOwner(&corev1.ConfigMap{ObjectMeta: *par})}
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	soloCtr, soloVol = run("solo", "")
	ownedBy("a root sandbox's claim an old parent owned", claim(soloVol), nil)

	// The cluster carries the owners out: the parent's removal takes the
	// family, and only it.
	cluster.RunGarbageCollector(t)
	if err := rt.Remove(ctx, parentCtr); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"kid.1", "kid-2", "grand"} {
		ctr, vol := prefix+"-"+n, prefix+"-ws-"+n
		goneAfterParent(t, "record "+ctr, objGetter(ctx, admin, ns, "configmap", objectName(ctr)))
		goneAfterParent(t, "pod "+ctr, objGetter(ctx, admin, ns, "pod", objectName(ctr)))
		goneAfterParent(t, "claim "+vol, objGetter(ctx, admin, ns, "claim", objectName(vol)))
	}
	if got, err := rt.Inspect(ctx, soloCtr); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("the root sandbox beside the family: %+v %v", got, err)
	}
	claim(soloVol)
	claim(parentVol) // a parent's own workspace is the Manager's to remove
}

// goneAfterParent waits, for up to 3 minutes, until get finds what
// (deleted by the garbage collector after its parent's removal) gone.
func goneAfterParent(t *testing.T, what string, get func() error) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := get()
		if apierrors.IsNotFound(err) {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there 3m after its parent's removal", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// objGetter reads one object of kind, for a wait on its deletion.
func objGetter(ctx context.Context, cs kubernetes.Interface, ns, kind, name string) func() error {
	return func() error {
		var err error
		switch kind {
		case "configmap":
			_, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		case "pod":
			_, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		case "claim":
			_, err = cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		}
		return err
	}
}
