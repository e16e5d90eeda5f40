package kube

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// TestSandboxCRDOnKubernetes: with --kube-sandbox-crd, each sandbox's pod
// is made by agent-sandbox's real controller (v1.0.1) from a Sandbox the
// runtime writes, with only the rights rbac.yaml grants: the Sandbox is
// owned by the sandbox's record and the pod by the Sandbox; commands run
// in it through the persistent shell; a stop suspends the Sandbox and its
// pod goes, and the next command runs the Sandbox again on the same
// workspace; a destroy takes the Sandbox, the pod and the record. Before
// agent-sandbox is installed, the runtime says what is missing.
func TestSandboxCRDOnKubernetes(t *testing.T) {
	ns, token, admin := namespace(t)
	kl := standIn(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: 2 * time.Minute, SandboxCRD: true})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config(cluster.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).Get(ctx, "sandboxes.agents.x-k8s.io", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if err := rt.Ping(ctx); err == nil || !strings.Contains(err.Error(), "agent-sandbox installed") {
			t.Fatalf("ping before agent-sandbox is installed: %v", err)
		}
		if _, err := rt.getSandbox(ctx, "nosuch"); err == nil || !strings.Contains(err.Error(), "agent-sandbox installed") {
			t.Fatalf("a Sandbox read before agent-sandbox is installed: %v", err)
		}
		m := sandbox.NewManager(rt, sandbox.Config{Prefix: kl.Node[:8] + "n", Defaults: sandbox.Profile{Image: "localhost/mcp-dev:latest"}})
		_, err := m.Exec(ctx, "default", shell.Request{Command: "true", Timeout: time.Minute})
		m.Close()
		if err == nil || !strings.Contains(err.Error(), "agent-sandbox installed") {
			t.Fatalf("a first command before agent-sandbox is installed: %v", err)
		}
		t.Logf("before agent-sandbox is installed: %v", err)
	}
	cluster.RunAgentSandbox(t)
	if err := rt.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}

	m := sandbox.NewManager(rt, sandbox.Config{Prefix: kl.Node[:8], Defaults: sandbox.Profile{Image: "localhost/mcp-dev:latest", Disk: "2G"}})
	defer m.Close()
	run := func(cmd string) (sandbox.ExecResult, string) {
		t.Helper()
		var out bytes.Buffer
		res, err := m.Exec(ctx, "default", shell.Request{Command: cmd, Stdout: &out, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v %+v %q", cmd, err, res, out.String())
		}
		return res, out.String()
	}
	if res, _ := run("echo kept >/workspace/mark && cd /tmp"); !res.Boot.Created {
		t.Fatalf("first command: %+v", res.Boot)
	}
	name := objectName(m.ContainerFor("default"))
	sbs := dyn.Resource(SandboxResource).Namespace(ns)
	u, err := sbs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Sandbox: %v", err)
	}
	sb, err := fromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !ownedBy(sb, rec.UID) || sb.Spec.OperatingMode != modeRunning {
		t.Fatalf("the Sandbox: owners %+v, mode %q", sb.OwnerReferences, sb.Spec.OperatingMode)
	}
	pod, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctl := metav1.GetControllerOf(pod)
	if ctl == nil || ctl.Kind != "Sandbox" || ctl.UID != sb.UID {
		t.Fatalf("the pod's controller: %+v", ctl)
	}
	// The controller made the pod the runtime asked for: locked down,
	// on the workspace claim.
	spec := pod.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken ||
		len(spec.Containers) != 1 || spec.Containers[0].SecurityContext == nil || *spec.Containers[0].SecurityContext.AllowPrivilegeEscalation ||
		len(spec.Volumes) == 0 || spec.Volumes[0].PersistentVolumeClaim == nil {
		t.Fatalf("the pod's spec: %+v", spec)
	}
	if _, out := run("pwd"); out != "/tmp\n" {
		t.Fatalf("a warm command: %q", out)
	}

	// A stop suspends the Sandbox; its pod goes. Its template changed
	// meanwhile (another image, by whoever may write Sandboxes) is
	// written anew at the next start.
	if err := rt.Stop(ctx, m.ContainerFor("default"), time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err = sbs.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if sb, _ = fromUnstructured(u); sb.Spec.OperatingMode != modeSuspended {
		t.Fatalf("the Sandbox after a stop: %q", sb.Spec.OperatingMode)
	}
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod after a stop: %v", err)
	}
	if c, err := rt.Inspect(ctx, m.ContainerFor("default")); err != nil || c.Running() {
		t.Fatalf("inspect after a stop: %+v %v", c, err)
	}
	tamper := `[{"op":"replace","path":"/spec/podTemplate/spec/containers/0/image","value":"` + testImage + `"}]`
	if _, err := sbs.Patch(ctx, name, types.JSONPatchType, []byte(tamper), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The next command runs it again, on the same workspace.
	res, out := run("cat /workspace/mark")
	if out != "kept\n" || !res.Boot.Started {
		t.Fatalf("the command after a stop: %+v %q", res.Boot, out)
	}
	if u, err = sbs.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if sb, _ = fromUnstructured(u); sb.Spec.OperatingMode != modeRunning || sb.Spec.PodTemplate.Spec.Containers[0].Image != "localhost/mcp-dev:latest" {
		t.Fatalf("the Sandbox after the start: %q %s", sb.Spec.OperatingMode, sb.Spec.PodTemplate.Spec.Containers[0].Image)
	}
	if pod, err = admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || pod.Spec.Containers[0].Image != "localhost/mcp-dev:latest" {
		t.Fatalf("the pod after the start: %v", err)
	}
	if list, err := rt.List(ctx, map[string]string{}); err != nil || len(list) != 1 || !list[0].Running() {
		t.Fatalf("list: %+v %v", list, err)
	}

	// A pod changed since its start (another image, by whoever may patch
	// pods; as a pod the controller adopted after an eviction would be)
	// gets no new stream: its Sandbox is suspended, and the next command
	// starts the pod again, as asked for.
	repoint := `[{"op":"replace","path":"/spec/containers/0/image","value":"` + testImage + `"}]`
	if _, err := admin.CoreV1().Pods(ns).Patch(ctx, name, types.JSONPatchType, []byte(repoint), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Exec(ctx, m.ContainerFor("default"), sandbox.ExecSpec{Argv: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "not the one its start checked") {
		t.Fatalf("a stream into a pod patched since its start: %v", err)
	}
	if u, err = sbs.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if sb, _ = fromUnstructured(u); sb.Spec.OperatingMode != modeSuspended {
		t.Fatalf("the Sandbox of a pod patched since its start: %q", sb.Spec.OperatingMode)
	}
	if _, out := run("cat /workspace/mark"); out != "kept\n" {
		t.Fatalf("the command after a pod patched since its start: %q", out)
	}
	if pod, err = admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || pod.Spec.Containers[0].Image != "localhost/mcp-dev:latest" {
		t.Fatalf("the pod after the next start: %v", err)
	}

	// A pod of a new sandbox's name that the controller would adopt (it
	// carries the label agent-sandbox's warm pools use) refuses its
	// boot, and is left alone.
	planted := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: objectName(m.ContainerFor("planted")), Namespace: ns,
		Labels:      map[string]string{labelManaged: managedBy, "agents.x-k8s.io/adoptable": "true"},
		Annotations: map[string]string{annName: m.ContainerFor("planted")}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, Image: testImage, Command: []string{"sleep", "600"}}}}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, planted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(ctx, "planted", shell.Request{Command: "true", Timeout: time.Minute}); err == nil || !strings.Contains(err.Error(), "not one this record made") {
		t.Fatalf("a boot beside a planted pod: %v", err)
	}
	if p, err := admin.CoreV1().Pods(ns).Get(ctx, planted.Name, metav1.GetOptions{}); err != nil || metav1.GetControllerOf(p) != nil {
		t.Fatalf("the planted pod: %v", err)
	}

	if ok, err := m.Destroy(ctx, "default"); err != nil || !ok {
		t.Fatalf("destroy: %v %v", ok, err)
	}
	if _, err := sbs.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Sandbox after a destroy: %v", err)
	}
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod after a destroy: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the record after a destroy: %v", err)
	}
}

