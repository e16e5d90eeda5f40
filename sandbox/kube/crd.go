package kube

// Sandbox mode: where the cluster runs agent-sandbox
// (sigs.k8s.io/agent-sandbox), each sandbox's pod is made by its
// controller from a Sandbox resource (agents.x-k8s.io/v1beta1) the runtime
// writes, rather than by the runtime itself. The record (a ConfigMap) stays
// the runtime's: it owns the Sandbox, which owns the pod, so a record's
// deletion still takes everything with it. A stop is the Sandbox's
// operatingMode Suspended (its controller deletes the pod; the runtime
// deletes it too, with the grace the stop asked for), a start its mode
// Running (the controller makes the pod again). The workspace claim is the
// runtime's, as in pod mode: a Sandbox's volumeClaimTemplates would name
// claims after it, and the runtime's claims outlive a removal for a
// snapshot or a restore (a sandbox adopted from a warm pool keeps the
// claim its pool made, detached from the Sandbox: warmpool.go).
//
// The Sandbox has its pod's name (podNameOf the record): a renamed
// sandbox's Sandbox, like its pod, keeps the name it was made with, and
// its owner, name and pod labels are handed on to the new record (a warm
// spare's claim, a reset moving the old sandbox aside).
//
// The fields written and read are those of agent-sandbox v1.0.1's
// api/v1beta1 (SandboxSpec: podTemplate, operatingMode, service); the
// controller names the pod after the Sandbox and makes itself the pod's
// controlling owner.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// SandboxResource is agent-sandbox's Sandbox.
var SandboxResource = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

const (
	sandboxAPIVersion = "agents.x-k8s.io/v1beta1"
	sandboxKind       = "Sandbox"
	modeRunning       = "Running"
	modeSuspended     = "Suspended"
)

// sandboxObject is the part of a Sandbox the runtime writes and reads.
type sandboxObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              sandboxSpec   `json:"spec"`
	Status            sandboxStatus `json:"status,omitempty"`
}

type sandboxSpec struct {
	PodTemplate   sandboxPodTemplate `json:"podTemplate"`
	OperatingMode string             `json:"operatingMode,omitempty"`
	// Service false: no Service for the pod; forwards reach it through
	// the agent.
	Service *bool `json:"service,omitempty"`
}

type sandboxPodTemplate struct {
	Spec     corev1.PodSpec     `json:"spec"`
	Metadata sandboxPodMetadata `json:"metadata"`
}

type sandboxPodMetadata struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// templateOf is the Sandbox's template of pod.
func templateOf(pod *corev1.Pod) *sandboxPodTemplate {
	return &sandboxPodTemplate{Spec: pod.Spec, Metadata: sandboxPodMetadata{Labels: pod.Labels, Annotations: pod.Annotations}}
}

type sandboxStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// sandboxes is the namespace's Sandbox client.
func (r *Runtime) sandboxes() dynamic.ResourceInterface {
	return r.dyn.Resource(SandboxResource).Namespace(r.opt.Namespace)
}

// getSandbox reads the Sandbox named name, nil when there is none.
func (r *Runtime) getSandbox(ctx context.Context, name string) (*sandboxObject, error) {
	u, err := r.sandboxes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if isNoResource(err) {
			return nil, r.noSandboxResource(err)
		}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("kubernetes: read the Sandbox %s: %w", name, err)
	}
	return fromUnstructured(u)
}

// isNoResource reports whether a NotFound is the resource's (agent-sandbox
// not installed), not the object's: the apiserver answers a path it does
// not serve with a plain 404, which client-go marks as an unexpected
// response (and names the object from the URL); a missing object gets a
// Status of its own.
func isNoResource(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	if d == nil {
		return true
	}
	for _, c := range d.Causes {
		if c.Type == metav1.CauseTypeUnexpectedServerResponse {
			return true
		}
	}
	return d.Name == ""
}

func (r *Runtime) noSandboxResource(err error) error {
	return fmt.Errorf("kubernetes: the cluster has no %s resource (sandbox mode needs agent-sandbox installed: its CRDs and controller): %w", SandboxResource.GroupResource(), err)
}

