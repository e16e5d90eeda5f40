package kubetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// Kubelet stands in for one node's kubelet, with podman as its container
// runtime: it takes the pods of a namespace onto a Node of its own (the
// scheduler's part), runs each as a podman container with the pod's
// image, command, environment, claims (as podman volumes, which outlive
// the pod as a claim's volume does), limits and capabilities, under the
// namespace's NetworkPolicies (egressDenied, ingress.go); reports
// their status as a kubelet does; finishes their graceful deletion; and
// serves the exec streams the apiserver forwards to a kubelet (SPDY or
// WebSocket, k8s.io/cri-streaming's server) by running `podman exec`.
//
// The apiserver reaches it at 127.0.0.1 over TLS with a client
// certificate, each side checking the other against the cluster's
// kubelet authority.
type Kubelet struct {
	// Node is the name of its Node.
	Node string
	// Execs counts the exec streams it served.
	Execs atomic.Int64

	cluster *Cluster
	cs      kubernetes.Interface
	ns      string
	podman  string
	prefix  string
	mux     http.Handler
	tls     *tls.Config

	srvMu sync.Mutex
	srv   *httptest.Server // the streaming server, made again by Restart
	conns *trackedListener // its listener, which knows its connections

	mu   sync.Mutex
	pods map[string]*podRun // by pod name
	// ingressMu holds one rewrite of the pods' ingress rules at a time
	// (ingress.go).
	ingressMu sync.Mutex
}

// podRun is one pod's container.
type podRun struct {
	uid      string
	ctr      string
	running  bool
	deleting bool
	// labels, ip, gateway and netns are the wired pod's labels, address,
	// its node's address on the pods' network, and its network namespace;
	// ingress the rules last loaded into it (ingress.go).
	labels  labels.Set
	ip      string
	gateway string
	netns   string
	ingress string
}

// StartKubelet runs a kubelet stand-in for the pods of namespace ns,
// with cs (the cluster's admin) to bind them and report on them, and
// names its containers and volumes with prefix. Stop ends it, with its
// containers, volumes and Node.
func (c *Cluster) StartKubelet(cs kubernetes.Interface, ns, prefix string) (k *Kubelet, stop func(), err error) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		return nil, nil, fmt.Errorf("the kubelet stand-in runs pods on podman: %w", err)
	}
	tlsConf, err := c.kubelets.serverTLS()
	if err != nil {
		return nil, nil, err
	}
	k = &Kubelet{Node: prefix + "node", cluster: c, cs: cs, ns: ns, podman: podman, prefix: prefix, pods: map[string]*podRun{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/{ns}/{pod}/{container}", k.serveExec)
	mux.HandleFunc("/exec/{ns}/{pod}/{uid}/{container}", k.serveExec)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	k.mux, k.tls = mux, tlsConf
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	k.serve(l)
	port := l.Addr().(*net.TCPAddr).Port

	ctx, cancel := context.WithCancel(context.Background())
	stop = func() {
		cancel()
		k.srvMu.Lock()
		k.srv.Close()
		k.srvMu.Unlock()
		k.removeAll()
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		_ = cs.CoreV1().Nodes().Delete(dctx, k.Node, metav1.DeleteOptions{})
	}
	if err := k.register(ctx, port); err != nil {
		stop()
		return nil, nil, err
	}
	k.sweepDead(ctx)
	go k.watchPods(ctx)
	go k.watchClaims(ctx)
	return k, stop, nil
}

// serve starts the streaming server on l.
func (k *Kubelet) serve(l net.Listener) {
	srv := httptest.NewUnstartedServer(k.mux)
	srv.Listener.Close()
	tl := &trackedListener{Listener: l, conns: map[net.Conn]bool{}}
	srv.Listener = tl
	srv.TLS = k.tls
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	k.srvMu.Lock()
	k.srv, k.conns = srv, tl
	k.srvMu.Unlock()
}

// Restart stops serving streams for down, as a kubelet that restarts
// does, and serves them again on the same port. The streams under way
// are cut (the stand-in's podman exec ends with its stream, and a shell
// whose input closes exits); the pods' containers go on running. Meanwhile the port
// refuses connections, so the apiserver cannot reach the node.
func (k *Kubelet) Restart(down time.Duration) error {
	k.srvMu.Lock()
	old, conns := k.srv, k.conns
	k.srvMu.Unlock()
	addr := old.Listener.Addr().String()
	// The streams' connections were hijacked, which the server forgets,
	// and Close would wait for the requests under way.
	conns.closeAll()
	old.Close()
	time.Sleep(down)
	var l net.Listener
	var err error
	// The port was ours a moment ago; nothing else on the loopback takes
	// it in practice, but a socket in TIME_WAIT can hold it briefly.
	for try := 0; try < 50; try++ {
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("kubelet stand-in: listen again on %s: %w", addr, err)
	}
	k.serve(l)
	return nil
}

// trackedListener keeps the connections it accepted, hijacked or not, so
// that all of them can be cut.
type trackedListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[tc] = true
	l.mu.Unlock()
	return tc, nil
}

