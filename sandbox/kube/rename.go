package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Renames. Neither a pod nor a ConfigMap can be renamed, so a sandbox's
// rename (a warm spare's claim, a reset moving the old sandbox aside)
// makes a record under the new name that takes over the old record's
// pod, and deletes the old record:
//
//  1. the new record: the old one's spec, labels, owner and ID (annID),
//     its pod's name (recordPod), and, while the rename is under way,
//     the old record's UID and object name (annRenamedFrom,
//     annRenamedFromObject);
//  2. where the old record has a pod, one patch hands the pod on: its
//     owner, name annotation, record label and group labels become the
//     new record's, and annRenamedFrom on it names the old record. The
//     patch tests the pod's owners first, so of two renames of one pod
//     one wins;
//  3. the old record's deletion;
//  4. the new record's under-way annotations are cleared.
//
// One write commits the rename: the pod's patch where there is a pod,
// else the old record's deletion. Whoever reads the records decides by
// it (settle, renameCommitted, handedOn): a new record under way is the
// sandbox's once the pod is its or the old record is gone, and is not
// there until then; an old record whose pod was handed on is not there
// either. So a rename cut at any point leaves one sandbox under one of
// the two names, never both, never neither. A reader that finds a rename
// committed finishes it (steps 3 and 4); a new record left uncommitted by
// a dead server is deleted by the next creation of its name once it is
// older than renameGrace, and waited for until then.

const (
	// annCreated, on a renamed sandbox's record, is when its first record
	// was made (RFC 3339): a sandbox's creation time stays through
	// renames, as a container's does.
	annCreated = "sandbox-mcp.io/created"
	// annID, on a renamed sandbox's record, is the ID the runtime gave
	// the sandbox (its first record's UID): an ID stays with a sandbox
	// through renames, as a container's does.
	annID = "sandbox-mcp.io/id"
	// recordPod, in a record's data, names its pod when that is not the
	// record's own object name (a renamed sandbox's pod, a pod made under
	// a name of its own because a renamed one kept the record's).
	recordPod = "pod"
	// annRenamedFrom is, on a new record under way, the UID of the
	// record it renames; on a pod, that of the record that handed it on.
	annRenamedFrom = "sandbox-mcp.io/renamed-from"
	// annRenamedFromObject is, on a new record under way, the object name
	// of the record it renames.
	annRenamedFromObject = "sandbox-mcp.io/renamed-from-object"
)

// renameGrace is how long a new record of a rename that has not
// committed is left to its renamer before the name's next creation
// deletes it: a rename takes a few API calls. (A variable for tests.)
var renameGrace = 15 * time.Second

// renameCut, set by tests, ends a rename after the step it names
// ("record", "pod", "old"), as a server killed there would.
var renameCut func(step string) bool

// cut reports whether a test ends the rename after step.
func cut(step string) bool { return renameCut != nil && renameCut(step) }

// idOf is the ID of the sandbox whose record is cm.
func idOf(cm *corev1.ConfigMap) string {
	if id := cm.Annotations[annID]; id != "" {
		return id
	}
	return string(cm.UID)
}

// createdOf is when the sandbox whose record is cm was made.
func createdOf(cm *corev1.ConfigMap) time.Time {
	if t, err := time.Parse(time.RFC3339, cm.Annotations[annCreated]); err == nil {
		return t
	}
	return cm.CreationTimestamp.Time
}

// podNameOf is the name of the pod of the record cm.
func podNameOf(cm *corev1.ConfigMap) string {
	if p := cm.Data[recordPod]; p != "" {
		return p
	}
	return cm.Name
}

// renaming reports whether cm is the new record of a rename under way.
func renaming(cm *corev1.ConfigMap) bool { return cm.Annotations[annRenamedFrom] != "" }

// handedOn reports whether pod p, found under rec's pod name, is no
// longer rec's because a rename of rec handed it on.
func handedOn(p *corev1.Pod, rec record) bool {
	return p != nil && p.Annotations[annRenamedFrom] == string(rec.cm.UID) && !ownedByRecord(p, rec.cm.UID)
}

// ownedByRecord reports whether p names the record of UID uid among its
// owners.
func ownedByRecord(p *corev1.Pod, uid types.UID) bool {
	for _, o := range p.OwnerReferences {
		if isRecordRef(o) && o.UID == uid {
			return true
		}
	}
	return false
}

// renameCommitted reports whether the rename whose new record is n has
// committed, given n's pod and the object under the old record's name
// (nil when there is none): the pod is n's, or the old record is gone.
func renameCommitted(n *corev1.ConfigMap, pod *corev1.Pod, old *corev1.ConfigMap) bool {
	if pod != nil && ownedByRecord(pod, n.UID) {
		return true
	}
	return old == nil || string(old.UID) != n.Annotations[annRenamedFrom]
}