func fromUnstructured(u *unstructured.Unstructured) (*sandboxObject, error) {
	var sb sandboxObject
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sb); err != nil {
		return nil, fmt.Errorf("kubernetes: the Sandbox %s: %w", u.GetName(), err)
	}
	return &sb, nil
}

// ownedBy reports whether o has an owner reference to the object of uid.
func ownedBy(o metav1.Object, uid types.UID) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

// withSandbox sets rec.podOwner, in sandbox mode, to the UID of the
// Sandbox rec's record owns, and rec.suspended to whether it is
// suspended; a Sandbox of that name it does not own is none of its
// (podOwner stays empty, and no pod passes madeBy).
func (r *Runtime) withSandbox(ctx context.Context, rec record) (record, error) {
	if r.dyn == nil {
		return rec, nil
	}
	sb, err := r.getSandbox(ctx, podNameOf(rec.cm))
	if err != nil {
		return rec, err
	}
	if sb != nil && ownedBy(sb, rec.cm.UID) {
		rec.podOwner, rec.suspended = sb.UID, sb.Spec.OperatingMode == modeSuspended
	}
	return rec, nil
}

// sandboxOf is what List needs of a Sandbox a record owns.
type sandboxOf struct {
	record, uid types.UID
	suspended   bool
}

// sandboxOwners maps the name of each Sandbox a record owns to it (a
// record's Sandbox has its pod's name): List's one read for every
// record.
func (r *Runtime) sandboxOwners(ctx context.Context) (map[string]sandboxOf, error) {
	list, err := r.sandboxes().List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, r.noSandboxResource(err)
		}
		return nil, fmt.Errorf("kubernetes: list Sandboxes: %w", err)
	}
	out := map[string]sandboxOf{}
	for i := range list.Items {
		u := &list.Items[i]
		mode, _, _ := unstructured.NestedString(u.Object, "spec", "operatingMode")
		for _, ref := range u.GetOwnerReferences() {
			if isRecordRef(ref) {
				out[u.GetName()] = sandboxOf{record: ref.UID, uid: u.GetUID(), suspended: mode == modeSuspended}
			}
		}
	}
	return out, nil
}

