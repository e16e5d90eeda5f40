// Package kubetest runs a real Kubernetes control plane for tests: Debian's
// etcd and a kube-apiserver built from the Go module proxy
// (scripts/build-kube-apiserver.sh), on the loopback, with token
// authentication and RBAC. There is no kubelet: pods stay Pending unless a
// test plays the kubelet's part.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
}

// Config is a client configuration for the holder of token.
func (c *Cluster) Config(token string) *rest.Config {
	return &rest.Config{Host: c.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData},
		QPS: 200, Burst: 400, Timeout: 30 * time.Second}
}

// Admin is a clientset with every right.
func (c *Cluster) Admin(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Kubeconfig writes a kubeconfig file for token's holder in namespace ns
// and returns its path.
func (c *Cluster) Kubeconfig(t testing.TB, token, ns string) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, c.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
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
`, c.Host, ca, token, ns)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
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
	var procs []*exec.Cmd
	stop := func() {
		for i := len(procs) - 1; i >= 0; i-- {
			_ = procs[i].Process.Kill()
			if i == 0 {
				_, _ = procs[i].Process.Wait() // etcd; the apiserver's Wait is its watcher's
			}
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
	procs = append(procs, etcdCmd)

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fail(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return fail(err)
	}
	admin := randomToken()
	c := &Cluster{Host: "https://127.0.0.1:" + strconv.Itoa(ports[2]), AdminToken: admin, dir: dir,
		tokens: filepath.Join(dir, "tokens.csv")}
	if err := os.WriteFile(c.tokens, []byte(admin+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return fail(err)
	}
	certDir := filepath.Join(dir, "certs")
	apiCmd := exec.Command(apiserver,
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(ports[2]), "--cert-dir", certDir,
		"--token-auth-file", c.tokens, "--authorization-mode", "RBAC",
		"--service-account-issuer", c.Host, "--service-account-key-file", keyFile,
		"--service-account-signing-key-file", keyFile,
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--disable-admission-plugins", "ServiceAccount",
		// No Service for a loopback apiserver, which the reconciler refuses.
		"--endpoint-reconciler-type", "none")
	if err := startLogged(apiCmd, filepath.Join(dir, "apiserver.log")); err != nil {
		return fail(fmt.Errorf("start kube-apiserver: %w", err))
	}
	procs = append(procs, apiCmd)
	exited := make(chan struct{})
	go func() { _ = apiCmd.Wait(); close(exited) }()
	// Up when /readyz answers; the serving certificate is in certDir by
	// then.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if ca, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt")); err == nil {
			c.CAData = ca
			if cs, err := kubernetes.NewForConfig(c.Config(admin)); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
				cancel()
				if err == nil && strings.TrimSpace(string(body)) == "ok" {
					return c, stop, "", nil
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
			log, _ := os.ReadFile(filepath.Join(dir, "apiserver.log"))
			if len(log) > 4000 {
				log = log[len(log)-4000:]
			}
			return fail(fmt.Errorf("kube-apiserver did not get ready: %s", log))
		}
		time.Sleep(200 * time.Millisecond)
	}
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
