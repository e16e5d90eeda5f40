package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

var cluster *kubetest.Cluster

func TestMain(m *testing.M) {
	RouteClientLogs(nil)
	c, stop, why, err := kubetest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube tests: start the control plane:", err)
		os.Exit(1)
	}
	if c == nil && os.Getenv("CI") == "true" {
		fmt.Fprintln(os.Stderr, "kube tests: CI may not skip them:", why)
		os.Exit(1)
	}
	cluster = c
	skipWhy = why
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

var skipWhy string

// namespace makes a namespace with deploy/kubernetes/rbac.yaml applied in
// it and returns it with the token of its ServiceAccount.
func namespace(t *testing.T) (string, string, kubernetes.Interface) {
	t.Helper()
	if cluster == nil {
		t.Skip(skipWhy)
	}
	ns, token := cluster.Namespace(t, "../../deploy/kubernetes/rbac.yaml")
	return ns, token, cluster.Admin(t)
}

// TestLifecycle: with only the rights rbac.yaml grants, a sandbox is
// recorded, runs as a locked-down pod on its workspace claim, is listed
// by any of its labels, stops (its pod gone, its record and claim kept),
// starts again and is removed; a second sandbox of one name, a host
// directory and an object of the same name that is not ours are refused
// or left alone.
func TestLifecycle(t *testing.T) {
	ns, token, admin := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubetest.PlayKubelet(ctx, admin, ns, "registry.invalid/never:1")
	if _, err := admin.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rt, err := New(cluster.Config(token), Options{Namespace: ns, RuntimeClass: "gvisor", VolumeSize: "3Gi", StartTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := rt.Version(ctx); err != nil || v != kubetest.Version {
		t.Fatalf("version %q %v", v, err)
	}

	const name, vol = "smt1-box_1", "smt1-ws-box_1"
	lbls := map[string]string{sandbox.LabelOwner: "smt1", sandbox.LabelName: "box_1", sandbox.LabelBaseImage: "localhost/mcp-dev:latest"}
	for range 2 {
		if err := rt.VolumeCreate(ctx, vol, lbls); err != nil {
			t.Fatal(err)
		}
	}
	pvc, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, objectName(vol), metav1.GetOptions{})
	if err != nil || pvc.Spec.Resources.Requests.Storage().String() != "3Gi" {
		t.Fatalf("the workspace claim: %+v %v", pvc, err)
	}
	spec := sandbox.RunSpec{Name: name, Image: "localhost/mcp-dev:latest", Labels: lbls, CPUs: 1.5, Memory: "512M", StorageSize: "2G",
		Mounts: []sandbox.Mount{{Volume: vol, Target: "/workspace"}}, Workdir: "/workspace", Env: map[string]string{"A": "1"},
		Command: []string{"sleep", "infinity"}}
	id, err := rt.Run(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods(ns).Get(ctx, objectName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case len(pod.OwnerReferences) != 1 || string(pod.OwnerReferences[0].UID) != id:
		t.Errorf("run returned %q, the pod's record is %+v", id, pod.OwnerReferences)
	case pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken:
		t.Error("the pod mounts a service account token")
	case pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks:
		t.Error("the pod gets service links")
	case pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "gvisor":
		t.Error("the pod's runtime class")
	case pod.Spec.HostNetwork || pod.Spec.HostPID || pod.Spec.HostIPC:
		t.Error("the pod shares the node's namespaces")
	case sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("the container's security context: %+v", sc)
	case len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Errorf("capabilities: %+v", sc.Capabilities)
	case c.Resources.Limits.Cpu().String() != "1500m" || c.Resources.Requests.Cpu().String() != "150m" ||
		c.Resources.Limits.Memory().String() != "512Mi" || c.Resources.Requests.Memory().String() != "512Mi":
		t.Errorf("resources: %+v", c.Resources)
	case c.Resources.Limits.StorageEphemeral().String() != "2Gi":
		t.Errorf("the root filesystem's bound: %+v", c.Resources.Limits)
	case len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].PersistentVolumeClaim == nil || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != pvc.Name:
		t.Errorf("volumes: %+v", pod.Spec.Volumes)
	case len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].Kind != "ConfigMap":
		t.Errorf("owner: %+v", pod.OwnerReferences)
	}
	got, err := rt.Inspect(ctx, name)
	if err != nil || got.State != sandbox.StateRunning || got.Name != name || got.ID != id || got.IP == "" ||
		got.Labels[sandbox.LabelBaseImage] != "localhost/mcp-dev:latest" || got.CPUs != 1.5 || got.Memory != 512<<20 || got.Started.IsZero() {
		t.Fatalf("inspect: %+v %v", got, err)
	}
	for _, q := range []struct {
		want map[string]string
		n    int
	}{{map[string]string{sandbox.LabelOwner: "smt1"}, 1}, {map[string]string{sandbox.LabelBaseImage: "localhost/mcp-dev:latest"}, 1},
		{map[string]string{sandbox.LabelOwner: "other"}, 0}, {map[string]string{sandbox.LabelOwner: "smt1", sandbox.LabelName: "box_2"}, 0}} {
		if l, err := rt.List(ctx, q.want); err != nil || len(l) != q.n {
			t.Errorf("list %v: %d %v", q.want, len(l), err)
		}
	}
	if _, err := rt.Run(ctx, spec); !errors.Is(err, sandbox.ErrAlreadyExists) {
		t.Errorf("a second sandbox of one name: %v", err)
	}

	if err := rt.Stop(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	if got, err := rt.Inspect(ctx, name); err != nil || got.State != sandbox.StateStopped {
		t.Fatalf("inspect after stop: %+v %v", got, err)
	}
	if err := rt.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	// The ID stays with the sandbox over a new pod, as a container's
	// over a restart, and reaches it.
	if got, err := rt.Inspect(ctx, id); err != nil || got.State != sandbox.StateRunning || got.ID != id || got.Name != name {
		t.Fatalf("inspect by ID after start: %+v %v", got, err)
	}
	if err := rt.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Inspect(ctx, name); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("inspect after remove: %v", err)
	}
	// A new sandbox of the same name is not reached by the old one's ID.
	if _, err := rt.Run(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Inspect(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("the old ID after a new sandbox of its name: %v", err)
	}
	if err := rt.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(ctx, name); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a second remove: %v", err)
	}
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, objectName(name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod after remove: %v", err)
	}
	for range 2 {
		if err := rt.VolumeRemove(ctx, vol); err != nil {
			t.Fatal(err)
		}
	}

	// Refused before anything is made: a host directory, nested
	// virtualization.
	bad := spec
	bad.Name, bad.Mounts = "smt1-host", []sandbox.Mount{{Source: "/etc", Target: "/host"}}
	if _, err := rt.Run(ctx, bad); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("a host directory: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(bad.Name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused sandbox left its record: %v", err)
	}
	// An image that cannot be pulled: the error says why, as soon as the
	// node has given up (not at the start timeout).
	never := spec
	never.Name, never.Image, never.Mounts = "smt1-never", "registry.invalid/never:1", nil
	if _, err := rt.Run(ctx, never); err == nil || !strings.Contains(err.Error(), "ImagePullBackOff") || !strings.Contains(err.Error(), "cannot start") {
		t.Errorf("an image that cannot be pulled: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(never.Name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a sandbox that could not start left its record: %v", err)
	}
	// Without network: the pod is marked, and a NetworkPolicy that lets
	// nothing in or out selects it; one changed to let traffic through
	// is refused, not used.
	offline := spec
	offline.Name, offline.Network, offline.Mounts = "smt1-offline", "none", nil
	if _, err := rt.Run(ctx, offline); err != nil {
		t.Fatalf("a sandbox without network: %v", err)
	}
	if p, err := admin.CoreV1().Pods(ns).Get(ctx, objectName(offline.Name), metav1.GetOptions{}); err != nil || p.Labels[labelNetwork] != networkNone {
		t.Errorf("the pod of a sandbox without network: %v %v", p.Labels, err)
	}
	np, err := admin.NetworkingV1().NetworkPolicies(ns).Get(ctx, isolatePolicy, metav1.GetOptions{})
	if err != nil || !isolates(np) {
		t.Fatalf("the isolating policy: %+v %v", np, err)
	}
	if c, err := rt.Inspect(ctx, offline.Name); err != nil || !c.NoNetwork {
		t.Errorf("inspect of a sandbox without network: %+v %v", c, err)
	}
	// Another policy that selects every pod and lets everything out:
	// policies add up, so it would undo ours.
	open := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-all"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{}}}}
	if _, err := admin.NetworkingV1().NetworkPolicies(ns).Create(ctx, open, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	offline2 := offline
	offline2.Name = "smt1-offline2"
	if _, err := rt.Run(ctx, offline2); err == nil || !strings.Contains(err.Error(), "allow-all") {
		t.Errorf("a sandbox without network beside a policy that lets everything out: %v", err)
	}
	if err := admin.NetworkingV1().NetworkPolicies(ns).Delete(ctx, "allow-all", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Ours changed to let traffic through, by the same runtime that
	// made it: refused too.
	np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}} // everything
	if _, err := admin.NetworkingV1().NetworkPolicies(ns).Update(ctx, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Run(ctx, offline2); err == nil || !strings.Contains(err.Error(), isolatePolicy) {
		t.Errorf("a sandbox without network under a policy that lets traffic through: %v", err)
	}
	// A pod deleted while it starts: said at once, nothing kept.
	silent := spec
	silent.Name, silent.Image, silent.Mounts = "smt1-silent", "registry.invalid/silent:1", nil
	go func() {
		for ctx.Err() == nil {
			if err := admin.CoreV1().Pods(ns).Delete(ctx, objectName(silent.Name), metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	began := time.Now()
	if _, err := rt.Run(ctx, silent); err == nil || !strings.Contains(err.Error(), "deleted while it started") {
		t.Errorf("a pod deleted while it started: %v", err)
	}
	if d := time.Since(began); d > time.Minute {
		t.Errorf("the deleted pod was waited for %s", d)
	}
	// A call that ends while its pod waits for a kubelet: the error says
	// where the pod stood, and nothing is kept.
	waiting := spec
	waiting.Name, waiting.Image, waiting.Mounts = "smt1-waiting", "registry.invalid/silent:2", nil
	_, err = rt.Run(cancelOnceThere(ctx, t, func(ctx context.Context) error {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, objectName(waiting.Name), metav1.GetOptions{})
		return err
	}), waiting)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "was not running in the ") ||
		!strings.Contains(err.Error(), "(Pending: no kubelet has reported on it)") {
		t.Errorf("a call that ended while its pod waited: %v", err)
	}
	if _, err := rt.Inspect(ctx, waiting.Name); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a sandbox whose call ended while its pod waited is left: %v", err)
	}
	// Someone else's pod under the name a sandbox's would get: the
	// sandbox is refused, leaves nothing, and the pod is never deleted,
	// by Run, Remove or Stop.
	theirPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: objectName("smt1-web")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, theirPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := spec
	web.Name, web.Mounts = "smt1-web", nil
	if _, err := rt.Run(ctx, web); !errors.Is(err, sandbox.ErrInUse) {
		t.Errorf("a sandbox whose pod name is taken: %v", err)
	}
	if err := rt.Remove(ctx, "smt1-web"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("remove of a sandbox that was refused: %v", err)
	}
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, theirPod.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("someone else's pod was deleted: %v", err)
	}
	// Someone else's ConfigMap under the name a sandbox would get: not
	// taken for a sandbox, not removed.
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: objectName("smt1-theirs")}, Data: map[string]string{"x": "y"}}
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Inspect(ctx, "smt1-theirs"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("inspect of a ConfigMap not ours: %v", err)
	}
	if err := rt.Remove(ctx, "smt1-theirs"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("remove of a ConfigMap not ours: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, foreign.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("a ConfigMap not ours was removed: %v", err)
	}
}