// startThroughSandbox has agent-sandbox's controller make pod (the pod
// the runtime would make itself): it writes the record's Sandbox, or sets
// the one there to this pod and running, waits for the controller's pod,
// checks that it is the pod asked for, and waits for it to run.
//
// The controller adopts a pod of the Sandbox's name that no one controls
// and that carries its labels (anyone who may create pods can make one),
// and whoever may write Sandboxes may change one's template; so a pod of
// that name the record did not make refuses the start, the whole template
// is written anew at every start, and the pod the controller hands over
// must match it (podMatches) before a command runs there.
func (r *Runtime) startThroughSandbox(ctx context.Context, rec record, pod *corev1.Pod) (*corev1.Pod, error) {
	sb, err := r.getSandbox(ctx, pod.Name)
	if err != nil {
		return nil, err
	}
	if sb != nil && !ownedBy(sb, rec.cm.UID) && sb.Labels[labelManaged] == managedBy &&
		sb.Annotations[annName] != rec.cm.Annotations[annName] {
		// A sandbox renamed away (a reset's old one) took its Sandbox,
		// and so the name, with it: this record's gets a name of its own.
		if pod, err = r.podOfItsOwn(ctx, rec, pod); err != nil {
			return nil, err
		}
		if sb, err = r.getSandbox(ctx, pod.Name); err != nil {
			return nil, err
		}
	}
	if sb != nil && !ownedBy(sb, rec.cm.UID) {
		return nil, fmt.Errorf("container %s: a Sandbox named %s is there already and is not one this record made: %w", rec.spec.Name, pod.Name, sandbox.ErrInUse)
	}
	rec.podOwner = ""
	if sb != nil {
		rec.podOwner = sb.UID
	}
	if p, err := r.podNamed(ctx, rec); err != nil {
		return nil, err
	} else if p != nil && !madeBy(p, rec) {
		return nil, fmt.Errorf("container %s: a pod named %s is there already and is not one this record made: %w", rec.spec.Name, pod.Name, sandbox.ErrInUse)
	}
	// The record says so first: from then on no server in pod mode acts
	// on the sandbox as if its pod were its own.
	if err := r.markPodsFrom(ctx, rec.cm); err != nil {
		return nil, err
	}
	if sb == nil {
		if sb, err = r.createSandbox(ctx, rec, pod); err != nil {
			return nil, err
		}
	} else if err := r.runSandbox(ctx, sb, pod); err != nil {
		return nil, err
	}
	rec.podOwner = sb.UID
	made, err := r.waitForPod(ctx, rec, sb)
	if err != nil {
		return nil, err
	}
	if err := podMatches(made, pod); err != nil {
		// Not one a command may run in: its Sandbox is suspended, so that
		// the sandbox reads as stopped (its controller deletes that pod,
		// which is its own now), and the next start makes it again.
		if serr := r.setMode(ctx, sb, modeSuspended); serr != nil {
			return nil, fmt.Errorf("container %s: the pod made for its Sandbox is not the one asked for (%v), and its Sandbox could not be suspended: %w", rec.spec.Name, err, serr)
		}
		return nil, fmt.Errorf("container %s: the pod made for its Sandbox is not the one asked for (%v): its Sandbox is suspended: %w", rec.spec.Name, err, sandbox.ErrInUse)
	}
	// What was checked, for every later stream into the pod to check
	// again (podOf): a pod the controller makes or adopts later (after an
	// eviction), or one patched since, must be the same.
	if err := r.notePodPrint(ctx, rec.cm, made); err != nil {
		return nil, err
	}
	if err := r.stillThere(ctx, rec, made); err != nil {
		return nil, err
	}
	return r.waitRunning(ctx, made)
}

// annPodPrint, on a record in sandbox mode, is podPrint of the pod its
// last start checked (podMatches).
const annPodPrint = "sandbox-mcp.io/pod-print"

// podPrintV1 begins the prints podPrint makes; a print of another form
// (a later server's) is not checked.
const podPrintV1 = "v1:"

// podPrintForm is the beginning of the prints this server makes and
// checks: podPrintV1 and the k8s.io/api version it was built with, whose
// types the print encodes (a server built with another reads a pod's
// fields otherwise, and does not check prints of this one's).
var podPrintForm = func() string {
	v := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/api" {
				v = d.Version
			}
		}
	}
	return podPrintV1 + "k8s.io/api@" + v + ":"
}()

// podPrint is a digest of what in p's spec decides what runs and what it
// reaches (the fields podMatches looks at, and every volume's source):
// equal for pods made from one template, different for one patched (an
// image changed, an ephemeral container added) or planted.
func podPrint(p *corev1.Pod) string {
	s := &p.Spec
	type container struct {
		Name, Image, WorkingDir string
		Command, Args           []string
		Env                     []corev1.EnvVar
		EnvFrom                 []corev1.EnvFromSource
		Mounts                  []corev1.VolumeMount
		Security                *corev1.SecurityContext
	}
	var cs []container
	for _, c := range s.Containers {
		cs = append(cs, container{c.Name, c.Image, c.WorkingDir, c.Command, c.Args, c.Env, c.EnvFrom, c.VolumeMounts, c.SecurityContext})
	}
	data, _ := json.Marshal(struct {
		Containers                            []container
		Init, Ephemeral                       int
		HostNetwork, HostPID, HostIPC         bool
		ShareProcessNamespace, AutomountToken *bool
		RuntimeClass, ServiceAccount          string
		Volumes                               []corev1.Volume
		PodSecurity                           *corev1.PodSecurityContext
	}{cs, len(s.InitContainers), len(s.EphemeralContainers), s.HostNetwork, s.HostPID, s.HostIPC,
		s.ShareProcessNamespace, s.AutomountServiceAccountToken, ptrString(s.RuntimeClassName), s.ServiceAccountName, s.Volumes, s.SecurityContext})
	sum := sha256.Sum256(data)
	return podPrintForm + hex.EncodeToString(sum[:])
}

