package kube

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/inprocess"
	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/mcpserver"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
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
	if pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Fatalf("pods after a destroy: %v %v", pods, err)
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

// TestWorkspaceSnapshotsOnKubernetes: a pod's root filesystem cannot be
// committed, so a snapshot on Kubernetes keeps the workspace and says so,
// and a restore or a clone boots the base image afresh with that
// workspace; the snapshot's deletion takes its tar and leaves the base
// image alone. Through the server's tools, with mcp-go's client.
func TestWorkspaceSnapshotsOnKubernetes(t *testing.T) {
	ns, admin, kl, rt := onStandIn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	store, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const base = "localhost/mcp-dev:latest"
	snapDir := t.TempDir()
	m := sandbox.NewManager(rt, sandbox.Config{Prefix: kl.Node[:8], Defaults: sandbox.Profile{Image: base},
		Snapshots: store, SnapshotDir: snapDir, Intents: store, LockDir: t.TempDir()})
	t.Cleanup(func() {
		for _, n := range []string{"default", "copy"} {
			_, _ = m.Destroy(context.Background(), n)
		}
		m.Close()
	})
	tool := toolsOf(t, m)
	run := func(name, cmd string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		res, err := m.Exec(ctx, name, shell.Request{Command: cmd, Stdout: &out, Stderr: &errOut, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s in %s: %v %+v %q", cmd, name, err, res, errOut.String())
		}
		return out.String()
	}
	podUID := func(name string) string {
		t.Helper()
		rec, err := rt.record(ctx, m.ContainerFor(name))
		if err != nil {
			t.Fatalf("the record of %s: %v", name, err)
		}
		p, err := admin.CoreV1().Pods(ns).Get(ctx, podNameOf(rec.cm), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the pod of %s: %v", name, err)
		}
		return string(p.UID)
	}
	const probe = "cat /workspace/w.txt; test -e /workspace/n.txt && echo n; test -e /opt/root.txt && echo root; true"
	run("default", "echo ws1 >/workspace/w.txt && echo r >/opt/root.txt")

	// Without the workspace there is nothing to keep: refused, saying why.
	if text, data, isErr := tool("snapshot", map[string]any{"snapshot_name": "s1", "include_workspace": false}); !isErr ||
		!strings.Contains(text, "root filesystem") || !strings.Contains(text, "keep nothing") {
		t.Fatalf("a snapshot without the workspace: %s %v", text, data)
	}
	text, data, isErr := tool("snapshot", map[string]any{"snapshot_name": "s1", "note": "first"})
	if isErr || data["workspace_only"] != true || data["image"] != "" || data["base_image"] != base || data["workspace"] != true ||
		!strings.Contains(text, "the workspace only") || !strings.Contains(text, "boots the base image "+base) {
		t.Fatalf("snapshot: %s %v", text, data)
	}
	rec, ok, err := store.Snapshot("s1")
	if err != nil || !ok || rec.WorkspaceBytes == 0 {
		t.Fatalf("the snapshot's record: %+v %v %v", rec, ok, err)
	}
	if _, err := os.Stat(filepath.Join(snapDir, rec.WorkspaceFile)); err != nil {
		t.Fatalf("the snapshot's workspace tar: %v", err)
	}
	if text, _, isErr := tool("list_snapshots", map[string]any{}); isErr || !strings.Contains(text, "s1") || !strings.Contains(text, "no root filesystem") {
		t.Fatalf("list_snapshots: %s", text)
	}

	// Restored: the workspace as it was, the rest of the pod afresh.
	run("default", "echo ws2 >/workspace/w.txt && echo x >/workspace/n.txt")
	uid := podUID("default")
	if text, data, isErr := tool("restore", map[string]any{"snapshot_name": "s1"}); isErr || data["fresh_base"] != base ||
		!strings.Contains(text, "kept no root filesystem") {
		t.Fatalf("restore: %s %v", text, data)
	}
	if out := run("default", probe); out != "ws1\n" {
		t.Fatalf("after the restore: %q, want the snapshot's workspace on a fresh root", out)
	}
	if podUID("default") == uid {
		t.Fatal("the restore kept the old pod")
	}

	// A clone: a copy of the workspace, on the base image.
	run("default", "echo r >/opt/root.txt")
	if text, data, isErr := tool("clone", map[string]any{"source": "default", "target": "copy"}); isErr || data["fresh_base"] != base ||
		!strings.Contains(text, "a copy of its workspace, on the base image "+base) {
		t.Fatalf("clone: %s %v", text, data)
	}
	if out := run("copy", probe); out != "ws1\n" {
		t.Fatalf("the clone: %q", out)
	}
	run("copy", "echo mine >/workspace/w.txt")
	if out := run("default", "cat /workspace/w.txt"); out != "ws1\n" {
		t.Fatalf("the source after its clone wrote: %q", out)
	}
	if leftover, _ := filepath.Glob(filepath.Join(snapDir, ".clone-*")); len(leftover) != 0 {
		t.Fatalf("the clone left its tar: %v", leftover)
	}

	// A snapshot whose tar went is refused before the pod is touched:
	// the pod cannot be put back once removed.
	if _, err := m.Snapshot(ctx, "default", sandbox.SnapshotRequest{Name: "s2", IncludeWorkspace: true}); err != nil {
		t.Fatal(err)
	}
	rec2, _, err := store.Snapshot("s2")
	if err != nil || os.Remove(filepath.Join(snapDir, rec2.WorkspaceFile)) != nil {
		t.Fatalf("remove s2's tar: %+v %v", rec2, err)
	}
	uid = podUID("default")
	if text, _, isErr := tool("restore", map[string]any{"snapshot_name": "s2"}); !isErr || !strings.Contains(text, "is gone") {
		t.Fatalf("a restore of a snapshot whose tar went: %s", text)
	}
	if podUID("default") != uid || run("default", "cat /opt/root.txt") != "r\n" {
		t.Fatal("a refused restore touched the pod")
	}
	if _, err := m.DeleteSnapshot(ctx, "s2"); err != nil {
		t.Fatal(err)
	}

	// A tar a killed snapshot left, with no record, goes when a server
	// starts.
	sum := sha256.Sum256([]byte("s3"))
	orphan := filepath.Join(snapDir, "s3-"+hex.EncodeToString(sum[:4])+".workspace.tar") // as a snapshot names its tar
	if err := os.WriteFile(orphan, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m2 := sandbox.NewManager(rt, sandbox.Config{Prefix: kl.Node[:8], Defaults: sandbox.Profile{Image: base},
		Snapshots: store, SnapshotDir: snapDir, Intents: store, LockDir: t.TempDir()})
	defer m2.Close()
	if err := m2.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the orphaned tar after a server started: %v", err)
	}

	// Deleted: the tar and the record go; nothing else was the snapshot's.
	if text, _, isErr := tool("delete_snapshot", map[string]any{"snapshot_name": "s1"}); isErr || !strings.Contains(text, "its workspace tar") {
		t.Fatalf("delete_snapshot: %s", text)
	}
	if _, err := os.Stat(filepath.Join(snapDir, rec.WorkspaceFile)); !os.IsNotExist(err) {
		t.Fatalf("the tar after the deletion: %v", err)
	}
	if text, _, isErr := tool("restore", map[string]any{"snapshot_name": "s1"}); !isErr || !strings.Contains(text, "no such snapshot") {
		t.Fatalf("a restore of the deleted snapshot: %s", text)
	}
}

// toolsOf serves m's tools (every toolset) to an in-process mcp-go
// client and returns a caller of them: a result's text, its structured
// content and whether it is an error.
func toolsOf(t *testing.T, m *sandbox.Manager) func(name string, args map[string]any) (string, map[string]any, bool) {
	t.Helper()
	ms, err := mcpserver.New(m, mcpserver.Options{Toolsets: []string{"all"}})
	if err != nil {
		t.Fatal(err)
	}
	c := inprocess.Connect(t, ms, "kube-test")
	return func(name string, args map[string]any) (string, map[string]any, bool) {
		t.Helper()
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = name, args
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var text strings.Builder
		for _, ct := range res.Content {
			if tc, ok := ct.(mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		var data map[string]any
		if res.StructuredContent != nil {
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &data)
		}
		return text.String(), data, res.IsError
	}
}
