package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// This file is the runtime's VolumeSnapshots (sandbox.VolumeSnapshotter):
// with a VolumeSnapshotClass named (Options.SnapshotClass), a workspace
// is copied by the claims' CSI driver, a snapshot of its claim and a new
// claim made from it, instead of a tar through the server.

// VolumeSnapshotResource is the VolumeSnapshot resource of the CSI
// snapshot API (external-snapshotter's).
var VolumeSnapshotResource = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}

// DefaultSnapshotTimeout bounds the wait for a VolumeSnapshot to be
// ready, and for a claim made from one to be bound.
const DefaultSnapshotTimeout = 5 * time.Minute

// VolumeSnapshotsWhyNot implements sandbox.VolumeSnapshotter: "" when a
// snapshot class is set and the cluster serves VolumeSnapshots.
func (r *Runtime) VolumeSnapshotsWhyNot(ctx context.Context) string {
	if r.opt.SnapshotClass == "" {
		return "no VolumeSnapshotClass is set (--kube-snapshot-class)"
	}
	if _, err := r.snapshots().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		if apierrors.IsNotFound(err) {
			return "the cluster serves no VolumeSnapshots (snapshot.storage.k8s.io/v1): install external-snapshotter's resources and controller"
		}
		return fmt.Sprintf("VolumeSnapshots cannot be listed in namespace %s: %v", r.opt.Namespace, err)
	}
	return ""
}

func (r *Runtime) snapshots() dynamic.ResourceInterface {
	return r.snapDyn.Resource(VolumeSnapshotResource).Namespace(r.opt.Namespace)
}

// SnapshotVolume implements sandbox.VolumeSnapshotter: a VolumeSnapshot
// of workspace volume's claim, under the name ref, waited for until the
// driver has it whole (readyToUse); its restore size is returned. One
// that failed, or is not ready in time, is deleted.
func (r *Runtime) SnapshotVolume(ctx context.Context, volume, ref string, labels map[string]string) (int64, error) {
	if why := r.VolumeSnapshotsWhyNot(ctx); why != "" {
		return 0, fmt.Errorf("%w: %s", sandbox.ErrUnsupported, why)
	}
	claim, err := r.claimOf(ctx, volume)
	if apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("volume %s: %w", volume, sandbox.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("kubernetes: read the claim of %s: %w", volume, err)
	}
	if !madeAs(claim, volume) {
		return 0, fmt.Errorf("kubernetes: claim %s is not the workspace %s", claim.Name, volume)
	}
	vs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": objectName(ref), "namespace": r.opt.Namespace,
			"labels": toAny(kubeLabels(labels, nil)), "annotations": map[string]any{annName: ref}},
		"spec": map[string]any{"volumeSnapshotClassName": r.opt.SnapshotClass,
			"source": map[string]any{"persistentVolumeClaimName": claim.Name}},
	}}
	created, err := r.snapshots().Create(ctx, vs, metav1.CreateOptions{})
	if err != nil {
		// One that landed all the same (an answer lost on the way) goes.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if !apierrors.IsAlreadyExists(err) {
			_ = r.RemoveVolumeSnapshot(dctx, ref)
		}
		return 0, fmt.Errorf("kubernetes: snapshot the claim of %s: %w", volume, err)
	}
	ready, err := r.waitSnapshotReady(ctx, created.GetName())
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = r.snapshots().Delete(dctx, created.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr(created.GetUID())}})
		return 0, fmt.Errorf("kubernetes: snapshot of the claim of %s: %w; it was deleted", volume, err)
	}
	return restoreSize(ready), nil
}

// restoreSize is the bytes a claim made from VolumeSnapshot vs needs, as
// its status says; 0 where it does not.
func restoreSize(vs *unstructured.Unstructured) int64 {
	q, ok, _ := unstructured.NestedString(vs.Object, "status", "restoreSize")
	if !ok {
		return 0
	}
	rs, err := resource.ParseQuantity(q)
	if err != nil {
		return 0
	}
	return rs.Value()
}

