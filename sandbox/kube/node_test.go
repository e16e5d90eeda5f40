package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// onNode is a namespace of its own on a real node of the cluster (a
// kubelet on containerd, kubetest.StartNode), the cluster's admin, and the
// runtime with the rights rbac.yaml grants there. Without what a node
// needs the test skips, saying what is missing; CI may not skip it.
func onNode(t *testing.T) (ns string, node *kubetest.Node, rt *Runtime) {
	t.Helper()
	ns, token, _ := namespace(t)
	if _, why := kubetest.NodeBinaries(); why != "" {
		if ciRun() {
			t.Fatal("CI may not skip the real node's tests:", why)
		}
		t.Skip(why)
	}
	node, stop, err := cluster.StartNode(ns, testImage)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	rt, err = New(cluster.Config(token), Options{Namespace: ns, StartTimeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return ns, node, rt
}

// TestOnARealNode: on a real kubelet (not the stand-in), a sandbox's pod
// runs with its workspace claim; processes run over the exec stream with
// their output and status; a program that is not there is status 127
// with the reason on stderr (a kubelet reports it as an error of the
// stream, where an engine gives 127); the persistent shell keeps its
// state between commands; a stop and a start keep the workspace's files;
// the sandbox's removal takes its pod and claim.
func TestOnARealNode(t *testing.T) {
	ns, node, rt := onNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const name, vol = "real_1", "real_1-ws"
	if err := rt.VolumeCreate(ctx, vol, nil); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.RunSpec{Name: name, Image: testImage, Command: []string{"sleep", "2147483647"},
		Mounts: []sandbox.Mount{{Volume: vol, Target: "/workspace"}}, Labels: map[string]string{sandbox.LabelOwner: "smtn"}}
	if _, err := rt.Run(ctx, spec); err != nil {
		t.Fatalf("run on the real node: %v\nkubelet's log, its end:\n%s", err, node.LogTail("kubelet.log"))
	}
	c, err := rt.Inspect(ctx, name)
	if err != nil || !c.Running() || c.IP == "" {
		t.Fatalf("inspect: %+v %v", c, err)
	}

	out, err := rt.Exec(ctx, name, sandbox.ExecSpec{Argv: []string{"sh", "-c", `echo "$GREETING"; pwd; cat; exit 3`},
		Env: map[string]string{"GREETING": "hello"}, Workdir: "/tmp", Stdin: strings.NewReader("from stdin\n")})
	if err != nil || string(out.Stdout) != "hello\n/tmp\nfrom stdin\n" || out.ExitCode != 3 {
		t.Fatalf("exec: %q %q status %d, %v", out.Stdout, out.Stderr, out.ExitCode, err)
	}
	for _, argv := range [][]string{{"no-such-program"}, {"/no/such/program"}} {
		out, err = rt.Exec(ctx, name, sandbox.ExecSpec{Argv: argv})
		if err != nil || out.ExitCode != 127 || !strings.Contains(string(out.Stderr), argv[0]+": ") {
			t.Errorf("exec of %s, which is not there: status %d, stderr %q, %v", argv[0], out.ExitCode, out.Stderr, err)
		}
	}

	// The persistent shell: one stream, its state kept.
	sh, run := openShell(ctx, t, rt, name)
	run("cd /workspace && export K=v && echo kept >file")
	if got, code := run(`echo "$PWD $K $(cat file)"; exit 4`); got != "/workspace v kept\n" || code != 4 {
		t.Fatalf("the shell's state: %q, status %d", got, code)
	}
	sh.Close()

	// A stop deletes the pod and keeps the claim; a start makes the pod
	// again, on it.
	if err := rt.Stop(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, name); err != nil {
		t.Fatalf("start: %v\nkubelet's log, its end:\n%s", err, node.LogTail("kubelet.log"))
	}
	out, err = rt.Exec(ctx, name, sandbox.ExecSpec{Argv: []string{"cat", "/workspace/file"}})
	if err != nil || string(out.Stdout) != "kept\n" {
		t.Fatalf("the workspace after a stop and a start: %q %q %v", out.Stdout, out.Stderr, err)
	}

	// Removal takes the pod; the claim's removal, its volume.
	if err := rt.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := rt.VolumeRemove(ctx, vol); err != nil {
		t.Fatal(err)
	}
	admin := cluster.Admin(t)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		pvs, err2 := admin.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: "kubetest.node=" + node.Name})
		if err == nil && err2 == nil && len(pods.Items) == 0 && len(pvs.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left 2m after the removal: %d pods, %d volumes (%v %v)", len(pods.Items), len(pvs.Items), err, err2)
		}
	}
}