// TestWithoutRights: a token the namespace grants nothing gets a clear
// error from Ping, naming the manifest.
func TestWithoutRights(t *testing.T) {
	ns, _, admin := namespace(t)
	ctx := context.Background()
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "nobody", &authv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(cluster.Config(tok.Status.Token), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Ping(ctx); err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), "rbac.yaml") {
		t.Fatalf("ping without rights: %v", err)
	}
}

// TestSizes: the sizes profiles give (engine style, with or without a
// b) read as binary units.
func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"512M": 512 << 20, "512mb": 512 << 20, "2GB": 2 << 30, "2g": 2 << 30, "1kb": 1 << 10, "1Gi": 1 << 30, "1048576": 1 << 20, "100b": 100} {
		q, err := memoryQuantity(in)
		if err != nil || q.Value() != want {
			t.Errorf("%q: %d %v, want %d", in, q.Value(), err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1G", "0"} {
		if _, err := memoryQuantity(bad); err == nil {
			t.Errorf("%q read as a size", bad)
		}
	}
	// The workspace claims' size reads as the profiles' disk does.
	for in, want := range map[string]int64{"512m": 512 << 20, "20g": 20 << 30, "20G": 20 << 30} {
		rt, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Options{Namespace: "a", VolumeSize: in})
		if err != nil || rt.volumeSize.Value() != want {
			t.Errorf("volume size %q: %v %v, want %d", in, rt, err, want)
		}
	}
}

