//go:build linux

package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest/csihost"
)

// CSIMissing says what is missing for StartCSI, "" when nothing is.
func CSIMissing() string {
	_, why := csiSidecars()
	return why
}

// csiSidecars is the directory of the CSI sidecars and the snapshot
// resources' definitions: CSI_SIDECARS_DIR, or beside the apiserver.
func csiSidecars() (dir, why string) {
	dir, why = besideAPIServer("csi-"+CSISidecarsVersion, "CSI_SIDECARS_DIR")
	if why != "" {
		return "", why
	}
	for _, p := range []string{"csi-provisioner", "csi-snapshotter", "snapshot-controller"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return "", "no " + p + " in " + dir + ": run scripts/build-kube-apiserver.sh"
		}
	}
	return dir, ""
}

// CSI is storage as a cluster with a CSI driver has it: the test driver
// (csihost) on the one node, external-provisioner making its volumes for
// claims of CSIStorageClass, external-snapshotter's controller and sidecar
// making its snapshots for VolumeSnapshots of CSISnapshotClass, and
// kube-controller-manager's volume binder between claims and volumes.
// The kubelet stand-ins publish its volumes into the pods that claim them,
// as a kubelet does through the driver's node service.
type CSI struct {
	// Driver is the driver, called in process by the kubelet stand-ins.
	Driver *csihost.Driver
	dir    string

	mu sync.Mutex
	// published lists, per container, the targets it was given.
	published map[string][]publication
}

type publication struct{ volume, target string }

// RunCSI runs the CSI storage until the test ends. Under CI missing
// programs fail the test; elsewhere they skip it.
func (c *Cluster) RunCSI(t *testing.T) *CSI {
	t.Helper()
	s, stop, why, err := c.StartCSI()
	switch {
	case why != "" && os.Getenv("CI") == "true":
		t.Fatal("CI may not skip this:", why)
	case why != "":
		t.Skip(why)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if logs := stop(); t.Failed() {
			t.Logf("the CSI programs' logs, their ends:\n%s", logs)
		}
	})
	return s
}

// StartCSI is RunCSI for a whole test process: stop ends the programs
// and returns the ends of their logs. why says what is missing, when a
// build is. One runs per cluster at a time: a second start is refused.
func (c *Cluster) StartCSI() (s *CSI, stop func() string, why string, err error) {
	dir, why := csiSidecars()
	if why != "" {
		return nil, nil, why, nil
	}
	kcm, why := controllerManager()
	if why != "" {
		return nil, nil, why, nil
	}
	tmp, err := os.MkdirTemp("", "kubetest-csi-")
	if err != nil {
		return nil, nil, "", err
	}
	s = &CSI{dir: tmp, published: map[string][]publication{}}
	if !c.csi.CompareAndSwap(nil, s) {
		os.RemoveAll(tmp)
		return nil, nil, "", errors.New("the CSI storage runs on this cluster already")
	}
	var procs []*process
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	stop = func() string {
		for _, p := range procs {
			p.kill()
		}
		cancel()
		<-served
		c.csi.Store(nil)
		s.unpublishAll()
		var logs strings.Builder
		for _, p := range procs {
			fmt.Fprintf(&logs, "--- %s\n%s\n", filepath.Base(p.log), p.tail(4000))
		}
		_ = os.RemoveAll(tmp)
		return logs.String()
	}
	fail := func(err error) (*CSI, func() string, string, error) {
		stop()
		return nil, nil, "", err
	}
	s.Driver, err = csihost.New(filepath.Join(tmp, "data"), "kubetest")
	if err != nil {
		close(served)
		return fail(err)
	}
	sock := filepath.Join(tmp, "csi.sock")
	go func() {
		defer close(served)
		if err := s.Driver.Serve(ctx, sock); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "kubetest: the CSI driver stopped:", err)
		}
	}()

	setup, setupCancel := context.WithTimeout(ctx, 2*time.Minute)
	defer setupCancel()
	dyn, err := dynamic.NewForConfig(c.Config(c.AdminToken))
	if err != nil {
		return fail(err)
	}
	crds, _ := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if len(crds) == 0 {
		return fail(fmt.Errorf("no snapshot resource definitions in %s/crds", dir))
	}
	for _, f := range crds {
		if err := installCRD(setup, dyn, f); err != nil {
			return fail(err)
		}
	}
	cs, err := c.AdminClient()
	if err != nil {
		return fail(err)
	}
	del := corev1.PersistentVolumeReclaimDelete
	for name, mode := range map[string]storagev1.VolumeBindingMode{
		CSIStorageClass: storagev1.VolumeBindingImmediate, CSILateStorageClass: storagev1.VolumeBindingWaitForFirstConsumer} {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: csihost.Name,
			VolumeBindingMode: &mode, ReclaimPolicy: &del}
		if _, err := cs.StorageV1().StorageClasses().Create(setup, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fail(fmt.Errorf("storage class %s: %w", name, err))
		}
	}
	vsc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": CSISnapshotClass}, "driver": csihost.Name, "deletionPolicy": "Delete"}}
	classes := dyn.Resource(schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"})
	if _, err := classes.Create(setup, vsc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fail(fmt.Errorf("snapshot class: %w", err))
	}

	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig, c.AdminToken, "default"); err != nil {
		return fail(err)
	}
	for _, cmd := range []*exec.Cmd{
		// The volume binder, which marks a claim for its class's
		// provisioner, binds it to the volume made, and releases the
		// volume once the claim goes; and the protections that hold a
		// claim while a pod uses it, and a volume while it is bound.
		exec.Command(kcm, "--kubeconfig", kubeconfig, "--controllers", "persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller",
			"--leader-elect=false", "--secure-port", "0"),
		exec.Command(filepath.Join(dir, "csi-provisioner"), "--kubeconfig", kubeconfig, "--csi-address", sock,
			"--leader-election=false", "--timeout", "60s"),
		exec.Command(filepath.Join(dir, "snapshot-controller"), "--kubeconfig", kubeconfig, "--leader-election=false"),
		exec.Command(filepath.Join(dir, "csi-snapshotter"), "--kubeconfig", kubeconfig, "--csi-address", sock,
			"--leader-election=false", "--timeout", "60s"),
	} {
		p := &process{cmd: cmd, log: filepath.Join(tmp, filepath.Base(cmd.Path)+".log"), exited: make(chan struct{})}
		if err := startLogged(cmd, p.log); err != nil {
			return fail(fmt.Errorf("start %s: %w", filepath.Base(cmd.Path), err))
		}
		go func() { _ = cmd.Wait(); close(p.exited) }()
		procs = append(procs, p)
	}
	return s, stop, "", nil
}