// notePodPrint writes p's print into record cm (annPodPrint), unless the
// record went or was renamed meanwhile (the start finds out next).
func (r *Runtime) notePodPrint(ctx context.Context, cm *corev1.ConfigMap, p *corev1.Pod) error {
	if _, err := r.annotateRecord(ctx, cm, annPodPrint, podPrint(p)); err != nil {
		return fmt.Errorf("kubernetes: note the pod of %s: %w", cm.Annotations[annName], err)
	}
	return nil
}

// annotateRecord sets annotation key to value on record cm, if cm is
// still the object of its UID, and updates cm; gone reports that it is
// not (removed, or another record under its name), and nothing was set.
func (r *Runtime) annotateRecord(ctx context.Context, cm *corev1.ConfigMap, key, value string) (gone bool, err error) {
	if cm.Annotations[key] == value {
		return false, nil
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": cm.UID},
		{"op": "add", "path": "/metadata/annotations/" + jsonPointer(key), "value": value},
	})
	updated, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Patch(ctx, cm.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	*cm = *updated
	return false, nil
}

// checkPodPrint, in sandbox mode, refuses a stream into pod p of record
// rec when p is not the pod rec's start checked (annPodPrint): the
// controller made or adopted another since, or it was patched. The
// sandbox is stopped (its Sandbox suspended, the pod deleted, and with it
// what runs there), so that its next start makes the pod anew and checks
// it.
func (r *Runtime) checkPodPrint(ctx context.Context, rec record, p *corev1.Pod) error {
	if !printDiffers(rec, p) {
		return nil
	}
	// The record again: a start may have checked this pod since it was
	// read.
	if now, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Get(ctx, rec.cm.Name, metav1.GetOptions{}); err == nil && now.UID == rec.cm.UID {
		rec.cm = now
		if !printDiffers(rec, p) {
			return nil
		}
	}
	why := "its pod is not the one its start checked (made again, adopted or patched since)"
	err := r.suspendSandbox(ctx, rec)
	if err == nil {
		// That pod, by its UID (not one a start made meanwhile), while
		// its Sandbox is still this record's.
		var handed bool
		if handed, err = r.handedOn(ctx, rec, p); err == nil && !handed {
			err = r.deletePod(ctx, p, time.Second)
		}
	}
	if err != nil {
		return fmt.Errorf("container %s: %s, and it could not be stopped: %w", rec.spec.Name, why, err)
	}
	return fmt.Errorf("container %s: %s: it was stopped, and the next start makes the pod again: %w", rec.spec.Name, why, sandbox.ErrNotRunning)
}

// printDiffers reports whether pod p, in sandbox mode, is not the pod
// record rec's start checked: rec keeps a print of this server's form
// (podPrintForm), and p's is another.
func printDiffers(rec record, p *corev1.Pod) bool {
	want := rec.cm.Annotations[annPodPrint]
	return rec.podOwner != "" && strings.HasPrefix(want, podPrintForm) && podPrint(p) != want
}

// runSandbox writes pod's template into sb, whole, and sets it running,
// if sb is still the object of its UID, with the owners read (a rename
// may have handed it on since).
func (r *Runtime) runSandbox(ctx context.Context, sb *sandboxObject, pod *corev1.Pod) error {
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(templateOf(pod))
	if err != nil {
		return fmt.Errorf("kubernetes: the Sandbox %s: %w", sb.Name, err)
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": sb.UID},
		{"op": "test", "path": "/metadata/ownerReferences", "value": sb.OwnerReferences},
		{"op": "replace", "path": "/spec/podTemplate", "value": tmpl},
		{"op": "replace", "path": "/spec/operatingMode", "value": modeRunning},
	})
	_, err = r.sandboxes().Patch(ctx, sb.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: set the Sandbox %s running: it was renamed or removed meanwhile: %w", sb.Name, sandbox.ErrInUse)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: set the Sandbox %s running: %w", sb.Name, err)
	}
	return nil
}

