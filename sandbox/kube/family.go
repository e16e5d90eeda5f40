package kube

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// A child sandbox's record names its parent's record as its owner, and so
// does its workspace claim; its pod is owned by its own record, as every
// pod is. The cluster's garbage collector then carries out what the
// server does when a parent is reset, restored or destroyed (every one
// deletes the parent's record): the children go, and their children,
// with their pods and workspaces, whether or not a server is there to do
// it (a server killed half way, a record deleted with kubectl).
//
// A root sandbox's claim has no record for an owner: a claim that a cut
// destroy left with an old parent as its owner is cleared when a root
// sandbox of the name mounts it, so a later deletion of that parent does
// not take it.

// parentRecord is the record of sandbox parent of the server whose
// prefix is owner.
func (r *Runtime) parentRecord(ctx context.Context, owner, parent string) (*corev1.ConfigMap, error) {
	list, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list records for the parent %s: %w", parent, err)
	}
	for i := range list.Items {
		rec, err := parseRecord(&list.Items[i], "")
		if err != nil || rec.labels[sandbox.LabelOwner] != owner || rec.cm.Annotations[annName] != sandbox.ContainerName(owner, parent) {
			continue
		}
		if rec, err = r.settle(ctx, rec); err != nil {
			continue // the new record of a rename not done
		}
		return rec.cm, nil
	}
	return nil, fmt.Errorf("kubernetes: the parent %q has no record in namespace %s: a child is made only beside its parent: %w",
		parent, r.opt.Namespace, sandbox.ErrNotFound)
}

// recordOwner is the owner reference to record cm.
func recordOwner(cm *corev1.ConfigMap) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
}

// isRecordRef reports whether ref names a record (a ConfigMap: the
// runtime makes no other kind of owner).
func isRecordRef(ref metav1.OwnerReference) bool {
	return ref.APIVersion == "v1" && ref.Kind == "ConfigMap"
}

// ownClaims makes parent (nil for a root sandbox) the only record that
// owns the workspace claims spec mounts, leaving alone owners of other
// kinds and claims that are not ours.
func (r *Runtime) ownClaims(ctx context.Context, spec sandbox.RunSpec, parent *corev1.ConfigMap) error {
	claims := r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace)
	for _, m := range spec.Mounts {
		if m.Volume == "" {
			continue
		}
		for attempt := 0; ; attempt++ {
			c, err := r.claimOf(ctx, m.Volume)
			if apierrors.IsNotFound(err) {
				break // the pod's start says so
			}
			if err != nil {
				return fmt.Errorf("kubernetes: read the claim of %s: %w", m.Volume, err)
			}
			if c.Labels[labelManaged] != managedBy || c.Annotations[annName] != m.Volume {
				break
			}
			want := slices.DeleteFunc(slices.Clone(c.OwnerReferences), isRecordRef)
			if parent != nil {
				want = append(want, recordOwner(parent))
			}
			if slices.EqualFunc(want, c.OwnerReferences, func(a, b metav1.OwnerReference) bool {
				return a.UID == b.UID && a.Kind == b.Kind && a.Name == b.Name
			}) {
				break
			}
			c.OwnerReferences = want
			_, err = claims.Update(ctx, c, metav1.UpdateOptions{})
			if err == nil {
				break
			}
			if !apierrors.IsConflict(err) || attempt == 2 {
				return fmt.Errorf("kubernetes: set the owner of the claim of %s: %w", m.Volume, err)
			}
		}
	}
	return nil
}
