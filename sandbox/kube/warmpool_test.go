package kube

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// TestWarmPoolsAsSpares: with warm pools, the Manager's spare is a
// SandboxWarmPool that agent-sandbox's controller fills; the first
// command on a new name takes the pool's Sandbox, whose workspace is then
// the sandbox's (through its pod made again and a reset, gone with its
// destroy), and
// the pool is filled again; with no spares kept the pool goes.
func TestWarmPoolsAsSpares(t *testing.T) {
	ns, token, admin := namespace(t)
	kl := standIn(t, ns)
	cluster.RunAgentSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rt, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: 2 * time.Minute, SandboxCRD: true, WarmPools: true})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config(cluster.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	prefix := kl.Node[:8]
	m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: "localhost/mcp-dev:latest", Disk: "2G"},
		Sandboxes: st, Intents: st, Jobs: st, LockDir: filepath.Join(dir, "locks"),
		Logger: slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	defer m.Close()
	// pooled waits for the pool to hold a ready Sandbox other than those
	// of skip, and returns its name.
	pooled := func(skip ...string) string {
		t.Helper()
		for ctx.Err() == nil {
			sp, err := m.Spares(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sp {
				ps, _ := rt.pooled(ctx, prefix)
				for _, p := range ps {
					if asSpare(p.spec, p.id).Name == s.Container && !slices.Contains(skip, p.sb.Name) {
						return p.sb.Name
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatal("no ready Sandbox in the warm pool:", ctx.Err())
		return ""
	}
	m.KeepSpares(1)
	first := pooled()
	run := func(cmd string) (sandbox.ExecResult, string) {
		t.Helper()
		var out bytes.Buffer
		res, err := m.Exec(ctx, "work", shell.Request{Command: cmd, Stdout: &out, Timeout: time.Minute})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v %+v %q", cmd, err, res, out.String())
		}
		return res, out.String()
	}
	if res, _ := run("echo kept > /workspace/f"); !res.Boot.Spare {
		t.Fatalf("the first call on a new name did not take the pool's Sandbox: %+v", res.Boot)
	}
	rec, err := rt.record(ctx, m.ContainerFor("work"))
	if err != nil {
		t.Fatal(err)
	}
	if podNameOf(rec.cm) != first || rec.cm.Annotations[annAdopting] != "" {
		t.Fatalf("the sandbox's pod is %s (the pool's was %s), mark %q", podNameOf(rec.cm), first, rec.cm.Annotations[annAdopting])
	}
	sb, err := rt.getSandbox(ctx, first)
	if err != nil || sb == nil || !ownedBy(sb, rec.cm.UID) || len(sb.OwnerReferences) != 1 || sb.Labels[labelWarmPool] != "" {
		t.Fatalf("the adopted Sandbox: %+v %v", sb, err)
	}
	claim, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "v0-"+first, metav1.GetOptions{})
	if _, tracked := claim.Labels[labelSandboxNameHash]; err != nil || tracked || len(claim.OwnerReferences) != 0 || !strings.HasPrefix(claim.Annotations[annName], prefix+"-ws_spare_") {
		t.Fatalf("the adopted workspace claim: %+v %v", claim, err)
	}
	vol := claim.Annotations[annName]
	if size, ok, err := rt.VolumeSize(ctx, vol); err != nil || !ok || size != 2<<30 {
		t.Fatalf("the size of workspace %s: %d %v %v", vol, size, ok, err)
	}
	second := pooled(first)
	t.Logf("the pool filled again: %s", second)
	// The pod goes (an eviction): the one made again, from the record's
	// template now, mounts the same workspace.
	if err := admin.CoreV1().Pods(ns).Delete(ctx, first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, out := run("cat /workspace/f"); out != "kept\n" {
		t.Fatalf("after the pod was made again: %q", out)
	}
	// A reset boots the sandbox anew on its workspace: the Sandbox that
	// was the pool's goes, and the claim it made stays.
	if _, err := m.Reset(ctx, "work", false); err != nil {
		t.Fatal(err)
	}
	if _, out := run("cat /workspace/f"); out != "kept\n" {
		t.Fatalf("after a reset: %q", out)
	}
	for {
		if sb, err := rt.getSandbox(ctx, first); err == nil && sb == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the reset left the pool's Sandbox")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, out := run("cat /workspace/f"); out != "kept\n" {
		t.Fatalf("after the old Sandbox went: %q", out)
	}
	if _, err := m.Destroy(ctx, "work"); err != nil {
		t.Fatal(err)
	}
	for {
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "v0-"+first, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && c.DeletionTimestamp != nil) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("destroy left the workspace claim: %+v %v", c, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.KeepSpares(0)
	name := poolObjectName(prefix, rec.labels[sandbox.LabelSpare])
	for {
		_, err := dyn.Resource(WarmPoolResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the pool with no spares kept: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tlog writes a Manager's log to the test's.
type tlog struct{ t *testing.T }

func (w tlog) Write(b []byte) (int, error) { w.t.Log(strings.TrimSpace(string(b))); return len(b), nil }

// TestAdoptionCutShort: an adoption a dead server left after its record
// is undone by the next reader once the record is past adoptGrace (and
// read as in use before), leaving the Sandbox in its pool; one left after
// the Sandbox was taken is finished by the next reader.
func TestAdoptionCutShort(t *testing.T) {
	ns, token, admin := namespace(t)
	kl := standIn(t, ns)
	cluster.RunAgentSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: 2 * time.Minute, SandboxCRD: true, WarmPools: true})
	if err != nil {
		t.Fatal(err)
	}
	prefix := kl.Node[:8]
	vol := prefix + "-ws_spare_" + sandbox.PooledSpareID
	labels := map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelRole: sandbox.RoleSpare, sandbox.LabelSpare: "0123456789abcdef", sandbox.LabelVolume: vol}
	spec := sandbox.RunSpec{Name: prefix + "_spare_" + sandbox.PooledSpareID, Image: "localhost/mcp-dev:latest", Labels: labels,
		Mounts: []sandbox.Mount{{Volume: vol, Target: "/workspace"}}, Workdir: "/workspace", Command: []string{"sleep", "infinity"}}
	if err := rt.KeepPools(ctx, prefix, []sandbox.PoolSpec{{Key: "0123456789abcdef", Spec: spec, Count: 2}}); err != nil {
		t.Fatal(err)
	}
	var spares []sandbox.Container
	for len(spares) < 2 {
		if spares, err = rt.Pooled(ctx, prefix); err != nil || ctx.Err() != nil {
			t.Fatalf("the pool's spares: %v %v", err, ctx.Err())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { adoptCut = nil; adoptGrace = 15 * time.Second })

	adoptCut = func(step string) bool { return step == "record" }
	if err := rt.Rename(ctx, spares[0].Name, prefix+"-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Inspect(ctx, prefix+"-a"); !errors.Is(err, sandbox.ErrInUse) {
		t.Fatalf("a record whose adoption is under way: %v", err)
	}
	adoptGrace = 0
	if _, err := rt.Inspect(ctx, prefix+"-a"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("a record whose adoption a dead server left before its Sandbox: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(prefix+"-a"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the record left: %v", err)
	}
	if now, _ := rt.Pooled(ctx, prefix); !slices.ContainsFunc(now, func(c sandbox.Container) bool { return c.ID == spares[0].ID }) {
		t.Fatalf("the Sandbox left the pool: %+v", now)
	}

	adoptCut = func(step string) bool { return step == "sandbox" }
	if err := rt.Rename(ctx, spares[1].Name, prefix+"-b"); err != nil {
		t.Fatal(err)
	}
	adoptCut = nil
	c, err := rt.Inspect(ctx, prefix+"-b")
	if err != nil || !c.Running() || c.ID != spares[1].ID {
		t.Fatalf("a sandbox whose adoption a dead server left after its Sandbox: %+v %v", c, err)
	}
	cm, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(prefix+"-b"), metav1.GetOptions{})
	if err != nil || cm.Annotations[annAdopting] != "" || cm.Annotations[annPodPrint] == "" {
		t.Fatalf("its record once finished: %+v %v", cm, err)
	}
	claim, err := rt.claimOf(ctx, c.Labels[sandbox.LabelVolume])
	if _, tracked := claim.Labels[labelSandboxNameHash]; err != nil || tracked {
		t.Fatalf("its workspace claim once finished: %+v %v", claim, err)
	}
	out, err := rt.Exec(ctx, prefix+"-b", sandbox.ExecSpec{Argv: []string{"sh", "-c", "echo ok > /workspace/x && cat /workspace/x"}})
	if err != nil || string(out.Stdout) != "ok\n" {
		t.Fatalf("a command in it: %+v %v", out, err)
	}
	// Another server sharing the prefix and keeping no pools leaves this
	// one's alone; this one, keeping none, deletes its own.
	other, err := New(cluster.Config(token), Options{Namespace: ns, SandboxCRD: true, WarmPools: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.KeepPools(ctx, prefix, nil); err != nil {
		t.Fatal(err)
	}
	pools := dynamicOf(t).Resource(WarmPoolResource).Namespace(ns)
	name := poolObjectName(prefix, "0123456789abcdef")
	if _, err := pools.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("another server's pool after a server without pools: %v", err)
	}
	if err := rt.KeepPools(ctx, prefix, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("its own pool after it keeps none: %v", err)
	}
}

func dynamicOf(t *testing.T) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cluster.Config(cluster.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}
