package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// AgentSandboxVersion is the agent-sandbox release whose controller and
// Sandbox resource the tests run (scripts/build-kube-apiserver.sh builds
// it beside the apiserver).
const AgentSandboxVersion = "v1.0.1"

// AgentSandboxMissing says what is missing for StartAgentSandbox, "" when
// nothing is.
func AgentSandboxMissing() string {
	_, why := agentSandbox()
	return why
}

// agentSandbox is the directory of agent-sandbox's controller and CRDs:
// AGENT_SANDBOX_DIR, or beside the apiserver. why says what is missing.
func agentSandbox() (dir, why string) {
	dir, why = besideAPIServer("agent-sandbox-"+AgentSandboxVersion, "AGENT_SANDBOX_DIR")
	if why != "" {
		return "", why
	}
	if _, err := os.Stat(filepath.Join(dir, "agent-sandbox-controller")); err != nil {
		return "", "no agent-sandbox-controller in " + dir + ": run scripts/build-kube-apiserver.sh"
	}
	return dir, ""
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// RunAgentSandbox installs agent-sandbox's Sandbox resource in the cluster
// (once: the definition is the cluster's) and runs its controller until
// the test ends, as a cluster that has agent-sandbox does. Under CI a
// missing build fails the test; elsewhere it skips it.
func (c *Cluster) RunAgentSandbox(t *testing.T) {
	t.Helper()
	stop, why, err := c.StartAgentSandbox()
	switch {
	case why != "" && os.Getenv("CI") == "true":
		t.Fatal("CI may not skip this:", why)
	case why != "":
		t.Skip(why)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if log := stop(); t.Failed() {
			t.Logf("agent-sandbox-controller's log, its end:\n%s", log)
		}
	})
}

// StartAgentSandbox is RunAgentSandbox for a whole test process: stop
// ends the controller and returns the end of its log. why says what is
// missing, when the build is. One controller runs per cluster at a time
// (it acts on every namespace's Sandboxes): a second start is refused.
func (c *Cluster) StartAgentSandbox() (stop func() string, why string, err error) {
	dir, why := agentSandbox()
	if why != "" {
		return nil, why, nil
	}
	if !c.agentSandbox.CompareAndSwap(false, true) {
		return nil, "", errors.New("agent-sandbox's controller runs on this cluster already")
	}
	started := false
	defer func() {
		if !started {
			c.agentSandbox.Store(false)
		}
	}()
	dyn, err := dynamic.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The Sandbox, and the extensions' resources (warm pools, templates,
	// claims), which the controller serves with --extensions.
	crds, _ := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if len(crds) < 4 {
		return nil, "no extension resource definitions in " + dir + ": run scripts/build-kube-apiserver.sh", nil
	}
	for _, f := range crds {
		if err := installCRD(ctx, dyn, f); err != nil {
			return nil, "", err
		}
	}
	tmp, err := os.MkdirTemp("", "agent-sandbox-")
	if err != nil {
		return nil, "", err
	}
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, c.AdminToken, "default"); err != nil {
		os.RemoveAll(tmp)
		return nil, "", err
	}
	logPath := filepath.Join(tmp, "agent-sandbox-controller.log")
	cmd := exec.Command(filepath.Join(dir, "agent-sandbox-controller"), "--kubeconfig", kubeconfig,
		"--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--extensions")
	if err := startLogged(cmd, logPath); err != nil {
		os.RemoveAll(tmp)
		return nil, "", fmt.Errorf("start agent-sandbox-controller: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	started = true
	return func() string {
		_ = cmd.Process.Kill()
		<-exited
		c.agentSandbox.Store(false)
		log, _ := os.ReadFile(logPath)
		if len(log) > 8000 {
			log = log[len(log)-8000:]
		}
		os.RemoveAll(tmp)
		return string(log)
	}, "", nil
}

// installCRD creates the CustomResourceDefinition in file, unless one of
// its name is there, and waits until the apiserver serves it.
func installCRD(ctx context.Context, dyn dynamic.Interface, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(&obj); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	crds := dyn.Resource(crdResource)
	if _, err := crds.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("install %s: %w", u.GetName(), err)
	}
	for {
		got, err := crds.Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read %s: %w", u.GetName(), err)
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not established: %w", u.GetName(), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
