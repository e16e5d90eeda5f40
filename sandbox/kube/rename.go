package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Renames. Neither a pod nor a ConfigMap can be renamed, so a sandbox's
// rename (a warm spare's claim, a reset moving the old sandbox aside)
// makes a record under the new name that takes over the old record's
// pod, and deletes the old record:
//
//  1. the new record: the old one's spec, labels, owner, ID (annID) and
//     creation time (annCreated), its pod's name (recordPod), and marks
//     naming the old record (annRenamedFrom, its UID, and
//     annRenamedFromObject, its object name) while the rename is under
//     way;
//  2. the commit: one patch of the old record, tested against the
//     version read in step 0, marks it renamed to the new one
//     (annRenamedTo, annRenamedToObject). Of two renames of one sandbox,
//     or a rename and a removal, one wins;
//  3. the pod, where the old record has one, is handed on in one patch
//     tested against its owners: its owner, name annotation, record label
//     and group labels become the new record's. In sandbox mode the
//     Sandbox is handed on instead (handOnSandbox): its owner, name
//     annotation and pod template's labels and annotations, in one patch
//     tested against its owners; the pod keeps its owner, the Sandbox,
//     and gets the new labels and name in a patch of its own (tested
//     against the name it had), which the Sandbox's controller would
//     make from the template anyway;
//  4. the new record's marks are cleared;
//  5. the old record is deleted.
//
// Readers decide by the commit (settle): an old record marked renamed is
// not there, and its reader finishes the rename (steps 3 to 5, or, when
// the new record went meanwhile, deletes the old one and its pod); a new
// record with marks is there once the old record is marked renamed to it,
// and then finished by its reader too; until then it is not there. A new
// record whose old record is gone or was renamed elsewhere was
// abandoned, and its reader deletes it. One whose old record is
// unmarked may belong to a renamer still at work: the next creation of
// its name waits renameGrace for it, then refuses it on the old record
// (annRenameRefused, a patch that also fails that renamer's commit) and
// deletes it. So a rename cut at any point leaves one sandbox under one
// of the two names, never both, never neither.
//
// A removal commits on the record too, before it touches the pod: one
// patch tested against the version read marks it removing (annRemoving).
// A rename never commits on a record so marked, and a removal finds a
// rename's commit and leaves the sandbox alone, so of the two one wins
// whole: a removal cannot delete a pod a rename is handing on (in sandbox
// mode, where the pod's owner stays, a deletion first checks that its
// Sandbox is still the record's: handedOn). A removal cut after its mark
// leaves a sandbox that reads as not running (its pod may still run),
// which the next removal finishes; a rename or a start is refused
// meanwhile, saying so. A start that read the record before a removal's
// mark or a rename's commit finds it when it reads the record again after
// its pod is there (stillThere): it gives way to the removal, and
// finishes the rename.
//
// A record's children are owned by its UID, so they go with the old
// record: the Manager renames a parent only where its children end with
// it (a reset, a restore).

const (
	// annID, on a renamed sandbox's record, is the ID the runtime gave
	// the sandbox (its first record's UID): an ID stays with a sandbox
	// through renames, as a container's does.
	annID = "sandbox-mcp.io/id"
	// annCreated, on a renamed sandbox's record, is when its first record
	// was made (RFC 3339): a sandbox's creation time stays through
	// renames, as a container's does.
	annCreated = "sandbox-mcp.io/created"
	// recordPod, in a record's data, names its pod when that is not the
	// record's own object name (a renamed sandbox's pod, a pod made under
	// a name of its own because a renamed one kept the record's).
	recordPod = "pod"
	// annRenamedFrom and annRenamedFromObject are, on a new record under
	// way, the UID and object name of the record it renames.
	annRenamedFrom       = "sandbox-mcp.io/renamed-from"
	annRenamedFromObject = "sandbox-mcp.io/renamed-from-object"
	// annRenamedTo and annRenamedToObject are, on an old record, the UID
	// and object name of the new record a committed rename made.
	annRenamedTo       = "sandbox-mcp.io/renamed-to"
	annRenamedToObject = "sandbox-mcp.io/renamed-to-object"
	// annRenameRefused is, on a record, the UID of a new record of a
	// rename of it that was given up as abandoned.
	annRenameRefused = "sandbox-mcp.io/rename-refused"
	// annRemoving is, on a record, when a removal of its sandbox began
	// (RFC 3339): the removal's commit, which no rename passes.
	annRemoving = "sandbox-mcp.io/removing"
)

