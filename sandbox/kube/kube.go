// Package kube runs sandboxes as pods of a Kubernetes cluster, through
// client-go (no kubectl): a sandbox is a record (a ConfigMap holding what
// it was created with) and, while it runs, a pod made from it; a
// workspace is a PersistentVolumeClaim. Stopping deletes the pod and keeps
// the record and the claim; starting makes the pod again.
//
// Pods get no service account token, no service links, no privilege
// escalation, the runtime's default seccomp profile and a trimmed set of
// capabilities; requests and limits come from the sandbox's profile.
//
// Processes in a pod run over the apiserver's exec stream (exec.go), so
// a sandbox's persistent shell is one long stream.
package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/go-logr/logr"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Options configure the runtime.
type Options struct {
	// Namespace holds every object the runtime makes.
	Namespace string
	// RuntimeClass, when set, is the pods' runtimeClassName (gvisor,
	// kata, ...).
	RuntimeClass string
	// StorageClass is the workspace claims' class ("": the cluster's
	// default); VolumeSize their size (default DefaultVolumeSize).
	StorageClass string
	VolumeSize   string
	// StartTimeout bounds the wait for a new pod to run (default
	// DefaultStartTimeout): an image that cannot be pulled, a pod that
	// cannot be scheduled.
	StartTimeout time.Duration
	// SandboxCRD has agent-sandbox's controller make each sandbox's pod
	// from a Sandbox resource the runtime writes (crd.go), instead of the
	// runtime making the pod.
	SandboxCRD bool
	// WarmPools, in sandbox mode, has the spares kept by agent-sandbox's
	// SandboxWarmPools (warmpool.go).
	WarmPools bool
	// SnapshotClass, when set, is the VolumeSnapshotClass a clone's
	// workspace is copied with: a VolumeSnapshot of the source's claim and
	// a claim made from it, by the claims' CSI driver (volsnap.go).
	SnapshotClass string
}

// Defaults.
const (
	DefaultVolumeSize   = "10Gi"
	DefaultStartTimeout = 5 * time.Minute
)

// Object labels and annotations.
const (
	// labelManaged marks every object the runtime makes.
	labelManaged = "app.kubernetes.io/managed-by"
	managedBy    = "sandbox-mcp"
	// annName keeps the container or volume name the object stands for
	// (object names are DNS labels; ours may hold '_').
	annName = "sandbox-mcp.io/name"
	// labelRecord names, on a pod, the record it was made from.
	labelRecord = "sandbox-mcp.io/record"
	// annPodsFrom, on a record, is sandboxKind where its pod is made by
	// agent-sandbox's controller from a Sandbox the record owns (a
	// server in sandbox mode made or started it): a server in pod mode
	// neither starts, stops nor renames such a sandbox, running or not.
	annPodsFrom = "sandbox-mcp.io/pods-from"
	// recordSpec and recordLabels are the record's data keys.
	recordSpec   = "spec.json"
	recordLabels = "labels.json"
	// labelNetwork=networkNone marks a pod kept off the network, which
	// the policy isolatePolicy selects.
	labelNetwork  = "sandbox-mcp.io/network"
	networkNone   = "none"
	isolatePolicy = "sandbox-mcp-no-network"
	// containerName is the sandbox's container in its pod.
	containerName = "sandbox"
)

// PodNetwork is the name a sandbox's attachment to the cluster's pod
// network goes by in a Container's Networks.
const PodNetwork = "pod network"

// Runtime is the Kubernetes runtime.
type Runtime struct {
	cs  kubernetes.Interface
	cfg *rest.Config
	opt Options
	// volumeSize is opt.VolumeSize, read.
	volumeSize resource.Quantity
	// ids maps the IDs given out (record UIDs) to their object names.
	ids sync.Map
	// dyn reaches the Sandbox resource; nil unless opt.SandboxCRD.
	dyn dynamic.Interface
	// snapDyn reaches VolumeSnapshots: those made under a snapshot class
	// are restored and removed by a server started without one.
	snapDyn dynamic.Interface
	// scopeUID is the identity Scope read, once it could; scopeFailed
	// when its last read failed.
	scopeMu     sync.Mutex
	scopeUID    string
	scopeFailed time.Time
	// pools are the warm pools this process keeps (KeepPools), by name:
	// the only ones it claims from, whose spec it takes from here, never
	// from the cluster, and the only ones it deletes (warmpool.go).
	poolsMu sync.Mutex
	pools   map[string]keptPool
}

// New returns the runtime for the cluster cfg reaches.
func New(cfg *rest.Config, opt Options) (*Runtime, error) {
	if opt.Namespace == "" {
		return nil, errors.New("kubernetes: no namespace")
	}
	if errs := validation.IsDNS1123Label(opt.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("kubernetes: namespace %q: %s", opt.Namespace, strings.Join(errs, "; "))
	}
	if opt.VolumeSize == "" {
		opt.VolumeSize = DefaultVolumeSize
	}
	// Read as the engines read sizes (20G is 20 GiB), not as a quantity
	// (where 512m is half a byte).
	size, err := memoryQuantity(opt.VolumeSize)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: volume size: %w", err)
	}
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = DefaultStartTimeout
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	r := &Runtime{cs: cs, cfg: cfg, opt: opt, volumeSize: size}
	if opt.SandboxCRD {
		if r.dyn, err = dynamic.NewForConfig(cfg); err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
	}
	if opt.SnapshotClass != "" {
		if errs := validation.IsDNS1123Subdomain(opt.SnapshotClass); len(errs) > 0 {
			return nil, fmt.Errorf("kubernetes: snapshot class %q: %s", opt.SnapshotClass, strings.Join(errs, "; "))
		}
	}
	if r.snapDyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	return r, nil
}

// RouteClientLogs sends client-go's own messages (a stream's copy that
// ended with its connection, say), which it writes to stderr otherwise,
// to logger at debug level; a nil logger drops them. Call it once, at
// the start, before anything logs.
func RouteClientLogs(logger *slog.Logger) {
	if logger == nil {
		klog.SetLogger(logr.Discard())
		return
	}
	klog.SetSlogLogger(slog.New(debugOnly{logger.Handler()}))
}

// debugOnly hands every record on at debug level.
type debugOnly struct{ slog.Handler }

func (h debugOnly) Enabled(ctx context.Context, _ slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug)
}

func (h debugOnly) Handle(ctx context.Context, r slog.Record) error {
	if streamTeardown[r.Message] {
		return nil
	}
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}

// streamTeardown are client-go's messages for the copies of an exec
// stream that end with it (a stream killed, a process that ended while
// its input was open): every stream's end, not news.
var streamTeardown = map[string]bool{
	"Copying stdin failed": true, "Copying stdout failed": true, "Copying stderr failed": true,
	"Waiting for server to close stdin failed": true, "Websocket Ping failed": true,
}

func (h debugOnly) WithAttrs(as []slog.Attr) slog.Handler { return debugOnly{h.Handler.WithAttrs(as)} }
func (h debugOnly) WithGroup(name string) slog.Handler    { return debugOnly{h.Handler.WithGroup(name)} }

// Kind is "kubernetes".
func (r *Runtime) Kind() string { return "kubernetes" }

// Binary is empty: the runtime runs no CLI.
func (r *Runtime) Binary() string { return "" }

