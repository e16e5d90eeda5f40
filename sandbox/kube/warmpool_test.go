package kube

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

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
	f := newPoolCluster(t)
	ctx, ns, admin, rt, prefix := f.ctx, f.ns, f.admin, f.rt, f.prefix
	dyn := dynamicOf(t)
	dir := t.TempDir()
	st, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
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
	name := poolObjectName(prefix, rec.labels[sandbox.LabelSpare], rec.labels[sandbox.LabelCA])
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
	f := newPoolFixture(t, 2)
	ctx, ns, admin, rt, prefix := f.ctx, f.ns, f.admin, f.rt, f.prefix
	spares := f.waitPooled(2)
	adoptCut = func(step string) bool { return step == "record" }
	if err := rt.Rename(ctx, spares[0].Name, prefix+"-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Inspect(ctx, prefix+"-a"); !errors.Is(err, sandbox.ErrInUse) {
		t.Fatalf("a record whose adoption is under way: %v", err)
	}
	listed := func(name string) bool {
		t.Helper()
		cs, err := rt.List(ctx, map[string]string{sandbox.LabelOwner: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(cs, func(c sandbox.Container) bool { return c.Name == name })
	}
	if listed(prefix + "-a") {
		t.Fatal("a record whose adoption is under way is listed")
	}
	// A server in pod mode reaches no Sandbox: it refuses, and leaves
	// the adoption whole.
	podMode, err := New(cluster.Config(f.token), Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	adoptGrace = 0 // past its grace from here on: even so not given up in pod mode
	if _, err := podMode.Inspect(ctx, prefix+"-a"); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("a server in pod mode reading an adoption: %v", err)
	}
	if _, err := podMode.List(ctx, nil); err != nil {
		t.Fatalf("a server in pod mode listing an adoption: %v", err)
	}
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(prefix+"-a"), metav1.GetOptions{}); err != nil {
		t.Fatalf("the record after a server in pod mode read it: %v", err)
	}
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
	if !listed(prefix + "-b") {
		t.Fatal("a sandbox whose Sandbox is taken is not listed before its adoption is finished")
	}
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
	other := f.server()
	if err := other.KeepPools(ctx, prefix, nil); err != nil {
		t.Fatal(err)
	}
	pools := dynamicOf(t).Resource(WarmPoolResource).Namespace(ns)
	templates := dynamicOf(t).Resource(TemplateResource).Namespace(ns)
	name := poolObjectName(prefix, f.key, "")
	before, err := templates.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("another server's pool after a server without pools: %v", err)
	}
	// One of another egress CA (its own state directory) keeping the
	// same kind of spare keeps a pool of its own: this one's template
	// is not rewritten.
	spec := f.spec
	spec.Labels = maps.Clone(spec.Labels)
	spec.Labels[sandbox.LabelCA] = "00ff00ff00ff00ff"
	if err := other.KeepPools(ctx, prefix, []sandbox.PoolSpec{{Key: f.key, Spec: spec, Count: 0}}); err != nil {
		t.Fatal(err)
	}
	theirs := poolObjectName(prefix, f.key, "00ff00ff00ff00ff")
	if _, err := pools.Get(ctx, theirs, metav1.GetOptions{}); theirs == name || err != nil {
		t.Fatalf("the pool of a server of another CA: %s %v", theirs, err)
	}
	if after, err := templates.Get(ctx, name, metav1.GetOptions{}); err != nil || after.GetAnnotations()[annTemplatePrint] != before.GetAnnotations()[annTemplatePrint] {
		t.Fatalf("this server's template after one of another CA kept its pool: %v", err)
	}
	if err := other.KeepPools(ctx, prefix, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Get(ctx, theirs, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the other server's pool after it keeps none: %v", err)
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

// poolFixture is a namespace with a kubelet stand-in and agent-sandbox's
// controllers, and a runtime keeping one warm pool of spec there.
type poolFixture struct {
	t      *testing.T
	ctx    context.Context
	ns     string
	token  string
	admin  kubernetes.Interface
	rt     *Runtime
	prefix string
	key    string
	spec   sandbox.RunSpec
}

// newPoolFixture starts a fixture whose runtime keeps a pool of count.
func newPoolFixture(t *testing.T, count int) *poolFixture {
	t.Helper()
	f := newPoolCluster(t)
	f.keep(f.rt, count)
	return f
}

// newPoolCluster starts a fixture whose runtime keeps no pool yet.
func newPoolCluster(t *testing.T) *poolFixture {
	t.Helper()
	ns, token, admin := namespace(t)
	kl := standIn(t, ns)
	cluster.RunAgentSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	t.Cleanup(func() { adoptCut = nil; adoptGrace = 15 * time.Second })
	f := &poolFixture{t: t, ctx: ctx, ns: ns, token: token, admin: admin, prefix: kl.Node[:8], key: "0123456789abcdef"}
	f.rt = f.server()
	vol := f.prefix + "-ws_spare_" + sandbox.PooledSpareID
	labels := map[string]string{sandbox.LabelOwner: f.prefix, sandbox.LabelRole: sandbox.RoleSpare, sandbox.LabelSpare: f.key, sandbox.LabelVolume: vol}
	f.spec = sandbox.RunSpec{Name: f.prefix + "_spare_" + sandbox.PooledSpareID, Image: "localhost/mcp-dev:latest", Labels: labels,
		Mounts: []sandbox.Mount{{Volume: vol, Target: "/workspace"}}, Workdir: "/workspace", Command: []string{"sleep", "infinity"}}
	return f
}

// server is another runtime on the fixture's namespace, as a server of
// the same prefix would make.
func (f *poolFixture) server() *Runtime {
	f.t.Helper()
	rt, err := New(cluster.Config(f.token), Options{Namespace: f.ns, StartTimeout: 2 * time.Minute, SandboxCRD: true, WarmPools: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return rt
}

// keep has rt keep the fixture's pool at count.
func (f *poolFixture) keep(rt *Runtime, count int) {
	f.t.Helper()
	if err := rt.KeepPools(f.ctx, f.prefix, []sandbox.PoolSpec{{Key: f.key, Spec: f.spec, Count: count}}); err != nil {
		f.t.Fatal(err)
	}
}

// waitPooled waits for the pool to hold n ready spares, and returns them.
func (f *poolFixture) waitPooled(n int) []sandbox.Container {
	f.t.Helper()
	for {
		spares, err := f.rt.Pooled(f.ctx, f.prefix)
		if err != nil || f.ctx.Err() != nil {
			f.t.Fatalf("the pool's spares: %v %v", err, f.ctx.Err())
		}
		if len(spares) >= n {
			return spares
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pauseAfterRecord holds the next adoption once its record is made,
// until the returned resume is called; paused is closed when it holds.
func pauseAfterRecord(t *testing.T) (paused <-chan struct{}, resume func()) {
	p, r := make(chan struct{}), make(chan struct{})
	var taken atomic.Bool
	adoptCut = func(step string) bool {
		// Only the first caller waits: the others (another runtime's
		// adoption) go on.
		if step == "record" && taken.CompareAndSwap(false, true) {
			close(p)
			<-r
		}
		return false
	}
	var resumed sync.Once
	resume = func() { resumed.Do(func() { close(r) }) }
	t.Cleanup(resume)
	return p, resume
}

// claimResource is agent-sandbox's SandboxClaim, which the runtime
// does not use: its tests make one to race an adoption.
var claimResource = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}

// TestAdoptionRaces: two takers of one pool Sandbox, the other taking it
// between this adoption's record and its take: a server sharing the
// prefix, then a SandboxClaim through agent-sandbox's own controller.
// The late adoption fails as a spare gone (the Manager tries its next),
// leaves no record, and the winner's sandbox is untouched.
func TestAdoptionRaces(t *testing.T) {
	f := newPoolFixture(t, 1)
	ctx, ns, rt, prefix := f.ctx, f.ns, f.rt, f.prefix
	other := f.server()
	f.keep(other, 1)
	lost := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("the adoption that lost the race: %v", err)
		}
		if _, err := f.admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the losing adoption's record: %v", err)
		}
		if _, err := rt.Inspect(ctx, name); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("the losing adoption's name: %v", err)
		}
	}
	race := func(spare, name string, winner func()) {
		t.Helper()
		paused, resume := pauseAfterRecord(t)
		done := make(chan error, 1)
		go func() { done <- rt.Rename(ctx, spare, name) }()
		select {
		case <-paused:
		case err := <-done:
			t.Fatalf("the adoption did not reach its record: %v", err)
		}
		winner()
		resume()
		lost(name, <-done)
	}

	spare := f.waitPooled(1)[0]
	race(spare.Name, prefix+"-a", func() {
		if err := other.Rename(ctx, spare.Name, prefix+"-b"); err != nil {
			t.Fatalf("the other server's adoption: %v", err)
		}
	})
	c, err := other.Inspect(ctx, prefix+"-b")
	if err != nil || !c.Running() || c.ID != spare.ID {
		t.Fatalf("the other server's sandbox: %+v %v", c, err)
	}
	if out, err := other.Exec(ctx, prefix+"-b", sandbox.ExecSpec{Argv: []string{"true"}}); err != nil || out.ExitCode != 0 {
		t.Fatalf("a command in the other server's sandbox: %+v %v", out, err)
	}

	// agent-sandbox's SandboxClaim on the same pool takes the next one.
	spares := f.waitPooled(1)
	ps, err := rt.pooled(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	sbName := ""
	for _, p := range ps {
		if string(p.sb.UID) == spares[0].ID {
			sbName = p.sb.Name
		}
	}
	if sbName == "" {
		t.Fatalf("spare %s is not in the pool: %+v", spares[0].ID, ps)
	}
	claims := dynamicOf(t).Resource(claimResource).Namespace(ns)
	var claimed *sandboxObject
	race(spares[0].Name, prefix+"-c", func() {
		claim := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": extensionsAPIVersion, "kind": "SandboxClaim",
			"metadata": map[string]any{"name": "theirs"},
			"spec":     map[string]any{"warmPoolRef": map[string]any{"name": poolObjectName(prefix, f.key, "")}},
		}}
		made, err := claims.Create(ctx, claim, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for ctx.Err() == nil {
			c, err := claims.Get(ctx, made.GetName(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.GetAnnotations()["agents.x-k8s.io/sandbox-name"]; got != "" && got != sbName {
				t.Fatalf("the SandboxClaim took %s, not the pool's one Sandbox %s", got, sbName)
			}
			sb, err := rt.getSandbox(ctx, sbName)
			if err != nil {
				t.Fatal(err)
			}
			if sb != nil && ownedBy(sb, made.GetUID()) {
				claimed = sb
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatal("the SandboxClaim took no Sandbox:", ctx.Err())
	})
	sb, err := rt.getSandbox(ctx, claimed.Name)
	if err != nil || sb == nil || sb.UID != claimed.UID || len(sb.OwnerReferences) != 1 || sb.OwnerReferences[0].Kind != "SandboxClaim" {
		t.Fatalf("the claim's Sandbox after the lost adoption: %+v %v", sb, err)
	}
	if sb.Annotations[annName] != "" {
		t.Fatalf("the claim's Sandbox carries a sandbox's name: %v", sb.Annotations)
	}
}
