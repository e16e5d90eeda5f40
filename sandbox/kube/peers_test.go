package kube

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestPeersAsNetworkPolicy: on a cluster that enforces NetworkPolicy (the
// kubelet stand-in does, inside each pod), sandboxes reach each other as
// on the engines' networks: a server's root sandboxes, and its children
// that may reach every sandbox, reach each other; a child kept to its
// family reaches its root and is reached by it, and by nothing else;
// another server's sandboxes reach none of these. The family's policy is
// owned by its root's record and taken over by a root made again under
// the name; a policy of ours that was changed to let more in stops the
// next pod it would select.
func TestPeersAsNetworkPolicy(t *testing.T) {
	ns, admin, _, rt := onStandIn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Each pod answers "hi" on port 8000, one connection at a time.
	serve := []string{"sh", "-c", "while :; do echo hi | nc -l -p 8000; done"}
	run := func(prefix, name string, labels map[string]string) (ctr, ip string) {
		t.Helper()
		ctr = prefix + "-" + name
		ls := map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: name}
		for k, v := range labels {
			ls[k] = v
		}
		if _, err := rt.Run(ctx, sandbox.RunSpec{Name: ctr, Image: testImage, Labels: ls, Command: serve}); err != nil {
			t.Fatalf("run %s: %v", ctr, err)
		}
		c, err := rt.Inspect(ctx, ctr)
		if err != nil || c.IP == "" {
			t.Fatalf("inspect %s: %+v %v", ctr, c, err)
		}
		return ctr, c.IP
	}
	child := func(parent, family string) map[string]string {
		ls := map[string]string{sandbox.LabelChildOf: parent, sandbox.LabelRole: "child"}
		if family != "" {
			ls[sandbox.LabelFamily] = family
		}
		return ls
	}
	ctrs, ips := map[string]string{}, map[string]string{}
	for _, s := range []struct {
		prefix, name string
		labels       map[string]string
	}{
		{"smtp", "a", nil}, {"smtp", "b", nil},
		{"smtp", "a-fam", child("a", "a")}, {"smtp", "a-all", child("a", "")},
		{"smtq", "c", nil},
	} {
		ctrs[s.name], ips[s.name] = run(s.prefix, s.name, s.labels)
	}

	// probe connects from one pod to another's address: "hi" is an
	// answer; a connection that times out was dropped on the way in.
	probe := func(from, to string) string {
		out, err := rt.Exec(ctx, ctrs[from], sandbox.ExecSpec{Argv: []string{"sh", "-c", "echo | nc -w 3 " + ips[to] + " 8000 2>&1"}})
		if err != nil {
			return err.Error()
		}
		return strings.TrimSpace(string(out.Stdout))
	}
	cases := []struct {
		from, to string
		reach    bool
	}{
		{"a", "b", true}, {"b", "a", true},
		{"a", "a-fam", true}, {"a-fam", "a", true},
		{"a-all", "b", true}, {"b", "a-all", true}, {"a", "a-all", true},
		{"a-fam", "b", false}, {"b", "a-fam", false},
		{"a-fam", "a-all", false}, {"a-all", "a-fam", false},
		{"c", "a", false}, {"a", "c", false}, {"c", "a-fam", false},
	}
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Go(func() {
			got := probe(c.from, c.to)
			// A pod between two connections refuses one: tried again.
			for deadline := time.Now().Add(20 * time.Second); c.reach && got != "hi" && time.Now().Before(deadline); {
				time.Sleep(200 * time.Millisecond)
				got = probe(c.from, c.to)
			}
			if c.reach && got != "hi" {
				t.Errorf("%s does not reach %s: %s", c.from, c.to, got)
			}
			if !c.reach && (got == "hi" || !strings.Contains(got, "timed out")) {
				t.Errorf("%s reaches %s, or was refused rather than kept out: %q", c.from, c.to, got)
			}
		})
	}
	wg.Wait()

	// What the server sees: each pod's groups, by the names the hosts
	// entries and network_info go by.
	for name, want := range map[string]string{"a": PodNetwork + "," + FamilyNetwork("a"), "a-fam": FamilyNetwork("a"), "a-all": PodNetwork} {
		c, err := rt.Inspect(ctx, ctrs[name])
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range c.Networks {
			got = append(got, n.Network)
			if n.IP != ips[name] {
				t.Errorf("%s on %s at %s, want its pod's address %s", name, n.Network, n.IP, ips[name])
			}
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%s is on %v, want %s", name, got, want)
		}
	}

	// The family's policy belongs to its root's record; a root made again
	// under the name takes it over (whether or not the cluster's garbage
	// collector deleted it with the root before).
	nps := admin.NetworkingV1().NetworkPolicies(ns)
	famPolicy := familyPolicy + groupValue("smtp", "b")
	ownedBy := func(ctr string) {
		t.Helper()
		rec, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, objectName(ctr), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		np, err := nps.Get(ctx, famPolicy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != rec.UID {
			t.Errorf("the family policy of %s is owned by %+v, want its record %s", ctr, np.OwnerReferences, rec.UID)
		}
	}
	ownedBy(ctrs["b"])
	if err := rt.Remove(ctx, ctrs["b"]); err != nil {
		t.Fatal(err)
	}
	run("smtp", "b", nil)
	ownedBy(ctrs["b"])

	// Our policy, changed to let every pod in, stops the next pod of its
	// group, and says how to mend it.
	peers, err := nps.Get(ctx, peersPolicy+groupValue("smtp", ""), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	peers.Spec.Ingress[0].From = nil
	if _, err := nps.Update(ctx, peers, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = rt.Run(ctx, sandbox.RunSpec{Name: "smtp-d", Image: testImage, Command: serve,
		Labels: map[string]string{sandbox.LabelOwner: "smtp", sandbox.LabelName: "d"}})
	if err == nil || !strings.Contains(err.Error(), "is not the one sandbox-mcp made") || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("a pod under a policy opened by hand: %v", err)
	}
	if err := nps.Delete(ctx, peers.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ip := run("smtp", "d", nil); ip == "" {
		t.Fatal("no address")
	}

	// Someone else's policy that lets every pod into every pod stops the
	// next sandbox's pod, named.
	open := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-open"},
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}}
	if _, err := nps.Create(ctx, open, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = rt.Run(ctx, sandbox.RunSpec{Name: "smtp-e", Image: testImage, Command: serve,
		Labels: map[string]string{sandbox.LabelOwner: "smtp", sandbox.LabelName: "e"}})
	if err == nil || !strings.Contains(err.Error(), "NetworkPolicy team-open") || !strings.Contains(err.Error(), "keep it off pods labelled") {
		t.Fatalf("a pod under a policy that lets everyone in: %v", err)
	}
	if err := nps.Delete(ctx, open.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The policy that lets no pod into sandboxes is there, and selects
	// them all: a group's policy deleted leaves its pods closed, not open.
	if np, err := nps.Get(ctx, noIngressPolicy, metav1.GetOptions{}); err != nil || len(np.Spec.Ingress) != 0 || np.Spec.PodSelector.MatchLabels[labelManaged] != managedBy {
		t.Fatalf("the policy that lets no pod in: %+v %v", np, err)
	}
	if err := nps.Delete(ctx, familyPolicy+groupValue("smtp", "a"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	run("smtp", "f", nil) // any pod's start rewrites the stand-in's rules
	if got := probe("a", "a-fam"); got == "hi" || !strings.Contains(got, "timed out") {
		t.Errorf("with its family's policy gone, a-fam is reached by its root, or refused rather than kept out: %q", got)
	}
}
