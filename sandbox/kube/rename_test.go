package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestRename: with only the rights rbac.yaml grants, a sandbox renamed
// keeps its ID, pod, workspace and labels under the new name and is gone
// under the old one, running or stopped, by name or by ID; a name in use
// is refused and nothing moves; a rename cut after any of its steps (as
// by a server killed there) leaves one sandbox under one of the two
// names, which the next reader or rename settles; and a sandbox booted
// again under a name whose pod a renamed one kept gets a pod of its own.
// In pod mode, and in sandbox mode, where the Sandbox is handed on with
// its pod.
func TestRename(t *testing.T) {
	t.Run("pods", func(t *testing.T) { testRename(t, false) })
	t.Run("sandboxes", func(t *testing.T) { testRename(t, true) })
}

func testRename(t *testing.T, crd bool) {
	ns, token, admin := namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubetest.PlayKubelet(ctx, admin, ns)
	if crd {
		cluster.RunAgentSandbox(t)
	}
	rt, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: time.Minute, SandboxCRD: crd})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := sandbox.RenamerOf(rt); !ok || r == nil {
		t.Fatal("RenamerOf: the runtime is no Renamer")
	}
	const owner = "smtr"
	run := func(name string) string {
		t.Helper()
		spec := sandbox.RunSpec{Name: name, Image: "localhost/mcp-dev:latest",
			Labels:  map[string]string{sandbox.LabelOwner: owner, sandbox.LabelRole: sandbox.RoleSpare, "k": "v"},
			Command: []string{"sleep", "infinity"}}
		id, err := rt.Run(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	gone := func(name string) {
		t.Helper()
		if c, err := rt.Inspect(ctx, name); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("%s is still there: %+v %v", name, c, err)
		}
	}
	is := func(name, id string, running bool) {
		t.Helper()
		c, err := rt.Inspect(ctx, name)
		if err != nil || c.ID != id || c.Name != name || c.Running() != running || c.Labels["k"] != "v" {
			t.Fatalf("%s: %+v %v (want ID %s, running %v)", name, c, err, id, running)
		}
		if byID, err := rt.Inspect(ctx, id); err != nil || byID.Name != name {
			t.Fatalf("%s by its ID: %+v %v", id, byID, err)
		}
	}
	listed := func() []string {
		t.Helper()
		cs, err := rt.List(ctx, map[string]string{sandbox.LabelOwner: owner})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range cs {
			names = append(names, c.Name)
		}
		slices.Sort(names)
		return names
	}
	podOf := func(id string) *corev1.Pod {
		t.Helper()
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The record's own, or in sandbox mode its Sandbox's.
		owner := types.UID("")
		if rec, err := rt.record(ctx, id); err == nil {
			owner = rec.cm.UID
			if crd {
				sb, err := rt.getSandbox(ctx, podNameOf(rec.cm))
				if err != nil || sb == nil || !ownedBy(sb, rec.cm.UID) || sb.Annotations[annName] != rec.cm.Annotations[annName] {
					t.Fatalf("the Sandbox of %s: %+v %v", id, sb, err)
				}
				owner = sb.UID
			}
		}
		var got *corev1.Pod
		for i := range pods.Items {
			for _, o := range pods.Items[i].OwnerReferences {
				if owner != "" && o.UID == owner {
					if got != nil {
						t.Fatalf("two pods of %s", id)
					}
					got = &pods.Items[i]
				}
			}
		}
		return got
	}

	// A running sandbox, by name then by ID.
	id := run("smtr_spare_1")
	before := podOf(id)
	if err := rt.Rename(ctx, "smtr_spare_1", "smtr-one"); err != nil {
		t.Fatal(err)
	}
	is("smtr-one", id, true)
	gone("smtr_spare_1")
	if p := podOf(id); p == nil || p.UID != before.UID || p.Annotations[annName] != "smtr-one" {
		t.Fatalf("the pod after the rename: %+v (was %s)", p, before.UID)
	}
	if got := listed(); !slices.Equal(got, []string{"smtr-one"}) {
		t.Fatalf("listed: %v", got)
	}
	if err := rt.Rename(ctx, id, "smtr-two"); err != nil {
		t.Fatal(err)
	}
	is("smtr-two", id, true)
	gone("smtr-one")
	if crd {
		// What read the sandbox before a rename cannot touch it after: a
		// stop's patch of the Sandbox, a deletion of its pod; a pod whose
		// name annotation lags (a controller's stale pass) is still the
		// sandbox's; a server in pod mode refuses to rename it.
		stale, err := rt.record(ctx, "smtr-two")
		if err != nil {
			t.Fatal(err)
		}
		staleSb, err := rt.getSandbox(ctx, podNameOf(stale.cm))
		if err != nil || staleSb == nil {
			t.Fatalf("the Sandbox: %v", err)
		}
		if err := rt.Rename(ctx, "smtr-two", "smtr-two-b"); err != nil {
			t.Fatal(err)
		}
		if err := rt.setMode(ctx, staleSb, modeSuspended); !errors.Is(err, sandbox.ErrInUse) {
			t.Fatalf("a stop that read the Sandbox before its rename: %v", err)
		}
		if err := rt.suspendSandbox(ctx, stale); !errors.Is(err, sandbox.ErrInUse) {
			t.Fatalf("a stop that read the record before its rename: %v", err)
		}
		if err := rt.deleteOwnedPod(ctx, stale, time.Second); !errors.Is(err, sandbox.ErrInUse) {
			t.Fatalf("a deletion that read the pod before its rename: %v", err)
		}
		p := podOf(id)
		if p == nil {
			t.Fatal("a deletion that read the pod before its rename deleted it")
		}
		// The pod's name annotation as first made (its Sandbox's
		// controller at a stale pass): still the sandbox's, and no
		// removal of that first name takes it.
		// (In its template too, so that the controller keeps it so.)
		patch := []byte(`{"metadata":{"annotations":{"sandbox-mcp.io/name":"smtr_spare_1"}}}`)
		if _, err := rt.sandboxes().Patch(ctx, p.Name, types.MergePatchType, []byte(`{"spec":{"podTemplate":`+string(patch)+`}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		is("smtr-two-b", id, true)
		if err := rt.Remove(ctx, "smtr_spare_1"); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("a removal of the sandbox's first name: %v", err)
		}
		if now := podOf(id); now == nil || now.UID != p.UID {
			t.Fatal("a removal of the sandbox's first name took its pod")
		}
		is("smtr-two-b", id, true)
		podRT, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := podRT.Rename(ctx, "smtr-two-b", "smtr-two-c"); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("a rename in pod mode of a sandbox a Sandbox made: %v", err)
		}
		// A rename cut after its commit, read by a server in pod mode:
		// it does not finish it (the old record owns the Sandbox), and a
		// server in sandbox mode does.
		renameCut = func(step string) bool { return step == "commit" }
		err = rt.Rename(ctx, "smtr-two-b", "smtr-two")
		renameCut = nil
		if err != nil {
			t.Fatal(err)
		}
		if _, err := podRT.Inspect(ctx, "smtr-two"); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("a server in pod mode reading a sandbox-mode rename cut after its commit: %v", err)
		}
		is("smtr-two", id, true)
		if now := podOf(id); now == nil || now.UID != p.UID {
			t.Fatal("the sandbox lost its pod to a rename a server in pod mode read")
		}

		// Stopped too, the sandbox is its Sandbox's, and its record says
		// so: a server in pod mode does not stop, start (a pod of its own
		// beside the suspended Sandbox) or rename it, nor finish a rename
		// of it (the old record's deletion would take the Sandbox).
		if err := podRT.Stop(ctx, "smtr-two", time.Second); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("a stop in pod mode of a sandbox a Sandbox made: %v", err)
		}
		// A record without the mark (made before it was kept) gets it
		// on the new record when its Sandbox is handed on.
		unmark := []byte(`{"metadata":{"annotations":{"` + annPodsFrom + `":null}}}`)
		if _, err := admin.CoreV1().ConfigMaps(ns).Patch(ctx, objectName("smtr-two"), types.MergePatchType, unmark, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := rt.Rename(ctx, "smtr-two", "smtr-two-m"); err != nil {
			t.Fatal(err)
		}
		if rec, err := rt.record(ctx, "smtr-two-m"); err != nil || rec.cm.Annotations[annPodsFrom] != sandboxKind {
			t.Fatalf("the record a Sandbox was handed on to: %+v %v", rec.cm, err)
		}
		if err := rt.Rename(ctx, "smtr-two-m", "smtr-two"); err != nil {
			t.Fatal(err)
		}
		if err := rt.Stop(ctx, "smtr-two", time.Second); err != nil {
			t.Fatal(err)
		}
		if err := podRT.Start(ctx, "smtr-two"); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("a start in pod mode of a stopped sandbox a Sandbox made: %v", err)
		}
		if err := podRT.Rename(ctx, "smtr-two", "smtr-two-c"); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("a rename in pod mode of a stopped sandbox a Sandbox made: %v", err)
		}
		renameCut = func(step string) bool { return step == "commit" }
		err = rt.Rename(ctx, "smtr-two", "smtr-two-d")
		renameCut = nil
		if err != nil {
			t.Fatal(err)
		}
		if _, err := podRT.Inspect(ctx, "smtr-two-d"); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("a server in pod mode reading a rename of a stopped sandbox-mode sandbox cut after its commit: %v", err)
		}
		if sb, err := rt.getSandbox(ctx, p.Name); err != nil || sb == nil {
			t.Fatalf("the stopped sandbox's Sandbox after a server in pod mode read its rename: %+v %v", sb, err)
		}
		is("smtr-two-d", id, false)
		if err := rt.Rename(ctx, "smtr-two-d", "smtr-two"); err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(ctx, "smtr-two"); err != nil {
			t.Fatal(err)
		}
		is("smtr-two", id, true)

		// A sandbox a server in pod mode made, started in sandbox mode,
		// is its Sandbox's from then on, and its record says so.
		pmSpec := sandbox.RunSpec{Name: "smtr-pm", Image: "localhost/mcp-dev:latest",
			Labels: map[string]string{sandbox.LabelOwner: owner, "k": "v"}, Command: []string{"sleep", "infinity"}}
		if _, err := podRT.Run(ctx, pmSpec); err != nil {
			t.Fatal(err)
		}
		if err := podRT.Stop(ctx, "smtr-pm", time.Second); err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(ctx, "smtr-pm"); err != nil {
			t.Fatal(err)
		}
		if rec, err := rt.record(ctx, "smtr-pm"); err != nil || rec.podOwner == "" || rec.cm.Annotations[annPodsFrom] != sandboxKind {
			t.Fatalf("a pod-mode sandbox started in sandbox mode: %+v %v", rec.cm, err)
		}
		if err := podRT.Stop(ctx, "smtr-pm", time.Second); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("a stop in pod mode of a sandbox now a Sandbox's: %v", err)
		}
		if err := rt.Remove(ctx, "smtr-pm"); err != nil {
			t.Fatal(err)
		}

		// A mark with no Sandbox behind it (a server in sandbox mode
		// killed between the two) refuses nothing.
		pmSpec.Name = "smtr-pm2"
		if _, err := podRT.Run(ctx, pmSpec); err != nil {
			t.Fatal(err)
		}
		mark := []byte(`{"metadata":{"annotations":{"` + annPodsFrom + `":"` + sandboxKind + `"}}}`)
		if _, err := admin.CoreV1().ConfigMaps(ns).Patch(ctx, objectName("smtr-pm2"), types.MergePatchType, mark, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := podRT.Stop(ctx, "smtr-pm2", time.Second); err != nil {
			t.Fatalf("a stop in pod mode of a sandbox marked with no Sandbox: %v", err)
		}
		if err := podRT.Start(ctx, "smtr-pm2"); err != nil {
			t.Fatalf("a start in pod mode of a sandbox marked with no Sandbox: %v", err)
		}
		if err := podRT.Remove(ctx, "smtr-pm2"); err != nil {
			t.Fatal(err)
		}
	}

	// A name in use is refused, and nothing moves.
	other := run("smtr-other")
	if err := rt.Rename(ctx, "smtr-two", "smtr-other"); !errors.Is(err, sandbox.ErrAlreadyExists) {
		t.Fatalf("a rename onto a sandbox: %v", err)
	}
	is("smtr-two", id, true)
	is("smtr-other", other, true)

	// Stopped: renamed, then started under its new name.
	if err := rt.Stop(ctx, "smtr-two", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rt.Rename(ctx, "smtr-two", "smtr-three"); err != nil {
		t.Fatal(err)
	}
	is("smtr-three", id, false)
	gone("smtr-two")
	if err := rt.Start(ctx, "smtr-three"); err != nil {
		t.Fatal(err)
	}
	is("smtr-three", id, true)

	// Cut after each step, running and stopped.
	t.Cleanup(func() { renameCut = nil; renameGrace = 15 * time.Second })
	renameGrace = 2 * time.Second
	for _, tc := range []struct {
		step    string
		stopped bool
		moved   bool // the rename committed
	}{
		{"record", false, false}, {"commit", false, true}, {"pod", false, true}, {"marks", false, true},
		{"record", true, false}, {"commit", true, true}, {"marks", true, true},
	} {
		from, to := "smtr-cut-a", "smtr-cut-b"
		cid := run(from)
		if tc.stopped {
			if err := rt.Stop(ctx, from, time.Second); err != nil {
				t.Fatal(err)
			}
		}
		renameCut = func(step string) bool { return step == tc.step }
		if err := rt.Rename(ctx, from, to); err != nil {
			t.Fatalf("cut after %s: %v", tc.step, err)
		}
		renameCut = nil
		now, was := from, to
		if tc.moved {
			now, was = to, from
		}
		// Read first under the name it no longer has (and listed), before
		// a read under its name finishes the rename.
		gone(was)
		if got := listed(); !slices.Contains(got, now) || slices.Contains(got, was) {
			t.Fatalf("cut after %s (stopped %v): listed %v", tc.step, tc.stopped, got)
		}
		is(now, cid, !tc.stopped)
		if !tc.moved {
			// The next rename waits out the dead one's record, then moves
			// the sandbox.
			if err := rt.Rename(ctx, from, to); err != nil {
				t.Fatalf("a rename after one cut after %s: %v", tc.step, err)
			}
			is(to, cid, !tc.stopped)
			gone(from)
		}
		// Settled: one record of the ID, without the marks.
		cms, err := admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, cm := range cms.Items {
			if idOf(&cm) == cid {
				n++
				if renaming(&cm) {
					t.Errorf("cut after %s: the record %s still says a rename is under way", tc.step, cm.Name)
				}
			}
		}
		if n != 1 {
			t.Fatalf("cut after %s: %d records of %s", tc.step, n, cid)
		}
		if err := rt.Remove(ctx, to); err != nil {
			t.Fatal(err)
		}
	}

	// A rename cut before its commit, then the sandbox removed: the new
	// record was abandoned, and its reader deletes it.
	countID := func(id string) int {
		t.Helper()
		cms, err := admin.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, cm := range cms.Items {
			if idOf(&cm) == id {
				n++
			}
		}
		return n
	}
	lost := run("smtr-lost")
	renameCut = func(step string) bool { return step == "record" }
	if err := rt.Rename(ctx, "smtr-lost", "smtr-lost-b"); err != nil {
		t.Fatal(err)
	}
	renameCut = nil
	if err := rt.Remove(ctx, "smtr-lost"); err != nil {
		t.Fatal(err)
	}
	gone("smtr-lost-b")
	gone("smtr-lost")
	if n := countID(lost); n != 0 {
		t.Fatalf("%d records of a removed sandbox whose rename was cut", n)
	}
	// A rename cut before its commit whose names are never read again:
	// a List past the grace gives it up, and the sandbox stays as it was.
	stall := run("smtr-stall")
	renameCut = func(step string) bool { return step == "record" }
	if err := rt.Rename(ctx, "smtr-stall", "smtr_old_stall"); err != nil {
		t.Fatal(err)
	}
	renameCut = nil
	if n := countID(stall); n != 2 {
		t.Fatalf("%d records of a sandbox whose rename was cut after its new record", n)
	}
	time.Sleep(renameGrace + time.Second)
	listed()
	if n := countID(stall); n != 1 {
		t.Fatalf("%d records of a sandbox whose cut rename a List past the grace saw", n)
	}
	is("smtr-stall", stall, true)
	if err := rt.Remove(ctx, "smtr-stall"); err != nil {
		t.Fatal(err)
	}

	// Two renames of one sandbox, the first cut before its commit: the
	// second wins, and the first's record is abandoned.
	twice := run("smtr-twice")
	renameCut = func(step string) bool { return step == "record" }
	if err := rt.Rename(ctx, "smtr-twice", "smtr-twice-y"); err != nil {
		t.Fatal(err)
	}
	renameCut = nil
	if err := rt.Rename(ctx, "smtr-twice", "smtr-twice-z"); err != nil {
		t.Fatal(err)
	}
	is("smtr-twice-z", twice, true)
	gone("smtr-twice-y")
	gone("smtr-twice")
	if n := countID(twice); n != 1 {
		t.Fatalf("%d records of a sandbox renamed twice", n)
	}
	if err := rt.Remove(ctx, "smtr-twice-z"); err != nil {
		t.Fatal(err)
	}

	// A reset's way: the sandbox moves aside with its pod, a new one boots
	// under the name (its pod under a name of its own), both run, and the
	// old one goes.
	first := run("smtr-reset")
	if err := rt.Rename(ctx, first, "smtr_old_1"); err != nil {
		t.Fatal(err)
	}
	second := run("smtr-reset")
	is("smtr-reset", second, true)
	is("smtr_old_1", first, true)
	p1, p2 := podOf(first), podOf(second)
	if p1 == nil || p2 == nil || p1.Name == p2.Name {
		t.Fatalf("the two pods: %v %v", p1, p2)
	}
	if err := rt.Remove(ctx, "smtr_old_1"); err != nil {
		t.Fatal(err)
	}
	gone("smtr_old_1")
	is("smtr-reset", second, true)
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, p1.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the old pod: %v", err)
	}

	// A removal and a rename of one sandbox at once (as by two servers).
	// One wins whole: the sandbox is gone under both names, or runs under
	// the new one with its pod; never under the new name without it.
	t.Cleanup(func() { removeStep = nil })
	records := func(id string) {
		t.Helper()
		if n := countID(id); n != 0 {
			t.Fatalf("%d records of a sandbox removed while renamed", n)
		}
	}
	// The rename commits after the removal read the record, before its
	// mark: the removal finds the commit and leaves the sandbox, whose
	// pod the rename's reader then hands on. By its ID, too, once the
	// rename ended.
	for _, byID := range []bool{false, true} {
		race := run("smtr-race")
		ref := "smtr-race"
		if byID {
			ref = race
		}
		var renameErr error
		removeStep = func(step string) bool {
			if step == "read" {
				if !byID {
					renameCut = func(step string) bool { return step == "commit" }
				}
				renameErr = rt.Rename(ctx, "smtr-race", "smtr-race-b")
				renameCut = nil
			}
			return false
		}
		removeErr := rt.Remove(ctx, ref)
		removeStep = nil
		if renameErr != nil || !errors.Is(removeErr, sandbox.ErrInUse) {
			t.Fatalf("a rename committed while a removal (by ID %v) read the record: rename %v, removal %v", byID, renameErr, removeErr)
		}
		is("smtr-race-b", race, true)
		if podOf(race) == nil {
			t.Fatal("the renamed sandbox lost its pod to the removal")
		}
		gone("smtr-race")
		if err := rt.Remove(ctx, "smtr-race-b"); err != nil {
			t.Fatal(err)
		}
		gone("smtr-race-b")
		records(race)
	}
	// The removal marks the record after the rename read it, before its
	// commit: the rename gives up, and the removal takes the sandbox.
	race := run("smtr-race")
	var removeErr error
	renameCut = func(step string) bool {
		if step == "record" {
			removeStep = func(step string) bool { return step == "mark" }
			removeErr = rt.Remove(ctx, "smtr-race")
			removeStep = nil
		}
		return false
	}
	renameErr := rt.Rename(ctx, "smtr-race", "smtr-race-b")
	renameCut = nil
	if !errors.Is(renameErr, sandbox.ErrInUse) || removeErr != nil {
		t.Fatalf("a removal marked the record before a rename's commit: rename %v, removal %v", renameErr, removeErr)
	}
	gone("smtr-race-b")
	if err := rt.Remove(ctx, "smtr-race"); err != nil {
		t.Fatal(err)
	}
	gone("smtr-race")
	records(race)

	// A removal cut after its commit: the sandbox reads as stopped (its
	// pod may run on); a rename or a start is refused, saying so, until
	// the next removal finishes it.
	halfGone := run("smtr-halfgone")
	removeStep = func(step string) bool { return step == "mark" }
	if err := rt.Remove(ctx, "smtr-halfgone"); err != nil {
		t.Fatal(err)
	}
	removeStep = nil
	is("smtr-halfgone", halfGone, false)
	hp := podOf(halfGone)
	if hp == nil {
		t.Fatal("a removal cut after its mark deleted the pod")
	}
	if err := rt.Rename(ctx, "smtr-halfgone", "smtr-halfgone-b"); !errors.Is(err, sandbox.ErrInUse) || !strings.Contains(err.Error(), "destroy it again") {
		t.Fatalf("a rename of a sandbox whose removal began: %v", err)
	}
	if err := rt.Start(ctx, "smtr-halfgone"); !errors.Is(err, sandbox.ErrInUse) || !strings.Contains(err.Error(), "destroy it again") {
		t.Fatalf("a start of a sandbox whose removal began: %v", err)
	}
	gone("smtr-halfgone-b")
	if err := rt.Remove(ctx, "smtr-halfgone"); err != nil {
		t.Fatal(err)
	}
	gone("smtr-halfgone")
	records(halfGone)
	if p, err := admin.CoreV1().Pods(ns).Get(ctx, hp.Name, metav1.GetOptions{}); err == nil && p.UID == hp.UID {
		t.Fatalf("the pod of a sandbox whose cut removal was finished is still there: %s", p.Name)
	}

	// A start and a removal at once: the removal runs whole after the
	// start read the record, before it made the pod. The start fails and
	// takes back the pod it made, whose record is gone.
	t.Cleanup(func() { startStep = nil })
	late := run("smtr-late")
	if err := rt.Stop(ctx, "smtr-late", time.Second); err != nil {
		t.Fatal(err)
	}
	var lateRemoved error
	startStep = func(string) {
		startStep = nil
		lateRemoved = rt.Remove(ctx, "smtr-late")
	}
	if err := rt.Start(ctx, "smtr-late"); !errors.Is(err, sandbox.ErrInUse) || lateRemoved != nil {
		t.Fatalf("a start the removal of its sandbox overtook: start %v, removal %v", err, lateRemoved)
	}
	gone("smtr-late")
	records(late)
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Annotations[annName] == "smtr-late" && p.DeletionTimestamp == nil {
			t.Fatalf("a pod of a removed sandbox, made by a start it overtook: %s", p.Name)
		}
	}

	// A start and a rename at once: the rename commits after the start
	// read the record, before it made the pod. The start finishes the
	// rename, and the sandbox runs under its new name with that pod.
	moving := run("smtr-moving")
	if err := rt.Stop(ctx, "smtr-moving", time.Second); err != nil {
		t.Fatal(err)
	}
	var renamed error
	startStep = func(string) {
		startStep = nil
		renameCut = func(step string) bool { return step == "commit" }
		renamed = rt.Rename(ctx, "smtr-moving", "smtr-moved")
		renameCut = nil
	}
	if err := rt.Start(ctx, "smtr-moving"); err != nil || renamed != nil {
		t.Fatalf("a start a rename overtook: start %v, rename %v", err, renamed)
	}
	is("smtr-moved", moving, true)
	gone("smtr-moving")
	if err := rt.Remove(ctx, "smtr-moved"); err != nil {
		t.Fatal(err)
	}
	records(moving)
}
