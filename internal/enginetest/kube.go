package enginetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/kube"
)

// Kubernetes names the Kubernetes runtime in SANDBOX_MCP_TEST_RUNTIMES:
// a real kube-apiserver whose pods run on the kubelet stand-in
// (kubetest), shared by the whole test process.
const Kubernetes = "kubernetes"

// KubeSuites are the suites the kubernetes target runs (those that run
// on one engine only run on it too, through RunFirstAndKubernetes): the
// end-to-end
// suites that pass on it and whose calls into the runtime are its own,
// but for those that load the machine (LoadSuites, the port and leak
// stress suites), which pass on it too and run on the real engines
// listed: its pods run on podman beside them, and a CI machine's two
// cores do not carry both. Left out too are the suites about the layers
// above the runtime (the HTTP face and its clients, mcp-go's client,
// toolsets, telemetry, the audit log, the state file, the client's roots,
// the image's toolbox): they pass on it, and what they ask of the runtime
// is what TestEndToEnd asks. The others are about what the runtime does
// not have yet (snapshots and image builds, warm spares, kill points of
// snapshots and restores) or about an engine CLI's own behaviour, and say
// so when skipped; SANDBOX_MCP_TEST_KUBE_ALL runs them all.
var KubeSuites = map[string]bool{
	// package e2e
	"TestEndToEnd": true, "TestTerminals": true,
	"TestKubernetesOffTheNetwork": true, "TestEgressEndToEnd": true, "TestKubernetesPeersByName": true, "TestPorts": true, "TestEgressPolicyReload": true,
	"TestJobs": true, "TestJobsSurviveSIGKILL": true, "TestJobsTellTheTruth": true,
	"TestTransfer": true, "TestSync": true, "TestWork": true, "TestCopyCLI": true,
	"TestPortsOutliveTheirServer": true, "TestPortsWithoutAgent": true, "TestPortCLI": true,
	"TestChildren": true, "TestChildrenLifetimes": true, "TestBadArgumentsAreRefused": true, "TestStats": true,
	"TestHistorySurvivesRestart": true, "TestKilledServerCommandsEndedByNext": true, "TestServerExitEndsCommands": true,
	"TestReconcileForgetsLostSandboxes": true, "TestTwoServersShareLifecycleAndSecrets": true,
	"TestDoctorFailures": true, "TestWarmSpares": true, "TestProfileSpare": true, "TestWarmSpareAllowlist": true,
	"TestDoctorAndPruneCLI": true,
}

// EnvKubeAll, when set, has the kubernetes target run every suite, to
// see which of the others pass.
const EnvKubeAll = "SANDBOX_MCP_TEST_KUBE_ALL"

// kubeShared is the control plane every kubernetes target of this
// process uses, and each target's namespace and node (the stand-in's, or
// the real one's).
var kubeShared struct {
	once    sync.Once
	cluster *kubetest.Cluster
	err     error
	why     string
	stops   []func()
	failed  bool // the tests failed: stops print what their logs end with
	mu      sync.Mutex
	targets map[kubeKind]*kubeTargetState
}

// kubeKind is a kind of kubernetes target.
type kubeKind int

const (
	kubeStandIn kubeKind = iota // pods on the kubelet stand-in
	kubeNode                    // pods on a real node
	kubeCRD                     // pods made by agent-sandbox, on the stand-in
)

// kubeTargetState is one kubernetes target, made once.
type kubeTargetState struct {
	once sync.Once
	tg   Target
	err  error
}

// KubernetesNode names, in SANDBOX_MCP_TEST_RUNTIMES, the Kubernetes
// runtime on a real node (a kubelet on containerd, kubetest.StartNode)
// rather than the kubelet stand-in.
const KubernetesNode = Kubernetes + "@node"

// NodeSuites are the suites the real node runs: those of KubeSuites that
// do not count on NetworkPolicy being enforced (its CNI bridge does not)
// and do not load the machine. When the real node is listed, the kubelet
// stand-in leaves these to it (a real kubelet on containerd is the better
// witness, and a CI machine's two cores do not carry both) and runs the
// rest of KubeSuites; SANDBOX_MCP_TEST_KUBE_ALL runs every suite on both.
var NodeSuites = map[string]bool{
	"TestEndToEnd": true, "TestTerminals": true, "TestJobs": true, "TestTransfer": true,
	"TestBadArgumentsAreRefused": true, "TestHistorySurvivesRestart": true,
}

// KubernetesCRD names, in SANDBOX_MCP_TEST_RUNTIMES, the Kubernetes
// runtime with --kube-sandbox-crd: its pods made by agent-sandbox's
// controller (kubetest.StartAgentSandbox) and run by the kubelet stand-in.
const KubernetesCRD = Kubernetes + "@crd"

// CRDSuites are the suites kubernetes@crd runs: the whole life of a
// sandbox, children, a server's restart, and warm spares (whose claim
// hands a Sandbox on), which are what the Sandbox resource changes; the
// rest of the runtime is pod mode's.
var CRDSuites = map[string]bool{
	"TestEndToEnd": true, "TestChildren": true, "TestHistorySurvivesRestart": true,
	"TestWarmSpares": true, "TestProfileSpare": true, "TestWarmPoolSpares": true,
}

// kubeTarget is the kubernetes target on the kubelet stand-in.
func kubeTarget(t testing.TB) Target { return sharedKubeTarget(t, kubeStandIn) }

