package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Who reaches whom, as NetworkPolicy. On the engines, the sandboxes of a
// server share one network and a family of children kept to itself (peers
// "family") has one of its own, which its root joins. Pods share the
// cluster's network, so here one policy lets no pod into any sandbox
// (noIngressPolicy), and one policy per group lets the group's pods into
// each other:
//
//   - peers: the root sandboxes of one server (prefix) and its children
//     with peers "all", labelled labelPeers=<the server's group>;
//   - family: a root sandbox and its children kept to their family,
//     labelled labelFamily=<the family's group>.
//
// Policies add up, so a root, in both groups, is reached by both; a child
// kept to its family by its family alone; and nothing else reaches either:
// not another server's sandboxes, not another family, not other pods of
// the namespace. A policy of someone else's that would let more in is
// refused at the start of every pod it selects, and named. Where a group's
// policy is missing (deleted by hand, or by the garbage collector with a
// root whose children still run), its pods are reached by no one rather
// than by everyone. A sandbox without network is in neither group; the
// isolating policy keeps everything out of it and in. What sandboxes reach
// outside their groups is left to egress (the egress mode, and the
// cluster's own policies).
//
// The policies are made before each pod. The family's policy is owned by
// the root's record: the root's deletion takes it. All of it holds where
// the cluster's network plugin enforces NetworkPolicy.
const (
	labelPeers  = "sandbox-mcp.io/peers"
	labelFamily = "sandbox-mcp.io/family"
	// noIngressPolicy selects every sandbox pod and lets nothing in.
	noIngressPolicy = "sandbox-mcp-no-ingress"
	// peersPolicy and familyPolicy prefix the group policies' names.
	peersPolicy  = "sandbox-mcp-peers-"
	familyPolicy = "sandbox-mcp-family-"
)

// FamilyNetwork is the name a sandbox's place in the family of root goes
// by in a Container's Networks (PodNetwork is that of its server's
// group).
func FamilyNetwork(root string) string { return "family of " + root }

// group is one peer group of a pod: its label and the policy that lets
// the group's pods reach each other.
type group struct {
	key, value string
	// root is the family's root sandbox ("" for the peers group).
	root string
}

func (g group) policyName() string {
	if g.key == labelFamily {
		return familyPolicy + g.value
	}
	return peersPolicy + g.value
}

// groupValue is the label value of a group of server owner: its peers
// (root "") or the family of root. The two parts are hashed apart, so
// that no two servers' groups share a value.
func groupValue(owner, root string) string {
	if root == "" {
		return objectName(owner + "\x00peers")
	}
	return objectName(owner + "\x00family\x00" + root)
}

// groupsOf are the peer groups of a sandbox booted with spec.
func groupsOf(spec sandbox.RunSpec) []group {
	if spec.Network == "none" {
		return nil
	}
	owner := spec.Labels[sandbox.LabelOwner]
	peers := group{key: labelPeers, value: groupValue(owner, "")}
	family := func(root string) group {
		return group{key: labelFamily, value: groupValue(owner, root), root: root}
	}
	switch {
	case spec.Labels[sandbox.LabelFamily] != "":
		return []group{family(spec.Labels[sandbox.LabelFamily])} // a child kept to its family
	case spec.Labels[sandbox.LabelChildOf] != "":
		return []group{peers} // a child with peers "all"
	default:
		return []group{peers, family(sandboxName(spec))} // a root
	}
}

// groupLabels are the labels that put a pod in groups.
func groupLabels(gs []group) map[string]string {
	out := map[string]string{}
	for _, g := range gs {
		out[g.key] = g.value
	}
	return out
}

// podNetworks are a running pod's attachments: its address on each group
// of its record that the pod is labelled with (a pod made before the
// groups is in none).
func podNetworks(spec sandbox.RunSpec, pod *corev1.Pod) []sandbox.Attachment {
	var out []sandbox.Attachment
	for _, g := range groupsOf(spec) {
		if pod.Labels[g.key] != g.value {
			continue
		}
		name := PodNetwork
		if g.key == labelFamily {
			name = FamilyNetwork(g.root)
		}
		out = append(out, sandbox.Attachment{Network: name, IP: pod.Status.PodIP})
	}
	return out
}

// groupPolicy is the policy of group g: its pods, reached by its pods.
func (r *Runtime) groupPolicy(g group, owner *corev1.ConfigMap) *networkingv1.NetworkPolicy {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{g.key: g.value}}
	np := r.policy(g.policyName(), *sel.DeepCopy())
	np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &sel}}}}
	if owner != nil {
		np.OwnerReferences = []metav1.OwnerReference{recordOwner(owner)}
	}
	return np
}

