package enginetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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

// KubeSuites are the suites the kubernetes target runs: the end-to-end
// suites that pass on it, but for those that load the machine (LoadSuites,
// the port and leak stress suites), which pass on it too and run on the
// real engines listed: its pods run on podman beside them, and a CI
// machine's two cores do not carry both. The others are about what the
// runtime does not have yet (snapshots and image builds, warm spares,
// kill points of snapshots and restores) or about an engine CLI's own behaviour, and say
// so when skipped; SANDBOX_MCP_TEST_KUBE_ALL runs them all.
var KubeSuites = map[string]bool{
	// package e2e
	"TestEndToEnd": true, "TestEndToEndOverHTTP": true, "TestMCPGoClient": true, "TestTerminals": true,
	"TestKubernetesOffTheNetwork": true, "TestEgressEndToEnd": true, "TestKubernetesPeersByName": true, "TestPorts": true, "TestEgressPolicyReload": true,
	"TestJobs": true, "TestJobsSurviveSIGKILL": true, "TestJobsTellTheTruth": true,
	"TestTransfer": true, "TestClientRoots": true, "TestSync": true, "TestWork": true, "TestCopyCLI": true,
	"TestPortsOutliveTheirServer": true, "TestPortsWithoutAgent": true, "TestPortCLI": true,
	"TestChildren": true, "TestChildrenLifetimes": true, "TestBadArgumentsAreRefused": true,
	"TestStats": true, "TestDynamicToolsets": true,
	"TestHistorySurvivesRestart": true, "TestKilledServerCommandsEndedByNext": true, "TestServerExitEndsCommands": true,
	"TestReconcileForgetsLostSandboxes": true, "TestStateFileAbuse": true, "TestTwoServersShareLifecycleAndSecrets": true,
	"TestHTTPClientsApart": true, "TestTelemetryOverHTTP": true, "TestAuditCLI": true, "TestDoctorFailures": true,
	"TestDefaultImageToolbox": true,
}

// EnvKubeAll, when set, has the kubernetes target run every suite, to
// see which of the others pass.
const EnvKubeAll = "SANDBOX_MCP_TEST_KUBE_ALL"

// kubeShared is the control plane, namespace and kubelet stand-in every
// kubernetes target of this process uses.
var kubeShared struct {
	once  sync.Once
	tg    Target
	err   error
	why   string
	stops []func()
}

// kubeTarget is the kubernetes target, made on first use: a server
// reaches the cluster through a kubeconfig file with the token of
// deploy/kubernetes/rbac.yaml's ServiceAccount, in a namespace of its own.
func kubeTarget(t testing.TB) Target {
	t.Helper()
	ks := &kubeShared
	ks.once.Do(func() {
		c, stop, why, err := kubetest.Start()
		if err != nil || c == nil {
			ks.err, ks.why = err, why
			return
		}
		ks.stops = append(ks.stops, stop)
		fail := func(err error) { ks.err = err }
		var b [3]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		ns := "e2e-" + id
		_, file, _, _ := runtime.Caller(0)
		rbac := filepath.Join(filepath.Dir(file), "..", "..", "deploy", "kubernetes", "rbac.yaml")
		token, drop, err := c.MakeNamespace(context.Background(), ns, rbac)
		if err != nil {
			fail(err)
			return
		}
		ks.stops = append(ks.stops, drop)
		admin, err := c.AdminClient()
		if err != nil {
			fail(err)
			return
		}
		_, stopKubelet, err := c.StartKubelet(admin, ns, "ke"+id)
		if err != nil {
			fail(err)
			return
		}
		ks.stops = append(ks.stops, stopKubelet)
		dir, err := os.MkdirTemp("", "kubetarget-")
		if err != nil {
			fail(err)
			return
		}
		ks.stops = append(ks.stops, func() { os.RemoveAll(dir) })
		kubeconfig := filepath.Join(dir, "kubeconfig")
		if err := c.WriteKubeconfig(kubeconfig, token, ns); err != nil {
			fail(err)
			return
		}
		cfg := c.Config(token)
		ks.tg = Target{Name: Kubernetes, Runtime: Kubernetes, Image: "localhost/mcp-dev:latest",
			Env: []string{"SANDBOX_MCP_KUBECONFIG=" + kubeconfig, "SANDBOX_MCP_KUBE_NAMESPACE=" + ns},
			New: func() sandbox.Runtime {
				rt, err := kube.New(cfg, kube.Options{Namespace: ns})
				if err != nil {
					panic(fmt.Sprintf("kubernetes target: %v", err))
				}
				return rt
			}}
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
	return ks.tg
}

// StopShared ends what the targets of this process started for all
// their tests (the Kubernetes control plane and its kubelet stand-in).
// Call it from TestMain once the tests ran.
func StopShared() {
	ks := &kubeShared
	for i := len(ks.stops) - 1; i >= 0; i-- {
		ks.stops[i]()
	}
	ks.stops = nil
}