// renameGrace is how long the creation of a name waits for a rename to
// that name that has not committed, before it refuses it as a dead
// server's: a rename takes a few API calls. (A variable for tests.)
var renameGrace = 15 * time.Second

// renameCut, set by tests, ends a rename after the step it names
// ("record", "commit", "pod", "marks"), as a server killed there would.
var renameCut func(step string) bool

// cut reports whether a test ends the rename after step.
func cut(step string) bool { return renameCut != nil && renameCut(step) }

// startStep, set by tests, is called by a start once it read the
// record ("read").
var startStep func(step string)

// removeStep, set by tests, is called by a removal after the step it
// names ("read": the record; "mark"); true ends the removal there, as a
// server killed there would.
var removeStep func(step string) bool

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

// renamedAway reports whether cm is an old record a committed rename
// left.
func renamedAway(cm *corev1.ConfigMap) bool { return cm.Annotations[annRenamedTo] != "" }

// removing reports whether a removal of cm's sandbox began.
func removing(cm *corev1.ConfigMap) bool { return cm.Annotations[annRemoving] != "" }

// committedTo reports whether old, the object under the name n's marks
// give (nil when there is none), is the record n renames, ours, and
// marked renamed to n.
func committedTo(n, old *corev1.ConfigMap) bool {
	return old != nil && string(old.UID) == n.Annotations[annRenamedFrom] && old.Labels[labelManaged] == managedBy &&
		old.Annotations[annRenamedTo] == string(n.UID)
}

// abandoned reports whether the rename n's marks describe can no longer
// commit: its old record (old, nil when gone) went, was renamed
// elsewhere, refused it, or is being removed.
func abandoned(n, old *corev1.ConfigMap) bool {
	return old == nil || string(old.UID) != n.Annotations[annRenamedFrom] ||
		(old.Annotations[annRenamedTo] != "" && old.Annotations[annRenamedTo] != string(n.UID)) ||
		old.Annotations[annRenameRefused] == string(n.UID) ||
		(removing(old) && !committedTo(n, old))
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

// Rename gives the sandbox ref names (its container name or ID) the
// container name newName, keeping its ID, creation time, pod, workspace
// and labels.
func (r *Runtime) Rename(ctx context.Context, ref, newName string) error {
	old, err := r.record(ctx, ref)
	if errors.Is(err, sandbox.ErrNotFound) && r.KeepsPools() && strings.Contains(ref, "_spare_") {
		// A spare of a warm pool: a Sandbox to adopt (warmpool.go).
		return r.adoptPooled(ctx, ref, newName)
	}
	if err != nil {
		return err
	}
	if removing(old.cm) {
		return fmt.Errorf("rename %s to %s: its removal began at %s (destroy it again to finish it): %w",
			ref, newName, old.cm.Annotations[annRemoving], sandbox.ErrInUse)
	}
	if err := r.refuseSandboxMode(ctx, old.cm, "rename it"); err != nil {
		return err
	}
	if r.dyn == nil {
		if err := r.refuseSandboxPod(ctx, old.cm, "rename it"); err != nil {
			return err
		}
	}
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
	if c := old.cm.Data[recordClaims]; c != "" {
		n.Data[recordClaims] = c // an adopted pool Sandbox's workspace (warmpool.go)
	}
	for _, k := range []string{annPodsFrom, annPodPrint} {
		if v := old.cm.Annotations[k]; v != "" {
			n.Annotations[k] = v
		}
	}
	made, err := r.createRecord(ctx, n)
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("rename %s to %s: %w", ref, newName, sandbox.ErrAlreadyExists)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: rename %s to %s: %w", ref, newName, err)
	}
	if cut("record") {
		return nil
	}
	committed, err := r.commitRename(ctx, old.cm, made)
	if err != nil || committed == nil {
		// The commit may have landed unseen (a cut connection, an ended
		// context): looked at again, and finished if so; else the new
		// record is refused on the old one, and deleted.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if now, gerr := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Get(dctx, old.cm.Name, metav1.GetOptions{}); gerr == nil && committedTo(made, now) {
			r.ids.Store(idOf(made), made.Name)
			return r.finishRename(dctx, now, made)
		}
		if rerr := r.refuseRename(dctx, made); rerr != nil && err == nil {
			err = rerr
		}
		if err == nil {
			err = fmt.Errorf("rename %s to %s: it was renamed or removed meanwhile: %w", ref, newName, sandbox.ErrInUse)
		}
		return err
	}
	r.ids.Store(idOf(made), made.Name)
	if cut("commit") {
		return nil
	}
	return r.finishRename(ctx, committed, made)
}

