package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/mcphttp"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestServerInClusterOnARealNode: deploy/kubernetes as a team applies it,
// on a real node: the server's image as scripts/build-server-image.sh
// builds it, the rights of rbac.yaml and the Deployment, claim and
// Service of server.yaml, with the two secrets server.yaml asks for. The
// server starts in its pod with its service account, answers a client of
// its Service's name over TLS with the bearer token (and refuses one
// without), and runs a command in a sandbox pod it makes beside itself.
// Its pod deleted, the Deployment's next one goes on with that sandbox,
// in the same pod, with its files and its shell's directory and
// variables; and removes it.
//
// What the test does for the cluster, since this one lacks it: the
// apiserver's Service is routed for the node's pods (no kube-proxy), the
// pod gets the token volume the ServiceAccount admission plugin would add,
// and the root CA's ConfigMap is published as kube-controller-manager
// would. The client dials the pod's address with the Service's name, as
// the cluster's DNS and Service would take it there.
func TestServerInClusterOnARealNode(t *testing.T) {
	if cluster == nil {
		t.Skip(skipWhy)
	}
	if _, why := kubetest.NodeBinaries(); why != "" {
		if ciRun() {
			t.Fatal("CI may not skip the real node's tests:", why)
		}
		t.Skip(why)
	}
	admin := cluster.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	// A namespace of its own, as an overlay of the manifests would name
	// (their host names say sandboxes; patchServer names this one).
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "sandboxes-" + hex.EncodeToString(b)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})

	// The server's image, built as the README says: by scripts/test.sh
	// before the tests (a build, a save or a removal while other packages'
	// tests run holds podman's store), else here.
	image := os.Getenv("SANDBOX_MCP_TEST_SERVER_IMAGE")
	if image == "" {
		image = "localhost/sandbox-mcp-server:kubetest-" + hex.EncodeToString(b)
		build := exec.CommandContext(ctx, "scripts/build-server-image.sh", image)
		build.Dir = "../.."
		build.WaitDelay = 10 * time.Second // its go build or podman build, should ctx end
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build the server's image: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer ccancel()
		kubetest.DropSavedImage(cctx, image) // each build is a new image: its archive is not kept
		_ = exec.CommandContext(cctx, "podman", "rmi", "-f", image).Run()
	})
	node, stop, err := cluster.StartNode(ns, testImage, image)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	// Before the node stops: nothing left for a later node's controllers
	// to act on in a namespace no controller here ever removes.
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandbox-mcp"}
		_ = admin.AppsV1().Deployments(ns).DeleteCollection(cctx, metav1.DeleteOptions{}, sel)
		_ = admin.AppsV1().ReplicaSets(ns).DeleteCollection(cctx, metav1.DeleteOptions{}, sel)
	})
	if err := node.RouteToAPIServer(cluster); err != nil {
		t.Fatal(err)
	}

	// What the cluster would have published, and the secrets the user
	// makes.
	tokenBytes := make([]byte, 32)
	_, _ = rand.Read(tokenBytes)
	token := hex.EncodeToString(tokenBytes)
	certPEM, keyPEM, caPEM, err := kubetest.ServingCertificate("sandbox-mcp." + ns + ".svc")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, o := range []any{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(cluster.CAData)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-mcp-tls"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-mcp-token"}, StringData: map[string]string{"token": token}},
	} {
		var err error
		switch o := o.(type) {
		case *corev1.ConfigMap:
			_, err = admin.CoreV1().ConfigMaps(ns).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Secret:
			_, err = admin.CoreV1().Secrets(ns).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	applyManifests(ctx, t, admin, ns, image)

	pod := waitServerReady(ctx, t, admin, ns, node, "")
	url := "https://sandbox-mcp." + ns + ".svc:8443/mcp"
	// transport dials the server's pod as the Service would take a
	// client there, and trusts the certificate of the Service's name.
	transport := func(pod *corev1.Pod) *http.Transport {
		dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort(pod.Status.PodIP, "8443"))
		}
		tr := &http.Transport{DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
		t.Cleanup(tr.CloseIdleConnections)
		return tr
	}

	// Without the token: refused.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if resp, err := (&http.Client{Transport: transport(pod)}).Do(req); err != nil {
		t.Fatalf("a request without the token: %v", err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a request without the token: %s", resp.Status)
	}

	// connect opens a client session with the server in pod, and returns
	// a call of a tool on it: the result's text, and whether it is an
	// error.
	connect := func(pod *corev1.Pod) func(tool string, args map[string]any) (string, bool) {
		c := sdk.NewClient(&sdk.Implementation{Name: "team-client", Version: "0"}, nil)
		cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url,
			HTTPClient: &http.Client{Transport: mcphttp.TokenTransport(transport(pod), token)}, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatalf("connect to the server in the cluster: %v\nits log:\n%s", err, podLog(admin, ns, pod.Name))
		}
		t.Cleanup(func() { cs.Close() })
		return func(tool string, args map[string]any) (string, bool) {
			t.Helper()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
			if err != nil {
				t.Fatalf("%s: %v\nthe server's log:\n%s", tool, err, podLog(admin, ns, pod.Name))
			}
			var text strings.Builder
			for _, ct := range res.Content {
				if tc, ok := ct.(*sdk.TextContent); ok {
					text.WriteString(tc.Text)
				}
			}
			return text.String(), res.IsError
		}
	}
	sandboxPod := func() corev1.Pod {
		t.Helper()
		// By its sandbox's name (annName): the server keeps a warm spare,
		// which the first call took, so the pod has a spare's labels.
		all, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
		var pods []corev1.Pod
		for _, p := range all.Items {
			if strings.HasSuffix(p.Annotations[annName], "-team1") {
				pods = append(pods, p)
			}
		}
		if err != nil || len(pods) != 1 || pods[0].Spec.NodeName != node.Name || pods[0].Status.Phase != corev1.PodRunning {
			t.Fatalf("the sandbox's pod: %+v %v", pods, err)
		}
		return pods[0]
	}

	call := connect(pod)
	out, isErr := call("exec", map[string]any{"sandbox": "team1", "command": "echo hello from $(cat /etc/hostname) && echo kept >/workspace/f && cd /tmp && export K=v"})
	if isErr || !strings.Contains(out, "hello from ") {
		t.Fatalf("exec through the server in the cluster: %s\nthe server's log:\n%s\nkubelet's log, its end:\n%s", out, podLog(admin, ns, pod.Name), node.LogTail("kubelet.log"))
	}
	before := sandboxPod()

	// The server's pod goes (a rollout, a drained node): the Deployment
	// makes another, which finds the sandbox by its state on the claim
	// and the cluster's objects, and goes on in the same pod.
	if err := admin.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = waitServerReady(ctx, t, admin, ns, node, pod.Name)
	call = connect(pod)
	out, isErr = call("exec", map[string]any{"sandbox": "team1", "command": `echo "$PWD $K $(cat /workspace/f)"`})
	if isErr || !strings.Contains(out, "/tmp v kept") {
		t.Fatalf("exec after the server's pod was made again: %s\nthe server's log:\n%s", out, podLog(admin, ns, pod.Name))
	}
	if after := sandboxPod(); after.UID != before.UID {
		t.Fatalf("the sandbox's pod was made again (%s, was %s): the new server did not take up the running one", after.UID, before.UID)
	}

	if out, isErr := call("destroy", map[string]any{"sandbox": "team1"}); isErr {
		t.Fatalf("destroy: %s", out)
	}
	until(ctx, t, "the sandbox's pod to go", func() (bool, error) {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sandbox.LabelName + "=team1"})
		return err == nil && len(pods.Items) == 0, err
	})
}