// Ping checks that the apiserver answers and the namespace can be read,
// and in sandbox mode that the cluster has the Sandbox resource.
func (r *Runtime) Ping(ctx context.Context) error {
	if _, err := r.cs.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("%w: the Kubernetes API server does not answer: %v", sandbox.ErrEngineNotStarted, err)
	}
	if _, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("kubernetes: namespace %s: %w (see deploy/kubernetes/rbac.yaml for the rights the server needs)", r.opt.Namespace, err)
	}
	if r.dyn != nil {
		_, err := r.sandboxes().List(ctx, metav1.ListOptions{Limit: 1})
		switch {
		case apierrors.IsNotFound(err):
			return r.noSandboxResource(err)
		case err != nil:
			return fmt.Errorf("kubernetes: Sandboxes in namespace %s: %w (see deploy/kubernetes/rbac.yaml for the rights the server needs)", r.opt.Namespace, err)
		}
	}
	return nil
}

// namespaceMarker is a ConfigMap the runtime keeps in its namespace:
// its UID tells this namespace apart from one of the same name made
// again, or on another cluster, whatever address a server reaches the
// cluster at. It is not a record (no managed-by label).
const namespaceMarker = "sandbox-mcp-namespace"

// scopeRetry is how long Scope answers without the identity after a
// read of it failed, before it reads again (a listing asks once per
// snapshot).
const scopeRetry = 30 * time.Second

// Scope implements sandbox.Scoped: the namespace, and its identity (the
// UID of its namespaceMarker, made by the first server that looks). The
// identity is read until a read succeeds (at most once per scopeRetry);
// a scope without it matches only records without one
// (sandbox.engineHere).
func (r *Runtime) Scope() string {
	r.scopeMu.Lock()
	defer r.scopeMu.Unlock()
	if r.scopeUID != "" {
		return "namespace " + r.opt.Namespace + ", id " + r.scopeUID
	}
	if time.Since(r.scopeFailed) < scopeRetry {
		return "namespace " + r.opt.Namespace // a read failed just now
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	cm, err := cms.Get(ctx, namespaceMarker, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: namespaceMarker, Namespace: r.opt.Namespace,
			Labels: map[string]string{"app.kubernetes.io/part-of": managedBy},
			Annotations: map[string]string{"sandbox-mcp.io/about": "its UID tells this namespace apart in sandbox-mcp's snapshot records " +
				"(made again, it reads as another namespace; a snapshot whose VolumeSnapshot is still here stays this one's)"}}},
			metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = cms.Get(ctx, namespaceMarker, metav1.GetOptions{})
		}
	}
	if err != nil {
		r.scopeFailed = time.Now()
		return "namespace " + r.opt.Namespace
	}
	r.scopeUID = string(cm.UID)
	return "namespace " + r.opt.Namespace + ", id " + r.scopeUID
}

var _ sandbox.Scoped = (*Runtime)(nil)

// StartTimeout is how long a start may wait for a new pod to run: the
// manager bounds a boot by it (sandbox.StartBounded). In sandbox mode a
// start waits Options.StartTimeout for agent-sandbox's controller to make
// the pod, then as long for it to run.
func (r *Runtime) StartTimeout() time.Duration {
	if r.dyn != nil {
		return 2 * r.opt.StartTimeout
	}
	return r.opt.StartTimeout
}

var _ sandbox.StartBounded = (*Runtime)(nil)

