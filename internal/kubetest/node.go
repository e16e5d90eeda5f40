package kubetest

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Node is a real node of the cluster: the kubelet of the apiserver's
// release (built beside it by scripts/build-kube-apiserver.sh) on Debian's
// containerd, runc and CNI bridge plugin, each of its own (its containerd
// is not the system's, its bridge and addresses are its own), with the
// parts of a control plane a node's pods need beside it:
// kube-controller-manager's volume binder, claim protection and garbage
// collector, a binder of pods to the node (the scheduler's part), and a
// provisioner that backs each claim with a host directory.
//
// What it lacks against a production cluster: a network plugin that
// enforces NetworkPolicy (the bridge lets every pod reach every pod), size
// limits on claims (host directories), image pulls (the images it runs
// are loaded at its start from archives of podman's images, SavedImage),
// node credentials (the
// kubelet acts as the cluster's admin), and a negative OOM score for its
// pods' sandboxes (this machine does not grant CAP_SYS_RESOURCE, so
// containerd keeps them at its own).
type Node struct {
	// Name is the Node's name, IP its address.
	Name string
	IP   string
	dir  string
	// bridge and subnet are its pods' network; life ends with the node.
	bridge string
	subnet *net.IPNet
	life   context.Context
}

// NodeBinaries are what a real node runs on: the kubelet (KUBELET, or
// beside the apiserver), containerd, ctr, runc, the CNI plugins and
// podman to load images from. why says what is missing; a node needs
// root, too.
func NodeBinaries() (kubelet, why string) {
	if kubelet, why = besideAPIServer("kubelet", "KUBELET"); why != "" {
		return "", why
	}
	for _, bin := range []string{"containerd", "ctr", "runc", "podman", "ip", "iptables"} {
		if _, err := exec.LookPath(bin); err != nil {
			return "", "no " + bin + " on the PATH: run scripts/setup-engine.sh"
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBin, p)); err != nil {
			return "", "no CNI plugin " + p + " in " + cniBin + ": run scripts/setup-engine.sh (containernetworking-plugins)"
		}
	}
	if os.Geteuid() != 0 {
		return "", "a real node runs as root"
	}
	return kubelet, ""
}

// cniBin is where Debian's containernetworking-plugins are.
const cniBin = "/usr/lib/cni"

// pauseImage is the pods' sandbox image: made at the node's start from
// the small test image (pauseBase), whose process sleeps.
const pauseImage = "localhost/kubetest-pause:latest"

// StartNode runs a real node of the cluster for the pods of namespace ns,
// with images (references in podman's store) loaded into it. Stop ends
// it, with its pods' containers, its network and its files. The node's
// cluster-wide parts (its controllers) act for every namespace.
func (c *Cluster) StartNode(ns string, images ...string) (n *Node, stop func(), err error) {
	kubelet, why := NodeBinaries()
	if why != "" {
		return nil, nil, errors.New(why)
	}
	ip, err := nodeAddress()
	if err != nil {
		return nil, nil, err
	}
	sweepDeadNodes()
	dir, err := os.MkdirTemp("/tmp", "ktn") // short: the sockets' paths are bounded
	if err != nil {
		return nil, nil, err
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	bridge := "kt" + hex.EncodeToString(b)
	// What a later node's sweep needs, should this process die first.
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())+" "+bridge), 0o600); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n = &Node{Name: "kt-node-" + hex.EncodeToString(b), IP: ip, dir: dir, bridge: bridge, life: ctx}
	var procs []*exec.Cmd
	stop = func() {
		cancel()
		n.drain(c, ns)
		for i := len(procs) - 1; i >= 0; i-- {
			_ = procs[i].Process.Kill()
			_, _ = procs[i].Process.Wait()
		}
		n.clean(bridge)
	}
	fail := func(err error) (*Node, func(), error) {
		stop()
		return nil, nil, err
	}
	start := func(logName string, bin string, args ...string) error {
		cmd := exec.Command(bin, args...)
		if err := startLogged(cmd, filepath.Join(dir, logName)); err != nil {
			return fmt.Errorf("start %s: %w", filepath.Base(bin), err)
		}
		procs = append(procs, cmd)
		return nil
	}

	// containerd, of its own, on the CNI bridge.
	sock := filepath.Join(dir, "containerd.sock")
	subnet, err := freeSubnet()
	if err != nil {
		return fail(err)
	}
	_, n.subnet, _ = net.ParseCIDR(subnet)
	conflist := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "plugins": [{"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
  "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}`,
		bridge, bridge, filepath.Join(dir, "ipam"), subnet)
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(dir, "containerd"), filepath.Join(dir, "state"), sock, pauseImage, cniBin, filepath.Join(dir, "cni"))
	for p, text := range map[string]string{filepath.Join(dir, "cni", "10-kt.conflist"): conflist, filepath.Join(dir, "containerd.toml"): config} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return fail(err)
		}
	}
	if err := start("containerd.log", "containerd", "--config", filepath.Join(dir, "containerd.toml")); err != nil {
		return fail(err)
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i == 200 {
			return fail(fmt.Errorf("containerd did not start: %s", tailOf(filepath.Join(dir, "containerd.log"))))
		}
		time.Sleep(100 * time.Millisecond)
	}
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Minute) // a podman stuck on its store fails the node, not the run
	err = n.loadImages(lctx, sock, images)
	lcancel()
	if err != nil {
		return fail(err)
	}

	// The kubelet, serving for the apiserver at the node's address.
	crt, key, err := c.kubelets.issue(n.Name, net.ParseIP(ip))
	if err != nil {
		return fail(err)
	}
	ports, err := freePorts(1)
	if err != nil {
		return fail(err)
	}
	kubeletConfig := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