// trackedConn leaves its listener's set when it is closed.
type trackedConn struct {
	net.Conn
	l *trackedListener
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (l *trackedListener) closeAll() {
	l.mu.Lock()
	conns := slices.Collect(maps.Keys(l.conns))
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// register makes the Node, ready, at 127.0.0.1:port.
func (k *Kubelet) register(ctx context.Context, port int) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.Node, Labels: map[string]string{"kubernetes.io/hostname": k.Node}}}
	n, err := k.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	n.Status = corev1.NodeStatus{
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: k.Node}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now()}},
		Capacity:        corev1.ResourceList{},
	}
	if _, err := k.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	return nil
}

func (k *Kubelet) watchPods(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := k.cs.CoreV1().Pods(k.ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			k.handle(ctx, ev.Type, p)
		}
		w.Stop()
	}
}

// handle acts on one pod event as the scheduler and the kubelet would.
func (k *Kubelet) handle(ctx context.Context, typ watch.EventType, p *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	run := k.pods[p.Name]
	if run != nil && run.uid != string(p.UID) {
		run = nil // a pod of the same name made since
	}
	switch {
	case typ == watch.Deleted:
		if run != nil {
			delete(k.pods, p.Name)
			go func() {
				k.remove(run.ctr)
				_ = k.enforceIngress(ctx, nil) // its address is no one's now
			}()
		}
	case p.DeletionTimestamp != nil:
		if p.Spec.NodeName == k.Node && (run == nil || !run.deleting) {
			if run == nil {
				run = &podRun{uid: string(p.UID), ctr: k.containerName(p)}
				k.pods[p.Name] = run
			}
			run.deleting, run.running = true, false
			grace := int64(0)
			if p.DeletionGracePeriodSeconds != nil {
				grace = *p.DeletionGracePeriodSeconds
			}
			go k.finishDeletion(ctx, p, run.ctr, grace)
		}
	case p.Spec.NodeName == "":
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: k.Node}}
		go func() {
			k.selectNode(ctx, p)
			_ = k.cs.CoreV1().Pods(k.ns).Bind(ctx, b, metav1.CreateOptions{})
		}()
	case p.Spec.NodeName == k.Node && run == nil && p.Status.Phase == corev1.PodPending && len(p.Spec.Containers) > 0:
		run = &podRun{uid: string(p.UID), ctr: k.containerName(p)}
		k.pods[p.Name] = run
		go k.start(ctx, p.DeepCopy(), run)
	}
}

// selectNode marks the pod's claims whose class binds them once a pod
// that uses them is scheduled (WaitForFirstConsumer) for this node, as the
// scheduler does before it binds the pod: their provisioner then makes
// their volumes.
func (k *Kubelet) selectNode(ctx context.Context, p *corev1.Pod) {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		c, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil || c.Spec.VolumeName != "" || c.Spec.StorageClassName == nil || *c.Spec.StorageClassName == "" {
			continue
		}
		sc, err := k.cs.StorageV1().StorageClasses().Get(ctx, *c.Spec.StorageClassName, metav1.GetOptions{})
		if err != nil || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{selectedNode: k.Node}}})
		_, _ = k.cs.CoreV1().PersistentVolumeClaims(k.ns).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
}

