package kube

// Warm pools (Options.WarmPools, sandbox mode): the spares the Manager
// keeps are agent-sandbox's SandboxWarmPools, kept full by its controller
// whether or not a server runs, rather than sandboxes the server boots.
// For each kind of spare (the Manager's spare key) the runtime writes a
// SandboxTemplate, the pod the runtime would make for such a spare with a
// workspace claim per pool Sandbox (volumeClaimTemplates), and a
// SandboxWarmPool of it with the count the Manager asks for.
//
// A claim takes a pool Sandbox directly, as agent-sandbox's SandboxClaim
// controller does (a claim object would have that controller rewrite the
// Sandbox's pod metadata at every pass, and let through only labels of
// allow-listed domains, which our NetworkPolicies select by): a record
// for the new sandbox, then one patch of the Sandbox that holds only while
// it is as read (its resourceVersion) and takes it out of the pool (its
// owner, the pool's labels, its volumeClaimTemplates, whose claim becomes
// the sandbox's own workspace, and its pod template, the record's), then
// the claim and the pod. A SandboxClaim's adoption takes a Sandbox with
// the same optimistic lock, so a Sandbox goes to one or the other (the
// pool's own deletions of its Sandboxes hold no lock: a Sandbox deleted
// just after its adoption is made again at the sandbox's next start, on
// its workspace). A record whose adoption a dead server left
// (annAdopting) is finished by the next reader if the Sandbox is its own,
// and removed if not, after a fence that makes a late adopter fail.
//
// What a server claims it checks against what it asked for itself: only
// pools it keeps (KeepPools, in this process), only Sandboxes of its
// template as last written, with the spec it wrote (never one read from
// the cluster, which whoever may write templates could change), a pod
// that matches it and a claim the pool made empty for that Sandbox.
//
// The Manager names a pool Sandbox as it names its spares (the spare
// name and workspace of an ID: pooledID of the Sandbox's UID), and the
// adopted claim, named by the controller after the Sandbox, answers for
// that workspace's name (labelVolume), owned by no one from the
// adoption on: the Manager records it as it records a claimed spare's.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// agent-sandbox's extension resources (v1.0.1's extensions/api/v1beta1).
var (
	TemplateResource = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	WarmPoolResource = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
)

const (
	extensionsAPIVersion = "extensions.agents.x-k8s.io/v1beta1"
	// The labels agent-sandbox's warm pool controller puts on the
	// Sandboxes of a pool (api/v1beta1's SandboxWarmPoolLabel, whose
	// value is NameHash of the pool's name, and the template's hashes),
	// which an adoption removes: a Sandbox no one owns that keeps the
	// first is taken back into its pool.
	labelWarmPool        = "agents.x-k8s.io/warm-pool-sandbox"
	labelTemplateRefHash = "agents.x-k8s.io/sandbox-template-ref-hash"
	labelTemplateHash    = "agents.x-k8s.io/sandbox-template-hash"
	labelPodTemplateHash = "agents.x-k8s.io/sandbox-pod-template-hash"
	// annTemplateRef, on a pool's Sandbox, names its SandboxTemplate.
	annTemplateRef = "agents.x-k8s.io/sandbox-template-ref"
	// annPoolSpec, on a SandboxTemplate the runtime wrote, is the RunSpec
	// its pod is made from (its names those of sandbox.PooledSpareID).
	annPoolSpec = "sandbox-mcp.io/spec"
	// annTemplatePrint, on a SandboxTemplate the runtime wrote, is a
	// digest of what it wrote: one that differs is written anew.
	annTemplatePrint = "sandbox-mcp.io/template-print"
	// annAdoptionRefused, on a pool Sandbox, is the UID of a record whose
	// unfinished adoption of it a reader gave up (settleAdoption).
	annAdoptionRefused = "sandbox-mcp.io/adoption-refused"
	// annAdopting, on a record, is the UID of the pool Sandbox the record
	// is taking, until the adoption is whole.
	annAdopting = "sandbox-mcp.io/adopting"
	// recordClaims, in a record's data, maps a volume the record's spec
	// mounts to its claim, where that is not the volume's own object (an
	// adopted pool Sandbox's workspace).
	recordClaims = "claims"
	// labelVolume, on an adopted claim, is objectName of the volume it
	// answers for.
	labelVolume = "sandbox-mcp.io/volume"
	// labelSandboxNameHash, on a claim a Sandbox's controller made, is
	// NameHash of the Sandbox's name: an unowned claim with it is taken
	// by a Sandbox of that name.
	labelSandboxNameHash = "agents.x-k8s.io/sandbox-name-hash"
	// labelPoolKey, on a pool and its template, is the spare key.
	labelPoolKey = "sandbox-mcp.io/spare-key"
)