// commitRename marks old renamed to n (step 2), if old is still as read;
// where it changed meanwhile, it is read again and the mark tried again
// unless a rename of it committed elsewhere, it refused n, or it went
// (then nil, no error).
func (r *Runtime) commitRename(ctx context.Context, old, n *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	for try := 0; ; try++ {
		patch, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": old.UID},
			{"op": "test", "path": "/metadata/resourceVersion", "value": old.ResourceVersion},
			{"op": "add", "path": "/metadata/annotations/" + jsonPointer(annRenamedTo), "value": string(n.UID)},
			{"op": "add", "path": "/metadata/annotations/" + jsonPointer(annRenamedToObject), "value": n.Name},
		})
		got, err := cms.Patch(ctx, old.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return got, nil
		}
		now, gerr := cms.Get(ctx, old.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr) || (gerr == nil && now.UID != old.UID):
			return nil, nil
		case gerr != nil:
			return nil, fmt.Errorf("kubernetes: rename %s: %w", old.Annotations[annName], err)
		case committedTo(n, now):
			return now, nil // landed, its answer lost
		case removing(now):
			return nil, nil // a removal committed first
		case now.ResourceVersion == old.ResourceVersion || try == 4:
			return nil, fmt.Errorf("kubernetes: rename %s: mark the old record: %w", old.Annotations[annName], err)
		case abandoned(n, now):
			return nil, nil
		}
		old = now
	}
}

// jsonPointer escapes s as one token of a JSON pointer.
func jsonPointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// finishRename does what is left of a committed rename of old to n
// (steps 3 to 5).
func (r *Runtime) finishRename(ctx context.Context, old, n *corev1.ConfigMap) error {
	rec, err := parseRecord(n, "")
	if err != nil {
		return err
	}
	if err := r.refuseSandboxMode(ctx, old, "finish its rename"); err != nil {
		return err
	}
	if r.dyn != nil {
		// Its Sandbox; or a pod a server in pod mode made for it.
		if err := r.handOnSandbox(ctx, old, rec); err != nil {
			return err
		}
	}
	if err := r.handOnPod(ctx, old, rec); err != nil {
		return err
	}
	if cut("pod") {
		return nil
	}
	if err := r.clearRenaming(ctx, n); err != nil {
		return err
	}
	if cut("marks") {
		return nil
	}
	uid := old.UID
	err = r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("kubernetes: rename %s: delete the old record: %w", old.Annotations[annName], err)
	}
	return nil
}