// TestPodMatches: a pod the controller hands over that differs from the
// one asked for in what runs or what it reaches is refused.
func TestPodMatches(t *testing.T) {
	rt := &Runtime{opt: Options{Namespace: "ns"}}
	want, err := rt.podFor(sandbox.RunSpec{Name: "a", Image: "img", Command: []string{"sh"}, Env: map[string]string{"A": "1"},
		Mounts: []sandbox.Mount{{Volume: "ws", Target: "/workspace"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := podMatches(want.DeepCopy(), want); err != nil {
		t.Fatalf("the pod itself: %v", err)
	}
	// What an admission plugin adds to every pod and confines no less
	// (OpenShift's user and SELinux level; a defaulted proc mount) passes.
	admitted := want.DeepCopy()
	admitted.Spec.SecurityContext.RunAsUser = ptr(int64(1000680000))
	admitted.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Level: "s0:c26,c5"}
	admitted.Spec.Containers[0].SecurityContext.ProcMount = ptr(corev1.DefaultProcMount)
	admitted.Spec.Containers[0].SecurityContext.RunAsNonRoot = ptr(true)
	admitted.Spec.SecurityContext.FSGroup = ptr(int64(1000680000))
	// A policy that spells out the runtime's default AppArmor profile, in
	// the field or the annotation the apiserver copies into it.
	admitted.Spec.Containers[0].SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
	admitted.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "sandbox": corev1.DeprecatedAppArmorBetaProfileRuntimeDefault}
	if err := podMatches(admitted, want); err != nil {
		t.Fatalf("the pod as an admission plugin confines it further: %v", err)
	}
	yes := true
	for what, change := range map[string]func(p *corev1.Pod){
		"image":      func(p *corev1.Pod) { p.Spec.Containers[0].Image = "other" },
		"command":    func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh", "-c", "x"} },
		"variables":  func(p *corev1.Pod) { p.Spec.Containers[0].Env[0].Value = "2" },
		"privileged": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Privileged = &yes },
		"capabilities": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = append(p.Spec.Containers[0].SecurityContext.Capabilities.Add, "SYS_ADMIN")
		},
		"a sidecar":    func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) },
		"an init":      func(p *corev1.Pod) { p.Spec.InitContainers = p.Spec.Containers },
		"host network": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"token":        func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = &yes },
		"claim":        func(p *corev1.Pod) { p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "another" },
		"host path": func(p *corev1.Pod) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		},
		"mounts": func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].MountPath = "/" },
		"seccomp unconfined": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		},
		"pod seccomp unconfined": func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
			p.Spec.Containers[0].SecurityContext.SeccompProfile = nil
		},
		"apparmor unconfined": func(p *corev1.Pod) {
			p.Spec.SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		},
		"selinux spc_t": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		},
		"pod selinux spc_t": func(p *corev1.Pod) { p.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} },
		"proc unmasked": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.ProcMount = ptr(corev1.UnmaskedProcMount)
		},
		"sysctls": func(p *corev1.Pod) {
			p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "0"}}
		},
		"apparmor localhost": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr("x")}
		},
		"apparmor annotation unconfined": func(p *corev1.Pod) {
			p.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "sandbox": corev1.DeprecatedAppArmorBetaProfileNameUnconfined}
		},
		"selinux every category": func(p *corev1.Pod) {
			p.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Level: "s0-s0:c0.c1023"}
		},
		"selinux no category": func(p *corev1.Pod) { p.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Level: "s0"} },
		"selinux user": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{User: "unconfined_u", Level: "s0:c1,c2"}
		},
		"root user":          func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.RunAsUser = ptr(int64(0)) },
		"pod root group":     func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsGroup = ptr(int64(0)) },
		"fsGroup 0":          func(p *corev1.Pod) { p.Spec.SecurityContext.FSGroup = ptr(int64(0)) },
		"supplementary root": func(p *corev1.Pod) { p.Spec.SecurityContext.SupplementalGroups = []int64{1000, 0} },
		"runAsNonRoot false": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.RunAsNonRoot = ptr(false) },
	} {
		got := want.DeepCopy()
		change(got)
		if err := podMatches(got, want); err == nil {
			t.Errorf("%s: not refused", what)
		}
	}
}