// kubeNodeTarget is the kubernetes target on a real node.
func kubeNodeTarget(t testing.TB) Target { return sharedKubeTarget(t, kubeNode) }

// kubeCRDTarget is the kubernetes target whose pods agent-sandbox makes.
func kubeCRDTarget(t testing.TB) Target { return sharedKubeTarget(t, kubeCRD) }

// sharedKubeTarget is a kubernetes target, made on first use: a server
// reaches the cluster through a kubeconfig file with the token of
// deploy/kubernetes/rbac.yaml's ServiceAccount, in a namespace of its
// own, whose pods run on the kubelet stand-in or on a real node, and are
// made by the runtime or by agent-sandbox.
func sharedKubeTarget(t testing.TB, kind kubeKind) Target {
	t.Helper()
	ks := &kubeShared
	ks.once.Do(func() {
		c, stop, why, err := kubetest.Start()
		if err != nil || c == nil {
			ks.err, ks.why = err, why
			return
		}
		ks.cluster = c
		ks.stops = append(ks.stops, stop)
	})
	switch {
	case ks.err != nil:
		t.Fatalf("kubernetes target: %v", ks.err)
	case ks.why != "":
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubernetes target: CI may not skip it: %s", ks.why)
		}
		t.Skipf("kubernetes target: %s", ks.why)
	}
	// What this kind needs beyond the control plane.
	var need, why string
	switch kind {
	case kubeCRD:
		need, why = KubernetesCRD, kubetest.AgentSandboxMissing()
	case kubeNode:
		need = KubernetesNode
		_, why = kubetest.NodeBinaries()
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s target: CI may not skip it: %s", need, why)
		}
		t.Skipf("%s target: %s", need, why)
	}
	ks.mu.Lock()
	if ks.targets == nil {
		ks.targets = map[kubeKind]*kubeTargetState{}
	}
	st := ks.targets[kind]
	if st == nil {
		st = &kubeTargetState{}
		ks.targets[kind] = st
	}
	ks.mu.Unlock()
	st.once.Do(func() { st.tg, st.err = makeKubeTarget(ks.cluster, kind) })
	if st.err != nil {
		t.Fatalf("kubernetes target: %v", st.err)
	}
	return st.tg
}

// makeKubeTarget makes a namespace on c, with its node, and the target
// that uses them.
func makeKubeTarget(c *kubetest.Cluster, kind kubeKind) (Target, error) {
	ks := &kubeShared
	add := func(stop func()) {
		ks.mu.Lock()
		ks.stops = append(ks.stops, stop)
		ks.mu.Unlock()
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	ns := "e2e-" + id
	_, file, _, _ := runtime.Caller(0)
	rbac := filepath.Join(filepath.Dir(file), "..", "..", "deploy", "kubernetes", "rbac.yaml")
	token, drop, err := c.MakeNamespace(context.Background(), ns, rbac)
	if err != nil {
		return Target{}, err
	}
	add(drop)
	name := Kubernetes
	if kind == kubeNode {
		name = Kubernetes + "-node"
		_, stopNode, err := c.StartNode(ns, "localhost/mcp-dev:latest", "localhost/sandbox-mcp-minimal:latest")
		if err != nil {
			return Target{}, err
		}
		add(stopNode)
	} else {
		admin, err := c.AdminClient()
		if err != nil {
			return Target{}, err
		}
		_, stopKubelet, err := c.StartKubelet(admin, ns, "ke"+id)
		if err != nil {
			return Target{}, err
		}
		add(stopKubelet)
	}
	crd := kind == kubeCRD
	if crd {
		name = Kubernetes + "-crd"
		stop, why, err := c.StartAgentSandbox()
		if why != "" {
			return Target{}, fmt.Errorf("%s: %s", KubernetesCRD, why)
		}
		if err != nil {
			return Target{}, err
		}
		add(func() {
			// The controller's word on what it did, for a failed run
			// (its log goes with it otherwise).
			if log := stop(); ks.failed {
				fmt.Fprintf(os.Stderr, "agent-sandbox-controller's log (the %s target's), its end:\n%s\n", name, log)
			}
		})
	}
	dir, err := os.MkdirTemp("", "kubetarget-")
	if err != nil {
		return Target{}, err
	}
	add(func() { os.RemoveAll(dir) })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, token, ns); err != nil {
		return Target{}, err
	}
	cfg := c.Config(token)
	return Target{Name: name, Runtime: Kubernetes, Image: "localhost/mcp-dev:latest",
		Env: []string{"SANDBOX_MCP_KUBECONFIG=" + kubeconfig, "SANDBOX_MCP_KUBE_NAMESPACE=" + ns,
			"SANDBOX_MCP_KUBE_SANDBOX_CRD=" + strconv.FormatBool(crd)},
		New: func() sandbox.Runtime {
			rt, err := kube.New(cfg, kube.Options{Namespace: ns, SandboxCRD: crd})
			if err != nil {
				panic(fmt.Sprintf("kubernetes target: %v", err))
			}
			return rt
		}}, nil
}

// StopShared ends what the targets of this process started for all
// their tests (the Kubernetes control plane and its kubelet stand-in).
// Call it from TestMain once the tests ran, with failed set when they
// failed: then the end of agent-sandbox's controller's log is printed to
// stderr, for the failure's reader.
func StopShared(failed bool) {
	ks := &kubeShared
	ks.mu.Lock()
	stops := ks.stops
	ks.stops, ks.failed = nil, failed
	ks.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
}