// Version is the apiserver's version.
func (r *Runtime) Version(ctx context.Context) (string, error) {
	v, err := r.cs.Discovery().ServerVersion()
	if err != nil {
		return "", fmt.Errorf("kubernetes: %w", err)
	}
	return v.GitVersion, nil
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9-]+`)

// objectName is the DNS label an object of name gets: a cleaned form
// of name and a hash of all of it, so that two names never share an
// object (a name that is a DNS label already is hashed too: else it could
// be another name's hashed form).
func objectName(name string) string {
	sum := sha256.Sum256([]byte(name))
	clean := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if len(clean) > 45 {
		clean = strings.TrimRight(clean[:45], "-")
	}
	if clean == "" {
		clean = "x"
	}
	return clean + "-" + hex.EncodeToString(sum[:6])
}

// madeAs reports whether o is an object the runtime made for name: it
// carries our managed-by label and name's annotation.
func madeAs(o metav1.Object, name string) bool {
	return o.GetAnnotations()[annName] == name && o.GetLabels()[labelManaged] == managedBy
}

// kubeLabels are the labels of ours that are valid Kubernetes labels
// (every one is kept in the record; these also select objects).
func kubeLabels(ls map[string]string, extra map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range ls {
		if len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0 {
			out[k] = v
		}
	}
	for k, v := range extra {
		out[k] = v
	}
	out[labelManaged] = managedBy
	return out
}

// record is what a sandbox was created with.
type record struct {
	cm     *corev1.ConfigMap
	spec   sandbox.RunSpec
	labels map[string]string
	// podOwner, in sandbox mode, is the UID of the Sandbox the record
	// owns, which owns its pod; empty in pod mode, where the record
	// owns the pod itself. suspended: that Sandbox is suspended (its
	// controller deletes its pod).
	podOwner  types.UID
	suspended bool
}

// record reads the record of the sandbox ref names: a container name, or
// the ID the runtime gave it (its record's UID), which never reaches a
// later sandbox of the same name.
func (r *Runtime) record(ctx context.Context, ref string) (record, error) {
	if uidPattern.MatchString(ref) {
		rec, err := r.recordByID(ctx, ref)
		if !errors.Is(err, sandbox.ErrNotFound) {
			return rec, err
		}
		// No record has that UID: a container name of that form, or
		// one gone. By name, an object named so is that name's.
	}
	name := ref
	cm, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Get(ctx, objectName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return record{}, fmt.Errorf("container %s: %w", name, sandbox.ErrNotFound)
	}
	if err != nil {
		return record{}, fmt.Errorf("kubernetes: read the record of %s: %w", name, err)
	}
	rec, err := parseRecord(cm, name)
	if err != nil {
		return rec, err
	}
	if rec, err = r.settle(ctx, rec); err != nil {
		return rec, err
	}
	return r.withSandbox(ctx, rec)
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// uidPattern is an object UID; a container name never has this form.
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// recordByID reads the record whose UID is id: by the object name last
// seen for it, else by a look through every record.
func (r *Runtime) recordByID(ctx context.Context, id string) (record, error) {
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	if v, ok := r.ids.Load(id); ok {
		cm, err := cms.Get(ctx, v.(string), metav1.GetOptions{})
		if err == nil && idOf(cm) == id {
			if rec, err := r.parseWithSandbox(ctx, cm); !errors.Is(err, sandbox.ErrNotFound) {
				return rec, err
			}
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return record{}, fmt.Errorf("kubernetes: read the record of %s: %w", id, err)
		}
		r.ids.Delete(id)
	}
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
	if err != nil {
		return record{}, fmt.Errorf("kubernetes: list records: %w", err)
	}
	// A rename cut short leaves two records of one ID: the new one is
	// the sandbox's when settle finds it so, else the old one.
	var found []*corev1.ConfigMap
	for i := range list.Items {
		if cm := &list.Items[i]; idOf(cm) == id {
			found = append(found, cm)
		}
	}
	slices.SortFunc(found, func(a, b *corev1.ConfigMap) int {
		return cmpBool(renaming(b), renaming(a)) // the new record first
	})
	for _, cm := range found {
		rec, err := r.parseWithSandbox(ctx, cm)
		if errors.Is(err, sandbox.ErrNotFound) {
			continue
		}
		if err == nil {
			r.ids.Store(id, cm.Name)
		}
		return rec, err
	}
	return record{}, fmt.Errorf("container %s: %w", id, sandbox.ErrNotFound)
}

// parseWithSandbox is parseRecord, then settle and withSandbox.
func (r *Runtime) parseWithSandbox(ctx context.Context, cm *corev1.ConfigMap) (record, error) {
	rec, err := parseRecord(cm, "")
	if err != nil {
		return rec, err
	}
	if rec, err = r.settle(ctx, rec); err != nil {
		return rec, err
	}
	return r.withSandbox(ctx, rec)
}

func parseRecord(cm *corev1.ConfigMap, name string) (record, error) {
	rec := record{cm: cm}
	if cm.Labels[labelManaged] != managedBy || (name != "" && cm.Annotations[annName] != name) {
		return rec, fmt.Errorf("container %s: %w (configmap %s is not its record)", name, sandbox.ErrNotFound, cm.Name)
	}
	if err := json.Unmarshal([]byte(cm.Data[recordSpec]), &rec.spec); err != nil {
		return rec, fmt.Errorf("kubernetes: the record of %s: %w", cm.Annotations[annName], err)
	}
	if err := json.Unmarshal([]byte(cm.Data[recordLabels]), &rec.labels); err != nil {
		return rec, fmt.Errorf("kubernetes: the labels of %s: %w", cm.Annotations[annName], err)
	}
	return rec, nil
}

// Run records the sandbox, makes its pod and waits for it to run.
func (r *Runtime) Run(ctx context.Context, spec sandbox.RunSpec) (string, error) {
	if _, err := r.podFor(spec, nil); err != nil {
		return "", err // refused before anything is made
	}
	specJSON, _ := json.Marshal(spec)
	labelsJSON, _ := json.Marshal(spec.Labels)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(spec.Name), Namespace: r.opt.Namespace,
			Labels: kubeLabels(spec.Labels, nil), Annotations: map[string]string{annName: spec.Name}},
		Data: map[string]string{recordSpec: string(specJSON), recordLabels: string(labelsJSON)},
	}
	if r.dyn != nil {
		cm.Annotations[annPodsFrom] = sandboxKind
	}
	// A workspace that began in a warm pool is its claim's (warmpool.go).
	claims, err := r.adoptedClaims(ctx, spec)
	if err != nil {
		return "", err
	}
	if len(claims) > 0 {
		b, _ := json.Marshal(claims)
		cm.Data[recordClaims] = string(b)
	}
	// A child is owned by its parent's record (family.go).
	var parent *corev1.ConfigMap
	if p := spec.Labels[sandbox.LabelChildOf]; p != "" {
		var err error
		if parent, err = r.parentRecord(ctx, spec.Labels[sandbox.LabelOwner], p); err != nil {
			return "", err
		}
		cm.OwnerReferences = []metav1.OwnerReference{recordOwner(parent)}
	}
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	made, err := r.createRecord(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("container %s: %w", spec.Name, sandbox.ErrAlreadyExists)
	}
	if err != nil {
		return "", fmt.Errorf("kubernetes: record %s: %w", spec.Name, err)
	}
	err = r.ownClaims(ctx, spec, parent)
	if err == nil {
		_, err = r.startPod(ctx, record{cm: made, spec: spec, labels: spec.Labels})
	}
	if err != nil {
		// Nothing half made is kept: the pod (if this call made it) and
		// the record go.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		half := record{cm: made, spec: spec}
		if r.dyn != nil {
			half, _ = r.withSandbox(dctx, half)
			_ = r.deleteSandbox(dctx, half)
		}
		_ = r.deleteOwnedPod(dctx, half, time.Second)
		uid := made.UID
		_ = cms.Delete(dctx, made.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		return "", err
	}
	r.ids.Store(idOf(made), made.Name)
	return idOf(made), nil
}

// podFor is the pod of spec; owner, when set, is its record.
func (r *Runtime) podFor(spec sandbox.RunSpec, owner *corev1.ConfigMap) (*corev1.Pod, error) {
	if spec.Image == "" {
		return nil, errors.New("kubernetes: no image")
	}
	c := corev1.Container{Name: containerName, Image: spec.Image, Command: spec.Command, WorkingDir: spec.Workdir,
		ImagePullPolicy: corev1.PullIfNotPresent}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
	}
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	if spec.CPUs > 0 {
		// The profile's CPUs bound the sandbox, as on the engines; it asks
		// the scheduler for a tenth of them (at least cpuRequestFloor):
		// a sandbox idles most of its life, and a node that had to hold
		// every sandbox's whole bound would take few of them.
		milli := int64(spec.CPUs * 1000)
		res.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
		res.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(min(milli, max(milli/cpuRequestShare, cpuRequestFloor)), resource.DecimalSI)
	}
	if spec.Memory != "" {
		q, err := memoryQuantity(spec.Memory)
		if err != nil {
			return nil, err
		}
		res.Limits[corev1.ResourceMemory], res.Requests[corev1.ResourceMemory] = q, q
	}
	if spec.StorageSize != "" {
		q, err := memoryQuantity(spec.StorageSize)
		if err != nil {
			return nil, err
		}
		res.Limits[corev1.ResourceEphemeralStorage] = q
	}
	c.Resources = res
	no := false
	c.SecurityContext = &corev1.SecurityContext{
		Privileged: &no, AllowPrivilegeEscalation: &no,
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: sandboxCaps},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	var vols []corev1.Volume
	for i, m := range spec.Mounts {
		if m.Volume == "" {
			return nil, fmt.Errorf("%w: a host directory (%s) cannot be mounted into a pod: use a volume", sandbox.ErrUnsupported, m.Source)
		}
		vn := "v" + strconv.Itoa(i)
		vols = append(vols, corev1.Volume{Name: vn, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(owner, m.Volume), ReadOnly: m.ReadOnly}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vn, MountPath: m.Target, ReadOnly: m.ReadOnly})
	}
	if spec.Virtualization {
		return nil, fmt.Errorf("%w: nested virtualization in a pod", sandbox.ErrUnsupported)
	}
	// The pod's name is its record's (podNameOf): a renamed sandbox's
	// pod keeps the name it was made with.
	podName, name, recName := objectName(spec.Name), spec.Name, objectName(spec.Name)
	if owner != nil {
		podName, name, recName = podNameOf(owner), owner.Annotations[annName], owner.Name
	}
	extra := groupLabels(groupsOf(spec)) // peers.go
	extra[labelRecord] = recName
	switch spec.Network {
	case "":
	case "none":
		// Off the network: the isolating NetworkPolicy selects it.
		extra[labelNetwork] = networkNone
	default:
		return nil, fmt.Errorf("%w: network %q for a pod", sandbox.ErrUnsupported, spec.Network)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: r.opt.Namespace,
			Labels:      kubeLabels(spec.Labels, extra),
			Annotations: map[string]string{annName: name}},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{c},
			Volumes:                       vols,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			ShareProcessNamespace:         &no,
			HostNetwork:                   false,
			TerminationGracePeriodSeconds: ptr(int64(10)),
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		},
	}
	if r.opt.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = &r.opt.RuntimeClass
	}
	if owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
	}
	return pod, nil
}

// A sandbox's CPU request is its bound divided by cpuRequestShare, and
// no less than cpuRequestFloor millicores (nor more than the bound).
// Memory, which cannot be taken back once given, is requested whole.
const (
	cpuRequestShare = 10
	cpuRequestFloor = 50
)

// sandboxCaps are the capabilities a sandbox keeps: what a root user
// installing packages and running servers needs, no more.
var sandboxCaps = []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT"}

func ptr[T any](v T) *T { return &v }

// memoryQuantity reads a size as the engines take it ("512M", "2g",
// "1Gi") into a quantity.
func memoryQuantity(s string) (resource.Quantity, error) {
	t := strings.TrimSpace(s)
	if n := len(t); n > 1 && (t[n-1] == 'b' || t[n-1] == 'B') && t[n-2] != 'i' {
		t = t[:n-1] // "512mb", "2GB", "100b"
	}
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			t = t[:n-1] + "Ki"
		case 'm', 'M':
			t = t[:n-1] + "Mi"
		case 'g', 'G':
			t = t[:n-1] + "Gi"
		case 't', 'T':
			t = t[:n-1] + "Ti"
		}
	}
	q, err := resource.ParseQuantity(t)
	if err != nil || q.Sign() <= 0 {
		return resource.Quantity{}, fmt.Errorf("kubernetes: size %q: not a size like 512M or 2G", s)
	}
	return q, nil
}

// startPod makes rec's pod and waits for it to run.
func (r *Runtime) startPod(ctx context.Context, rec record) (*corev1.Pod, error) {
	pod, err := r.podFor(rec.spec, rec.cm)
	if err != nil {
		return nil, err
	}
	if pod.Labels[labelNetwork] == networkNone {
		if err := r.ensureIsolation(ctx, pod); err != nil {
			return nil, err
		}
	} else if err := r.ensureGroups(ctx, rec, pod); err != nil {
		return nil, err
	}
	if r.dyn != nil {
		return r.startThroughSandbox(ctx, rec, pod)
	}
	pods := r.cs.CoreV1().Pods(r.opt.Namespace)
	made, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A sandbox renamed away (a reset's old one) took its pod, and so
		// the name, with it: this record's pod gets a name of its own.
		if pod, err = r.podNameTaken(ctx, rec, pod); err != nil {
			return nil, err
		}
		made, err = pods.Create(ctx, pod, metav1.CreateOptions{})
	}
	if apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("container %s: a pod named %s is there already and is not one this record made: %w", rec.spec.Name, pod.Name, sandbox.ErrInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: create the pod of %s: %w", rec.spec.Name, err)
	}
	if err := r.stillThere(ctx, rec, made); err != nil {
		return nil, err
	}
	return r.waitRunning(ctx, made)
}

// stillThere reads rec's record again once its pod p is made: a removal
// or a rename on another server may have committed since it was read,
// and looked for the pod (or the Sandbox) before it was there. A removal
// marks the record before it looks for the pod, and a start makes the
// pod before it looks at the record, so one of the two sees the other.
// Removed or being removed: the pod is deleted (in sandbox mode its
// Sandbox first) and the start fails. A rename committed: the start
// finishes it, handing the pod (or Sandbox) on with the sandbox (as if
// it had started before the rename), and goes on.
func (r *Runtime) stillThere(ctx context.Context, rec record, p *corev1.Pod) error {
	now, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).Get(ctx, rec.cm.Name, metav1.GetOptions{})
	var why string
	switch {
	case apierrors.IsNotFound(err) || (err == nil && now.UID != rec.cm.UID):
		why = "removed (or renamed)"
	case err != nil:
		return nil // unknown: the start goes on, as it would have
	case removing(now):
		why = "being removed"
	case renamedAway(now):
		moved := rec
		moved.cm = now
		if _, serr := r.settle(ctx, moved); serr != nil && !errors.Is(serr, sandbox.ErrNotFound) {
			return serr
		}
		return nil
	default:
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	if handed, herr := r.handedOn(dctx, rec, p); herr != nil || handed {
		// Renamed, and its record gone since: the Sandbox and its pod
		// are the new record's now.
		if herr != nil {
			return fmt.Errorf("container %s: %s while it started: %w", rec.spec.Name, why, herr)
		}
		return fmt.Errorf("container %s: renamed while it started: %w", rec.spec.Name, sandbox.ErrInUse)
	}
	if r.dyn != nil {
		if derr := r.deleteSandbox(dctx, rec); derr != nil {
			return fmt.Errorf("container %s: %s while it started, and its new Sandbox could not be deleted: %w", rec.spec.Name, why, derr)
		}
	}
	if derr := r.deletePod(dctx, p, time.Second); derr != nil {
		return fmt.Errorf("container %s: %s while it started, and its new pod could not be deleted: %w", rec.spec.Name, why, derr)
	}
	return fmt.Errorf("container %s: %s while it started: %w", rec.spec.Name, why, sandbox.ErrInUse)
}

// ensureIsolation makes, unless it is there, the NetworkPolicy that
// denies every connection to and from the pods marked networkNone (with
// no rule, neither ingress nor egress lets anything through), and checks,
// at every start of such a pod, that no policy selecting it lets traffic
// through: policies add up, so one allowing anything would undo ours.
// It holds where the cluster's network plugin enforces NetworkPolicy.
func (r *Runtime) ensureIsolation(ctx context.Context, pod *corev1.Pod) error {
	nps := r.cs.NetworkingV1().NetworkPolicies(r.opt.Namespace)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: isolatePolicy, Namespace: r.opt.Namespace, Labels: map[string]string{labelManaged: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelNetwork: networkNone}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	list, err := nps.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes: list NetworkPolicies: %w", err)
	}
	present, ours := false, false
	for i := range list.Items {
		p := &list.Items[i]
		if p.Name == isolatePolicy {
			present = true
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		if p.Name == isolatePolicy {
			ours = isolates(p)
		}
		if lets(p) {
			return fmt.Errorf("kubernetes: NetworkPolicy %s in %s lets traffic to or from sandboxes without network: delete it (sandbox-mcp makes %s again) or keep it off pods labelled %s=%s",
				p.Name, r.opt.Namespace, isolatePolicy, labelNetwork, networkNone)
		}
	}
	if !present {
		// Made once, on first use; one another server made meanwhile is
		// read and checked as any other.
		made, err := nps.Create(ctx, np, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			made, err = nps.Get(ctx, isolatePolicy, metav1.GetOptions{})
		}
		if err != nil {
			return fmt.Errorf("kubernetes: the NetworkPolicy that keeps sandboxes off the network: %w", err)
		}
		ours = isolates(made)
	}
	if !ours {
		return fmt.Errorf("kubernetes: NetworkPolicy %s in %s does not isolate the pods labelled %s=%s: delete it and sandbox-mcp makes it again",
			isolatePolicy, r.opt.Namespace, labelNetwork, networkNone)
	}
	return nil
}

// isolates reports whether np selects the pods marked networkNone and
// denies everything to and from them.
func isolates(np *networkingv1.NetworkPolicy) bool {
	sel := np.Spec.PodSelector
	return len(sel.MatchExpressions) == 0 && len(sel.MatchLabels) <= 1 && (len(sel.MatchLabels) == 0 || sel.MatchLabels[labelNetwork] == networkNone) &&
		slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) &&
		!lets(np)
}

// lets reports whether np lets some traffic through for the pods it
// selects: a rule of a direction it governs. (Ingress is governed with or
// without PolicyTypes; egress when listed, or when it has rules.)
func lets(np *networkingv1.NetworkPolicy) bool {
	return len(np.Spec.Ingress) > 0 || len(np.Spec.Egress) > 0
}

// waitRunning waits for pod to run, or to fail, within StartTimeout.
func (r *Runtime) waitRunning(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	parent, began := ctx, time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.opt.StartTimeout)
	defer cancel()
	pods := r.cs.CoreV1().Pods(r.opt.Namespace)
	name := pod.Annotations[annName]
	deleted := false
	for {
		if deleted {
			return nil, fmt.Errorf("kubernetes: the pod of %s was deleted while it started", name)
		}
		switch pod.Status.Phase {
		case corev1.PodRunning:
			return pod, nil
		case corev1.PodFailed, corev1.PodSucceeded:
			return nil, fmt.Errorf("kubernetes: the pod of %s ended as it started (%s): %s", pod.Annotations[annName], pod.Status.Phase, waitingReason(pod))
		}
		if hopeless(pod) {
			return nil, fmt.Errorf("kubernetes: the pod of %s cannot start: %s", pod.Annotations[annName], waitingReason(pod))
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion})
		if err != nil {
			if waitEnding(ctx) {
				return nil, r.ended(parent, pod, began)
			}
			return nil, fmt.Errorf("kubernetes: watch the pod of %s: %w", name, err)
		}
		changed := false
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.UID != pod.UID {
				if ev.Type == watch.Error {
					break // e.g. an expired version: read the pod again
				}
				continue
			}
			pod, changed = p, true
			if ev.Type == watch.Deleted {
				deleted = true
				break
			}
			if p.Status.Phase != corev1.PodPending || hopeless(p) {
				break
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil, r.ended(parent, pod, began)
		}
		if !changed && !deleted {
			// The watch ended with no news (a timeout of the server's, an
			// expired version): read the pod again, a moment later, and
			// watch on.
			select {
			case <-ctx.Done():
				return nil, r.ended(parent, pod, began)
			case <-time.After(100 * time.Millisecond):
			}
			p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID) {
				deleted = true
				continue
			}
			if err != nil {
				if waitEnding(ctx) {
					return nil, r.ended(parent, pod, began)
				}
				return nil, fmt.Errorf("kubernetes: read the pod of %s: %w", name, err)
			}
			pod = p
		}
	}
}

// ended is the error of a wait for pod, begun at began, that ran out:
// the caller's context (said with where the pod stood then), or the start
// timeout.
func (r *Runtime) ended(parent context.Context, pod *corev1.Pod, began time.Time) error {
	if err := context.Cause(parent); err != nil {
		return fmt.Errorf("kubernetes: the pod of %s was not running in the %s the call waited for it (%s: %s): %w",
			pod.Annotations[annName], time.Since(began).Round(100*time.Millisecond), phaseOf(pod), waitingReason(pod), err)
	}
	return r.notRunning(pod)
}

// phaseOf is pod's phase, Pending until one is reported.
func phaseOf(pod *corev1.Pod) corev1.PodPhase {
	if pod.Status.Phase == "" {
		return corev1.PodPending
	}
	return pod.Status.Phase
}

func (r *Runtime) notRunning(pod *corev1.Pod) error {
	return fmt.Errorf("kubernetes: the pod of %s is not running after %s (%s): %s", pod.Annotations[annName], r.opt.StartTimeout, phaseOf(pod), waitingReason(pod))
}

// hopeless reports whether pod's container waits for what will not come
// by waiting: an image pull that already failed and backs off, an image
// name that is not one, a configuration the node cannot make.
func hopeless(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError":
				return true
			}
		}
	}
	return false
}

// waitingReason says why pod does not run, as its status tells.
func waitingReason(pod *corev1.Pod) string {
	var why []string
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		// The node's word on the pod as a whole: a rejection at
		// admission (OutOfcpu, OutOfmemory), an eviction.
		why = append(why, strings.TrimPrefix(strings.TrimSpace(pod.Status.Reason+": "+pod.Status.Message), ": "))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			why = append(why, strings.TrimSpace(w.Reason+" "+w.Message))
		}
		if t := cs.State.Terminated; t != nil {
			why = append(why, fmt.Sprintf("exited %d: %s %s", t.ExitCode, t.Reason, t.Message))
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			why = append(why, c.Message)
		}
	}
	if len(why) == 0 {
		return "no kubelet has reported on it"
	}
	return strings.Join(why, "; ")
}

// Start makes the pod of a stopped sandbox again.
func (r *Runtime) Start(ctx context.Context, name string) error {
	rec, err := r.record(ctx, name)
	if err != nil {
		return err
	}
	if removing(rec.cm) {
		// Its pod would be the record's, which the removal deletes.
		return fmt.Errorf("start %s: its removal began at %s (destroy it again to finish it): %w", name, rec.cm.Annotations[annRemoving], sandbox.ErrInUse)
	}
	if err := r.refuseSandboxMode(ctx, rec.cm, "start it"); err != nil {
		return err
	}
	if startStep != nil {
		startStep("read")
	}
	p, err := r.ownedPod(ctx, rec)
	if err != nil {
		return err
	}
	if p != nil {
		live := p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending)
		if live && !rec.suspended {
			_, err = r.waitRunning(ctx, p)
			return err
		}
		// An ended pod, or one on its way out: made again once gone. A
		// live one whose Sandbox is suspended (a stop cut short) is kept,
		// and its Sandbox set running again before its controller
		// deletes it, unless it is not the pod the last start checked.
		if !live || printDiffers(rec, p) {
			if err := r.deleteOwnedPod(ctx, rec, time.Second); err != nil {
				return err
			}
		}
	}
	_, err = r.startPod(ctx, rec)
	return err
}

// ownedPod is the pod rec made, nil when there is none; a pod of that
// name that rec did not make is an error, and is left alone.
func (r *Runtime) ownedPod(ctx context.Context, rec record) (*corev1.Pod, error) {
	p, err := r.podNamed(ctx, rec)
	if p == nil || err != nil {
		return nil, err
	}
	if !madeBy(p, rec) {
		return nil, fmt.Errorf("kubernetes: pod %s is not one the record of %s made: left alone: %w", p.Name, rec.spec.Name, sandbox.ErrInUse)
	}
	return p, nil
}

// podNamed reads the pod of rec's name, nil when there is none; whether
// rec made it is the caller's to check (madeBy).
func (r *Runtime) podNamed(ctx context.Context, rec record) (*corev1.Pod, error) {
	p, err := r.cs.CoreV1().Pods(r.opt.Namespace).Get(ctx, podNameOf(rec.cm), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("kubernetes: read the pod of %s: %w", rec.spec.Name, err)
	}
	return p, nil
}

// madeBy reports whether pod p is one record rec made: ours by its label,
// and owned by rec's ConfigMap itself (its UID) with rec's name, or in
// sandbox mode controlled by the Sandbox that ConfigMap owns. A Sandbox's
// pod is its Sandbox's whatever its name annotation says: a rename hands
// the Sandbox on before its controller (or the rename) brings the pod's
// labels and annotations in line.
func madeBy(p *corev1.Pod, rec record) bool {
	if p.Labels[labelManaged] != managedBy {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "ConfigMap" && o.UID == rec.cm.UID {
			return p.Annotations[annName] == rec.cm.Annotations[annName]
		}
		if rec.podOwner != "" && o.Kind == sandboxKind && o.APIVersion == sandboxAPIVersion && o.UID == rec.podOwner &&
			o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// Stop deletes the sandbox's pod (with grace), keeping its record and
// workspace, and waits for it to go.
func (r *Runtime) Stop(ctx context.Context, name string, grace time.Duration) error {
	rec, err := r.record(ctx, name)
	if err != nil {
		return err
	}
	if err := r.refuseSandboxMode(ctx, rec.cm, "stop it"); err != nil {
		return err
	}
	if r.dyn != nil {
		// Suspended first: its controller would make the pod again.
		if err := r.suspendSandbox(ctx, rec); err != nil {
			return err
		}
	}
	return r.deleteOwnedPod(ctx, rec, grace)
}

// deleteOwnedPod deletes the pod rec made, if there is one, with grace
// (at least a second: a grace of 0 would drop the pod's object while its
// processes may still run on the node, on the workspace a next pod then
// mounts) and waits until that pod is gone.
func (r *Runtime) deleteOwnedPod(ctx context.Context, rec record, grace time.Duration) error {
	p, err := r.ownedPod(ctx, rec)
	if err != nil || p == nil {
		return err
	}
	if handed, err := r.handedOn(ctx, rec, p); err != nil {
		return err
	} else if handed {
		return fmt.Errorf("container %s: renamed meanwhile: %w", rec.spec.Name, sandbox.ErrInUse)
	}
	return r.deletePod(ctx, p, grace)
}

// controllingSandbox reads the Sandbox that controls p: isSandboxPod is
// false where none does (or, in pod mode, the server cannot tell), and sb
// nil where that Sandbox is gone (or another has its name now).
func (r *Runtime) controllingSandbox(ctx context.Context, p *corev1.Pod) (sb *sandboxObject, isSandboxPod bool, err error) {
	c := metav1.GetControllerOfNoCopy(p)
	if r.dyn == nil || c == nil || c.Kind != sandboxKind {
		return nil, false, nil
	}
	if sb, err = r.getSandbox(ctx, c.Name); err != nil || sb == nil || sb.UID != c.UID {
		return nil, true, err
	}
	return sb, true, nil
}

// controllingSandboxOwners is the UIDs of the owners of the Sandbox that
// controls p, nil where no Sandbox does (pod mode) and empty where that
// Sandbox is gone.
func (r *Runtime) controllingSandboxOwners(ctx context.Context, p *corev1.Pod) ([]types.UID, error) {
	sb, ok, err := r.controllingSandbox(ctx, p)
	if !ok || err != nil {
		return nil, err
	}
	out := []types.UID{}
	if sb != nil {
		for _, o := range sb.OwnerReferences {
			out = append(out, o.UID)
		}
	}
	return out, nil
}

// handedOn reports whether pod p, of rec's Sandbox as rec was read, is
// another record's now: a rename handed the Sandbox on since (sandbox
// mode; the pod's owner, the Sandbox, stays the same through a rename).
func (r *Runtime) handedOn(ctx context.Context, rec record, p *corev1.Pod) (bool, error) {
	sb, _, err := r.controllingSandbox(ctx, p)
	return sb != nil && !ownedBy(sb, rec.cm.UID), err
}

// deletePod deletes pod p (its UID, not whatever has its name) and waits
// until it is gone.
func (r *Runtime) deletePod(ctx context.Context, p *corev1.Pod, grace time.Duration) error {
	pods := r.cs.CoreV1().Pods(r.opt.Namespace)
	secs := max(int64(grace/time.Second), 1)
	uid := p.UID
	// A Sandbox's pod keeps its owner through a rename; its Sandbox's
	// owners tell whether it was handed on.
	sbOwners, err := r.controllingSandboxOwners(ctx, p)
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		// The version read, too: a rename may hand the pod on meanwhile.
		rv := p.ResourceVersion
		err = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &secs, Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if !apierrors.IsConflict(err) {
			break
		}
		// Changed (its status, most often): deleted if its owners are
		// still those read.
		now, gerr := pods.Get(ctx, p.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr) || (gerr == nil && (now.UID != uid || !sameOwners(now, p))):
			return nil // gone, or handed on: not this caller's to delete
		case gerr != nil:
			return fmt.Errorf("kubernetes: delete the pod of %s: %w", p.Annotations[annName], gerr)
		case try == 4:
			return fmt.Errorf("kubernetes: delete the pod of %s: it kept changing: %w", p.Annotations[annName], err)
		}
		if sbOwners != nil {
			if owners, err := r.controllingSandboxOwners(ctx, now); err != nil || !slices.Equal(owners, sbOwners) {
				return err // handed on with its Sandbox (or gone)
			}
		}
		p = now
	}
	if apierrors.IsNotFound(err) {
		return nil // gone already
	}
	if err != nil {
		return fmt.Errorf("kubernetes: delete the pod of %s: %w", p.Annotations[annName], err)
	}
	bound := time.Duration(secs)*time.Second + 2*time.Minute
	deadline := time.Now().Add(bound)
	for {
		got, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && got.UID != uid) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubernetes: the pod of %s is still there %s after its deletion", p.Annotations[annName], bound)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sameOwners reports whether a and b name the same owners.
func sameOwners(a, b *corev1.Pod) bool {
	return slices.EqualFunc(a.OwnerReferences, b.OwnerReferences, func(x, y metav1.OwnerReference) bool { return x.UID == y.UID })
}

// Remove deletes the sandbox's pod (with a second's grace) and its
// record.
func (r *Runtime) Remove(ctx context.Context, name string) error {
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	rec, err := r.record(ctx, name)
	if err != nil {
		// No record: a pod made by an older record's start may be left.
		if errors.Is(err, sandbox.ErrNotFound) {
			if perr := r.removeStrayPod(ctx, name); perr != nil {
				return perr
			}
		}
		return err
	}
	if removeStep != nil && removeStep("read") {
		return nil
	}
	if err := r.markRemoving(ctx, rec.cm, name); err != nil {
		return err
	}
	if removeStep != nil && removeStep("mark") {
		return nil
	}
	// Committed: the rest is done even when the caller's context ends,
	// so that a cancelled call does not leave the sandbox marked.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	if r.dyn != nil {
		// Suspended first, so that its controller does not make the pod
		// again; the Sandbox goes once its pod did (while it is there,
		// the pod is known for the record's by its owner).
		if err := r.suspendSandbox(ctx, rec); err != nil {
			return err
		}
	}
	if err := r.deleteOwnedPod(ctx, rec, time.Second); err != nil {
		return err
	}
	if r.dyn != nil {
		if err := r.deleteSandbox(ctx, rec); err != nil {
			return err
		}
	}
	// Against the version read: a rename committed meanwhile has the
	// sandbox under its new name, which this removal does not take.
	uid, rv := rec.cm.UID, rec.cm.ResourceVersion
	err = cms.Delete(ctx, rec.cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if apierrors.IsConflict(err) {
		// Changed meanwhile: renamed (then not found here), or touched
		// otherwise (then deleted as it is now).
		now, rerr := r.record(ctx, name)
		if rerr != nil {
			return rerr
		}
		if now.cm.UID != uid || renaming(now.cm) || renamedAway(now.cm) {
			return fmt.Errorf("container %s: changed while it was removed: %w", name, sandbox.ErrInUse)
		}
		rv = now.cm.ResourceVersion
		err = cms.Delete(ctx, rec.cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete the record of %s: %w", name, err)
	}
	r.ids.Delete(idOf(rec.cm))
	return nil
}

// markRemoving commits a removal of the sandbox whose record is cm,
// updated in place (see rename.go): it marks the record removing, tested
// against the version read, so that a rename committed meanwhile is seen
// (the removal then fails, and leaves the sandbox to its new name) and no
// rename commits after it.
func (r *Runtime) markRemoving(ctx context.Context, cm *corev1.ConfigMap, name string) error {
	cms := r.cs.CoreV1().ConfigMaps(r.opt.Namespace)
	for try := 0; !removing(cm); try++ {
		patch, _ := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": cm.UID},
			{"op": "test", "path": "/metadata/resourceVersion", "value": cm.ResourceVersion},
			{"op": "add", "path": "/metadata/annotations/" + jsonPointer(annRemoving), "value": time.Now().UTC().Format(time.RFC3339)},
		})
		got, err := cms.Patch(ctx, cm.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
		if err == nil {
			*cm = *got
			return nil
		}
		now, gerr := cms.Get(ctx, cm.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr) || (gerr == nil && now.UID != cm.UID):
			// Gone from under its name: renamed (to the end, meanwhile)
			// when ref, an ID, still finds it.
			if again, rerr := r.record(ctx, name); rerr == nil && idOf(again.cm) == idOf(cm) {
				return fmt.Errorf("container %s: renamed while it was removed: %w", name, sandbox.ErrInUse)
			}
			return fmt.Errorf("container %s: %w (removed meanwhile)", name, sandbox.ErrNotFound)
		case gerr != nil:
			return fmt.Errorf("kubernetes: remove %s: mark its record: %w", name, err)
		case renamedAway(now) || renaming(now):
			return fmt.Errorf("container %s: renamed while it was removed: %w", name, sandbox.ErrInUse)
		case now.ResourceVersion == cm.ResourceVersion || try == 4:
			return fmt.Errorf("kubernetes: remove %s: mark its record: %w", name, err)
		}
		*cm = *now
	}
	return nil
}

// removeStrayPod deletes a pod of ours named for name whose record is
// gone (a removal cut between the two), unless a Sandbox that is still
// there controls it.
func (r *Runtime) removeStrayPod(ctx context.Context, name string) error {
	p, err := r.cs.CoreV1().Pods(r.opt.Namespace).Get(ctx, objectName(name), metav1.GetOptions{})
	if err != nil || p.Labels[labelManaged] != managedBy || p.Annotations[annName] != name || len(p.OwnerReferences) == 0 {
		return nil
	}
	if c := metav1.GetControllerOfNoCopy(p); c != nil && c.Kind == sandboxKind {
		// A Sandbox's pod goes with its Sandbox: while that is there it
		// is its record's (perhaps a renamed sandbox's, its pod's name
		// annotation not yet in line), and without a record the garbage
		// collector takes it.
		if r.dyn == nil {
			return nil
		}
		if sb, _, err := r.controllingSandbox(ctx, p); err != nil || sb != nil {
			return err
		}
	}
	return r.deletePod(ctx, p, time.Second)
}

// Inspect describes one sandbox from its record and pod.
func (r *Runtime) Inspect(ctx context.Context, name string) (sandbox.Container, error) {
	rec, err := r.record(ctx, name)
	if err != nil {
		return sandbox.Container{}, err
	}
	pod, err := r.podNamed(ctx, rec)
	if err != nil {
		return sandbox.Container{}, err
	}
	return describe(rec, pod), nil
}

// podOf names the running pod of the sandbox that ref (a name or the
// record's UID) names. A pod of that name that its record did not make (a
// stray, or one made in its place by another hand) is no pod of the
// sandbox's: an exec there would run in another's machine.
func (r *Runtime) podOf(ctx context.Context, ref string) (string, error) {
	rec, err := r.record(ctx, ref)
	if err != nil {
		return "", err
	}
	pod, err := r.podNamed(ctx, rec)
	if err != nil {
		return "", err
	}
	if !describe(rec, pod).Running() {
		return "", fmt.Errorf("kubernetes: exec in %s: %w", ref, sandbox.ErrNotRunning)
	}
	if err := r.checkPodPrint(ctx, rec, pod); err != nil {
		return "", err
	}
	return pod.Name, nil
}

// ours is p when rec made it, else nil.
func ours(p *corev1.Pod, rec record) *corev1.Pod {
	if p == nil || !madeBy(p, rec) {
		return nil
	}
	return p
}

// List returns the sandboxes whose labels hold every one given.
func (r *Runtime) List(ctx context.Context, want map[string]string) ([]sandbox.Container, error) {
	sel := labels.Set(kubeLabels(want, nil)).AsSelector().String()
	cms, err := r.cs.CoreV1().ConfigMaps(r.opt.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list records: %w", err)
	}
	pods, err := r.cs.CoreV1().Pods(r.opt.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list pods: %w", err)
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	var owners map[string]sandboxOf
	if r.dyn != nil {
		if owners, err = r.sandboxOwners(ctx); err != nil {
			return nil, err
		}
	}
	recs := map[string]*corev1.ConfigMap{}
	for i := range cms.Items {
		recs[cms.Items[i].Name] = &cms.Items[i]
	}
	var out []sandbox.Container
	for i := range cms.Items {
		rec, err := parseRecord(&cms.Items[i], "")
		if err != nil {
			continue
		}
		// Of the two records of a rename not finished, the sandbox's
		// (settle); what a dead server left is finished or given up
		// here, since its names may never be read again.
		if renamedAway(rec.cm) || renaming(rec.cm) {
			r.tidyRename(ctx, rec, recs[rec.cm.Annotations[annRenamedFromObject]])
		}
		if renamedAway(rec.cm) || (renaming(rec.cm) && !committedTo(rec.cm, recs[rec.cm.Annotations[annRenamedFromObject]])) {
			continue
		}
		o, owned := owners[podNameOf(rec.cm)]
		owned = owned && o.record == rec.cm.UID
		if owned {
			rec.podOwner, rec.suspended = o.uid, o.suspended
		}
		if r.dyn != nil && rec.cm.Annotations[annAdopting] != "" && !owned {
			// An adoption whose Sandbox is not the record's yet: under
			// way, or a dead server's, given up here once well past its
			// grace (a reader of its name gives it up sooner).
			if time.Since(rec.cm.CreationTimestamp.Time) >= 4*adoptGrace {
				_, _ = r.settleAdoption(ctx, rec)
			}
			continue
		}
		match := true
		for k, v := range want {
			if rec.labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, describe(rec, byName[podNameOf(rec.cm)]))
		}
	}
	return out, nil
}

// describe is the Container that record rec and its pod (nil: none)
// make.
func describe(rec record, pod *corev1.Pod) sandbox.Container {
	// The ID is the record's: it stays with the sandbox while its pod
	// is made again, as a container's ID stays over a restart.
	c := sandbox.Container{Name: rec.cm.Annotations[annName], ID: idOf(rec.cm), Image: rec.spec.Image, Labels: rec.labels,
		NoNetwork: rec.spec.Network == "none",
		Created:   createdOf(rec.cm), CPUs: rec.spec.CPUs, State: sandbox.StateStopped}
	if q, err := memoryQuantity(rec.spec.Memory); err == nil {
		c.Memory = q.Value()
	}
	if pod = ours(pod, rec); pod == nil {
		return c
	}
	c.IP = pod.Status.PodIP
	if c.IP != "" && !c.NoNetwork {
		c.Networks = podNetworks(rec.spec, pod)
	}
	switch pod.Status.Phase {
	case corev1.PodRunning:
		c.State = sandbox.StateRunning
		if pod.DeletionTimestamp != nil || rec.suspended || removing(rec.cm) {
			c.State = sandbox.StateStopped // on its way out
		}
	case corev1.PodPending:
		c.State = sandbox.StateCreated
	case corev1.PodSucceeded, corev1.PodFailed:
		c.State = sandbox.StateStopped
	default:
		c.State = sandbox.StateUnknown
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		if s := cs.State.Running; s != nil {
			c.Started = s.StartedAt.Time
		}
		if s := cs.State.Terminated; s != nil {
			c.Started, c.Finished, c.ExitCode = s.StartedAt.Time, s.FinishedAt.Time, int(s.ExitCode)
		}
	}
	if c.Started.IsZero() && pod.Status.StartTime != nil && c.State == sandbox.StateRunning {
		c.Started = pod.Status.StartTime.Time
	}
	return c
}

// VolumeCreate makes the workspace claim name, of the runtime's default
// size, if there is none.
func (r *Runtime) VolumeCreate(ctx context.Context, name string, ls map[string]string) error {
	return r.createClaim(ctx, name, ls, r.volumeSize)
}

// DiskSupport implements sandbox.DiskLimiter: a workspace claim is made
// of the sandbox's disk size. A pod's root filesystem is on its node,
// which the server cannot read, and its process count is the node's
// (the kubelet's podPidsLimit).
func (r *Runtime) DiskSupport(ctx context.Context) sandbox.DiskSupport {
	return sandbox.DiskSupport{VolumeSize: true,
		RootfsUnwatchable: "a pod's root filesystem is on its node, out of the server's sight",
		Notes:             []string{"kubernetes: /workspace is a claim of the sandbox's disk size; the root filesystem and the process count are bounded by the node (its ephemeral storage, the kubelet's podPidsLimit)"}}
}

// VolumeCreateSized implements sandbox.SizedVolumeCreator: the workspace
// claim name asks for bytes of storage. A claim that is there already is
// kept at its size (VolumeSize reads it).
func (r *Runtime) VolumeCreateSized(ctx context.Context, name string, ls map[string]string, bytes int64, fresh bool) (bool, error) {
	if bytes <= 0 {
		return false, fmt.Errorf("kubernetes: a claim of %d bytes", bytes)
	}
	return true, r.createClaim(ctx, name, ls, *resource.NewQuantity(bytes, resource.BinarySI))
}

// VolumeSize implements sandbox.VolumeSizer: the storage the claim name
// was given (its capacity once bound, else what it asks for).
func (r *Runtime) VolumeSize(ctx context.Context, name string) (int64, bool, error) {
	c, err := r.claimOf(ctx, name)
	if apierrors.IsNotFound(err) {
		return 0, false, fmt.Errorf("volume %s: %w", name, sandbox.ErrNotFound)
	}
	if err != nil {
		return 0, false, fmt.Errorf("kubernetes: read the claim of %s: %w", name, err)
	}
	if !madeAs(c, name) {
		return 0, false, fmt.Errorf("kubernetes: claim %s is not the workspace %s", c.Name, name)
	}
	if q, ok := c.Status.Capacity[corev1.ResourceStorage]; ok && !q.IsZero() {
		return q.Value(), true, nil
	}
	return c.Spec.Resources.Requests.Storage().Value(), true, nil
}

// createClaim makes the workspace claim name of size if there is none.
func (r *Runtime) createClaim(ctx context.Context, name string, ls map[string]string, size resource.Quantity) error {
	// A workspace that began in a warm pool has its claim already, under
	// another name (warmpool.go).
	if c, err := r.claimOf(ctx, name); err == nil && c.Name != objectName(name) {
		if !madeAs(c, name) {
			return fmt.Errorf("kubernetes: claim %s is not the workspace %s: left alone", c.Name, name)
		}
		return nil
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(name), Namespace: r.opt.Namespace,
			Labels: kubeLabels(ls, nil), Annotations: map[string]string{annName: name}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if r.opt.StorageClass != "" {
		pvc.Spec.StorageClassName = &r.opt.StorageClass
	}
	_, err := r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, gerr := r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace).Get(ctx, pvc.Name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("kubernetes: read the claim of %s: %w", name, gerr)
		}
		if !madeAs(got, name) {
			return fmt.Errorf("kubernetes: claim %s exists and is not the workspace %s: left alone", pvc.Name, name)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubernetes: create the claim of %s: %w", name, err)
	}
	return nil
}

// VolumeRemove deletes the workspace claim name; a missing one is not an
// error.
func (r *Runtime) VolumeRemove(ctx context.Context, name string) error {
	claims := r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace)
	got, err := r.claimOf(ctx, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kubernetes: read the claim of %s: %w", name, err)
	}
	if !madeAs(got, name) {
		return fmt.Errorf("kubernetes: claim %s is not the workspace %s: left alone", got.Name, name)
	}
	err = claims.Delete(ctx, got.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &got.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete the claim of %s: %w", name, err)
	}
	return nil
}

// VolumeNames implements sandbox.VolumeLister: the workspaces the
// runtime made, by the names they were made under, but for those being
// deleted (a claim goes once no pod uses it).
func (r *Runtime) VolumeNames(ctx context.Context) ([]string, error) {
	list, err := r.cs.CoreV1().PersistentVolumeClaims(r.opt.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list workspace claims: %w", err)
	}
	var names []string
	for _, c := range list.Items {
		if n := c.Annotations[annName]; n != "" && (c.Name == objectName(n) || c.Labels[labelVolume] == objectName(n)) && c.DeletionTimestamp == nil {
			names = append(names, n)
		}
	}
	return names, nil
}

// ImageExists is true: the cluster's nodes pull images as pods need
// them, and a missing one fails the pod's start, which says so.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) { return true, nil }

var (
	_ sandbox.Runtime            = (*Runtime)(nil)
	_ sandbox.DiskLimiter        = (*Runtime)(nil)
	_ sandbox.SizedVolumeCreator = (*Runtime)(nil)
	_ sandbox.VolumeSizer        = (*Runtime)(nil)
	_ sandbox.VolumeLister       = (*Runtime)(nil)
	_ sandbox.Renamer            = (*Runtime)(nil)
)