// TestPodPrint: a pod's print stays through what changes in a pod's life
// (labels, annotations, its node, its status) and changes with what runs
// in it or what it reaches.
func TestPodPrint(t *testing.T) {
	rt := &Runtime{opt: Options{Namespace: "ns"}}
	pod, err := rt.podFor(sandbox.RunSpec{Name: "a", Image: "img", Command: []string{"sh"}, Env: map[string]string{"A": "1"},
		Mounts: []sandbox.Mount{{Volume: "ws", Target: "/workspace"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := podPrint(pod)
	// (A test binary has no module versions in its build information:
	// its form says "unknown"; a server's names the version.)
	if !strings.HasPrefix(want, podPrintForm) || !strings.HasPrefix(podPrintForm, podPrintV1+"k8s.io/api@") {
		t.Fatalf("print %q (form %q)", want, podPrintForm)
	}
	for what, change := range map[string]func(p *corev1.Pod){
		"labels": func(p *corev1.Pod) {
			p.Labels = map[string]string{"x": "y"}
			p.Annotations = map[string]string{"x": "y"}
		},
		"node":        func(p *corev1.Pod) { p.Spec.NodeName = "n2" },
		"status":      func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning; p.Status.PodIP = "10.0.0.9" },
		"resources":   func(p *corev1.Pod) { p.Spec.Containers[0].Resources = corev1.ResourceRequirements{} },
		"tolerations": func(p *corev1.Pod) { p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "k"}) },
	} {
		got := pod.DeepCopy()
		change(got)
		if podPrint(got) != want {
			t.Errorf("%s: the print changed", what)
		}
	}
	for what, change := range map[string]func(p *corev1.Pod){
		"image":     func(p *corev1.Pod) { p.Spec.Containers[0].Image = "other" },
		"ephemeral": func(p *corev1.Pod) { p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{}} },
		"variables": func(p *corev1.Pod) { p.Spec.Containers[0].Env[0].Value = "2" },
		"claim":     func(p *corev1.Pod) { p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "another" },
		"sidecar":   func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) },
	} {
		got := pod.DeepCopy()
		change(got)
		if podPrint(got) == want {
			t.Errorf("%s: the print did not change", what)
		}
	}
}

