package kube

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestManagerOnKubernetes: the server's Manager runs sandboxes on the
// runtime as on the engines: a first command boots a pod, commands share
// one persistent shell, files go in and out, and a destroy takes the pod,
// its record and its workspace.
func TestManagerOnKubernetes(t *testing.T) {
	ns, admin, kl, rt := onStandIn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m := sandbox.NewManager(rt, sandbox.Config{Prefix: kl.Node[:8], Defaults: sandbox.Profile{Image: "localhost/mcp-dev:latest", Disk: "3G"}})
	defer m.Close()
	var out bytes.Buffer
	res, err := m.Exec(ctx, "default", shell.Request{Command: "cd /tmp && echo hi from $(hostname)", Stdout: &out, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || out.Len() == 0 {
		t.Fatalf("first command: %+v %q", res, out.String())
	}
	t.Logf("boot: %+v; %s", res.Boot, out.String())
	// The workspace claim is of the profile's disk size, and status says
	// that is what bounds /workspace.
	claims, err := admin.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 1 || claims.Items[0].Spec.Resources.Requests.Storage().Value() != 3<<30 {
		t.Fatalf("the workspace claims: %+v %v", claims, err)
	}
	if info, err := m.Status(ctx, "default"); err != nil || info.Limits.Workspace != sandbox.MechVolumeSize || info.Limits.Disk != "3G" {
		t.Fatalf("status: %+v %v", info.Limits, err)
	}
	before := kl.Execs.Load()
	for range 10 {
		out.Reset()
		res, err = m.Exec(ctx, "default", shell.Request{Command: "pwd", Stdout: &out, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 || out.String() != "/tmp\n" {
			t.Fatalf("warm command: %v %+v %q", err, res, out.String())
		}
	}
	// The commands share the shell's stream; the server's own chores
	// (the agent's start, activity marks) take a few of their own.
	if n := kl.Execs.Load() - before; n >= 10 {
		t.Fatalf("10 warm commands took %d exec streams", n)
	}
	if _, err := m.WriteFile(ctx, "default", sandbox.WriteRequest{Path: "/workspace/a.txt", Data: []byte("hello\x00world")}); err != nil {
		t.Fatal(err)
	}
	got, err := m.ReadFile(ctx, "default", "/workspace/a.txt", 0, 0)
	if err != nil || string(got) != "hello\x00world" {
		t.Fatalf("read back: %q %v", got, err)
	}
	// The pod goes (an eviction, a node drained): the next command
	// makes it again, on the same workspace.
	pod := objectName(m.ContainerFor("default"))
	if err := admin.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := admin.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the pod was not deleted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	out.Reset()
	res, err = m.Exec(ctx, "default", shell.Request{Command: "cat /workspace/a.txt", Stdout: &out, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 || out.String() != "hello\x00world" {
		t.Fatalf("the command after the pod went: %v %+v %q", err, res, out.String())
	}
	t.Logf("after the pod went: %+v", res.Boot)
	if ok, err := m.Destroy(ctx, "default"); err != nil || !ok {
		t.Fatalf("destroy: %v %v", ok, err)
	}
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, objectName(m.ContainerFor("default")), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pod after a destroy: %v", err)
	}
}

// markedDefault boots the default sandbox of a Manager on the kubelet
// stand-in, with /tmp/mark holding "kept", and returns a runner of
// commands in it. The sandbox and the Manager go with the test.
func markedDefault(t *testing.T) (ns string, admin kubernetes.Interface, kl *kubetest.Kubelet, run func(cmd string) (sandbox.ExecResult, string, error)) {
	t.Helper()
	ns, admin, kl, rt := onStandIn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	m := sandbox.NewManager(rt, sandbox.Config{Prefix: kl.Node[:8], Defaults: sandbox.Profile{Image: "localhost/mcp-dev:latest"}})
	t.Cleanup(func() {
		_, _ = m.Destroy(context.Background(), "default")
		m.Close()
		cancel()
	})
	run = func(cmd string) (sandbox.ExecResult, string, error) {
		var out bytes.Buffer
		res, err := m.Exec(ctx, "default", shell.Request{Command: cmd, Stdout: &out, Timeout: time.Minute})
		return res, out.String(), err
	}
	if res, _, err := run("echo kept >/tmp/mark"); err != nil || res.ExitCode != 0 {
		t.Fatalf("first command: %v %+v", err, res)
	}
	return ns, admin, kl, run
}

// checkNewStream checks that the command after what cut the shell's
// stream finds the mark, in the sandbox as it was (not started or made
// again), on an exec stream opened since streams were counted.
func checkNewStream(t *testing.T, kl *kubetest.Kubelet, run func(string) (sandbox.ExecResult, string, error), streams int64, what string) {
	t.Helper()
	res, out, err := run("cat /tmp/mark")
	if err != nil || res.ExitCode != 0 || out != "kept\n" || res.Boot.Started || res.Boot.Created {
		t.Fatalf("the command after %s: %v %+v %q", what, err, res, out)
	}
	if kl.Execs.Load() == streams {
		t.Fatalf("no new exec stream after %s: the old shell's was not cut", what)
	}
}

// TestShellOutlivesAnApiserverRestart: a restart of the apiserver cuts
// every exec stream through it, the sandbox's persistent shell among
// them; the next command gets a new shell in the same pod (its files are
// there, the pod is not made again).
func TestShellOutlivesAnApiserverRestart(t *testing.T) {
	_, _, kl, run := markedDefault(t)
	streams := kl.Execs.Load()
	if err := cluster.RestartAPIServer(); err != nil {
		t.Fatal(err)
	}
	checkNewStream(t, kl, run, streams, "the apiserver's restart")
	for range 3 {
		if res, out, err := run("cat /tmp/mark"); err != nil || res.ExitCode != 0 || out != "kept\n" {
			t.Fatalf("a warm command after: %v %+v %q", err, res, out)
		}
	}
}

// TestShellOutlivesAKubeletRestart: a kubelet that restarts cuts the
// shell's exec stream but leaves the pod running. The next command gets a
// new stream in the same pod, with its files; a command sent while the
// kubelet is down does not make the pod again either, and the sandbox
// serves once the kubelet is back.
func TestShellOutlivesAKubeletRestart(t *testing.T) {
	ns, admin, kl, run := markedDefault(t)
	podUID := func() string {
		t.Helper()
		pods, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("want the sandbox's one pod: %v %d", err, len(pods.Items))
		}
		return string(pods.Items[0].UID)
	}
	uid := podUID()

	streams := kl.Execs.Load()
	if err := kl.Restart(0); err != nil {
		t.Fatal(err)
	}
	checkNewStream(t, kl, run, streams, "the kubelet's restart")

	// Down for a while, with a command sent meanwhile.
	restarted := make(chan error, 1)
	go func() { restarted <- kl.Restart(3 * time.Second) }()
	time.Sleep(500 * time.Millisecond)
	// Refused at once, and saying why, without the command line the
	// exec's URL carries.
	if _, _, err := run("cat /tmp/mark"); err == nil {
		t.Log("the command ran: the kubelet was back already")
	} else if msg := err.Error(); !strings.Contains(msg, "could not reach the pod's node") || strings.Contains(msg, "command=") {
		t.Fatalf("a command while the kubelet was down should say the node could not be reached: %v", err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if res, out, err := run("cat /tmp/mark"); err != nil || res.ExitCode != 0 || out != "kept\n" || res.Boot.Created {
			t.Fatalf("a command once the kubelet is back: %v %+v %q", err, res, out)
		}
	}
	if got := podUID(); got != uid {
		t.Fatalf("the pod was made again (uid %s, then %s): a kubelet's restart leaves it running", uid, got)
	}
}
