// Package kubetest runs a real Kubernetes control plane for tests: Debian's
// etcd and a kube-apiserver built from the Go module proxy
// (scripts/build-kube-apiserver.sh), on the loopback, with token
// authentication and RBAC. There is no kubelet: pods stay Pending unless a
// test plays the kubelet's part.
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Version is the kube-apiserver release the tests build and run.
const Version = "v1.37.2"

// Cluster is a running control plane.
type Cluster struct {
	// Host is the apiserver's URL; CAData its serving certificate.
	Host   string
	CAData []byte
	// AdminToken authenticates as a member of system:masters.
	AdminToken string
	dir        string
	tokens     string
	// The apiserver's program, arguments, process and its end.
	apiBin    string
	apiArgs   []string
	api       *exec.Cmd
	apiExited chan struct{}
	// kubelets signs what the apiserver and the kubelet stand-ins show
	// each other.
	kubelets *authority
	// agentSandbox: agent-sandbox's controller runs (StartAgentSandbox).
	agentSandbox atomic.Bool
	// csi is the CSI storage that runs on it, if any (StartCSI).
	csi atomic.Pointer[CSI]
}

// Config is a client configuration for the holder of token.
func (c *Cluster) Config(token string) *rest.Config {
	return &rest.Config{Host: c.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData},
		QPS: 200, Burst: 400, Timeout: 30 * time.Second}
}

// Admin is a clientset with every right.
func (c *Cluster) Admin(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := c.AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// AdminClient is a clientset with every right.
func (c *Cluster) AdminClient() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.Config(c.AdminToken))
}