// refuseSandboxMode, in pod mode, refuses to go on (doing what) with the
// sandbox of record cm when the record says its pod is made from a
// Sandbox (annPodsFrom), running or not: its Sandbox, which goes with the
// record, is out of this server's reach (a pod of its own would stand
// beside a Sandbox its controller may run again; a rename finished here
// would delete the old record, and the Sandbox with it).
//
// A mark with no Sandbox of the record's behind it (a server in sandbox
// mode killed, or refused, between the mark and the Sandbox's creation)
// refuses nothing.
func (r *Runtime) refuseSandboxMode(ctx context.Context, cm *corev1.ConfigMap, doing string) error {
	if r.dyn != nil || cm.Annotations[annPodsFrom] != sandboxKind {
		return nil
	}
	u, err := r.snapDyn.Resource(SandboxResource).Namespace(r.opt.Namespace).Get(ctx, podNameOf(cm), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err): // no such Sandbox, or no Sandboxes on the cluster
		return nil
	case err == nil && !ownedBy(u, cm.UID):
		return nil
	}
	return fmt.Errorf("%s: its pod is made by agent-sandbox from a Sandbox: %s from a server started with --kube-sandbox-crd: %w",
		cm.Annotations[annName], doing, sandbox.ErrUnsupported)
}

// refuseSandboxPod, in pod mode, refuses to go on (doing what) with
// the sandbox of record cm when its pod was made by agent-sandbox from a
// Sandbox, which goes with the record and which only a server in sandbox
// mode reaches.
func (r *Runtime) refuseSandboxPod(ctx context.Context, cm *corev1.ConfigMap, doing string) error {
	p, err := r.cs.CoreV1().Pods(r.opt.Namespace).Get(ctx, podNameOf(cm), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("kubernetes: read the pod of %s: %w", cm.Annotations[annName], err)
	}
	return sandboxPodRefused(p, cm, doing)
}

// sandboxPodRefused is refuseSandboxPod's answer for pod p, as read.
func sandboxPodRefused(p *corev1.Pod, cm *corev1.ConfigMap, doing string) error {
	if c := metav1.GetControllerOfNoCopy(p); c != nil && c.Kind == sandboxKind {
		return fmt.Errorf("%s: its pod was made by agent-sandbox from a Sandbox: %s from a server started with --kube-sandbox-crd: %w",
			cm.Annotations[annName], doing, sandbox.ErrUnsupported)
	}
	return nil
}

// handOnPod moves record old's pod, where it has one, to rec (step 3,
// pod mode). In pod mode a Sandbox's pod refuses the rename's finish:
// its Sandbox is out of this server's reach, and the old record, which
// owns it, is kept for a server in sandbox mode.
func (r *Runtime) handOnPod(ctx context.Context, old *corev1.ConfigMap, rec record) error {
	p, err := r.cs.CoreV1().Pods(r.opt.Namespace).Get(ctx, podNameOf(old), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("kubernetes: rename %s: read its pod: %w", old.Annotations[annName], err)
	}
	if r.dyn == nil {
		if err := sandboxPodRefused(p, old, "finish its rename"); err != nil {
			return err
		}
	}
	if !ownedByRecord(p, old.UID) || p.Labels[labelManaged] != managedBy {
		return nil
	}
	want, err := r.podFor(rec.spec, rec.cm)
	if err != nil {
		return err
	}
	return r.handOn(ctx, p, old, rec, want, []metav1.OwnerReference{recordOwner(rec.cm)})
}

