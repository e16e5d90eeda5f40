package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Ingress NetworkPolicy, enforced as a network plugin does: every pod has
// one address on one network (podman's default bridge), and a pod that
// some policy of type Ingress selects accepts connections only from the
// addresses of the pods that a rule of such a policy lets in (and from its
// node, replies to its own connections, and its loopback). The rules live
// in the pod's own network namespace (iptables, entered from the host),
// rewritten for every pod whenever a pod's network is set up, before its
// first process runs, and when a pod's container ends.
//
// Only rules of pod selectors in the policy's namespace are modelled; a
// policy with ports, address blocks or namespace selectors fails the
// pods it selects rather than leaving them more open than a cluster
// would.

// ingressOf reads, from the namespace's policies, what may reach a pod
// labelled ls: whether any policy isolates it for ingress and, if so,
// the selectors of the pods let in (all set: every source is).
func ingressOf(policies []networkingv1.NetworkPolicy, ls labels.Set) (isolated, all bool, from []labels.Selector, err error) {
	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			return false, false, nil, fmt.Errorf("NetworkPolicy %s: %w", np.Name, err)
		}
		if !sel.Matches(ls) {
			continue
		}
		// Ingress is governed when listed, and when no type is.
		if len(np.Spec.PolicyTypes) > 0 && !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			continue
		}
		isolated = true
		for _, rule := range np.Spec.Ingress {
			if len(rule.Ports) > 0 {
				return false, false, nil, fmt.Errorf("NetworkPolicy %s has an ingress rule with ports, which the kubelet stand-in cannot enforce", np.Name)
			}
			if len(rule.From) == 0 {
				all = true
			}
			for _, peer := range rule.From {
				if peer.IPBlock != nil || peer.NamespaceSelector != nil || peer.PodSelector == nil {
					return false, false, nil, fmt.Errorf("NetworkPolicy %s lets in by address or namespace, which the kubelet stand-in cannot enforce", np.Name)
				}
				s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				if err != nil {
					return false, false, nil, fmt.Errorf("NetworkPolicy %s: %w", np.Name, err)
				}
				from = append(from, s)
			}
		}
	}
	return isolated, all, from, nil
}

// ingressRules is the iptables-restore input that lets into a pod only
// the addresses in allowed (all of them when not isolated).
func ingressRules(isolated bool, allowed []string) string {
	var b strings.Builder
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n")
	if isolated {
		b.WriteString("-A INPUT -i lo -j ACCEPT\n-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n")
		for _, ip := range allowed {
			fmt.Fprintf(&b, "-A INPUT -s %s -j ACCEPT\n", ip)
		}
		b.WriteString("-A INPUT -j DROP\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// checkIngress fails early, before its container is made, a pod that a
// policy the stand-in cannot model selects.
func (k *Kubelet) checkIngress(ctx context.Context, ls labels.Set) error {
	list, err := k.cs.NetworkingV1().NetworkPolicies(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("network policies: %w", err)
	}
	_, _, _, err = ingressOf(list.Items, ls)
	return err
}

// wireIngress sets up the network of run's container, made but not
// started, and loads the ingress rules of it and of the pods it is let
// into, from the namespace's policies and the pods wired now.
func (k *Kubelet) wireIngress(ctx context.Context, run *podRun, p *corev1.Pod) error {
	if _, err := k.podmanOut(ctx, "init", run.ctr); err != nil {
		return err
	}
	out, err := k.podmanOut(ctx, "inspect", "--format", "{{.NetworkSettings.IPAddress}} {{.NetworkSettings.Gateway}} {{.NetworkSettings.SandboxKey}}", run.ctr)
	if err != nil {
		return err
	}
	f := strings.Fields(out)
	if len(f) != 3 || net.ParseIP(f[0]) == nil || net.ParseIP(f[1]) == nil || !strings.HasPrefix(f[2], "/") {
		return fmt.Errorf("the pod's network: podman says %q", strings.TrimSpace(out))
	}
	k.mu.Lock()
	run.labels, run.ip, run.gateway, run.netns = labels.Set(p.Labels), f[0], f[1], f[2]
	k.mu.Unlock()
	return k.enforceIngress(ctx, run)
}

// unwire takes run's pod out of the others' rules once its container
// ended: its address may be another's next.
func (k *Kubelet) unwire(ctx context.Context, run *podRun) {
	k.mu.Lock()
	was := run.netns != ""
	run.netns, run.ingress = "", ""
	k.mu.Unlock()
	if was {
		_ = k.enforceIngress(context.WithoutCancel(ctx), nil)
	}
}

// enforceIngress rewrites the ingress rules of every wired pod from the
// namespace's policies and the pods wired now, and reports what failed
// for pod mine (another's failure, a pod ending meanwhile, say, is tried
// again at the next rewrite). The pod's node (the network's gateway) is
// always let in, as network plugins do for the kubelet's probes.
func (k *Kubelet) enforceIngress(ctx context.Context, mine *podRun) error {
	k.ingressMu.Lock()
	defer k.ingressMu.Unlock()
	list, err := k.cs.NetworkingV1().NetworkPolicies(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("network policies: %w", err)
	}
	type member struct {
		run                *podRun
		labels             labels.Set
		ip, gateway, netns string
	}
	var members []member
	k.mu.Lock()
	for _, run := range k.pods {
		if run.netns != "" {
			members = append(members, member{run, run.labels, run.ip, run.gateway, run.netns})
		}
	}
	k.mu.Unlock()
	var errs []error
	for _, m := range members {
		isolated, all, from, err := ingressOf(list.Items, m.labels)
		if err != nil {
			if m.run == mine {
				errs = append(errs, err)
			}
			isolated, all, from = true, false, nil // nothing in rather than too much
		}
		allowed := []string{m.gateway}
		for _, src := range members {
			if slices.ContainsFunc(from, func(s labels.Selector) bool { return s.Matches(src.labels) }) {
				allowed = append(allowed, src.ip)
			}
		}
		slices.Sort(allowed)
		rules := ingressRules(isolated && !all, slices.Compact(allowed))
		k.mu.Lock()
		same := m.run.ingress == rules
		k.mu.Unlock()
		if same {
			continue
		}
		if err := applyIngress(ctx, m.netns, rules); err != nil {
			if m.run == mine {
				errs = append(errs, err)
			}
			continue
		}
		k.mu.Lock()
		if m.run.netns == m.netns {
			m.run.ingress = rules
		}
		k.mu.Unlock()
	}
	return errors.Join(errs...)
}

// applyIngress loads rules into the network namespace at path netns.
func applyIngress(ctx context.Context, netns, rules string) error {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("the kubelet stand-in enforces NetworkPolicy inside pods: %w", err)
	}
	restore, err := exec.LookPath("iptables-restore")
	if err != nil {
		return fmt.Errorf("the kubelet stand-in enforces NetworkPolicy inside pods with iptables: %w", err)
	}
	cmd := exec.CommandContext(ctx, nsenter, "--net="+netns, restore, "-w")
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stderr = strings.NewReader(rules), &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ingress rules in the pod's network %s: %w: %s", netns, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