// waitSnapshotReady waits for VolumeSnapshot name to be ready to use,
// and returns it; it says the driver's error when it reports one.
func (r *Runtime) waitSnapshotReady(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultSnapshotTimeout)
	defer cancel()
	// The controller retries what fails (a driver's error, a class that
	// is not there yet); what stays is the answer once the wait is up. A
	// read that fails is tried again, but for a snapshot deleted meanwhile.
	last := ""
	for {
		got, err := r.snapshots().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, errors.New("deleted while it was made")
		case err != nil:
			last = err.Error()
		default:
			if ready, _, _ := unstructured.NestedBool(got.Object, "status", "readyToUse"); ready {
				return got, nil
			}
			if msg, ok, _ := unstructured.NestedString(got.Object, "status", "error", "message"); ok && msg != "" {
				last = msg
			}
		}
		select {
		case <-ctx.Done():
			if last != "" {
				return nil, fmt.Errorf("not ready within %s: %s", DefaultSnapshotTimeout, last)
			}
			return nil, fmt.Errorf("not ready within %s: %w", DefaultSnapshotTimeout, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// VolumeFromSnapshot implements sandbox.VolumeSnapshotter: workspace
// claim name made from snapshot ref by the driver, of bytes (the
// runtime's volume size when 0), or of the snapshot's restore size where
// that is larger. It does not wait for the claim to be bound: a class
// that binds when a pod first uses the claim (WaitForFirstConsumer)
// binds it once the sandbox's pod is made, and the pod runs only on the
// claim made.
func (r *Runtime) VolumeFromSnapshot(ctx context.Context, name, ref string, labels map[string]string, bytes int64) error {
	vs, err := r.snapshots().Get(ctx, objectName(ref), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("volume snapshot %s: %w", ref, sandbox.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: read volume snapshot %s: %w", ref, err)
	}
	if !madeAs(vs, ref) {
		return fmt.Errorf("kubernetes: volume snapshot %s is not %s", vs.GetName(), ref)
	}
	if vs.GetDeletionTimestamp() != nil {
		return fmt.Errorf("volume snapshot %s is being deleted: %w", ref, sandbox.ErrNotFound)
	}
	size := r.volumeSize
	if bytes > 0 {
		size = *resource.NewQuantity(bytes, resource.BinarySI)
	}
	if rs := restoreSize(vs); rs > size.Value() {
		size = *resource.NewQuantity(rs, resource.BinarySI)
	}
	group := VolumeSnapshotResource.Group
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(name), Namespace: r.opt.Namespace,
			Labels: kubeLabels(labels, nil), Annotations: map[string]string{annName: name}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
			DataSource:  &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: vs.GetName()},
		},
	}
	if r.opt.StorageClass != "" {
		pvc.Spec.StorageClassName = &r.opt.StorageClass
	}
	_, err = r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubernetes: the claim of %s exists already (%w): a volume is made from a snapshot into a new name only", name, sandbox.ErrAlreadyExists)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: create the claim of %s from snapshot %s: %w", name, ref, err)
	}
	return nil
}

// HasVolumeSnapshot implements sandbox.VolumeSnapshotFinder: whether
// VolumeSnapshot ref, made by the runtime, is in the namespace.
func (r *Runtime) HasVolumeSnapshot(ctx context.Context, ref string) (bool, error) {
	vs, err := r.snapshots().Get(ctx, objectName(ref), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("kubernetes: read volume snapshot %s: %w", ref, err)
	}
	return madeAs(vs, ref) && vs.GetDeletionTimestamp() == nil, nil
}

var _ sandbox.VolumeSnapshotFinder = (*Runtime)(nil)

// RemoveVolumeSnapshot implements sandbox.VolumeSnapshotter; a missing
// snapshot is not an error.
func (r *Runtime) RemoveVolumeSnapshot(ctx context.Context, ref string) error {
	vs, err := r.snapshots().Get(ctx, objectName(ref), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubernetes: read volume snapshot %s: %w", ref, err)
	}
	if !madeAs(vs, ref) {
		return fmt.Errorf("kubernetes: volume snapshot %s is not %s: left alone: %w", vs.GetName(), ref, sandbox.ErrInUse)
	}
	err = r.snapshots().Delete(ctx, vs.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr(vs.GetUID())}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete volume snapshot %s: %w", ref, err)
	}
	return nil
}

// VolumeSnapshotNames lists the volume snapshots the runtime made, by
// the names they were made under.
func (r *Runtime) VolumeSnapshotNames(ctx context.Context) ([]string, error) {
	list, err := r.snapshots().List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list volume snapshots: %w", err)
	}
	var names []string
	for _, vs := range list.Items {
		if n := vs.GetAnnotations()[annName]; n != "" && vs.GetName() == objectName(n) && vs.GetDeletionTimestamp() == nil {
			names = append(names, n)
		}
	}
	return names, nil
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

var _ sandbox.VolumeSnapshotter = (*Runtime)(nil)