// handOnSandbox moves record old's Sandbox, where it has one, to rec
// (step 3, sandbox mode): its owner, name and pod template (the pod's
// labels and annotations, which its controller keeps the pod's) in one
// patch that holds only while its owners are as read; then its pod's
// labels and annotations, so that the pod is rec's at once rather than
// at the controller's next pass. A reader that finds the Sandbox handed
// on already still brings its pod up to date.
func (r *Runtime) handOnSandbox(ctx context.Context, old *corev1.ConfigMap, rec record) error {
	name := podNameOf(old)
	sb, err := r.getSandbox(ctx, name)
	if err != nil || sb == nil || sb.Labels[labelManaged] != managedBy {
		return err
	}
	want, err := r.podFor(rec.spec, rec.cm)
	if err != nil {
		return err
	}
	if ownedBy(sb, old.UID) || ownedBy(sb, rec.cm.UID) {
		// The new record says so first (a record made before the mark
		// was kept, or marked after the rename read it, passes it on).
		if err := r.markPodsFrom(ctx, rec.cm); err != nil {
			return err
		}
	}
	if ownedBy(sb, old.UID) {
		if want.Labels[labelNetwork] != networkNone {
			// The groups' policies first, as in pod mode.
			if err := r.ensureGroups(ctx, rec, want); err != nil {
				return err
			}
		}
		meta, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&templateOf(want).Metadata)
		if err != nil {
			return fmt.Errorf("kubernetes: rename %s: %w", old.Annotations[annName], err)
		}
		annotations := maps.Clone(sb.Annotations)
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[annName] = rec.cm.Annotations[annName]
		patch, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": sb.UID},
			{"op": "test", "path": "/metadata/ownerReferences", "value": sb.OwnerReferences},
			{"op": "replace", "path": "/metadata/ownerReferences", "value": []metav1.OwnerReference{recordOwner(rec.cm)}},
			{"op": "replace", "path": "/metadata/annotations", "value": annotations},
			{"op": "replace", "path": "/spec/podTemplate/metadata", "value": meta},
		})
		if _, err := r.sandboxes().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			now, gerr := r.getSandbox(ctx, name)
			if gerr != nil || now == nil || now.UID != sb.UID || ownedBy(now, old.UID) {
				return fmt.Errorf("kubernetes: rename %s: hand its Sandbox on: %w", old.Annotations[annName], err)
			}
			sb = now // handed on by another reader
		} else {
			sb.OwnerReferences = []metav1.OwnerReference{recordOwner(rec.cm)}
		}
	}
	if !ownedBy(sb, rec.cm.UID) {
		return nil // not this rename's
	}
	p, err := r.cs.CoreV1().Pods(r.opt.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("kubernetes: rename %s: read its pod: %w", old.Annotations[annName], err)
	case !controlledBy(p, sb.UID) || p.Annotations[annName] != old.Annotations[annName]:
		return nil // another's; or handed on already (to rec, or onward since)
	}
	return r.handOn(ctx, p, old, rec, want, p.OwnerReferences)
}

// controlledBy reports whether o's controlling owner is the object of
// uid.
func controlledBy(o metav1.Object, uid types.UID) bool {
	c := metav1.GetControllerOfNoCopy(o)
	return c != nil && c.UID == uid
}

// handOn gives pod p, of record old, the labels and annotations of want,
// rec's pod, and owners for its owners: one patch that holds only while
// p's owners are as read.
func (r *Runtime) handOn(ctx context.Context, p *corev1.Pod, old *corev1.ConfigMap, rec record, want *corev1.Pod, owners []metav1.OwnerReference) error {
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
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": p.UID},
		{"op": "test", "path": "/metadata/ownerReferences", "value": p.OwnerReferences},
	}
	if was, ok := p.Annotations[annName]; ok {
		// A Sandbox's pod keeps its owner through renames: its name says
		// whose it was when read (a later rename's finisher may have
		// been first).
		ops = append(ops, map[string]any{"op": "test", "path": "/metadata/annotations/" + jsonPointer(annName), "value": was})
	}
	patch, _ := json.Marshal(append(ops, []map[string]any{
		{"op": "replace", "path": "/metadata/ownerReferences", "value": owners},
		{"op": "replace", "path": "/metadata/labels", "value": labels},
		{"op": "replace", "path": "/metadata/annotations", "value": annotations},
	}...))
	pods := r.cs.CoreV1().Pods(r.opt.Namespace)
	_, err := pods.Patch(ctx, p.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err == nil {
		return nil
	}
	// A failed test is an error of the request: which one, the pod says.
	now, gerr := pods.Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(gerr) || (gerr == nil && (now.UID != p.UID || now.Annotations[annName] != p.Annotations[annName] ||
		!slices.EqualFunc(now.OwnerReferences, p.OwnerReferences, func(a, b metav1.OwnerReference) bool { return a.UID == b.UID }))) {
		return nil // gone, or handed on by another reader (to rec, or onward since)
	}
	return fmt.Errorf("kubernetes: rename %s: hand its pod on: %w", old.Annotations[annName], err)
}

