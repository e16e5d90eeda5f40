package app

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/kube"
)

// KubeConfig is the cluster the kubernetes runtime uses and how it makes
// sandboxes there.
type KubeConfig struct {
	// Kubeconfig is the kubeconfig file; "": $KUBECONFIG, then
	// ~/.kube/config, then the pod's own service account when the server
	// runs in the cluster.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context is the kubeconfig's context to use; "": its current one.
	Context string `json:"context,omitempty"`
	// Namespace holds the sandboxes; "": the context's namespace, or the
	// server's own in the cluster, else "default".
	Namespace string `json:"namespace,omitempty"`
	// RuntimeClass is the pods' runtimeClassName (gvisor, kata, ...).
	RuntimeClass string `json:"runtime_class,omitempty"`
	// StorageClass is the workspace claims' storage class; "": the
	// cluster's default.
	StorageClass string `json:"storage_class,omitempty"`
	// SandboxCRD makes each sandbox's pod through agent-sandbox's
	// Sandbox resource (its controller makes the pod) instead of making
	// the pod itself.
	SandboxCRD bool `json:"sandbox_crd,omitempty"`
	// WarmPools, with SandboxCRD, keeps the spares as agent-sandbox's
	// SandboxWarmPools.
	WarmPools bool `json:"warm_pools,omitempty"`
	// SnapshotClass is a VolumeSnapshotClass of the claims' CSI driver:
	// a clone's workspace is copied by the storage with it.
	SnapshotClass string `json:"snapshot_class,omitempty"`
}

// check validates the names set: a namespace is a DNS label, the
// classes DNS subdomains. What one setting needs of another is checked
// once every source is read (checkTogether), whichever set it.
func (k KubeConfig) check() error {
	if k.Namespace != "" {
		if errs := validation.IsDNS1123Label(k.Namespace); len(errs) > 0 {
			return fmt.Errorf("kubernetes namespace %q: %s", k.Namespace, errs[0])
		}
	}
	for key, v := range map[string]string{"runtime_class": k.RuntimeClass, "storage_class": k.StorageClass, "snapshot_class": k.SnapshotClass} {
		if v == "" {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			return fmt.Errorf("kubernetes %s %q: %s", key, v, errs[0])
		}
	}
	return nil
}

// checkTogether validates what one setting needs of another, on the
// configuration every source made.
func (k KubeConfig) checkTogether() error {
	if k.WarmPools && !k.SandboxCRD {
		return errors.New("kubernetes warm pools need --kube-sandbox-crd: a pool keeps Sandboxes")
	}
	return nil
}

// openKube is the kubernetes runtime cfg describes.
func openKube(cfg Config, logger *slog.Logger) (sandbox.Runtime, string, error) {
	kube.RouteClientLogs(logger)
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if cfg.Kube.Kubeconfig != "" {
		rules.ExplicitPath = cfg.Kube.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Kube.Context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("runtime kubernetes: no cluster to reach (set --kubeconfig, or KUBECONFIG, or run the server in the cluster): %w", err)
	}
	ns := cfg.Kube.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("runtime kubernetes: namespace: %w", err)
		}
	}
	rt, err := kube.New(rc, kube.Options{Namespace: ns, RuntimeClass: cfg.Kube.RuntimeClass, StorageClass: cfg.Kube.StorageClass,
		VolumeSize: cfg.Defaults.Disk, StartTimeout: 5 * time.Minute, SandboxCRD: cfg.Kube.SandboxCRD, WarmPools: cfg.Kube.WarmPools, SnapshotClass: cfg.Kube.SnapshotClass})
	if err != nil {
		return nil, "", err
	}
	why := fmt.Sprintf("set by --runtime: cluster %s, namespace %s", rc.Host, ns)
	if cfg.Kube.SandboxCRD {
		why += ", pods made through agent-sandbox's Sandbox resource"
	}
	if cfg.Kube.WarmPools {
		why += ", spares kept by agent-sandbox's warm pools"
	}
	if cfg.Kube.SnapshotClass != "" {
		why += ", workspaces snapshotted and cloned with VolumeSnapshotClass " + cfg.Kube.SnapshotClass
	}
	return rt, why, nil
}