port: %d
readOnlyPort: 0
healthzPort: 0
tlsCertFile: %q
tlsPrivateKeyFile: %q
cgroupsPerQOS: false
enforceNodeAllocatable: []
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
resolvConf: /etc/resolv.conf
podLogsDir: %q
makeIPTablesUtilChains: false
`, filepath.Join(dir, "kubelet-ca.crt"), sock, ip, ports[0], filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key"), filepath.Join(dir, "pod-logs"))
	files := map[string][]byte{"kubelet-ca.crt": c.kubelets.pem, "kubelet.crt": crt, "kubelet.key": key, "kubelet.yaml": []byte(kubeletConfig)}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fail(err)
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, c.AdminToken, "default"); err != nil {
		return fail(err)
	}
	// The kubelet sets some kernel settings as it starts; they are put
	// back once it runs (they are this machine's, shared with other tests),
	// under a lock that another test process's node takes too, so that
	// none reads what a kubelet just set as the machine's own.
	unlock, err := lockTunables()
	if err != nil {
		return fail(err)
	}
	defer unlock()
	tunables, err := saveTunables(dir)
	if err != nil {
		return fail(err)
	}
	defer restoreTunables(dir, tunables) // on failure too
	if err := start("kubelet.log", kubelet, "--config", filepath.Join(dir, "kubelet.yaml"), "--kubeconfig", kubeconfig,
		"--root-dir", filepath.Join(dir, "kubelet"), "--cert-dir", filepath.Join(dir, "pki"),
		"--hostname-override", n.Name, "--node-ip", ip); err != nil {
		return fail(err)
	}
	cs, err := c.AdminClient()
	if err != nil {
		return fail(err)
	}
	if err := n.waitReady(ctx, cs); err != nil {
		return fail(err)
	}
	restoreTunables(dir, tunables)
	unlock()

	// The control plane's parts for pods: volume binding and protection,
	// the garbage collector, Deployments and ReplicaSets, the scheduler's
	// binding, claims' volumes.
	kcm, why := controllerManager()
	if why != "" {
		return fail(errors.New(why))
	}
	if err := start("controller-manager.log", kcm, "--kubeconfig", kubeconfig,
		"--controllers", "garbage-collector-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller,persistentvolume-binder-controller,deployment-controller,replicaset-controller",
		"--leader-elect=false", "--secure-port", "0", "--concurrent-gc-syncs", "5"); err != nil {
		return fail(err)
	}
	go n.bindPods(ctx, cs, ns)
	go n.provision(ctx, cs, ns)
	return n, stop, nil
}

// nodeAddress is this machine's first address that is not the loopback's
// nor a container bridge's: a kubelet refuses the loopback.
func nodeAddress() (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 || i.Flags&net.FlagUp == 0 ||
			slices.ContainsFunc([]string{"podman", "docker", "kt", "cni", "veth", "br-", "virbr"}, func(p string) bool { return strings.HasPrefix(i.Name, p) }) {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", errors.New("a real node needs an address other than the loopback's, and this machine has none")
}

// tunables are the kernel settings a kubelet changes as it starts.
var tunables = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops"}

// tunablesLock is the machine-wide lock on the kernel settings a kubelet
// changes (a fixed path: test processes may have other temporary
// directories).
const tunablesLock = "/tmp/kubetest-tunables.lock"

// lockTunables takes the machine-wide lock on the kernel settings a
// kubelet changes; the function it returns, called once or more, lets go.
func lockTunables() (func(), error) {
	f, err := os.OpenFile(tunablesLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil
}

// saveTunables reads the settings, and keeps them in the node's dir for
// a sweep to put back should this process die before it does.
func saveTunables(dir string) (map[string]string, error) {
	out := map[string]string{}
	var text strings.Builder
	for _, t := range tunables {
		if b, err := os.ReadFile("/proc/sys/" + t); err == nil {
			out[t] = strings.TrimSpace(string(b))
			fmt.Fprintf(&text, "%s %s\n", t, out[t])
		}
	}
	return out, os.WriteFile(filepath.Join(dir, "tunables"), []byte(text.String()), 0o600)
}

// restoreTunables puts the settings back, once they are this machine's
// again forgets them.
func restoreTunables(dir string, saved map[string]string) {
	for t, v := range saved {
		_ = os.WriteFile("/proc/sys/"+t, []byte(v+"\n"), 0o644)
	}
	_ = os.Remove(filepath.Join(dir, "tunables"))
}

// restoreSavedTunables puts back what a dead node's dir kept, if it did.
func restoreSavedTunables(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "tunables"))
	if err != nil {
		return
	}
	saved := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && slices.Contains(tunables, f[0]) && strings.Trim(f[1], "-0123456789") == "" {
			saved[f[0]] = f[1]
		}
	}
	restoreTunables(dir, saved)
}

// loadImages loads the pods' sandbox image and images (from podman's
// store) into the node's containerd. Podman's store is only read: tests
// beside this one list and change it, and an image made or replaced in it
// meanwhile fails their listings ("layer not known").
func (n *Node) loadImages(ctx context.Context, sock string, images []string) error {
	load := func(tar, what string) error {
		out, err := exec.CommandContext(ctx, "ctr", "--address", sock, "--namespace", "k8s.io", "images", "import", tar).CombinedOutput()
		if err != nil {
			return fmt.Errorf("load %s into the node: %w: %s", what, err, out)
		}
		return nil
	}
	small, err := SavedImage(ctx, pauseBase)
	if err != nil {
		return err
	}
	pause := filepath.Join(n.dir, "pause.tar")
	if err := asPauseImage(small, pause); err != nil {
		return fmt.Errorf("the pods' sandbox image: %w", err)
	}
	err = load(pause, pauseImage)
	_ = os.Remove(pause)
	if err != nil {
		return err
	}
	for _, im := range images {
		tar, err := SavedImage(ctx, im)
		if err != nil {
			return err
		}
		if err := load(tar, im); err != nil {
			return err
		}
	}
	return nil
}

// DropSavedImage removes the archive SavedImage keeps of image, if there
// is one (an image made for one run, whose archive no later run uses).
func DropSavedImage(ctx context.Context, image string) {
	out, err := exec.CommandContext(ctx, "podman", "image", "inspect", "--format", "{{.Id}}", image).Output()
	if id := strings.TrimSpace(string(out)); err == nil && containerID.MatchString(id) {
		_ = os.Remove(filepath.Join(imageCache, id+".tar"))
	}
}

// imageCache keeps the docker archives of the images nodes load, by image
// ID: saving a large image from podman holds its store for a while, which
// scripts/test.sh does once, before the tests, not beside them.
const imageCache = "/var/tmp/kubetest-images"

// SavedImage is the path of a docker archive of podman's image im, saved
// once per image ID (whole or not at all: a temporary name, then a
// rename).
func SavedImage(ctx context.Context, im string) (string, error) {
	out, err := exec.CommandContext(ctx, "podman", "image", "inspect", "--format", "{{.Id}}", im).Output()
	id := strings.TrimSpace(string(out))
	if err != nil || !containerID.MatchString(id) {
		return "", fmt.Errorf("podman has no image %s (%v): run scripts/build-images.sh", im, err)
	}
	if err := os.MkdirAll(imageCache, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(imageCache, id+".tar")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if out, err := exec.CommandContext(ctx, "podman", "save", "-q", "--format", "docker-archive", "-o", tmp, im).CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("save %s from podman: %w: %s", im, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	// Archives of images since rebuilt go after a while.
	old, _ := filepath.Glob(filepath.Join(imageCache, "*.tar"))
	for _, o := range old {
		if fi, err := os.Stat(o); err == nil && time.Since(fi.ModTime()) > 48*time.Hour {
			_ = os.Remove(o)
		}
	}
	return path, nil
}

// pauseBase is the image the pods' sandbox image is made from.
const pauseBase = "localhost/sandbox-mcp-minimal:latest"

// asPauseImage writes at dst the docker archive src (one image) as the
// pods' sandbox image: its layers, its configuration with a process that
// sleeps, and the name pauseImage.
func asPauseImage(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	files := map[string][]byte{} // the archive's JSON files, rewritten at the end
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if strings.HasSuffix(h.Name, ".json") {
			b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
			if err != nil {
				return err
			}
			files[h.Name] = b
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	var manifest []map[string]any
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		return fmt.Errorf("%s: not a docker archive of one image (%v)", src, err)
	}
	cfgName, _ := manifest[0]["Config"].(string)
	var cfg map[string]any
	if err := json.Unmarshal(files[cfgName], &cfg); err != nil {
		return fmt.Errorf("%s: its configuration %q: %v", src, cfgName, err)
	}
	cc, _ := cfg["config"].(map[string]any)
	if cc == nil {
		cc = map[string]any{}
		cfg["config"] = cc
	}
	cc["Entrypoint"], cc["Cmd"] = []string{"sleep", "2147483647"}, nil
	manifest[0]["Config"], manifest[0]["RepoTags"] = "pause.json", []string{pauseImage}
	delete(files, "manifest.json")
	delete(files, cfgName)
	cfgJSON, _ := json.Marshal(cfg)
	manJSON, _ := json.Marshal(manifest)
	files["pause.json"], files["manifest.json"] = cfgJSON, manJSON
	for name, b := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return out.Close()
}

// waitReady waits for the kubelet to register its Node, ready.
func (n *Node) waitReady(ctx context.Context, cs kubernetes.Interface) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil && slices.ContainsFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the kubelet did not get ready: %v\n%s", err, tailOf(filepath.Join(n.dir, "kubelet.log")))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// bindPods binds the pods of ns that no node has to this one.
func (n *Node) bindPods(ctx context.Context, cs kubernetes.Interface, ns string) {
	for ctx.Err() == nil {
		w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
				continue
			}
			b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: n.Name}}
			for try := 0; try < 10; try++ {
				err := cs.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{})
				if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || ctx.Err() != nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		w.Stop()
	}
}

// provision backs each claim of ns with a volume of a host directory of
// the node's, bound to it, and removes the volume and its directory once
// the claim is gone (the volume Released).
func (n *Node) provision(ctx context.Context, cs kubernetes.Interface, ns string) {
	go func() {
		for ctx.Err() == nil {
			w, err := cs.CoreV1().PersistentVolumes().Watch(ctx, metav1.ListOptions{LabelSelector: "kubetest.node=" + n.Name})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				pv, ok := ev.Object.(*corev1.PersistentVolume)
				if ok && ev.Type != watch.Deleted && pv.Status.Phase == corev1.VolumeReleased && pv.Spec.HostPath != nil &&
					strings.HasPrefix(pv.Spec.HostPath.Path, filepath.Join(n.dir, "volumes")+"/") {
					_ = cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
					_ = os.RemoveAll(pv.Spec.HostPath.Path)
				}
			}
			w.Stop()
		}
	}()
	for ctx.Err() == nil {
		w, err := cs.CoreV1().PersistentVolumeClaims(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*corev1.PersistentVolumeClaim)
			if !ok || ev.Type != watch.Added || c.Spec.VolumeName != "" {
				continue
			}
			// Open to every user, as local-path-provisioner makes its
			// directories: a host path gets no fsGroup, and a pod that
			// runs as another user than root writes it too.
			path := filepath.Join(n.dir, "volumes", string(c.UID))
			if err := os.MkdirAll(path, 0o755); err != nil || os.Chmod(path, 0o777) != nil {
				continue
			}
			class := ""
			if c.Spec.StorageClassName != nil {
				class = *c.Spec.StorageClassName
			}
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: "kt-" + string(c.UID), Labels: map[string]string{"kubetest.node": n.Name}},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      c.Spec.Resources.Requests,
					AccessModes:                   c.Spec.AccessModes,
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					StorageClassName:              class,
					ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: c.Name, UID: c.UID},
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}},
				},
			}
			if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				_ = os.RemoveAll(path)
			}
		}
		w.Stop()
	}
}

// drain deletes the node's pods in ns and waits, a while, for the kubelet
// to have ended their containers and taken down their networks.
func (n *Node) drain(c *Cluster, ns string) {
	cs, err := c.AdminClient()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	zero := int64(0)
	_ = cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	for ctx.Err() == nil {
		out, err := exec.CommandContext(ctx, "ctr", "--address", filepath.Join(n.dir, "containerd.sock"), "--namespace", "k8s.io", "tasks", "ls", "-q").Output()
		if (err != nil || strings.TrimSpace(string(out)) == "") && n.addressesHeld() == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// addressesHeld counts the pod addresses the node's IPAM has given and
// not taken back: each goes once its pod's network is taken down.
func (n *Node) addressesHeld() int {
	held := 0
	_ = filepath.WalkDir(filepath.Join(n.dir, "ipam"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && net.ParseIP(d.Name()) != nil {
			held++
		}
		return nil
	})
	return held
}

// freeSubnet picks a /24 for the node's pods that no interface of this
// machine is on (another test process's node, say).
func freeSubnet() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for try := 0; try < 64; try++ {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		_, sub, _ := net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", 244+int(b[0])%8, b[1]))
		if !slices.ContainsFunc(addrs, func(a net.Addr) bool {
			ipn, ok := a.(*net.IPNet)
			return ok && (sub.Contains(ipn.IP) || ipn.Contains(sub.IP))
		}) {
			return sub.String(), nil
		}
	}
	return "", errors.New("no free /24 under 10.244.0.0/13 for the node's pods")
}

// clean takes down what is left of the node once its programs ended:
// its containers' processes, its mounts, its bridge and its files.
func (n *Node) clean(bridge string) {
	// Processes of containers the kubelet did not end (their shims
	// outlive containerd), found by the node's directory in their command
	// line, and their children.
	if pids := processesNaming(n.dir + "/"); len(pids) > 0 {
		for _, pid := range pids {
			_ = exec.Command("pkill", "-9", "-P", strconv.Itoa(pid)).Run()
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(500 * time.Millisecond) // their ends, before their cgroups go
	}
	// The cgroups of its containers (cgroupfs, under k8s.io), once their
	// processes are gone.
	ids, _ := os.ReadDir(filepath.Join(n.dir, "state", "io.containerd.runtime.v2.task", "k8s.io"))
	for _, id := range ids {
		if containerID.MatchString(id.Name()) {
			groups, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io/" + id.Name())
			for _, g := range groups {
				_ = os.Remove(g)
			}
		}
	}
	// Mounts under its directory, deepest first.
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		var mounts []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fs := strings.Fields(sc.Text()); len(fs) > 4 && strings.HasPrefix(fs[4], n.dir+"/") {
				mounts = append(mounts, fs[4])
			}
		}
		f.Close()
		slices.Sort(mounts)
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = exec.Command("umount", "-l", mounts[i]).Run()
		}
	}
	if bridgeName.MatchString(bridge) {
		_ = exec.Command("ip", "link", "delete", bridge).Run()
		dropServiceRoutes(bridge)
	}
	// Whatever is still mounted under it keeps the directory.
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), " "+n.dir+"/") {
		return
	}
	_ = os.RemoveAll(n.dir)
}

// Names a node's directory and bridge go by.
var (
	nodeDirName = regexp.MustCompile(`^/tmp/ktn[0-9]+$`)
	containerID = regexp.MustCompile(`^[0-9a-f]{64}$`)
	bridgeName  = regexp.MustCompile(`^kt[0-9a-f]{6}$`)
)

// processesNaming are the processes whose command line holds s.
func processesNaming(s string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s) {
			out = append(out, pid)
		}
	}
	return out
}

// LogTail is the end of the log of one of the node's programs
// (kubelet.log, containerd.log, controller-manager.log), for a failure.
func (n *Node) LogTail(name string) string { return tailOf(filepath.Join(n.dir, name)) }

// sweepDeadNodes takes down the nodes that test processes now gone left
// (a panic, a timeout, a kill): their programs died with them, but their
// containers' processes and mounts outlive them.
func sweepDeadNodes() {
	unlock, err := lockTunables()
	if err != nil {
		return
	}
	defer unlock()
	dirs, _ := filepath.Glob("/tmp/ktn*/owner")
	for _, owner := range dirs {
		dir := filepath.Dir(owner)
		// Only a directory a node of root's made: not a file another
		// user left to be taken for one.
		fi, err := os.Lstat(dir)
		if err != nil || !nodeDirName.MatchString(dir) || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
			continue
		}
		b, err := os.ReadFile(owner)
		f := strings.Fields(string(b))
		if err != nil || len(f) != 2 || !bridgeName.MatchString(f[1]) {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid <= 0 || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		restoreSavedTunables(dir)
		(&Node{dir: dir}).clean(f[1])
	}
}

// tailOf is the end of the file at path, for an error.
func tailOf(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// RouteToAPIServer lets the node's pods reach the apiserver where a pod's
// in-cluster client looks for it: the address of the default namespace's
// Service kubernetes, port 443, which the kubelet gives every pod in its
// variables, as kube-proxy would. The node has no kube-proxy: a rule of
// the host's sends what the node's pods send there to a relay of this
// process on the node's address, which takes connections from the node's
// pods only and carries them to the apiserver on the loopback. It ends
// with the node. The apiserver's certificate names the Service's address.
func (n *Node) RouteToAPIServer(c *Cluster) error {
	cs, err := c.AdminClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(n.life, 30*time.Second)
	defer cancel()
	svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the apiserver's Service: %w", err)
	}
	vip := net.ParseIP(svc.Spec.ClusterIP)
	if vip == nil || vip.To4() == nil {
		return fmt.Errorf("the apiserver's Service has no IPv4 address: %q", svc.Spec.ClusterIP)
	}
	api := strings.TrimPrefix(c.Host, "https://")
	l, err := net.Listen("tcp4", net.JoinHostPort(n.IP, "0"))
	if err != nil {
		return err
	}
	relay := l.Addr().String()
	go func() {
		<-n.life.Done()
		l.Close()
	}()
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			from, _ := conn.RemoteAddr().(*net.TCPAddr)
			if from == nil || !n.subnet.Contains(from.IP) {
				conn.Close()
				continue
			}
			go relayTo(n.life, conn, api)
		}
	}()
	rule := []string{"PREROUTING", "-i", n.bridge, "-d", vip.String(), "-p", "tcp", "--dport", "443",
		"-m", "comment", "--comment", serviceRouteTag + n.bridge, "-j", "DNAT", "--to-destination", relay}
	if out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w", "10", "-t", "nat", "-A"}, rule...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables: %w: %s", err, out)
	}
	return nil
}

// serviceRouteTag starts the comment of the rules RouteToAPIServer adds,
// followed by the node's bridge.
const serviceRouteTag = "kubetest-api-"

// relayTo carries conn to addr and back, until either end closes or ctx
// ends.
func relayTo(ctx context.Context, conn net.Conn, addr string) {
	defer conn.Close()
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close(); up.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
	<-done
}

// dropServiceRoutes removes the host's rules RouteToAPIServer added for
// the node of bridge.
func dropServiceRoutes(bridge string) {
	out, err := exec.Command("iptables", "-w", "10", "-t", "nat", "-S", "PREROUTING").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "-A" || !slices.Contains(f, serviceRouteTag+bridge) {
			continue
		}
		_ = exec.Command("iptables", append([]string{"-w", "10", "-t", "nat", "-D"}, f[1:]...)...).Run()
	}
}