// poolLabelKeys are the warm pool controller's labels (labelWarmPool and
// the template's hashes), which an adoption removes from the Sandbox and
// its pod.
var poolLabelKeys = []string{labelWarmPool, labelTemplateRefHash, labelTemplateHash, labelPodTemplateHash}

// adoptGrace is how long a record being adopted into is taken for one
// under way, before a reader removes it as a dead server's. (A variable
// for tests.)
var adoptGrace = 15 * time.Second

// adoptCut, set by tests, ends an adoption after the step it names
// ("record", "sandbox"), as a server killed there would.
var adoptCut func(step string) bool

// poolObjectName is the name of the SandboxTemplate and SandboxWarmPool
// of spare key of prefix, for a server whose egress CA has print ca (""
// for none): short, since the pool's Sandboxes, and so their pods, are
// named after it with six more characters. Servers sharing a prefix but
// not a CA (each its own state directory) keep pools of their own,
// rather than rewrite one template in turn, each rewrite replacing the
// pool's Sandboxes.
func poolObjectName(prefix, key, ca string) string {
	sum := sha256.Sum256([]byte(prefix + "\x00" + key + "\x00" + ca))
	return "sandbox-mcp-pool-" + hex.EncodeToString(sum[:6])
}

// nameHash is agent-sandbox's NameHash (controllers.NameHash): the FNV-1a
// hash of a name in eight hex digits, the value of labelWarmPool.
func nameHash(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%08x", h.Sum32())
}

// pooledID is the spare ID the Manager knows pool Sandbox uid by.
func pooledID(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return hex.EncodeToString(sum[:8])
}

// poolTemplate is the SandboxTemplate of a pool of spec's spares: the
// pod podFor makes of spec, but for what names one sandbox (its record's
// label, its name's annotation) and its workspace claims, which the
// controller makes per Sandbox from volumeClaimTemplates of bytes each.
func (r *Runtime) poolTemplate(name, key string, spec sandbox.RunSpec, bytes int64) (*unstructured.Unstructured, error) {
	pod, err := r.podFor(spec, nil)
	if err != nil {
		return nil, err
	}
	delete(pod.Labels, labelRecord)
	delete(pod.Annotations, annName)
	size := r.volumeSize
	if bytes > 0 {
		size = *resource.NewQuantity(bytes, resource.BinarySI)
	}
	var claims []map[string]any
	var keep []corev1.Volume
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			keep = append(keep, v)
			continue
		}
		pvc := corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		}
		if r.opt.StorageClass != "" {
			pvc.StorageClassName = &r.opt.StorageClass
		}
		ps, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pvc)
		if err != nil {
			return nil, err
		}
		// The claim's volume keeps the pod's volume name: the controller
		// names the volume after the template and the claim after both.
		claims = append(claims, map[string]any{"metadata": map[string]any{"name": v.Name, "labels": map[string]any{labelManaged: managedBy}}, "spec": ps})
	}
	pod.Spec.Volumes = keep
	specJSON, _ := json.Marshal(spec)
	// What the runtime writes, by a digest (the apiserver's defaults make
	// the object read back differ from it): in the template's pod
	// metadata too, which the pool copies into each of its Sandboxes, so
	// that one of an older template (which the pool is about to replace)
	// is not claimed.
	first, _ := json.Marshal(struct {
		Pod    *corev1.Pod
		Claims []map[string]any
		Size   string
	}{pod, claims, size.String()})
	psum := sha256.Sum256(append(first, specJSON...))
	tprint := hex.EncodeToString(psum[:])
	pod.Annotations[annTemplatePrint] = tprint
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(templateOf(pod))
	if err != nil {
		return nil, err
	}
	no := false
	tspec := map[string]any{
		"podTemplate":          tmpl,
		"volumeClaimTemplates": toAnySlice(claims),
		"service":              no,
		// The runtime's own policies select the sandboxes: none of
		// agent-sandbox's, and no DNS of its choosing.
		"networkPolicyManagement": "Unmanaged",
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": extensionsAPIVersion, "kind": "SandboxTemplate",
		"metadata": map[string]any{"name": name, "namespace": r.opt.Namespace,
			"labels":      toAny(poolLabels(spec, key)),
			"annotations": map[string]any{annPoolSpec: string(specJSON), annTemplatePrint: tprint}},
		"spec": tspec,
	}}
	return u, nil
}