// policy is an ingress policy of ours named name, selecting sel, with no
// rule yet.
func (r *Runtime) policy(name string, sel metav1.LabelSelector) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.opt.Namespace, Labels: map[string]string{labelManaged: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sel,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// ensureGroups makes, unless they are there, the policy that lets nothing
// into sandboxes and those of the groups of rec's sandbox, whose pod is
// pod, and checks that those there are ours and unchanged, and that no
// other policy lets more into the pod.
func (r *Runtime) ensureGroups(ctx context.Context, rec record, pod *corev1.Pod) error {
	wants := []*networkingv1.NetworkPolicy{r.policy(noIngressPolicy, metav1.LabelSelector{MatchLabels: map[string]string{labelManaged: managedBy}})}
	owners := []*corev1.ConfigMap{nil}
	for _, g := range groupsOf(rec.spec) {
		owner, err := r.groupOwner(ctx, rec, g)
		if err != nil {
			return err
		}
		wants, owners = append(wants, r.groupPolicy(g, owner)), append(owners, owner)
	}
	nps := r.cs.NetworkingV1().NetworkPolicies(r.opt.Namespace)
	list, err := nps.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("kubernetes: list NetworkPolicies: %w", err)
	}
	have := map[string]*networkingv1.NetworkPolicy{}
	for i := range list.Items {
		have[list.Items[i].Name] = &list.Items[i]
	}
	for _, p := range list.Items {
		if slices.ContainsFunc(wants, func(w *networkingv1.NetworkPolicy) bool { return w.Name == p.Name }) {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err == nil && sel.Matches(labels.Set(pod.Labels)) && letsIn(&p) {
			return fmt.Errorf("kubernetes: NetworkPolicy %s in %s lets pods into the sandbox %s past its peers: keep it off pods labelled %s=%s (sandboxes are best in a namespace of their own)",
				p.Name, r.opt.Namespace, rec.spec.Name, labelManaged, managedBy)
		}
	}
	for i, want := range wants {
		// A policy the garbage collector deletes between this server's
		// read and its write is made again on the next try.
		got := have[want.Name]
		for try := 0; ; try++ {
			err = r.ensurePolicy(ctx, want, owners[i], got)
			if try == 2 || (!errors.Is(err, errRaced) && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err)) {
				break
			}
			if got, err = nps.Get(ctx, want.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				got = nil
			} else if err != nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("kubernetes: the NetworkPolicy %s for the sandbox %s: %w", want.Name, rec.spec.Name, err)
		}
	}
	return nil
}

// groupOwner is the record that owns the policy of group g of rec's
// sandbox: a root's own record for its family, its root's for a child
// kept to its family (nil when that root has no record), none for the
// peers.
func (r *Runtime) groupOwner(ctx context.Context, rec record, g group) (*corev1.ConfigMap, error) {
	switch {
	case g.key != labelFamily:
		return nil, nil
	case rec.spec.Labels[sandbox.LabelChildOf] == "":
		return rec.cm, nil
	}
	p, err := r.parentRecord(ctx, rec.spec.Labels[sandbox.LabelOwner], g.root)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, nil
	}
	return p, err
}

// letsIn reports whether np lets some pod in to the pods it selects.
func letsIn(np *networkingv1.NetworkPolicy) bool {
	types := np.Spec.PolicyTypes
	return len(np.Spec.Ingress) > 0 && (len(types) == 0 || slices.Contains(types, networkingv1.PolicyTypeIngress))
}

// errRaced is a write that another's write of the same object came
// before: read again and retry.
var errRaced = errors.New("changed meanwhile")

// ensurePolicy makes want unless got (the policy of its name, nil when
// there is none) is there, checks that got is ours and lets in what want
// does, no more, and gives it to owner (when set) if an earlier record
// of owner's name had it.
func (r *Runtime) ensurePolicy(ctx context.Context, want *networkingv1.NetworkPolicy, owner *corev1.ConfigMap, got *networkingv1.NetworkPolicy) error {
	nps := r.cs.NetworkingV1().NetworkPolicies(r.opt.Namespace)
	if got == nil {
		_, err := nps.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return errRaced // made by another server meanwhile: read it
		}
		return err
	}
	if got.Labels[labelManaged] != managedBy || !samePolicy(got.Spec, want.Spec) {
		return fmt.Errorf("NetworkPolicy %s in %s is not the one sandbox-mcp made (it lets in other pods, or to other pods): delete it and sandbox-mcp makes it again",
			got.Name, r.opt.Namespace)
	}
	if owner == nil || slices.ContainsFunc(got.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == owner.UID }) {
		return nil
	}
	// Left by an earlier root of the name, whose deletion the garbage
	// collector has not carried out yet: this root's now, in place, so
	// that the family is never without it.
	got = got.DeepCopy()
	got.OwnerReferences = append(slices.DeleteFunc(got.OwnerReferences, isRecordRef), recordOwner(owner))
	_, err := nps.Update(ctx, got, metav1.UpdateOptions{})
	return err
}

// samePolicy reports whether got selects the pods want does and lets in
// the pods want does, and governs nothing else; fields an apiserver
// fills in by default do not count.
func samePolicy(got, want networkingv1.NetworkPolicySpec) bool {
	if !sameSelector(&got.PodSelector, &want.PodSelector) || !slices.Equal(got.PolicyTypes, want.PolicyTypes) ||
		len(got.Egress) != 0 || len(got.Ingress) != len(want.Ingress) {
		return false
	}
	for i, w := range want.Ingress {
		g := got.Ingress[i]
		if len(g.Ports) != 0 || len(g.From) != len(w.From) {
			return false
		}
		for j, wf := range w.From {
			gf := g.From[j]
			if gf.IPBlock != nil || gf.NamespaceSelector != nil || !sameSelector(gf.PodSelector, wf.PodSelector) {
				return false
			}
		}
	}
	return true
}

// sameSelector reports whether a and b are the same labels to match, and
// nothing else.
func sameSelector(a, b *metav1.LabelSelector) bool {
	return a != nil && b != nil && len(a.MatchExpressions) == 0 && len(b.MatchExpressions) == 0 && maps.Equal(a.MatchLabels, b.MatchLabels)
}