// podMatches reports how got, the pod the controller made (or adopted),
// differs from want, the pod asked for, in what decides what runs and
// what it reaches: its containers, their images, commands, variables,
// mounts and privileges, its volumes and its namespaces.
func podMatches(got, want *corev1.Pod) error {
	g, w := &got.Spec, &want.Spec
	switch {
	case len(g.Containers) != 1 || len(g.InitContainers) != 0 || len(g.EphemeralContainers) != 0:
		return fmt.Errorf("%d containers, %d init containers, %d ephemeral", len(g.Containers), len(g.InitContainers), len(g.EphemeralContainers))
	case g.HostNetwork || g.HostPID || g.HostIPC || (g.ShareProcessNamespace != nil && *g.ShareProcessNamespace):
		return errors.New("it shares the node's or its containers' namespaces")
	case g.AutomountServiceAccountToken == nil || *g.AutomountServiceAccountToken:
		return errors.New("it mounts a service account token")
	case ptrString(g.RuntimeClassName) != ptrString(w.RuntimeClassName):
		return fmt.Errorf("runtime class %q", ptrString(g.RuntimeClassName))
	case g.ServiceAccountName != "" && g.ServiceAccountName != "default" && g.ServiceAccountName != w.ServiceAccountName:
		return fmt.Errorf("service account %q", g.ServiceAccountName)
	}
	if len(g.Volumes) != len(w.Volumes) {
		return fmt.Errorf("%d volumes", len(g.Volumes))
	}
	for i, v := range g.Volumes {
		wv := w.Volumes[i]
		if v.Name != wv.Name || v.PersistentVolumeClaim == nil || wv.PersistentVolumeClaim == nil ||
			v.PersistentVolumeClaim.ClaimName != wv.PersistentVolumeClaim.ClaimName || v.PersistentVolumeClaim.ReadOnly != wv.PersistentVolumeClaim.ReadOnly {
			return fmt.Errorf("volume %s", v.Name)
		}
	}
	gc, wc := &g.Containers[0], &w.Containers[0]
	switch {
	case gc.Image != wc.Image:
		return fmt.Errorf("image %s", gc.Image)
	case !slices.Equal(gc.Command, wc.Command) || !slices.Equal(gc.Args, wc.Args) || gc.WorkingDir != wc.WorkingDir:
		return errors.New("another command")
	case len(gc.EnvFrom) != 0 || !slices.EqualFunc(gc.Env, wc.Env, func(a, b corev1.EnvVar) bool { return a.Name == b.Name && a.Value == b.Value && a.ValueFrom == nil }):
		return errors.New("other variables")
	case !slices.EqualFunc(gc.VolumeMounts, wc.VolumeMounts, func(a, b corev1.VolumeMount) bool {
		return a.Name == b.Name && a.MountPath == b.MountPath && a.ReadOnly == b.ReadOnly && a.SubPath == b.SubPath
	}):
		return errors.New("other mounts")
	}
	gs, ws := gc.SecurityContext, wc.SecurityContext
	if gs == nil || ws == nil || gs.Privileged == nil || *gs.Privileged || gs.AllowPrivilegeEscalation == nil || *gs.AllowPrivilegeEscalation ||
		gs.Capabilities == nil || !slices.Equal(gs.Capabilities.Add, ws.Capabilities.Add) || !slices.Equal(gs.Capabilities.Drop, ws.Capabilities.Drop) {
		return errors.New("other privileges")
	}
	return looserConfinement(got, want)
}