// poolLabels are the labels of the pool and template of spec's spares.
func poolLabels(spec sandbox.RunSpec, key string) map[string]string {
	return map[string]string{labelManaged: managedBy, sandbox.LabelOwner: spec.Labels[sandbox.LabelOwner], labelPoolKey: key}
}

func toAnySlice(ms []map[string]any) []any {
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

// KeepsPools implements sandbox.PoolKeeper: spares are warm pools when
// the runtime was given WarmPools.
func (r *Runtime) KeepsPools() bool { return r.opt.WarmPools && r.dyn != nil }

// KeepPools implements sandbox.PoolKeeper: it writes a template and a
// pool of each of pools, of their counts, and deletes prefix's others.
func (r *Runtime) KeepPools(ctx context.Context, prefix string, pools []sandbox.PoolSpec) error {
	if !r.KeepsPools() {
		return fmt.Errorf("%w: warm pools need --kube-sandbox-crd and --kube-warm-pools", sandbox.ErrUnsupported)
	}
	wanted := map[string]bool{}
	var errs []error
	for _, p := range pools {
		if p.Spec.Labels[sandbox.LabelOwner] != prefix || labelValueErr(p.Key) != nil {
			return fmt.Errorf("kubernetes: a pool of %q for prefix %q", p.Key, prefix)
		}
		name := poolObjectName(prefix, p.Key, p.Spec.Labels[sandbox.LabelCA])
		wanted[name] = true
		tprint, err := r.keepPool(ctx, name, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.poolsMu.Lock()
		if r.pools == nil {
			r.pools = map[string]keptPool{}
		}
		r.pools[name] = keptPool{prefix: prefix, spec: p.Spec, print: tprint}
		r.poolsMu.Unlock()
	}
	// Only pools this process kept go: those of another server sharing
	// the prefix are its own (a dead server's stay until deleted by
	// hand, or by a server that keeps them again and then none).
	r.poolsMu.Lock()
	var drop []string
	for name, kp := range r.pools {
		if kp.prefix == prefix && !wanted[name] {
			drop = append(drop, name)
			delete(r.pools, name)
		}
	}
	r.poolsMu.Unlock()
	for _, name := range drop {
		errs = append(errs, r.dropPool(ctx, name))
	}
	return errors.Join(errs...)
}

// keptPool is a pool this process keeps: its prefix, its spares' spec as
// this process asked for it, and its template's print.
type keptPool struct {
	prefix, print string
	spec          sandbox.RunSpec
}

func labelValueErr(v string) error {
	if len(v) == 0 || len(v) > 63 || strings.Trim(v, "0123456789abcdef") != "" {
		return errors.New("not a spare key")
	}
	return nil
}

// keepPool writes pool p's template (anew when it changed: the pool
// replaces its Sandboxes of the old one) and the pool, of p's count.
func (r *Runtime) keepPool(ctx context.Context, name string, p sandbox.PoolSpec) (string, error) {
	tmpl, err := r.poolTemplate(name, p.Key, p.Spec, p.WorkspaceBytes)
	if err != nil {
		return "", err
	}
	tprint := tmpl.GetAnnotations()[annTemplatePrint]
	// A pool's pods kept off the network are so from their start: the
	// isolating policy first, as for the runtime's own pods.
	if pod, err := r.podFor(p.Spec, nil); err == nil && pod.Labels[labelNetwork] == networkNone {
		if err := r.ensureIsolation(ctx, pod); err != nil {
			return "", err
		}
	}
	templates := r.dyn.Resource(TemplateResource).Namespace(r.opt.Namespace)
	got, err := templates.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := templates.Create(ctx, tmpl, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("kubernetes: create the template of pool %s: %w", name, err)
		}
	case err != nil:
		return "", fmt.Errorf("kubernetes: read the template of pool %s: %w", name, err)
	case got.GetAnnotations()[annTemplatePrint] != tmpl.GetAnnotations()[annTemplatePrint]:
		tmpl.SetResourceVersion(got.GetResourceVersion())
		if _, err := templates.Update(ctx, tmpl, metav1.UpdateOptions{}); err != nil {
			return "", fmt.Errorf("kubernetes: update the template of pool %s: %w", name, err)
		}
	}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": extensionsAPIVersion, "kind": "SandboxWarmPool",
		"metadata": map[string]any{"name": name, "namespace": r.opt.Namespace, "labels": toAny(poolLabels(p.Spec, p.Key))},
		"spec": map[string]any{
			"replicas":           int64(p.Count),
			"sandboxTemplateRef": map[string]any{"name": name},
			// Sandboxes of an older template are replaced at once, not
			// only as they are claimed.
			"updateStrategy": map[string]any{"type": "Recreate"},
		},
	}}
	pools := r.dyn.Resource(WarmPoolResource).Namespace(r.opt.Namespace)
	cur, err := pools.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := pools.Create(ctx, pool, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("kubernetes: create warm pool %s: %w", name, err)
		}
	case err != nil:
		return "", fmt.Errorf("kubernetes: read warm pool %s: %w", name, err)
	default:
		n, _, _ := unstructured.NestedInt64(cur.Object, "spec", "replicas")
		if n != int64(p.Count) {
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"replicas": p.Count}})
			if _, err := pools.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return "", fmt.Errorf("kubernetes: set warm pool %s to %d: %w", name, p.Count, err)
			}
		}
	}
	return tprint, nil
}