// selectedNode is the annotation by which the scheduler tells a claim's
// provisioner the node of the first pod that uses it.
const selectedNode = "volume.kubernetes.io/selected-node"

// containerName names a pod's container after the pod and its UID, as a
// kubelet does: a pod made again under the same name while the container
// of the one before is still being removed gets a container of its own.
func (k *Kubelet) containerName(p *corev1.Pod) string {
	uid := strings.ReplaceAll(string(p.UID), "-", "")
	return k.prefix + "k-" + p.Name + "-" + uid[:min(len(uid), 12)]
}

func (k *Kubelet) volumeName(claim string) string { return k.prefix + "pvc-" + claim }

// start runs the pod's container and reports it running, then watches
// for its end.
func (k *Kubelet) start(ctx context.Context, p *corev1.Pod, run *podRun) {
	c := p.Spec.Containers[0]
	// As a kubelet does while it makes the container: a wait that ends
	// now can tell a slow start from a pod no node took.
	k.waiting(ctx, p, "ContainerCreating", "")
	args := []string{"create", "--name", run.ctr, "--hostname", p.Name, "--label", "kubetest.kubelet=" + k.Node, "--label", pidLabel,
		"--security-opt", "no-new-privileges", "--cap-drop", "ALL"}
	if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil {
		for _, cp := range sc.Capabilities.Add {
			args = append(args, "--cap-add", string(cp))
		}
	}
	isolated, err := k.egressDenied(ctx, p)
	if err != nil {
		k.fail(ctx, p, "CreateContainerConfigError", err.Error())
		return
	}
	if isolated {
		args = append(args, "--network", "none")
	} else if err := k.checkIngress(ctx, p.Labels); err != nil {
		k.fail(ctx, p, "CreateContainerConfigError", err.Error())
		return
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		args = append(args, "--memory", strconv.FormatInt(q.Value(), 10))
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		args = append(args, "--cpus", strconv.FormatFloat(float64(q.MilliValue())/1000, 'f', 3, 64))
	}
	for _, e := range c.Env {
		args = append(args, "--env", e.Name+"="+e.Value)
	}
	if c.WorkingDir != "" {
		args = append(args, "--workdir", c.WorkingDir)
	}
	claims := map[string]string{}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	for _, m := range c.VolumeMounts {
		claim, ok := claims[m.Name]
		if !ok {
			k.fail(ctx, p, "CreateContainerConfigError", "volume "+m.Name+" is not a claim")
			return
		}
		// A claim of the CSI storage's class is its driver's volume,
		// published for this container; any other is a podman volume.
		vol, err := k.publishClaim(ctx, run.ctr, m.Name, claim, m.ReadOnly)
		if err != nil {
			k.unpublish(run.ctr)
			k.fail(ctx, p, "FailedMount", err.Error())
			return
		}
		if vol == "" {
			vol = k.volumeName(claim)
			// One that exists already (a claim's, from the pod before) is
			// used as it is.
			if _, err := k.podmanOut(ctx, "volume", "create", "--label", "kubetest.kubelet="+k.Node, "--label", pidLabel, vol); err != nil && !strings.Contains(err.Error(), "already exists") {
				k.unpublish(run.ctr)
				k.fail(ctx, p, "CreateContainerConfigError", err.Error())
				return
			}
		}
		spec := vol + ":" + m.MountPath
		if m.ReadOnly {
			spec += ":ro"
		}
		args = append(args, "--volume", spec)
	}
	if len(c.Command) > 0 {
		ep, _ := json.Marshal(c.Command)
		args = append(args, "--entrypoint", string(ep))
	}
	args = append(args, "--", c.Image)
	args = append(args, c.Args...)
	if _, err := k.podmanOut(ctx, args...); err != nil {
		k.unpublish(run.ctr)
		k.fail(ctx, p, "CreateContainerError", err.Error())
		return
	}
	// Its network, and the ingress rules of it and of the pods it is let
	// into, before its first process runs (ingress.go).
	if !isolated {
		if err := k.wireIngress(ctx, run, p); err != nil {
			k.remove(run.ctr)
			k.fail(ctx, p, "CreateContainerError", err.Error())
			return
		}
	}
	if _, err := k.podmanOut(ctx, "start", run.ctr); err != nil {
		k.unwire(ctx, run)
		k.remove(run.ctr)
		k.fail(ctx, p, "CreateContainerError", err.Error())
		return
	}
	k.mu.Lock()
	ok := !run.deleting
	run.running = ok
	ip := run.ip
	k.mu.Unlock()
	if !ok {
		return
	}
	now := metav1.Now()
	k.report(ctx, p, func(p *corev1.Pod) {
		p.Status.Phase, p.Status.StartTime = corev1.PodRunning, &now
		p.Status.PodIP = strings.TrimSpace(ip)
		if p.Status.PodIP == "" {
			// Kept off the network (a policy denies it everything): a
			// cluster still gives it an address, whose traffic its
			// policy drops; here one of the documentation range, which
			// reaches nothing.
			sum := sha256.Sum256([]byte(p.UID))
			p.Status.PodIP = fmt.Sprintf("198.51.100.%d", 1+int(sum[0])%254)
		}
		p.Status.HostIP = "127.0.0.1"
		if p.Status.PodIP != "" {
			p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
		}
		// The conditions a kubelet reports of a running pod with no
		// readiness probe (controllers, agent-sandbox's among them, wait
		// for Ready).
		p.Status.Conditions = podConditions(corev1.ConditionTrue, now)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Ready: true, Started: ptr(true),
			ContainerID: "podman://" + run.ctr, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
	// Its end, unless a deletion ends it.
	out, err := k.podmanOut(context.WithoutCancel(ctx), "wait", run.ctr)
	k.mu.Lock()
	deleting := run.deleting
	run.running = false
	k.mu.Unlock()
	k.unwire(ctx, run)
	if err != nil || deleting || ctx.Err() != nil {
		return
	}
	code, _ := strconv.Atoi(strings.TrimSpace(out))
	end := metav1.Now()
	k.report(ctx, p, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodSucceeded
		if code != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		p.Status.Conditions = podConditions(corev1.ConditionFalse, end)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, ContainerID: "podman://" + run.ctr,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), StartedAt: now, FinishedAt: end, Reason: "Completed"}}}}
	})
}