// TestChildrenGoWithTheirParentThroughSandboxes: in sandbox mode a
// child's record is owned by its parent's, its Sandbox by its record and
// its pod by its Sandbox; with the cluster's garbage collector running,
// the parent's removal alone takes the child's and grandchild's records,
// Sandboxes and pods, and leaves a root sandbox beside them whole.
func TestChildrenGoWithTheirParentThroughSandboxes(t *testing.T) {
	ns, token, admin := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubetest.PlayKubelet(ctx, admin, ns)
	cluster.RunAgentSandbox(t)
	rt, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: time.Minute, SandboxCRD: true})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config(cluster.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	sbs := dyn.Resource(SandboxResource).Namespace(ns)
	const prefix = "smtc"
	run := func(name, parent string) string {
		t.Helper()
		ctr, vol := prefix+"-"+name, prefix+"-ws-"+name
		labels := map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: name, sandbox.LabelRole: "primary"}
		if parent != "" {
			labels[sandbox.LabelRole], labels[sandbox.LabelChildOf] = "child", parent
		}
		if err := rt.VolumeCreate(ctx, vol, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: name}); err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Run(ctx, sandbox.RunSpec{Name: ctr, Image: "localhost/mcp-dev:latest", Labels: labels,
			Mounts: []sandbox.Mount{{Volume: vol, Target: "/workspace"}}, Command: []string{"sleep", "infinity"}}); err != nil {
			t.Fatalf("run %s: %v", name, err)
		}
		// Its Sandbox is its record's, its pod its Sandbox's.
		rec, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(ctr), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u, err := sbs.Get(ctx, objectName(ctr), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the Sandbox of %s: %v", name, err)
		}
		pod, err := admin.CoreV1().Pods(ns).Get(ctx, objectName(ctr), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !ownedBy(u, rec.UID) || metav1.GetControllerOf(pod) == nil || metav1.GetControllerOf(pod).UID != u.GetUID() {
			t.Fatalf("%s: the Sandbox's owners %+v, the pod's %+v", name, u.GetOwnerReferences(), pod.OwnerReferences)
		}
		return ctr
	}
	parent := run("par", "")
	run("kid", "par")
	run("grand", "kid")
	solo := run("solo", "")

	cluster.RunGarbageCollector(t)
	if err := rt.Remove(ctx, parent); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"par", "kid", "grand"} {
		obj := objectName(prefix + "-" + n)
		goneAfterParent(t, "the Sandbox of "+n, func() error { _, err := sbs.Get(ctx, obj, metav1.GetOptions{}); return err })
		goneAfterParent(t, "the pod of "+n, objGetter(ctx, admin, ns, "pod", obj))
		goneAfterParent(t, "the record of "+n, objGetter(ctx, admin, ns, "configmap", obj))
	}
	if got, err := rt.Inspect(ctx, solo); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("the root sandbox beside the family: %+v %v", got, err)
	}
}