// dropPool deletes pool name and its template: the garbage collector
// deletes the Sandboxes it still owns (those adopted are records').
func (r *Runtime) dropPool(ctx context.Context, name string) error {
	for _, res := range []schema.GroupVersionResource{WarmPoolResource, TemplateResource} {
		err := r.dyn.Resource(res).Namespace(r.opt.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("kubernetes: delete %s %s: %w", res.Resource, name, err)
		}
	}
	return nil
}

// pooledSandbox is a ready Sandbox of one of prefix's pools, with the
// spec of its pool's template.
type pooledSandbox struct {
	sb   *sandboxObject
	spec sandbox.RunSpec
	id   string
}

// pooled lists the ready, unclaimed Sandboxes of prefix's pools.
func (r *Runtime) pooled(ctx context.Context, prefix string) ([]pooledSandbox, error) {
	pools, err := r.dyn.Resource(WarmPoolResource).Namespace(r.opt.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labelManaged + "=" + managedBy + "," + sandbox.LabelOwner + "=" + prefix})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list warm pools: %w", err)
	}
	if len(pools.Items) == 0 {
		return nil, nil
	}
	byHash := map[string]types.UID{}
	var hashes []string
	for _, p := range pools.Items {
		h := nameHash(p.GetName())
		byHash[h] = p.GetUID()
		hashes = append(hashes, h)
	}
	list, err := r.sandboxes().List(ctx, metav1.ListOptions{LabelSelector: labelWarmPool + " in (" + strings.Join(hashes, ",") + ")"})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list the warm pools' Sandboxes: %w", err)
	}
	r.poolsMu.Lock()
	kept := maps.Clone(r.pools)
	r.poolsMu.Unlock()
	var out []pooledSandbox
	for i := range list.Items {
		sb, err := fromUnstructured(&list.Items[i])
		if err != nil || sb.DeletionTimestamp != nil || !ready(sb) {
			continue
		}
		if c := metav1.GetControllerOfNoCopy(sb); c == nil || c.Kind != "SandboxWarmPool" || c.UID != byHash[sb.Labels[labelWarmPool]] {
			continue
		}
		// Of a pool this process keeps, and of its template as this
		// process wrote it last: the spec is the one it asked for, not
		// one read from the cluster.
		kp, ok := kept[sb.Annotations[annTemplateRef]]
		if !ok || kp.prefix != prefix || sb.Spec.PodTemplate.Metadata.Annotations[annTemplatePrint] != kp.print {
			continue
		}
		out = append(out, pooledSandbox{sb: sb, spec: kp.spec, id: pooledID(sb.UID)})
	}
	return out, nil
}