// Kubeconfig writes a kubeconfig file for token's holder in namespace ns
// and returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, token, ns string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(p, token, ns); err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteKubeconfig writes, at path, a kubeconfig file for token's holder
// in namespace ns, with the cluster's certificate inline.
func (c *Cluster) WriteKubeconfig(path, token, ns string) error {
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: test
    namespace: %s
current-context: test
`, c.Host, base64.StdEncoding.EncodeToString(c.CAData), token, ns)
	return os.WriteFile(path, []byte(text), 0o600)
}

// Binaries are where the control plane's programs are: KUBE_APISERVER (or
// the build script's cache) and etcd on the PATH. why says what is missing.
func Binaries() (apiserver, etcd, why string) {
	apiserver = os.Getenv("KUBE_APISERVER")
	if apiserver == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		apiserver = filepath.Join(cache, "sandbox-mcp", "kube", Version, "kube-apiserver")
	}
	if _, err := os.Stat(apiserver); err != nil {
		return "", "", "no kube-apiserver at " + apiserver + ": run scripts/build-kube-apiserver.sh (or set KUBE_APISERVER)"
	}
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return "", "", "no etcd on the PATH: run scripts/build-kube-apiserver.sh, which installs Debian's etcd-server"
	}
	return apiserver, etcd, ""
}

// controllerManager is where kube-controller-manager is:
// KUBE_CONTROLLER_MANAGER, or beside the apiserver (the build script puts
// it there). why says what is missing.
func controllerManager() (path, why string) {
	return besideAPIServer("kube-controller-manager", "KUBE_CONTROLLER_MANAGER")
}

// besideAPIServer is where program name is: the path in variable env, or
// beside the apiserver, where scripts/build-kube-apiserver.sh puts it.
// why says what is missing.
func besideAPIServer(name, env string) (path, why string) {
	path = os.Getenv(env)
	if path == "" {
		apiserver, _, why := Binaries()
		if why != "" {
			return "", why
		}
		path = filepath.Join(filepath.Dir(apiserver), name)
	}
	if _, err := os.Stat(path); err != nil {
		return "", "no " + name + " at " + path + ": run scripts/build-kube-apiserver.sh (or set " + env + ")"
	}
	return path, ""
}

// RunGarbageCollector runs, until the test ends, kube-controller-manager
// with only the controllers that carry out owner references (the garbage
// collector) and let a deleted claim go once no pod uses it (pvc
// protection): what a cluster does with the owners the runtime sets.
// Under CI a missing binary fails the test; elsewhere it skips it.
func (c *Cluster) RunGarbageCollector(t *testing.T) {
	t.Helper()
	bin, why := controllerManager()
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI may not skip this:", why)
		}
		t.Skip(why)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, c.AdminToken, "default"); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "controller-manager.log")
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--controllers", "garbage-collector-controller,persistentvolumeclaim-protection-controller",
		"--leader-elect=false", "--secure-port", "0", "--concurrent-gc-syncs", "5")
	if err := startLogged(cmd, logPath); err != nil {
		t.Fatalf("start kube-controller-manager: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			if len(log) > 6000 {
				log = log[len(log)-6000:]
			}
			t.Logf("kube-controller-manager's log, its end:\n%s", log)
		}
	})
}

// Start runs a control plane for the tests of one package (call it from
// TestMain and Stop it after). It returns nil and the reason when the
// binaries are missing.
func Start() (*Cluster, func(), string, error) {
	apiserver, etcdBin, why := Binaries()
	if why != "" {
		return nil, nil, why, nil
	}
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, nil, "", err
	}
	var etcd *exec.Cmd
	var c *Cluster
	stop := func() {
		if c != nil {
			c.stopAPIServer()
		}
		if etcd != nil {
			_ = etcd.Process.Kill()
			_, _ = etcd.Process.Wait()
		}
		time.Sleep(100 * time.Millisecond)
		os.RemoveAll(dir)
	}
	fail := func(err error) (*Cluster, func(), string, error) {
		stop()
		return nil, nil, "", err
	}
	ports, err := freePorts(3)
	if err != nil {
		return fail(err)
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdCmd := exec.Command(etcdBin, "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-cluster", "default=http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--unsafe-no-fsync")
	if err := startLogged(etcdCmd, filepath.Join(dir, "etcd.log")); err != nil {
		return fail(fmt.Errorf("start etcd: %w", err))
	}
	etcd = etcdCmd

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fail(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return fail(err)
	}
	admin := randomToken()
	c = &Cluster{Host: "https://127.0.0.1:" + strconv.Itoa(ports[2]), AdminToken: admin, dir: dir,
		tokens: filepath.Join(dir, "tokens.csv")}
	if err := os.WriteFile(c.tokens, []byte(admin+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return fail(err)
	}
	if c.kubelets, err = newAuthority(); err != nil {
		return fail(err)
	}
	kubeletFlags, err := c.kubelets.writeApiserverFiles(dir)
	if err != nil {
		return fail(err)
	}
	certDir := filepath.Join(dir, "certs")
	c.apiBin, c.apiArgs = apiserver, append([]string{
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(ports[2]), "--cert-dir", certDir,
		"--token-auth-file", c.tokens, "--authorization-mode", "RBAC",
		"--service-account-issuer", c.Host, "--service-account-key-file", keyFile,
		"--service-account-signing-key-file", keyFile,
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--disable-admission-plugins", "ServiceAccount",
		// No Service for a loopback apiserver, which the reconciler refuses.
		"--endpoint-reconciler-type", "none"}, kubeletFlags...)
	if err := c.startAPIServer(); err != nil {
		return fail(err)
	}
	return c, stop, "", nil
}

// startAPIServer runs the apiserver and waits until it is ready.
func (c *Cluster) startAPIServer() error {
	certDir := filepath.Join(c.dir, "certs")
	apiCmd := exec.Command(c.apiBin, c.apiArgs...)
	logPath := filepath.Join(c.dir, "apiserver.log")
	if err := startLogged(apiCmd, logPath); err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	exited := make(chan struct{})
	c.api, c.apiExited = apiCmd, exited
	go func() { _ = apiCmd.Wait(); close(exited) }()
	// Up when /readyz answers; the serving certificate is in certDir by
	// then.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if ca, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt")); err == nil {
			c.CAData = ca
			if cs, err := kubernetes.NewForConfig(c.Config(c.AdminToken)); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
				cancel()
				if err == nil && strings.TrimSpace(string(body)) == "ok" {
					return nil
				}
			}
		}
		ended := false
		select {
		case <-exited:
			ended = true
		default:
		}
		if ended || time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			if len(log) > 4000 {
				log = log[len(log)-4000:]
			}
			return fmt.Errorf("kube-apiserver did not get ready: %s", log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stopAPIServer kills the apiserver and waits for it to end.
func (c *Cluster) stopAPIServer() {
	if c.api == nil {
		return
	}
	_ = c.api.Process.Kill()
	select {
	case <-c.apiExited:
	case <-time.After(10 * time.Second):
	}
	c.api = nil
}

// RestartAPIServer kills the apiserver and starts it again on the same
// address, certificates and etcd: every stream through it is cut, and
// every object kept.
func (c *Cluster) RestartAPIServer() error {
	c.stopAPIServer()
	return c.startAPIServer()
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func startLogged(cmd *exec.Cmd, logPath string) error {
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	dieWithTests(cmd)
	err = cmd.Start()
	f.Close()
	return err
}

// freePorts returns n loopback ports free at the time of the call.
func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// PlayKubelet reports the pods of namespace ns as a kubelet would once
// their container runs, until ctx ends: phase Running, the container's
// running state, an IP. A pod whose image is in failing is reported
// waiting with ImagePullBackOff instead, and one whose image holds
// "/silent" gets no report at all. Only the status is played: no process
// runs.
func PlayKubelet(ctx context.Context, cs kubernetes.Interface, ns string, failing ...string) {
	go func() {
		for ctx.Err() == nil {
			w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok || ev.Type == watch.Deleted || (p.Status.Phase != "" && p.Status.Phase != corev1.PodPending) || len(p.Status.ContainerStatuses) > 0 || len(p.Spec.Containers) == 0 {
					continue
				}
				now := metav1.Now()
				c := p.Spec.Containers[0]
				if strings.Contains(c.Image, "/silent") {
					continue
				}
				st := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
				if slices.Contains(failing, c.Image) {
					p.Status.Phase = corev1.PodPending
					st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image " + strconv.Quote(c.Image)}
				} else {
					p.Status.Phase = corev1.PodRunning
					p.Status.PodIP, p.Status.StartTime = "10.244.0."+strconv.Itoa(1+int(p.UID[0])%200), &now
					st.Ready, st.State.Running = true, &corev1.ContainerStateRunning{StartedAt: now}
				}
				p.Status.ContainerStatuses = []corev1.ContainerStatus{st}
				_, _ = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			}
			w.Stop()
		}
	}()
}

// Namespace makes a namespace named for the test with the objects of the
// RBAC manifest at rbacPath (deploy/kubernetes/rbac.yaml) in it, and
// returns it with a token of the manifest's ServiceAccount: the rights a
// server run by the manifest has, no more. The namespace goes when the
// test ends.
func (c *Cluster) Namespace(t *testing.T, rbacPath string) (ns, token string) {
	t.Helper()
	ns = strings.ToLower(strings.NewReplacer("_", "-", "/", "-").Replace(t.Name()))
	if len(ns) > 50 {
		ns = ns[:50]
	}
	ns = strings.Trim(ns, "-") + "-" + strconv.FormatInt(time.Now().UnixNano()%100000, 10)
	token, drop, err := c.MakeNamespace(context.Background(), ns, rbacPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drop)
	return ns, token
}

// MakeNamespace makes namespace ns with the objects of the RBAC manifest
// at rbacPath in it, and returns a token of its ServiceAccount and a
// function that deletes the namespace.
func (c *Cluster) MakeNamespace(ctx context.Context, ns, rbacPath string) (token string, drop func(), err error) {
	admin, err := c.AdminClient()
	if err != nil {
		return "", nil, err
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return "", nil, err
	}
	drop = func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }
	sa, err := applyRBAC(ctx, admin, ns, rbacPath)
	if err != nil {
		drop()
		return "", nil, err
	}
	// A day, not the default hour: a package's tests share a namespace,
	// and a slow run must not find its token expired half way.
	life := int64((24 * time.Hour).Seconds())
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &life}}, metav1.CreateOptions{})
	if err != nil {
		drop()
		return "", nil, err
	}
	return tok.Status.Token, drop, nil
}

// applyRBAC creates the objects of the manifest at path in ns and
// returns the name of its ServiceAccount.
func applyRBAC(ctx context.Context, cs kubernetes.Interface, ns, path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	sa := ""
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if doc == nil {
			continue
		}
		js, _ := json.Marshal(doc)
		switch doc["kind"] {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			_ = json.Unmarshal(js, &o)
			sa = o.Name
			_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &o, metav1.CreateOptions{})
		case "Role":
			var o rbacv1.Role
			_ = json.Unmarshal(js, &o)
			_, err = cs.RbacV1().Roles(ns).Create(ctx, &o, metav1.CreateOptions{})
		case "RoleBinding":
			var o rbacv1.RoleBinding
			_ = json.Unmarshal(js, &o)
			for i := range o.Subjects {
				o.Subjects[i].Namespace = ns
			}
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &o, metav1.CreateOptions{})
		default:
			return "", fmt.Errorf("%s holds a %v", path, doc["kind"])
		}
		if err != nil {
			return "", err
		}
	}
	if sa == "" {
		return "", fmt.Errorf("%s has no ServiceAccount", path)
	}
	return sa, nil
}