// process is one program StartCSI runs.
type process struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// tail is the last n bytes of the program's log.
func (p *process) tail(n int) string {
	log, _ := os.ReadFile(p.log)
	if len(log) > n {
		log = log[len(log)-n:]
	}
	return string(log)
}

// csiStorage is the CSI storage running on the cluster, if any.
func (c *Cluster) csiStorage() *CSI { return c.csi.Load() }

// publish makes volume (a volume handle of the driver's) appear at a
// directory of its own for container ctr, through the driver's node
// service as a kubelet calls it, and returns that directory.
func (s *CSI) publish(ctx context.Context, ctr, name, volume string, readOnly bool) (string, error) {
	target := filepath.Join(s.dir, "pods", ctr, name)
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return "", err
	}
	_, err := s.Driver.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: volume, TargetPath: target, Readonly: readOnly,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
	})
	if err != nil {
		return "", fmt.Errorf("publish volume %s: %w", volume, err)
	}
	s.mu.Lock()
	s.published[ctr] = append(s.published[ctr], publication{volume, target})
	s.mu.Unlock()
	return target, nil
}

// unpublish takes back what publish gave container ctr, once it is gone.
func (s *CSI) unpublish(ctr string) {
	s.mu.Lock()
	pubs := s.published[ctr]
	delete(s.published, ctr)
	s.mu.Unlock()
	for _, p := range pubs {
		_, _ = s.Driver.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: p.volume, TargetPath: p.target})
	}
	_ = os.Remove(filepath.Join(s.dir, "pods", ctr))
}

func (s *CSI) unpublishAll() {
	s.mu.Lock()
	ctrs := make([]string, 0, len(s.published))
	for ctr := range s.published {
		ctrs = append(ctrs, ctr)
	}
	s.mu.Unlock()
	for _, ctr := range ctrs {
		s.unpublish(ctr)
	}
}

// publishClaim publishes, for container ctr, the CSI volume that claim is
// bound to, when the claim is of a class of the CSI driver's, and returns the
// directory to mount ("" for a claim of another class). As a kubelet's
// volume manager does, it waits a while for the claim to be bound.
func (k *Kubelet) publishClaim(ctx context.Context, ctr, name, claim string, readOnly bool) (string, error) {
	s := k.cluster.csiStorage()
	if s == nil {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		c, err := k.cs.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("claim %s: %w", claim, err)
		}
		if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName == "" {
			return "", nil
		}
		sc, err := k.cs.StorageV1().StorageClasses().Get(ctx, *c.Spec.StorageClassName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && sc.Provisioner != csihost.Name) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("class of claim %s: %w", claim, err)
		}
		if c.Status.Phase == corev1.ClaimBound && c.Spec.VolumeName != "" {
			pv, err := k.cs.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
			if err != nil {
				return "", fmt.Errorf("volume of claim %s: %w", claim, err)
			}
			if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != csihost.Name {
				return "", fmt.Errorf("volume %s of claim %s is not the CSI driver's", pv.Name, claim)
			}
			return s.publish(ctx, ctr, name, pv.Spec.CSI.VolumeHandle, readOnly || pv.Spec.CSI.ReadOnly)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("claim %s is not bound (%s): %w", claim, c.Status.Phase, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