func ptr[T any](v T) *T { return &v }

// podConditions are the conditions a kubelet reports of a pod whose
// containers run (ready true) or have ended (false), changed at t.
func podConditions(ready corev1.ConditionStatus, t metav1.Time) []corev1.PodCondition {
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t},
		{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: t},
		{Type: corev1.PodReady, Status: ready, LastTransitionTime: t},
	}
}

// egressDenied reports whether the namespace's NetworkPolicies deny the
// pod every connection out, as a network plugin that enforces them
// would: some policy of type Egress selects it and none that does lets
// anything through. The stand-in enforces that case alone (the pod gets
// no network); a policy with rules it cannot model fails the pod rather
// than leaving it more open than the cluster would.
func (k *Kubelet) egressDenied(ctx context.Context, p *corev1.Pod) (bool, error) {
	list, err := k.cs.NetworkingV1().NetworkPolicies(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("network policies: %w", err)
	}
	denied := false
	for _, np := range list.Items {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(p.Labels)) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			continue
		}
		if len(np.Spec.Egress) > 0 {
			return false, fmt.Errorf("NetworkPolicy %s has egress rules, which the kubelet stand-in cannot enforce", np.Name)
		}
		denied = true
	}
	return denied, nil
}

// fail reports a container that could not be made, as a kubelet does.
func (k *Kubelet) fail(ctx context.Context, p *corev1.Pod, reason, msg string) {
	k.waiting(ctx, p, reason, msg)
}

