//go:build linux

package kubetest

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// TestCSIStorageSnapshots: with the CSI storage running, a claim of its
// class is provisioned by external-provisioner and published into the pod
// that claims it by the kubelet stand-in; a VolumeSnapshot of it is made
// by external-snapshotter and holds the volume as it was, not as it is
// changed after; a claim made from the snapshot holds that; and the
// volumes and the snapshot go with their objects.
func TestCSIStorageSnapshots(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI may not skip this: no podman")
		}
		t.Skip("no podman")
	}
	c, stop, why, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI may not skip this:", why)
		}
		t.Skip(why)
	}
	defer stop()
	s := c.RunCSI(t)
	cs := c.Admin(t)
	ns := "csi-" + strconv.Itoa(os.Getpid())
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, stopKubelet, err := c.StartKubelet(cs, ns, "ktcsi"+strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer stopKubelet()
	dyn, err := dynamic.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	claim(ctx, t, cs, ns, "data", nil)
	runPod(ctx, t, cs, ns, "writer", "data", "echo before > /data/f")

	snap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": "snap", "namespace": ns},
		"spec": map[string]any{"volumeSnapshotClassName": CSISnapshotClass,
			"source": map[string]any{"persistentVolumeClaimName": "data"}},
	}}
	if _, err := dyn.Resource(VolumeSnapshots).Namespace(ns).Create(ctx, snap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the snapshot to be ready", func() (bool, error) {
		got, err := dyn.Resource(VolumeSnapshots).Namespace(ns).Get(ctx, "snap", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse")
		return ready, nil
	})
	runPod(ctx, t, cs, ns, "changer", "data", "echo after > /data/f")

	apiGroup := "snapshot.storage.k8s.io"
	claim(ctx, t, cs, ns, "restored", &corev1.TypedLocalObjectReference{APIGroup: &apiGroup, Kind: "VolumeSnapshot", Name: "snap"})
	runPod(ctx, t, cs, ns, "reader", "restored", `test "$(cat /data/f)" = before`)
	runPod(ctx, t, cs, ns, "reader-data", "data", `test "$(cat /data/f)" = after`)

	// Their objects gone, the volumes and the snapshot go too.
	zero := int64(0)
	_ = cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	if err := dyn.Resource(VolumeSnapshots).Namespace(ns).Delete(ctx, "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"data", "restored"} {
		if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(ctx, t, "the driver's volumes and snapshot to go", func() (bool, error) {
		vols, snaps, err := s.Driver.Count()
		return vols == 0 && snaps == 0, err
	})
}

// claim makes a claim of the CSI storage's class, from source if given,
// and waits until it is bound.
func claim(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string, source *corev1.TypedLocalObjectReference) {
	t.Helper()
	class := CSIStorageClass
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			DataSource:       source,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
		}}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "claim "+name+" to be bound", func() (bool, error) {
		got, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.ClaimBound, err
	})
}

// runPod runs script in a pod with claim at /data and waits for it to
// end, failing the test unless it succeeded.
func runPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, claim, script string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "localhost/sandbox-mcp-minimal:latest",
				Command: []string{"sh", "-c", script}, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	waitFor(ctx, t, "pod "+name+" to end", func() (bool, error) {
		got, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = got
		return got.Status.Phase == corev1.PodSucceeded || got.Status.Phase == corev1.PodFailed, nil
	})
	if last.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s (%s): %s: %+v", name, script, last.Status.Phase, last.Status.ContainerStatuses)
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// A claim of one node is published to one pod at a time here, as
	// ReadWriteOnce asks: the next pod comes once this one is gone.
	waitFor(ctx, t, "pod "+name+" to go", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// waitFor polls cond until it holds, failing the test when ctx ends
// first or cond errs.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last error: %v)", what, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