// ready reports whether sb's controller says it is Ready.
func ready(sb *sandboxObject) bool {
	for _, c := range sb.Status.Conditions {
		if c.Type == "Ready" && c.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}

// asSpare is spec, a pool template's, as the spare of ID id.
func asSpare(spec sandbox.RunSpec, id string) sandbox.RunSpec {
	sub := func(s string) string { return strings.ReplaceAll(s, sandbox.PooledSpareID, id) }
	spec.Name = sub(spec.Name)
	spec.Labels = maps.Clone(spec.Labels)
	spec.Labels[sandbox.LabelVolume] = sub(spec.Labels[sandbox.LabelVolume])
	spec.Mounts = append([]sandbox.Mount(nil), spec.Mounts...)
	for i := range spec.Mounts {
		spec.Mounts[i].Volume = sub(spec.Mounts[i].Volume)
	}
	return spec
}

// Pooled implements sandbox.PoolKeeper: the ready Sandboxes of prefix's
// pools, as the Manager's spares.
func (r *Runtime) Pooled(ctx context.Context, prefix string) ([]sandbox.Container, error) {
	if !r.KeepsPools() {
		return nil, nil
	}
	ps, err := r.pooled(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Container, 0, len(ps))
	for _, p := range ps {
		spec := asSpare(p.spec, p.id)
		out = append(out, sandbox.Container{ID: string(p.sb.UID), Name: spec.Name, Image: spec.Image,
			State: sandbox.StateRunning, Labels: spec.Labels, Created: p.sb.CreationTimestamp.Time})
	}
	return out, nil
}

// adoptPooled takes the pool Sandbox the Manager knows as spare (a
// spare's name) for the sandbox newName. ErrNotFound: there is no such
// Sandbox ready (another took it, or it went).
func (r *Runtime) adoptPooled(ctx context.Context, spare, newName string) error {
	prefix, id, ok := strings.Cut(spare, "_spare_")
	if !ok || !r.KeepsPools() {
		return fmt.Errorf("container %s: %w", spare, sandbox.ErrNotFound)
	}
	ps, err := r.pooled(ctx, prefix)
	if err != nil {
		return err
	}
	var p *pooledSandbox
	for i := range ps {
		if ps[i].id == id {
			p = &ps[i]
		}
	}
	if p == nil {
		return fmt.Errorf("container %s: %w", spare, sandbox.ErrNotFound)
	}
	spec := asSpare(p.spec, id)
	if spec.Name != spare {
		return fmt.Errorf("container %s: %w", spare, sandbox.ErrNotFound)
	}
	spec.Name = newName
	pods := r.cs.CoreV1().Pods(r.opt.Namespace)
	pod, err := pods.Get(ctx, p.sb.Name, metav1.GetOptions{})
	if err != nil || !controlledBy(pod, p.sb.UID) || pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return fmt.Errorf("container %s: its pod is not running: %w", spare, sandbox.ErrNotFound)
	}
	claims := map[string]string{}
	for i, m := range spec.Mounts {
		if m.Volume == "" {
			continue
		}
		// The claim the pool's controller made for this Sandbox, empty:
		// not one planted or made from another's data.
		name := "v" + strconv.Itoa(i) + "-" + p.sb.Name
		c, err := r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || !controlledBy(c, p.sb.UID) || c.Spec.DataSource != nil || c.Spec.DataSourceRef != nil {
			return fmt.Errorf("container %s: its workspace claim %s is not one its pool made (%v): %w", spare, name, err, sandbox.ErrNotFound)
		}
		claims[m.Volume] = name
	}
	if len(pod.Spec.NodeSelector) > 0 || pod.Spec.Affinity != nil {
		return fmt.Errorf("container %s: its pod was placed by a selector the pool's template does not have: %w", spare, sandbox.ErrNotFound)
	}
	claimsJSON, _ := json.Marshal(claims)
	specJSON, _ := json.Marshal(spec)
	labelsJSON, _ := json.Marshal(spec.Labels)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(newName), Namespace: r.opt.Namespace,
			Labels: kubeLabels(spec.Labels, nil),
			// The spare's ID and creation are the Sandbox's, as listed.
			Annotations: map[string]string{annName: newName, annPodsFrom: sandboxKind, annID: string(p.sb.UID),
				annCreated: p.sb.CreationTimestamp.UTC().Format(time.RFC3339), annAdopting: string(p.sb.UID)}},
		Data: map[string]string{recordSpec: string(specJSON), recordLabels: string(labelsJSON), recordPod: p.sb.Name, recordClaims: string(claimsJSON)},
	}
	want, err := r.podFor(spec, cm)
	if err != nil {
		return err
	}
	if err := podMatches(pod, want); err != nil {
		// Its template was changed behind the runtime's back: not one a
		// command may run in.
		return fmt.Errorf("container %s: the pool's pod is not the one its template asks for (%v): %w", spare, err, sandbox.ErrNotFound)
	}

	made, err := r.createRecord(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("container %s: %w", newName, sandbox.ErrAlreadyExists)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: record %s: %w", newName, err)
	}
	rec := record{cm: made, spec: spec, labels: spec.Labels}
	if adoptCut != nil && adoptCut("record") {
		return nil
	}
	err = nil
	if want.Labels[labelNetwork] != networkNone {
		// The groups' policies (owned by the record) before the pod is
		// in them, as a rename hands a pod on.
		err = r.ensureGroups(ctx, rec, want)
	}
	if err == nil {
		err = r.takeSandbox(ctx, rec, p.sb, want)
	}
	if err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		// A patch whose answer was lost may have landed: the Sandbox
		// says, and a taken one is finished rather than left to point
		// at a deleted record.
		if now, gerr := r.getSandbox(dctx, p.sb.Name); gerr == nil && now != nil && now.UID == p.sb.UID && ownedBy(now, made.UID) {
			err = r.finishAdoption(dctx, &rec)
			if err == nil {
				r.ids.Store(idOf(rec.cm), rec.cm.Name)
			}
			return err
		}
		uid := made.UID
		_ = r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Delete(dctx, made.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		return err
	}
	if adoptCut != nil && adoptCut("sandbox") {
		return nil
	}
	if err := r.finishAdoption(ctx, &rec); err != nil {
		return err
	}
	r.ids.Store(idOf(made), made.Name)
	return nil
}