// applyManifests creates the objects of deploy/kubernetes's rbac.yaml and
// server.yaml in ns, as kustomization.yaml puts them, with image for the
// server's (the overlay's part) and the sandboxes' image one the node
// has. The server's pod gets the service account token volume the
// ServiceAccount admission plugin adds, which this cluster runs without.
func applyManifests(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns, image string) {
	t.Helper()
	for _, file := range []string{"rbac.yaml", "server.yaml"} {
		data, err := os.ReadFile(filepath.Join("../../deploy/kubernetes", file))
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var raw map[string]any
			if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if raw == nil {
				continue
			}
			kind, _ := raw["kind"].(string)
			body, err := json.Marshal(raw)
			if err != nil {
				t.Fatal(err)
			}
			switch kind {
			case "Deployment":
				var d appsv1.Deployment
				dec := json.NewDecoder(bytes.NewReader(body))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&d); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				patchServer(t, &d.Spec.Template.Spec, image, ns)
				_, err = admin.AppsV1().Deployments(ns).Create(ctx, &d, metav1.CreateOptions{})
			case "ServiceAccount", "Service", "PersistentVolumeClaim":
				err = admin.CoreV1().RESTClient().Post().Namespace(ns).Resource(strings.ToLower(kind)+"s").
					Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
			case "Role", "RoleBinding":
				err = admin.RbacV1().RESTClient().Post().Namespace(ns).Resource(strings.ToLower(kind)+"s").
					Body(body).SetHeader("Content-Type", "application/json").Do(ctx).Error()
			default:
				t.Fatalf("%s holds a %s, which this test does not create", file, kind)
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("%s: %s: %v", file, kind, err)
			}
		}
	}
}

// patchServer is the overlay's part (the server's image, the sandboxes'
// image, the Service's name in namespace ns) and the admission plugin's
// (the token volume) on the server's pod.
func patchServer(t *testing.T, spec *corev1.PodSpec, image, ns string) {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("server.yaml's pod has %d containers", len(spec.Containers))
	}
	c := &spec.Containers[0]
	c.Image = image
	c.ImagePullPolicy = corev1.PullNever
	found := false
	for i, a := range c.Args {
		if strings.HasPrefix(a, "--image=") {
			c.Args[i], found = "--image="+testImage, true
		}
		c.Args[i] = strings.Replace(c.Args[i], ".sandboxes.svc", "."+ns+".svc", 1)
	}
	if !found {
		t.Fatal("server.yaml's server names no --image for the sandboxes")
	}
	expiry := int64(3607)
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
}

// waitServerReady waits for the Deployment's one pod, other than the pod
// named not, to be ready, and returns it; its failure says why, with the
// server's log.
func waitServerReady(ctx context.Context, t *testing.T, admin kubernetes.Interface, ns string, node *kubetest.Node, not string) *corev1.Pod {
	t.Helper()
	var last string
	for ctx.Err() == nil {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=sandbox-mcp"})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Name != not {
			p := &pods.Items[0]
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
					return p
				}
			}
			last = fmt.Sprintf("pod %s: phase %s, %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			for _, st := range p.Status.ContainerStatuses {
				if st.RestartCount > 0 {
					t.Fatalf("the server's container restarted: %s\nits log:\n%s", last, podLog(admin, ns, p.Name))
				}
			}
		} else if err == nil {
			last = fmt.Sprintf("%d pods", len(pods.Items))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("the server's pod was not ready: %s\nkubelet's log, its end:\n%s", last, node.LogTail("kubelet.log"))
	return nil
}

// podLog is the end of pod's log, for a failure.
func podLog(admin kubernetes.Interface, ns, pod string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tail := int64(60)
	b, err := admin.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b)
}