// WhyNoRename implements sandbox.RenameChecker: the runtime renames
// sandboxes in pod mode; a Sandbox resource cannot be renamed, and its
// controller owns the pod.
func (r *Runtime) WhyNoRename() string {
	if r.dyn != nil {
		return "kubernetes cannot rename a sandbox agent-sandbox's Sandbox resource makes (--kube-sandbox-crd)"
	}
	return ""
}

// Rename gives the sandbox ref names (its container name or ID) the
// container name newName, keeping its ID, pod, workspace and labels.
func (r *Runtime) Rename(ctx context.Context, ref, newName string) error {
	if why := r.WhyNoRename(); why != "" {
		return fmt.Errorf("%w: %s", sandbox.ErrUnsupported, why)
	}
	old, err := r.record(ctx, ref)
	if err != nil {
		return err
	}
	pod, err := r.podNamed(ctx, old)
	if err != nil {
		return err
	}
	pod = ours(pod, old)
	spec := old.spec
	spec.Name = newName
	specJSON, _ := json.Marshal(spec)
	n := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(newName), Namespace: r.opt.Namespace,
			Labels: maps.Clone(old.cm.Labels),
			Annotations: map[string]string{annName: newName, annID: idOf(old.cm), annCreated: createdOf(old.cm).UTC().Format(time.RFC3339),
				annRenamedFrom: string(old.cm.UID), annRenamedFromObject: old.cm.Name},
			OwnerReferences: old.cm.OwnerReferences},
		Data: map[string]string{recordSpec: string(specJSON), recordLabels: old.cm.Data[recordLabels], recordPod: podNameOf(old.cm)},
	}
	made, err := r.createRecord(ctx, n)
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("rename %s to %s: %w", ref, newName, sandbox.ErrAlreadyExists)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: rename %s to %s: %w", ref, newName, err)
	}
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	undo := func() {
		uid := made.UID
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = cms.Delete(dctx, made.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	if cut("record") {
		return nil
	}
	rec := record{cm: made, spec: spec, labels: old.labels}
	if pod != nil {
		if err := r.handOn(ctx, pod, old, rec); err != nil {
			undo()
			return err
		}
	}
	r.ids.Store(idOf(made), made.Name)
	if cut("pod") {
		return nil
	}
	// The old record goes: the commit where there was no pod.
	uid := old.cm.UID
	err = cms.Delete(ctx, old.cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		if pod == nil {
			undo()
			return fmt.Errorf("kubernetes: rename %s to %s: delete the old record: %w", ref, newName, err)
		}
		// Committed with the pod: the old record, and the new one's
		// marks, are left for the next reader (settle).
		return nil
	}
	if cut("old") {
		return nil
	}
	r.clearRenaming(ctx, made)
	return nil
}

// handOn moves pod p from record old to record rec: one patch that
// holds only while p's owners are still old's.
func (r *Runtime) handOn(ctx context.Context, p *corev1.Pod, old, rec record) error {
	want, err := r.podFor(rec.spec, rec.cm)
	if err != nil {
		return err
	}
	labels := maps.Clone(p.Labels)
	maps.Copy(labels, want.Labels)
	for _, g := range []string{labelPeers, labelFamily} {
		if _, ok := want.Labels[g]; !ok {
			delete(labels, g)
		}
	}
	if !maps.Equal(labels, p.Labels) && labels[labelNetwork] != networkNone {
		// The groups follow the name (a spare's family becomes the
		// sandbox's): their policies first.
		moved := p.DeepCopy()
		moved.Labels = labels
		if err := r.ensureGroups(ctx, rec, moved); err != nil {
			return err
		}
	}
	annotations := maps.Clone(p.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[annName] = rec.cm.Annotations[annName]
	annotations[annRenamedFrom] = string(old.cm.UID)
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": p.UID},
		{"op": "test", "path": "/metadata/ownerReferences", "value": p.OwnerReferences},
		{"op": "replace", "path": "/metadata/ownerReferences", "value": []metav1.OwnerReference{recordOwner(rec.cm)}},
		{"op": "replace", "path": "/metadata/labels", "value": labels},
		{"op": "replace", "path": "/metadata/annotations", "value": annotations},
	})
	pods := r.cs.CoreV1().Pods(r.opt.Namespace)
	_, err = pods.Patch(ctx, p.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err == nil {
		return nil
	}
	// A failed test is an error of the request: which one, the pod says.
	now, gerr := pods.Get(ctx, p.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(gerr) || (gerr == nil && now.UID != p.UID):
		return fmt.Errorf("rename %s: its pod went meanwhile: %w", old.spec.Name, sandbox.ErrNotFound)
	case gerr == nil && !ownedByRecord(now, old.cm.UID):
		return fmt.Errorf("rename %s: its pod changed hands meanwhile: %w", old.spec.Name, sandbox.ErrInUse)
	}
	return fmt.Errorf("kubernetes: rename %s: hand its pod on: %w", old.spec.Name, err)
}

// sandboxName is the name of the sandbox whose record holds spec: its
// LabelName, or for a claimed warm spare, which has none, the name its
// container's name says ("" where that name is a hashed long one).
func sandboxName(spec sandbox.RunSpec) string {
	if n := spec.Labels[sandbox.LabelName]; n != "" {
		return n
	}
	owner := spec.Labels[sandbox.LabelOwner]
	if n, ok := strings.CutPrefix(spec.Name, owner+"-"); ok && sandbox.ValidateName(n) == nil && sandbox.ContainerName(owner, n) == spec.Name {
		return n
	}
	return ""
}

// settle decides rec when it is the new record of a rename under way: it
// is the sandbox's once the rename committed (and the rename is then
// finished), and not there (ErrNotFound) until then.
func (r *Runtime) settle(ctx context.Context, rec record) (record, error) {
	if !renaming(rec.cm) {
		return rec, nil
	}
	pod, err := r.podNamed(ctx, rec)
	if err != nil {
		return rec, err
	}
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	old, err := cms.Get(ctx, rec.cm.Annotations[annRenamedFromObject], metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		old = nil
	case err != nil:
		return rec, fmt.Errorf("kubernetes: read the record %s renames: %w", rec.cm.Annotations[annName], err)
	}
	if !renameCommitted(rec.cm, pod, old) {
		return rec, fmt.Errorf("container %s: %w (a rename to it is under way)", rec.cm.Annotations[annName], sandbox.ErrNotFound)
	}
	if old != nil && string(old.UID) == rec.cm.Annotations[annRenamedFrom] {
		uid := old.UID
		if err := cms.Delete(ctx, old.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return rec, fmt.Errorf("kubernetes: finish the rename to %s: delete the old record: %w", rec.cm.Annotations[annName], err)
		}
	}
	r.clearRenaming(ctx, rec.cm)
	return rec, nil
}

// clearRenaming drops the under-way annotations of a committed rename's
// new record (step 4). A failure leaves them to the next reader.
func (r *Runtime) clearRenaming(ctx context.Context, cm *corev1.ConfigMap) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annRenamedFrom: nil, annRenamedFromObject: nil}}})
	_, _ = r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	delete(cm.Annotations, annRenamedFrom)
	delete(cm.Annotations, annRenamedFromObject)
}