// takeSandbox moves pool Sandbox sb, as read, to record rec in one patch
// (see the top of this file). A Sandbox changed since it was read (taken
// by another) is ErrNotFound: the Manager tries its next spare.
func (r *Runtime) takeSandbox(ctx context.Context, rec record, sb *sandboxObject, want *corev1.Pod) error {
	labels := maps.Clone(sb.Labels)
	for _, l := range poolLabelKeys {
		delete(labels, l)
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[labelManaged] = managedBy
	annotations := maps.Clone(sb.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[annName] = rec.spec.Name
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(templateOf(want))
	if err != nil {
		return err
	}
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": sb.UID},
		{"op": "test", "path": "/metadata/resourceVersion", "value": sb.ResourceVersion},
		{"op": "replace", "path": "/metadata/ownerReferences", "value": []metav1.OwnerReference{recordOwner(rec.cm)}},
		{"op": "replace", "path": "/metadata/labels", "value": labels},
		{"op": "replace", "path": "/metadata/annotations", "value": annotations},
		{"op": "replace", "path": "/spec/podTemplate", "value": tmpl},
	}
	patch, _ := json.Marshal(ops)
	_, err = r.sandboxes().Patch(ctx, sb.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("container %s: pool Sandbox %s was taken or changed meanwhile (%v): %w", rec.spec.Name, sb.Name, err, sandbox.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("kubernetes: take pool Sandbox %s for %s: %w", sb.Name, rec.spec.Name, err)
	}
	return nil
}

// finishAdoption makes an adopted Sandbox's claims and pod rec's, notes
// the pod's print and clears the record's mark. Each step holds whoever
// does it (the adopting server, or a reader after its death).
func (r *Runtime) finishAdoption(ctx context.Context, rec *record) error {
	var claims map[string]string
	_ = json.Unmarshal([]byte(rec.cm.Data[recordClaims]), &claims)
	pvcs := r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace)
	for vol, claim := range claims {
		c, err := pvcs.Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			// Gone (the controller would make an empty one of its name,
			// which is not this workspace): the mark stays, and the
			// sandbox does not run until it is dealt with.
			return fmt.Errorf("kubernetes: read the claim %s of %s: %w", claim, vol, err)
		}
		sbUID := types.UID(rec.cm.Annotations[annID])
		if _, tracked := c.Labels[labelSandboxNameHash]; c.Labels[labelVolume] == objectName(vol) && c.Annotations[annName] == vol && !tracked && !ownedBy(c, sbUID) {
			continue
		}
		// The workspace outlives its Sandbox, as the runtime's own claims
		// do: no owner, so that no deletion of the Sandbox (its pool's,
		// acting on a cache that still shows it in the pool, or a record's
		// cascading) takes it; and not the name-hash label the Sandbox's
		// controller takes an unowned claim back by. The controller says
		// on every pass that it cannot adopt the claim (its
		// volumeClaimTemplates cannot change); it makes the pod all the
		// same.
		var owners []metav1.OwnerReference
		for _, ref := range c.OwnerReferences {
			if ref.UID != sbUID {
				owners = append(owners, ref)
			}
		}
		labels := maps.Clone(c.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		delete(labels, labelSandboxNameHash)
		labels[labelManaged], labels[labelVolume] = managedBy, objectName(vol)
		annotations := maps.Clone(c.Annotations)
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[annName] = vol
		patch, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": c.UID},
			{"op": "replace", "path": "/metadata/labels", "value": labels},
			{"op": "replace", "path": "/metadata/annotations", "value": annotations},
			{"op": "replace", "path": "/metadata/ownerReferences", "value": append([]metav1.OwnerReference{}, owners...)},
		})
		if _, err := pvcs.Patch(ctx, claim, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("kubernetes: take the claim of %s: %w", vol, err)
		}
	}
	name := podNameOf(rec.cm)
	pods := r.cs.CoreV1().Pods(r.opt.Namespace)
	want, err := r.podFor(rec.spec, rec.cm)
	if err != nil {
		return err
	}
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err == nil && (!controlledBy(p, types.UID(rec.cm.Annotations[annID])) || podMatches(p, want) != nil) {
		// Not the Sandbox's pod as its template asks (planted, or made
		// from another template meanwhile): deleted, by its UID; the
		// controller makes it again from the record's template, and the
		// next start checks that one.
		_ = r.deletePod(ctx, p, time.Second)
		p, err = nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	if err == nil && p.Annotations[annName] != rec.spec.Name {
		labels := maps.Clone(p.Labels)
		for _, l := range poolLabelKeys {
			delete(labels, l)
		}
		maps.Copy(labels, want.Labels)
		if labels[labelNetwork] != networkNone {
			moved := p.DeepCopy()
			moved.Labels = labels
			if err := r.ensureGroups(ctx, *rec, moved); err != nil {
				return err
			}
		}
		annotations := maps.Clone(p.Annotations)
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[annName] = rec.spec.Name
		patch, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": p.UID},
			{"op": "replace", "path": "/metadata/labels", "value": labels},
			{"op": "replace", "path": "/metadata/annotations", "value": annotations},
		})
		if p, err = pods.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("kubernetes: take the pod of %s: %w", rec.spec.Name, err)
		}
	} else if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: read the pod of %s: %w", rec.spec.Name, err)
	}
	if err == nil {
		if err := r.notePodPrint(ctx, rec.cm, p); err != nil {
			return err
		}
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": rec.cm.UID},
		{"op": "remove", "path": "/metadata/annotations/" + jsonPointer(annAdopting)},
	})
	updated, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Patch(ctx, rec.cm.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsInvalid(err) {
		return fmt.Errorf("kubernetes: mark %s taken: %w", rec.spec.Name, err)
	}
	if err == nil {
		rec.cm = updated
	}
	return nil
}