// settle decides a record a rename marked: an old record renamed away is
// not there (ErrNotFound) and its rename is finished; a new record is
// there once its rename committed, which is then finished, and not there
// until then (an abandoned one is deleted).
func (r *Runtime) settle(ctx context.Context, rec record) (record, error) {
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	name := rec.cm.Annotations[annName]
	switch {
	case rec.cm.Annotations[annAdopting] != "":
		return r.settleAdoption(ctx, rec) // warmpool.go
	case renamedAway(rec.cm):
		n, err := cms.Get(ctx, rec.cm.Annotations[annRenamedToObject], metav1.GetOptions{})
		switch {
		case err == nil && string(n.UID) == rec.cm.Annotations[annRenamedTo] && n.Labels[labelManaged] == managedBy:
			if err := r.finishRename(ctx, rec.cm, n); err != nil {
				return rec, err
			}
		case err == nil || apierrors.IsNotFound(err):
			// The new record went before the rename was finished (its
			// sandbox destroyed): the old record and its pod (or its
			// Sandbox, which takes the pod) go too.
			gone := record{cm: rec.cm, spec: rec.spec}
			if r.dyn != nil {
				err = r.deleteSandbox(ctx, gone)
			} else {
				err = r.deleteOwnedPod(ctx, gone, time.Second)
			}
			if err != nil {
				return rec, err
			}
			uid := rec.cm.UID
			if err := cms.Delete(ctx, rec.cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
				return rec, fmt.Errorf("kubernetes: delete the record %s a rename left: %w", name, err)
			}
		default:
			return rec, fmt.Errorf("kubernetes: read the record %s was renamed to: %w", name, err)
		}
		return rec, fmt.Errorf("container %s: %w (renamed)", name, sandbox.ErrNotFound)
	case renaming(rec.cm):
		old, err := cms.Get(ctx, rec.cm.Annotations[annRenamedFromObject], metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			old = nil
		case err != nil:
			return rec, fmt.Errorf("kubernetes: read the record %s renames: %w", name, err)
		}
		if committedTo(rec.cm, old) {
			if err := r.finishRename(ctx, old, rec.cm); err != nil {
				return rec, err
			}
			return rec, nil
		}
		if abandoned(rec.cm, old) {
			// As read: a copy read before its marks were cleared is not
			// the record now.
			uid, rv := rec.cm.UID, rec.cm.ResourceVersion
			_ = cms.Delete(ctx, rec.cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		}
		return rec, fmt.Errorf("container %s: %w (a rename to it is under way)", name, sandbox.ErrNotFound)
	}
	return rec, nil
}

// tidyRename, for List, finishes the rename rec (a record with marks)
// is part of when it committed, and gives up one that did not and is
// older than renameGrace (old is the object under its old record's
// name, as listed). What it cannot do is left to the next look.
func (r *Runtime) tidyRename(ctx context.Context, rec record, old *corev1.ConfigMap) {
	if renaming(rec.cm) && !committedTo(rec.cm, old) {
		if time.Since(rec.cm.CreationTimestamp.Time) > renameGrace {
			_ = r.refuseRename(ctx, rec.cm)
		}
		return
	}
	_, _ = r.settle(ctx, rec)
}

// clearRenaming drops the marks of a committed rename's new record
// (step 4).
func (r *Runtime) clearRenaming(ctx context.Context, cm *corev1.ConfigMap) error {
	if !renaming(cm) {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annRenamedFrom: nil, annRenamedFromObject: nil}}})
	updated, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes: rename to %s: clear the record's marks: %w", cm.Annotations[annName], err)
	}
	*cm = *updated
	return nil
}