// looserConfinement reports what in got's security settings confines
// its container less than want's, or may: a seccomp profile other than
// want's; an AppArmor profile other than the runtime's default (set, or
// in the annotation older clusters read); an SELinux type, user or role
// other than want's, or a level other than one sensitivity with its own
// categories (a range, or none, reaches other containers' files); root
// (user, group, fsGroup or a supplementary group 0) or runAsNonRoot false
// where want names neither; an unmasked /proc; sysctls want does not set.
// What an admission plugin adds to every pod and confines no less passes:
// a non-root user and group, an SELinux level of the namespace's own
// categories. got and want have container security contexts (podMatches
// checked).
func looserConfinement(got, want *corev1.Pod) error {
	gp, wp := podSecurity(got), podSecurity(want)
	gc, wc := got.Spec.Containers[0].SecurityContext, want.Spec.Containers[0].SecurityContext
	if !equality.Semantic.DeepEqual(seccompOf(gc, gp), seccompOf(wc, wp)) {
		return errors.New("another seccomp profile")
	}
	if a := appArmorOf(gc, gp); a != nil && a.Type != corev1.AppArmorProfileTypeRuntimeDefault {
		return fmt.Errorf("AppArmor profile %s", a.Type)
	}
	for k, v := range got.Annotations {
		if strings.HasPrefix(k, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) && v != corev1.DeprecatedAppArmorBetaProfileRuntimeDefault {
			return fmt.Errorf("AppArmor profile %s", v)
		}
	}
	if err := looserSELinux(seLinuxOf(gc, gp), seLinuxOf(wc, wp)); err != nil {
		return err
	}
	for _, id := range []struct {
		what      string
		got, want *int64
	}{
		{"user", gc.RunAsUser, wc.RunAsUser}, {"pod user", gp.RunAsUser, wp.RunAsUser},
		{"group", gc.RunAsGroup, wc.RunAsGroup}, {"pod group", gp.RunAsGroup, wp.RunAsGroup},
		{"fsGroup", gp.FSGroup, wp.FSGroup},
	} {
		if id.got != nil && *id.got == 0 && (id.want == nil || *id.want != 0) {
			return fmt.Errorf("%s 0", id.what)
		}
	}
	for _, g := range gp.SupplementalGroups {
		if g == 0 && !slices.Contains(wp.SupplementalGroups, 0) {
			return errors.New("supplementary group 0")
		}
	}
	for _, nr := range []*bool{gc.RunAsNonRoot, gp.RunAsNonRoot} {
		if nr != nil && !*nr {
			return errors.New("runAsNonRoot false")
		}
	}
	if gc.ProcMount != nil && *gc.ProcMount != corev1.DefaultProcMount {
		return fmt.Errorf("proc mount %s", *gc.ProcMount)
	}
	for _, sc := range gp.Sysctls {
		if !slices.Contains(wp.Sysctls, sc) {
			return fmt.Errorf("sysctl %s", sc.Name)
		}
	}
	return nil
}

// podSecurity is p's pod security context, empty where it has none.
func podSecurity(p *corev1.Pod) *corev1.PodSecurityContext {
	if p.Spec.SecurityContext == nil {
		return &corev1.PodSecurityContext{}
	}
	return p.Spec.SecurityContext
}

// seccompOf is the seccomp profile a container with security context c
// in a pod with pc runs under (nil: the runtime's choice).
func seccompOf(c *corev1.SecurityContext, pc *corev1.PodSecurityContext) *corev1.SeccompProfile {
	if c.SeccompProfile != nil {
		return c.SeccompProfile
	}
	return pc.SeccompProfile
}

// appArmorOf is seccompOf's counterpart for AppArmor.
func appArmorOf(c *corev1.SecurityContext, pc *corev1.PodSecurityContext) *corev1.AppArmorProfile {
	if c.AppArmorProfile != nil {
		return c.AppArmorProfile
	}
	return pc.AppArmorProfile
}

// seLinuxOf is the SELinux options a container runs with, as the kubelet
// takes them: the container's whole, else the pod's (nil: the runtime's).
func seLinuxOf(c *corev1.SecurityContext, pc *corev1.PodSecurityContext) *corev1.SELinuxOptions {
	if c.SELinuxOptions != nil {
		return c.SELinuxOptions
	}
	return pc.SELinuxOptions
}

// mcsLevel is an SELinux level of one sensitivity and categories each
// named (s0:c26,c5), as admission gives a namespace's pods.
var mcsLevel = regexp.MustCompile(`^s[0-9]+:c[0-9]+(,c[0-9]+)*$`)