// settleAdoption decides a record a dead server's adoption left: its
// Sandbox adopted, the adoption is finished; not (and the mark older than
// adoptGrace), the record is removed and the name is free. A younger one
// is in use.
func (r *Runtime) settleAdoption(ctx context.Context, rec record) (record, error) {
	if r.dyn == nil {
		// In pod mode no Sandbox is in reach: neither finished nor
		// given up here.
		return rec, fmt.Errorf("container %s: being made from a warm pool's Sandbox: read it from a server started with --kube-sandbox-crd: %w",
			rec.spec.Name, sandbox.ErrUnsupported)
	}
	uid := types.UID(rec.cm.Annotations[annAdopting])
	sb, err := r.getSandbox(ctx, podNameOf(rec.cm))
	if err != nil {
		return rec, err
	}
	if sb != nil && sb.UID == uid && ownedBy(sb, rec.cm.UID) {
		err := r.finishAdoption(ctx, &rec)
		return rec, err
	}
	if time.Since(rec.cm.CreationTimestamp.Time) < adoptGrace {
		return rec, fmt.Errorf("container %s: being made from a warm pool's Sandbox: %w", rec.spec.Name, sandbox.ErrInUse)
	}
	if sb != nil && sb.UID == uid {
		// A fence before the record goes: a change of the Sandbox while
		// it is still not the record's, so that an adopter whose patch
		// is late (it holds only while the Sandbox is as it read it)
		// fails, rather than make the Sandbox a deleted record's.
		patch, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": sb.UID},
			{"op": "test", "path": "/metadata/ownerReferences", "value": sb.OwnerReferences},
			{"op": "add", "path": "/metadata/annotations/" + jsonPointer(annAdoptionRefused), "value": string(rec.cm.UID)},
		})
		if _, err := r.sandboxes().Patch(ctx, sb.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			if now, gerr := r.getSandbox(ctx, sb.Name); gerr == nil && now != nil && now.UID == uid && ownedBy(now, rec.cm.UID) {
				err := r.finishAdoption(ctx, &rec)
				return rec, err
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
				return rec, fmt.Errorf("kubernetes: refuse the unfinished adoption of %s: %w", rec.spec.Name, err)
			}
		}
	}
	cuid := rec.cm.UID
	err = r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Delete(ctx, rec.cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cuid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return rec, fmt.Errorf("kubernetes: remove the unfinished record of %s: %w", rec.spec.Name, err)
	}
	return rec, fmt.Errorf("container %s: %w", rec.spec.Name, sandbox.ErrNotFound)
}

