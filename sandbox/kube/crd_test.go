package kube

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

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

	// A stop suspends the Sandbox; its pod goes.
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
	// The next command runs it again, on the same workspace.
	res, out := run("cat /workspace/mark")
	if out != "kept\n" || !res.Boot.Started {
		t.Fatalf("the command after a stop: %+v %q", res.Boot, out)
	}
	if u, err = sbs.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if sb, _ = fromUnstructured(u); sb.Spec.OperatingMode != modeRunning {
		t.Fatalf("the Sandbox after the start: %q", sb.Spec.OperatingMode)
	}
	if list, err := rt.List(ctx, map[string]string{}); err != nil || len(list) != 1 || !list[0].Running() {
		t.Fatalf("list: %+v %v", list, err)
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