// TestSandboxWithoutItsController: with agent-sandbox's resources
// installed and its controller not running, a start that runs out says
// that no pod was made, rather than only that a deadline passed: by the
// start timeout, that the controller reported nothing on the Sandbox; by
// the call's end, what the Sandbox's conditions said then. Neither leaves
// a record, Sandbox or pod behind.
func TestSandboxWithoutItsController(t *testing.T) {
	ns, token, admin := namespace(t)
	installed := false
	t.Run("install agent-sandbox", func(t *testing.T) {
		cluster.RunAgentSandbox(t) // its controller ends with this subtest; the resources stay
		installed = true
	})
	if !installed {
		t.Skip("agent-sandbox could not be installed (the subtest says why)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(cluster.Config(cluster.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	spec := func(name string) sandbox.RunSpec {
		return sandbox.RunSpec{Name: "smtw-" + name, Image: "localhost/mcp-dev:latest", Command: []string{"sleep", "infinity"},
			Labels: map[string]string{sandbox.LabelOwner: "smtw", sandbox.LabelName: name, sandbox.LabelRole: "primary"}}
	}
	sbs := dyn.Resource(SandboxResource).Namespace(ns)
	// The call's own end comes once its Sandbox is there, with a word
	// from a controller written into it (as agent-sandbox's would be),
	// which the error must read after the call's context ended.
	const said = "waiting for a node (written by the test)"
	saySomething := func(ctx context.Context) error {
		u, err := sbs.Get(ctx, objectName("smtw-call"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		cond := map[string]any{"type": "Ready", "status": "False", "reason": "Waiting", "message": said,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
		if err := unstructured.SetNestedSlice(u.Object, []any{cond}, "status", "conditions"); err != nil {
			return err
		}
		_, err = sbs.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		return err
	}
	for _, c := range []struct {
		name, want string
		rt         Options
		call       func() context.Context
	}{
		{"timeout", "no pod was made for smtw-timeout's Sandbox in 2s: its controller reported nothing on it: is agent-sandbox's controller running?",
			Options{Namespace: ns, StartTimeout: 2 * time.Second, SandboxCRD: true}, func() context.Context { return ctx }},
		{"call", "no pod was made for smtw-call's Sandbox in the ", Options{Namespace: ns, StartTimeout: time.Minute, SandboxCRD: true},
			func() context.Context { return cancelOnceThere(ctx, t, saySomething) }},
	} {
		rt, err := New(cluster.Config(token), c.rt)
		if err != nil {
			t.Fatal(err)
		}
		_, err = rt.Run(c.call(), spec(c.name))
		canceled := c.name == "call"
		if err == nil || !strings.Contains(err.Error(), c.want) || canceled != errors.Is(err, context.Canceled) ||
			(canceled && !strings.Contains(err.Error(), "its Sandbox says Ready: "+said)) {
			t.Errorf("%s: a start with no controller: %v", c.name, err)
		}
		if _, err := rt.Inspect(ctx, spec(c.name).Name); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("%s: the sandbox is left: %v", c.name, err)
		}
	}
	left, err := sbs.List(ctx, metav1.ListOptions{})
	if err != nil || len(left.Items) != 0 {
		t.Errorf("Sandboxes left: %v %v", left, err)
	}
	if pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left: %v %v", pods, err)
	}
}

// A request that fails as its context is about to end (the client's rate
// limiter refuses a wait past the deadline) is taken for the context's
// end, and waited out so that the caller can tell what ended it; one that
// fails with time to spare is not.
func TestWaitEnding(t *testing.T) {
	far, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if ending(far) || waitEnding(far) {
		t.Fatal("a context a minute from its deadline was taken for ending")
	}
	if ending(context.Background()) {
		t.Fatal("a context without a deadline was taken for ending")
	}
	near, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if !waitEnding(near) {
		t.Fatal("a context 300ms from its deadline was not taken for ending")
	}
	if !errors.Is(near.Err(), context.DeadlineExceeded) {
		t.Fatalf("waitEnding returned before the context ended: %v", near.Err())
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if !waitEnding(gone) {
		t.Fatal("a canceled context was not taken for ending")
	}
}