// claimName is the claim of volume vol in record owner's pod: the one
// the record maps it to, else the volume's own object.
func claimName(owner *corev1.ConfigMap, vol string) string {
	if owner != nil {
		if s := owner.Data[recordClaims]; s != "" {
			var claims map[string]string
			if json.Unmarshal([]byte(s), &claims) == nil && claims[vol] != "" {
				return claims[vol]
			}
		}
	}
	return objectName(vol)
}

// claimOf reads the workspace claim of volume vol: its own object, else
// the adopted claim that answers for it (labelVolume). A claim of neither
// is NotFound.
func (r *Runtime) claimOf(ctx context.Context, vol string) (*corev1.PersistentVolumeClaim, error) {
	pvcs := r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace)
	c, err := pvcs.Get(ctx, objectName(vol), metav1.GetOptions{})
	if !apierrors.IsNotFound(err) || !pooledVolume.MatchString(vol) {
		// Only a workspace made in a pool is another claim than its own
		// object: a new name's first command (its workspace not made
		// yet) makes no List.
		return c, err
	}
	list, lerr := pvcs.List(ctx, metav1.ListOptions{LabelSelector: labelVolume + "=" + objectName(vol)})
	if lerr != nil {
		return nil, lerr
	}
	var found *corev1.PersistentVolumeClaim
	for i := range list.Items {
		c := &list.Items[i]
		if c.Annotations[annName] != vol || c.Labels[labelManaged] != managedBy || !adoptedClaimName.MatchString(c.Name) {
			continue
		}
		if found != nil {
			// Two answer for one workspace: one was planted. Neither is
			// taken for it.
			return nil, fmt.Errorf("kubernetes: claims %s and %s both say they are the workspace %s: %w", found.Name, c.Name, vol, sandbox.ErrInUse)
		}
		found = c
	}
	if found != nil {
		return found, nil
	}
	return nil, err
}

// pooledVolume is the form of a pooled spare's workspace name (a
// spare's volume, its ID pooledID's sixteen hex digits), which stays the
// workspace's through renames.
var pooledVolume = regexp.MustCompile(`-ws_spare_[0-9a-f]{16}$`)

// adoptedClaimName is the name agent-sandbox's controller gives the claim
// of a pool Sandbox of ours: the template's volume, the Sandbox's name.
var adoptedClaimName = regexp.MustCompile(`^v[0-9]+-sandbox-mcp-pool-[0-9a-f]{12}-[a-z0-9]{5}$`)

var _ sandbox.PoolKeeper = (*Runtime)(nil)

// detachClaims makes the workspace claims Sandbox sb's controller made and
// an adoption made a sandbox's (labelVolume) owned by no one, so that
// the Sandbox's deletion leaves them: a workspace outlives its container
// (a reset, a restore), and goes with its sandbox's destroy.
func (r *Runtime) detachClaims(ctx context.Context, sb *sandboxObject) error {
	pvcs := r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace)
	list, err := pvcs.List(ctx, metav1.ListOptions{LabelSelector: labelVolume})
	if err != nil {
		return fmt.Errorf("kubernetes: list the claims of Sandbox %s: %w", sb.Name, err)
	}
	for i := range list.Items {
		c := &list.Items[i]
		if !ownedBy(c, sb.UID) || c.Labels[labelManaged] != managedBy {
			continue
		}
		var keep []metav1.OwnerReference
		for _, ref := range c.OwnerReferences {
			if ref.UID != sb.UID {
				keep = append(keep, ref)
			}
		}
		patch, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": c.UID},
			{"op": "replace", "path": "/metadata/ownerReferences", "value": append([]metav1.OwnerReference{}, keep...)},
		})
		if _, err := pvcs.Patch(ctx, c.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("kubernetes: detach claim %s from Sandbox %s: %w", c.Name, sb.Name, err)
		}
	}
	return nil
}

// adoptedClaims maps each volume spec mounts whose claim is an adopted
// one (claimOf) to that claim, for a new record of spec (recordClaims):
// a sandbox booted again on a workspace that began in a pool.
func (r *Runtime) adoptedClaims(ctx context.Context, spec sandbox.RunSpec) (map[string]string, error) {
	claims := map[string]string{}
	for _, m := range spec.Mounts {
		if m.Volume == "" {
			continue
		}
		c, err := r.claimOf(ctx, m.Volume)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kubernetes: read the claim of %s: %w", m.Volume, err)
		}
		if c.Name != objectName(m.Volume) {
			claims[m.Volume] = c.Name
		}
	}
	return claims, nil
}