// waiting reports the pod's container waiting, for reason.
func (k *Kubelet) waiting(ctx context.Context, p *corev1.Pod, reason, msg string) {
	k.report(ctx, p, func(p *corev1.Pod) {
		c := p.Spec.Containers[0]
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	})
}

// report updates the pod's status with set, on its latest version.
func (k *Kubelet) report(ctx context.Context, p *corev1.Pod, set func(*corev1.Pod)) {
	for range 20 {
		cur, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || cur.UID != p.UID || cur.DeletionTimestamp != nil {
			return
		}
		set(cur)
		if _, err := k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return
		}
	}
}

// finishDeletion ends the pod's container within its grace and removes
// the pod, as a kubelet does once its containers are gone.
func (k *Kubelet) finishDeletion(ctx context.Context, p *corev1.Pod, ctr string, grace int64) {
	_, _ = k.podmanOut(context.WithoutCancel(ctx), "rm", "-f", "-t", strconv.FormatInt(grace, 10), ctr)
	k.unpublish(ctr)
	uid := p.UID
	_ = k.cs.CoreV1().Pods(k.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0)),
		Preconditions: &metav1.Preconditions{UID: &uid}})
}

func (k *Kubelet) remove(ctr string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, _ = k.podmanOut(ctx, "rm", "-f", "-t", "0", ctr)
	k.unpublish(ctr)
}

// unpublish takes back the CSI volumes published for container ctr, once
// it is gone.
func (k *Kubelet) unpublish(ctr string) {
	if s := k.cluster.csiStorage(); s != nil {
		s.unpublish(ctr)
	}
}

// watchClaims removes a claim's volume once the claim is deleted, as a
// provisioner with the Delete reclaim policy does.
func (k *Kubelet) watchClaims(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*corev1.PersistentVolumeClaim); ok && ev.Type == watch.Deleted {
				go func() {
					for range 30 { // its pod may still be going
						if _, err := k.podmanOut(context.WithoutCancel(ctx), "volume", "rm", "-f", k.volumeName(c.Name)); err == nil || strings.Contains(err.Error(), "no such volume") {
							return
						}
						time.Sleep(time.Second)
					}
				}()
			}
		}
		w.Stop()
	}
}

// removeAll removes every container and volume of this stand-in.
// pidLabel marks the containers and volumes a stand-in makes with the
// test process it runs in, so that the next stand-in removes those a
// process that died (a panic, a timeout, a kill) left.
var pidLabel = "kubetest.pid=" + strconv.Itoa(os.Getpid())

// sweepDead removes the containers and volumes of stand-ins whose test
// process is gone. One whose process number is alive again (reused) is
// left: the next sweep after that process goes takes it.
func (k *Kubelet) sweepDead(ctx context.Context) {
	dead := func(out string) []string {
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			pid, err := strconv.Atoi(f[1])
			if err != nil || pid <= 0 {
				continue
			}
			if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
				names = append(names, f[0])
			}
		}
		return names
	}
	if out, err := k.podmanOut(ctx, "ps", "-a", "--filter", "label=kubetest.kubelet", "--format", `{{.ID}} {{index .Labels "kubetest.pid"}}`); err == nil {
		if ids := dead(out); len(ids) > 0 {
			_, _ = k.podmanOut(ctx, append([]string{"rm", "-f", "-t", "0"}, ids...)...)
		}
	}
	if out, err := k.podmanOut(ctx, "volume", "ls", "--filter", "label=kubetest.kubelet", "--format", `{{.Name}} {{index .Labels "kubetest.pid"}}`); err == nil {
		if vols := dead(out); len(vols) > 0 {
			_, _ = k.podmanOut(ctx, append([]string{"volume", "rm", "-f"}, vols...)...)
		}
	}
}