// TestObjectNames: every sandbox name maps to a valid, distinct object
// name.
func TestObjectNames(t *testing.T) {
	seen := map[string]string{}
	for _, n := range []string{"smcp-default", "smcp-a_b", "smcp-a-b", "smcp_spare_0123456789abcdef", "SMCP-Upper", "x", strings.Repeat("a", 63), strings.Repeat("a", 64), "a.b",
		objectName("smcp-a_b")} {
		o := objectName(n)
		if len(o) > 63 || o != strings.ToLower(o) || strings.HasPrefix(o, "-") || strings.HasSuffix(o, "-") || strings.ContainsAny(o, "_.") {
			t.Errorf("%q -> %q: not a DNS label", n, o)
		}
		if prev, ok := seen[o]; ok {
			t.Errorf("%q and %q share %q", n, prev, o)
		}
		seen[o] = n
	}
}

// cancelOnceThere is a context of ctx that ends a moment after there
// finds what a call under it makes (its pod, its Sandbox): a call that
// ends while it waits, and not before, however slow the steps before the
// wait are.
func cancelOnceThere(ctx context.Context, t *testing.T, there func(context.Context) error) context.Context {
	call, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() {
		defer cancel()
		for ctx.Err() == nil && there(ctx) != nil {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // into the wait
	}()
	return call
}