// looserSELinux reports how SELinux options got confine less than want:
// another type, user or role, or a level that is not want's and not one
// of a namespace's own categories.
func looserSELinux(got, want *corev1.SELinuxOptions) error {
	if got == nil {
		return nil
	}
	if want == nil {
		want = &corev1.SELinuxOptions{}
	}
	switch {
	case got.Type != "" && got.Type != want.Type:
		return fmt.Errorf("SELinux type %q", got.Type)
	case got.User != "" && got.User != want.User, got.Role != "" && got.Role != want.Role:
		return fmt.Errorf("SELinux user %q, role %q", got.User, got.Role)
	case got.Level != "" && got.Level != want.Level && !mcsLevel.MatchString(got.Level):
		return fmt.Errorf("SELinux level %q", got.Level)
	}
	return nil
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (r *Runtime) createSandbox(ctx context.Context, rec record, pod *corev1.Pod) (*sandboxObject, error) {
	no := false
	sb := &sandboxObject{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxAPIVersion, Kind: sandboxKind},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: r.opt.Namespace,
			Labels:          map[string]string{labelManaged: managedBy},
			Annotations:     map[string]string{annName: rec.spec.Name},
			OwnerReferences: []metav1.OwnerReference{recordOwner(rec.cm)}},
		Spec: sandboxSpec{
			PodTemplate:   *templateOf(pod),
			OperatingMode: modeRunning,
			Service:       &no,
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sb)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: the Sandbox of %s: %w", rec.spec.Name, err)
	}
	made, err := r.sandboxes().Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, r.noSandboxResource(err)
	case apierrors.IsAlreadyExists(err):
		return nil, fmt.Errorf("container %s: a Sandbox named %s is there already: %w", rec.spec.Name, pod.Name, sandbox.ErrInUse)
	case err != nil:
		return nil, fmt.Errorf("kubernetes: create the Sandbox of %s: %w", rec.spec.Name, err)
	}
	return fromUnstructured(made)
}

// markPodsFrom marks record cm as one whose pod a Sandbox makes
// (annPodsFrom), where it is not yet (a record a server in pod mode made,
// or one made before the mark was kept).
func (r *Runtime) markPodsFrom(ctx context.Context, cm *corev1.ConfigMap) error {
	gone, err := r.annotateRecord(ctx, cm, annPodsFrom, sandboxKind)
	if gone {
		return fmt.Errorf("container %s: its record was removed or replaced meanwhile: %w", cm.Annotations[annName], sandbox.ErrInUse)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: mark the record of %s: %w", cm.Annotations[annName], err)
	}
	return nil
}

// setMode sets sb's operatingMode, if sb is still the object of its UID
// with the owners read (a rename may have handed it on since).
func (r *Runtime) setMode(ctx context.Context, sb *sandboxObject, mode string) error {
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": sb.UID},
		{"op": "test", "path": "/metadata/ownerReferences", "value": sb.OwnerReferences},
		{"op": "replace", "path": "/spec/operatingMode", "value": mode},
	})
	_, err := r.sandboxes().Patch(ctx, sb.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: set the Sandbox %s %s: it was renamed or removed meanwhile: %w", sb.Name, mode, sandbox.ErrInUse)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: set the Sandbox %s %s: %w", sb.Name, mode, err)
	}
	return nil
}