// createRecord creates cm. Where its name is taken by the new record of
// a rename that has not committed, it waits for that rename to commit
// (the name is then taken) or, past renameGrace, deletes that record as
// a dead server's and creates cm.
func (r *Runtime) createRecord(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	for {
		made, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return made, err
		}
		there, gerr := cms.Get(ctx, cm.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			continue // gone meanwhile
		}
		if gerr != nil || !renaming(there) || there.Labels[labelManaged] != managedBy {
			return nil, err
		}
		rec, perr := parseRecord(there, "")
		if perr != nil {
			return nil, err
		}
		if _, serr := r.settle(ctx, rec); !errors.Is(serr, sandbox.ErrNotFound) {
			return nil, err // committed, or unreadable: the name is taken
		}
		if time.Since(there.CreationTimestamp.Time) > renameGrace {
			uid := there.UID
			derr := cms.Delete(ctx, there.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if derr != nil && !apierrors.IsNotFound(derr) && !apierrors.IsConflict(derr) {
				return nil, fmt.Errorf("kubernetes: delete the record of a rename a server left undone: %w", derr)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// podNameTaken is pod, to be made for rec, under a name of its own when
// the pod that has its name now is another record's (a renamed sandbox
// kept it); the record says so before the pod is made. Any other pod of
// that name is an error.
func (r *Runtime) podNameTaken(ctx context.Context, rec record, pod *corev1.Pod) (*corev1.Pod, error) {
	there, err := r.cs.CoreV1().Pods(r.opt.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return pod, nil // gone meanwhile: the name is free again
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: read the pod named %s: %w", pod.Name, err)
	}
	if there.Labels[labelManaged] != managedBy || there.Annotations[annRenamedFrom] == "" || ownedByRecord(there, rec.cm.UID) {
		return nil, fmt.Errorf("container %s: a pod named %s is there already and is not one this record made: %w", rec.spec.Name, pod.Name, sandbox.ErrInUse)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := objectName(rec.spec.Name + "\x00" + hex.EncodeToString(b[:]))
	cm := rec.cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[recordPod] = name
	updated, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: name the pod of %s: %w", rec.spec.Name, err)
	}
	*rec.cm = *updated
	pod = pod.DeepCopy()
	pod.Name = name
	return pod, nil
}