func (k *Kubelet) removeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	label := "label=kubetest.kubelet=" + k.Node
	if out, err := k.podmanOut(ctx, "ps", "-aq", "--filter", label); err == nil && strings.TrimSpace(out) != "" {
		_, _ = k.podmanOut(ctx, append([]string{"rm", "-f", "-t", "0"}, strings.Fields(out)...)...)
	}
	k.mu.Lock()
	runs := slices.Collect(maps.Values(k.pods))
	k.mu.Unlock()
	for _, run := range runs {
		k.unpublish(run.ctr)
	}
	if out, err := k.podmanOut(ctx, "volume", "ls", "-q", "--filter", label); err == nil && strings.TrimSpace(out) != "" {
		_, _ = k.podmanOut(ctx, append([]string{"volume", "rm", "-f"}, strings.Fields(out)...)...)
	}
}

func (k *Kubelet) podmanOut(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, k.podman, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("podman %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// serveExec serves one exec stream, as a kubelet's streaming server does.
func (k *Kubelet) serveExec(w http.ResponseWriter, req *http.Request) {
	if req.PathValue("ns") != k.ns {
		http.Error(w, "pod not found", http.StatusNotFound)
		return
	}
	opts, err := remotecommand.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q, _ := url.ParseQuery(req.URL.RawQuery)
	cmd := q["command"]
	k.Execs.Add(1)
	remotecommand.ServeExec(w, req, k, req.PathValue("pod"), req.PathValue("uid"), req.PathValue("container"), cmd, opts,
		4*time.Hour, 30*time.Second, remotecommand.SupportedStreamingProtocols)
}

// ExecInContainer runs cmd in the pod's container through `podman exec`.
func (k *Kubelet) ExecInContainer(ctx context.Context, pod, uid, container string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	k.mu.Lock()
	run := k.pods[pod]
	ok := run != nil && run.running
	k.mu.Unlock()
	if !ok {
		return fmt.Errorf("container %q of pod %q is not running", container, pod)
	}
	if len(cmd) == 0 {
		return errors.New("no command")
	}
	args := []string{"exec"}
	if in != nil {
		args = append(args, "-i")
	}
	if tty {
		args = append(args, "-t")
	}
	args = append(append(args, run.ctr), cmd...)
	c := exec.CommandContext(ctx, k.podman, args...)
	if tty {
		f, err := pty.Start(c)
		if err != nil {
			return err
		}
		// Sizes come until the stream ends; the terminal closes first.
		var mu sync.Mutex
		closed := false
		defer func() {
			mu.Lock()
			closed = true
			f.Close()
			mu.Unlock()
		}()
		go func() {
			for sz := range resize {
				mu.Lock()
				if !closed {
					_ = pty.Setsize(f, &pty.Winsize{Cols: sz.Width, Rows: sz.Height})
				}
				mu.Unlock()
			}
		}()
		if in != nil {
			go func() { _, _ = io.Copy(f, in) }()
		}
		_, _ = io.Copy(out, f)
	} else {
		// Pipes of its own, as a kubelet's runtime has: the input fed by
		// a copy nobody waits for (the client's input may stay open
		// after the process ended); the output copied whole, however
		// slowly the client reads, before the status is sent.
		var copies sync.WaitGroup
		var closeAfterStart []*os.File
		if in != nil {
			pr, pw, err := os.Pipe()
			if err != nil {
				return err
			}
			defer pw.Close()
			c.Stdin = pr
			closeAfterStart = append(closeAfterStart, pr)
			go func() { _, _ = io.Copy(pw, in); pw.Close() }()
		}
		for _, o := range []struct {
			w   io.Writer
			set *io.Writer
		}{{out, &c.Stdout}, {errw, &c.Stderr}} {
			if o.w == nil {
				continue
			}
			pr, pw, err := os.Pipe()
			if err != nil {
				return err
			}
			*o.set = pw
			closeAfterStart = append(closeAfterStart, pw)
			copies.Add(1)
			go func() { defer copies.Done(); defer pr.Close(); _, _ = io.Copy(o.w, pr) }()
		}
		err := c.Start()
		for _, f := range closeAfterStart {
			f.Close()
		}
		if err != nil {
			copies.Wait()
			return err
		}
		defer copies.Wait()
	}
	err := c.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return utilexec.CodeExitError{Err: err, Code: ee.ExitCode()}
	}
	return err
}

var _ remotecommand.Executor = (*Kubelet)(nil)