// waitForPod waits, within the start timeout, for the pod the controller
// makes for sb: named after it, and controlled by it. When the wait ends
// without one (the timeout, or the caller's context), the error says what
// the Sandbox's controller reported on it, if anything.
func (r *Runtime) waitForPod(ctx context.Context, rec record, sb *sandboxObject) (*corev1.Pod, error) {
	began := time.Now()
	deadline := began.Add(r.opt.StartTimeout)
	pods := r.cs.CoreV1().Pods(r.opt.Namespace)
	another := false // a pod of its name is there that it did not make
	for tries := 0; ; {
		p, err := pods.Get(ctx, sb.Name, metav1.GetOptions{})
		switch {
		case err == nil && madeBy(p, rec) && p.DeletionTimestamp == nil:
			return p, nil
		case err != nil && !apierrors.IsNotFound(err) && !ending(ctx):
			return nil, fmt.Errorf("kubernetes: read the pod of %s: %w", rec.spec.Name, err)
		}
		if err == nil || apierrors.IsNotFound(err) {
			another = err == nil && !madeBy(p, rec)
		}
		if tries++; tries%10 == 0 {
			// A removal (or the garbage collector, its record gone) may
			// have taken the Sandbox since.
			if now, err := r.getSandbox(ctx, sb.Name); err == nil && (now == nil || now.UID != sb.UID) {
				return nil, fmt.Errorf("container %s: its Sandbox was deleted while it started: %w", rec.spec.Name, sandbox.ErrInUse)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("kubernetes: no pod was made for %s's Sandbox in %s: %s", rec.spec.Name, r.opt.StartTimeout, r.noPodWhy(ctx, sb.Name, another))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kubernetes: no pod was made for %s's Sandbox in the %s the call waited for one (%s): %w",
				rec.spec.Name, time.Since(began).Round(100*time.Millisecond), r.noPodWhy(ctx, sb.Name, another), context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ending reports whether a request that failed may have failed for
// ctx's end: ctx has ended, or its deadline is a moment away, when the
// client's rate limiter refuses a wait it cannot finish in time before
// ctx itself ends.
func ending(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < time.Second
}

// waitEnding is ending, and when it reports true it waits (a second at
// most) for ctx to end, so that the caller can tell what ended it.
func waitEnding(ctx context.Context) bool {
	if !ending(ctx) {
		return false
	}
	<-ctx.Done()
	return true
}

// noPodWhy says why the Sandbox named name may have no pod yet: what its
// controller reported on it, or that it reported nothing. another says a
// pod of its name is there that it did not make. It reads the Sandbox
// even when ctx has ended (the wait's error is being made), briefly.
func (r *Runtime) noPodWhy(ctx context.Context, name string, another bool) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	why := "its controller reported nothing on it: is agent-sandbox's controller running?"
	if cur, err := r.getSandbox(ctx, name); err == nil && cur != nil {
		var said []string
		for _, c := range cur.Status.Conditions {
			if c.Message != "" {
				said = append(said, c.Type+": "+c.Message)
			}
		}
		if len(said) > 0 {
			why = "its Sandbox says " + strings.Join(said, "; ")
		}
	}
	if another {
		why = "a pod named " + name + " is there that it did not make; " + why
	}
	return why
}

// suspendSandbox sets rec's Sandbox suspended, so that its controller
// does not make the pod again once the runtime deleted it.
func (r *Runtime) suspendSandbox(ctx context.Context, rec record) error {
	sb, err := r.getSandbox(ctx, podNameOf(rec.cm))
	if err != nil || sb == nil {
		return err
	}
	if !ownedBy(sb, rec.cm.UID) {
		if sb.UID == rec.podOwner {
			return fmt.Errorf("container %s: renamed meanwhile: %w", rec.spec.Name, sandbox.ErrInUse)
		}
		return nil // another's, never this record's
	}
	if sb.Spec.OperatingMode == modeSuspended {
		return nil
	}
	return r.setMode(ctx, sb, modeSuspended)
}

// deleteSandbox deletes rec's Sandbox, if it owns one.
func (r *Runtime) deleteSandbox(ctx context.Context, rec record) error {
	sb, err := r.getSandbox(ctx, podNameOf(rec.cm))
	if err != nil || sb == nil || !ownedBy(sb, rec.cm.UID) {
		return err
	}
	// An adopted pool Sandbox's workspace is its controller's: left out
	// of the deletion (warmpool.go).
	if rec.cm.Data[recordClaims] != "" {
		if err := r.detachClaims(ctx, sb); err != nil {
			return err
		}
	}
	uid := sb.UID
	err = r.sandboxes().Delete(ctx, sb.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("kubernetes: delete the Sandbox of %s: %w", rec.spec.Name, err)
	}
	return nil
}