// createRecord creates cm. Where its name is taken by a record a rename
// marked, that record is settled first: an old record renamed away is
// finished (and gone); a new one whose rename committed holds the name;
// one whose rename may still commit is waited for, and past renameGrace
// refused on its old record and deleted.
func (r *Runtime) createRecord(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	var waitingFor types.UID
	var since time.Time
	for {
		made, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return made, err
		}
		there, gerr := cms.Get(ctx, cm.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			continue // gone meanwhile
		}
		if gerr != nil || there.Labels[labelManaged] != managedBy || (!renaming(there) && !renamedAway(there)) {
			return nil, err
		}
		rec, perr := parseRecord(there, "")
		if perr != nil {
			return nil, err
		}
		if _, serr := r.settle(ctx, rec); !errors.Is(serr, sandbox.ErrNotFound) {
			return nil, err // a sandbox's: the name is taken
		}
		if renamedAway(there) {
			continue // finished, and gone
		}
		if _, gerr := cms.Get(ctx, cm.Name, metav1.GetOptions{}); apierrors.IsNotFound(gerr) {
			continue // abandoned, and deleted
		}
		if there.UID != waitingFor {
			waitingFor, since = there.UID, time.Now()
		}
		if time.Since(since) > renameGrace {
			if err := r.refuseRename(ctx, there); err != nil {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// refuseRename gives up the rename whose new record is n as a dead
// server's: its old record is marked so (which fails that rename's
// commit, if its renamer lives), then n is deleted.
func (r *Runtime) refuseRename(ctx context.Context, n *corev1.ConfigMap) error {
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	old, err := cms.Get(ctx, n.Annotations[annRenamedFromObject], metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("kubernetes: read the record %s renames: %w", n.Annotations[annName], err)
	case committedTo(n, old):
		return nil // committed meanwhile: the next look finds the name taken
	case !abandoned(n, old):
		patch, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/resourceVersion", "value": old.ResourceVersion},
			{"op": "add", "path": "/metadata/annotations/" + jsonPointer(annRenameRefused), "value": string(n.UID)},
		})
		if _, err := cms.Patch(ctx, old.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return nil // changed meanwhile (a failed test): looked at again
			}
			return fmt.Errorf("kubernetes: refuse a rename a server left undone: %w", err)
		}
	}
	// As read: a copy read before its marks were cleared is not the
	// record now.
	uid, rv := n.UID, n.ResourceVersion
	if err := cms.Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("kubernetes: delete the record of a rename a server left undone: %w", err)
	}
	return nil
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
	if there.Labels[labelManaged] != managedBy || there.Annotations[annName] == rec.cm.Annotations[annName] || ownedByRecord(there, rec.cm.UID) {
		return nil, fmt.Errorf("container %s: a pod named %s is there already and is not one this record made: %w", rec.spec.Name, pod.Name, sandbox.ErrInUse)
	}
	return r.podOfItsOwn(ctx, rec, pod)
}

// podOfItsOwn is pod under a name of its own, which rec's record names
// (recordPod) before the pod, or its Sandbox, is made.
func (r *Runtime) podOfItsOwn(ctx context.Context, rec record, pod *corev1.Pod) (*corev1.Pod, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := objectName(rec.spec.Name + "\x00" + hex.EncodeToString(b[:]))
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": rec.cm.UID},
		{"op": "test", "path": "/metadata/resourceVersion", "value": rec.cm.ResourceVersion},
		{"op": "add", "path": "/data/" + jsonPointer(recordPod), "value": name},
	})
	updated, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Patch(ctx, rec.cm.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// A failed test: the record changed since it was read (renamed,
		// removed, or another start named the pod).
		return nil, fmt.Errorf("container %s: its record changed while it started (renamed or removed meanwhile?): %w", rec.spec.Name, sandbox.ErrInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: name the pod of %s: %w", rec.spec.Name, err)
	}
	*rec.cm = *updated
	pod = pod.DeepCopy()
	pod.Name = name
	return pod, nil
}

// sandboxName is the name of the sandbox whose record holds spec: its
// LabelName, or for a claimed warm spare, which has none, the name its
// container's name says ("" where that name is a hashed long one: such a
// root is in no family of its name, so its children reach it only as
// peers).
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
