package kube

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Who reaches whom, as NetworkPolicy. On the engines, the sandboxes of a
// server share one network and a family of children kept to itself (peers
// "family") has one of its own, which its root joins. Pods share the
// cluster's network, so the same groups are ingress policies here, one
// per group, each letting in only the group's own pods:
//
//   - peers: the root sandboxes of one server (prefix) and its children
//     with peers "all", labelled labelPeers=<the server's group>;
//   - family: a root sandbox and its children kept to their family,
//     labelled labelFamily=<the root's record name>.
//
// Policies add up, so a root, in both groups, is reached by both; a child
// kept to its family by its family alone; and nothing else reaches either:
// not another server's sandboxes, not another family, not other pods of
// the namespace. A sandbox without network is in neither group: the
// isolating policy alone selects it. What sandboxes reach outside the
// cluster and outside their groups is left to egress (the egress mode,
// and the cluster's own policies).
//
// Each pod's policies are made before the pod, so that no moment passes
// with the pod unselected. The family's policy is owned by the root's
// record: the root's deletion takes it (its children went before it).
// All of it holds where the cluster's network plugin enforces
// NetworkPolicy.
const (
	labelPeers  = "sandbox-mcp.io/peers"
	labelFamily = "sandbox-mcp.io/family"
	// peersPolicy and familyPolicy prefix the policies' names.
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

// groupsOf are the peer groups of a sandbox booted with spec.
func groupsOf(spec sandbox.RunSpec) []group {
	if spec.Network == "none" {
		return nil
	}
	owner := spec.Labels[sandbox.LabelOwner]
	peers := group{key: labelPeers, value: objectName(sandbox.NetworkNameFor(owner))}
	if root := spec.Labels[sandbox.LabelFamily]; root != "" {
		// A child kept to its family.
		return []group{{key: labelFamily, value: objectName(sandbox.ContainerName(owner, root)), root: root}}
	}
	if spec.Labels[sandbox.LabelChildOf] != "" {
		return []group{peers} // a child with peers "all"
	}
	// A root: its record's name is its family's.
	return []group{peers, {key: labelFamily, value: objectName(spec.Name), root: spec.Labels[sandbox.LabelName]}}
}

// groupLabels are the labels that put a pod in groups.
func groupLabels(gs []group) map[string]string {
	out := map[string]string{}
	for _, g := range gs {
		out[g.key] = g.value
	}
	return out
}

// groupNetworks are a running pod's attachments: its address on each of
// its groups.
func groupNetworks(gs []group, ip string) []sandbox.Attachment {
	var out []sandbox.Attachment
	for _, g := range gs {
		name := PodNetwork
		if g.key == labelFamily {
			name = FamilyNetwork(g.root)
		}
		out = append(out, sandbox.Attachment{Network: name, IP: ip})
	}
	return out
}

// groupPolicy is the policy of group g: its pods, reached by its pods.
func (r *Runtime) groupPolicy(g group, owner *corev1.ConfigMap) *networkingv1.NetworkPolicy {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{g.key: g.value}}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: g.policyName(), Namespace: r.opt.Namespace, Labels: map[string]string{labelManaged: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sel,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &sel}}}},
		},
	}
	if owner != nil {
		np.OwnerReferences = []metav1.OwnerReference{recordOwner(owner)}
	}
	return np
}

// ensureGroups makes, unless they are there, the policies of the groups
// of rec's sandbox, and checks that those there are ours and unchanged:
// one that lets more in would open the group. A root's family policy is
// owned by its record; a family child's by its root's, when it has one.
func (r *Runtime) ensureGroups(ctx context.Context, rec record) error {
	for _, g := range groupsOf(rec.spec) {
		var owner *corev1.ConfigMap
		switch {
		case g.key == labelFamily && g.value == rec.cm.Name:
			owner = rec.cm
		case g.key == labelFamily:
			if p, err := r.parentRecord(ctx, rec.spec.Labels[sandbox.LabelOwner], g.root); err == nil {
				owner = p
			}
		}
		want := r.groupPolicy(g, owner)
		// A policy the garbage collector deletes between this server's
		// read and its write is made again on the next try.
		var err error
		for try := 0; try < 3; try++ {
			if err = r.ensurePolicy(ctx, want, owner); !errors.Is(err, errRaced) && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("kubernetes: the NetworkPolicy %s that keeps %s's peers to themselves: %w", want.Name, rec.spec.Name, err)
		}
	}
	return nil
}

// errRaced is a write that another's write of the same object came
// before: read again and retry.
var errRaced = errors.New("changed meanwhile")

// ensurePolicy makes want unless a policy of its name is there, checks
// that one there is ours and the same, and gives it to owner (when set)
// if an earlier record of owner's name had it.
func (r *Runtime) ensurePolicy(ctx context.Context, want *networkingv1.NetworkPolicy, owner *corev1.ConfigMap) error {
	nps := r.cs.NetworkingV1().NetworkPolicies(r.opt.Namespace)
	got, err := nps.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		got, err = nps.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return errRaced // made by another server meanwhile: read it
		}
	}
	if err != nil {
		return err
	}
	if got.Labels[labelManaged] != managedBy || !reflect.DeepEqual(got.Spec, want.Spec) {
		return fmt.Errorf("NetworkPolicy %s in %s is not the one sandbox-mcp made (it must let in only the pods it selects): delete it and sandbox-mcp makes it again",
			got.Name, r.opt.Namespace)
	}
	if owner == nil || slices.ContainsFunc(got.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == owner.UID }) {
		return nil
	}
	// Left by an earlier root of the name, whose deletion the garbage
	// collector has not carried out yet: this root's now, in place, so
	// that the family is never without it.
	got.OwnerReferences = append(slices.DeleteFunc(got.OwnerReferences, isRecordRef), recordOwner(owner))
	_, err = nps.Update(ctx, got, metav1.UpdateOptions{})
	return err
}
