package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/kube"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// kubeNode runs the kube section's pods on a real node (-kube-node).
var kubeNode bool

// benchKube: the Kubernetes runtime against a real kube-apiserver whose
// pods run on the kubelet stand-in (podman), or on a real node with
// -kube-node (a kubelet on containerd, kubetest.StartNode): a warm command through the
// sandbox's persistent shell, one stream for all its commands, against one
// exec stream per command (mcp-sandboxd's way), interleaved; and a pod
// that went (an eviction) made again by the next command, against the
// pod's own start from the same stopped sandbox and its first exec.
func (b *bench) benchKube() error {
	kube.RouteClientLogs(nil)
	c, stop, why, err := kubetest.Start()
	if err != nil {
		return err
	}
	if c == nil {
		return errors.New("kube: " + why)
	}
	defer stop()
	ctx := b.ctx
	ns := "bench-" + randHex(3)
	token, drop, err := c.MakeNamespace(ctx, ns, "deploy/kubernetes/rbac.yaml")
	if err != nil {
		return err
	}
	defer drop()
	admin, err := c.AdminClient()
	if err != nil {
		return err
	}
	if kubeNode {
		_, stopNode, err := c.StartNode(ns, "localhost/mcp-dev:latest")
		if err != nil {
			return err
		}
		defer stopNode()
	} else {
		_, stopKubelet, err := c.StartKubelet(admin, ns, "bk"+randHex(3))
		if err != nil {
			return err
		}
		defer stopKubelet()
	}
	cfg := c.Config(token)
	rt, err := kube.New(cfg, kube.Options{Namespace: ns, StartTimeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	m := sandbox.NewManager(rt, sandbox.Config{Prefix: "bench", Defaults: sandbox.Profile{Image: "localhost/mcp-dev:latest"}})
	defer m.Close()
	defer func() { _, _ = m.Destroy(context.Background(), "k") }()
	run := func(cmd string) (sandbox.ExecResult, error) {
		var out bytes.Buffer
		res, err := m.Exec(ctx, "k", shell.Request{Command: cmd, Stdout: &out, Timeout: time.Minute})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%q: status %d", cmd, res.ExitCode)
		}
		return res, err
	}
	if _, err := run("true"); err != nil {
		return err
	}
	// One bare exec stream per command, as mcp-sandboxd runs each: the
	// pod named, no look at the sandbox's record first.
	pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 {
		return fmt.Errorf("kube: the sandbox's pod: %v (%d pods)", err, len(pods.Items))
	}
	ctr, podName := m.ContainerFor("k"), pods.Items[0].Name
	// execURL is the pod's exec subresource for opts.
	execURL := func(opts *corev1.PodExecOptions) string {
		return admin.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(podName).
			SubResource("exec").VersionedParams(opts, scheme.ParameterCodec).URL().String()
	}
	bareExec := func() error {
		ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", execURL(&corev1.PodExecOptions{Command: []string{"true"}, Stdout: true, Stderr: true}))
		if err != nil {
			return err
		}
		return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
	}
	// The stream's own round trip: a line through `cat` on an open exec
	// stream, the least a command on the shell's stream can cost.
	echo, stopEcho, err := openEcho(ctx, cfg, execURL(&corev1.PodExecOptions{Command: []string{"cat"}, Stdin: true, Stdout: true}))
	if err != nil {
		return fmt.Errorf("kube: a stream for the round trip: %w", err)
	}
	defer stopEcho()
	// And one framed round trip on an open `sh` stream, marked on stdout
	// and on stderr as the persistent shell's frames are (the podman
	// section's framing floor).
	frame, stopFrame, err := openFramed(ctx, cfg, execURL(&corev1.PodExecOptions{Command: []string{"sh"}, Stdin: true, Stdout: true, Stderr: true}))
	if err != nil {
		return fmt.Errorf("kube: a stream for the framed round trip: %w", err)
	}
	defer stopFrame()
	rounds := max(b.n/10, 30)
	var warm, each, trips, frames []time.Duration
	for range rounds {
		t0 := time.Now()
		if _, err := run("true"); err != nil {
			return err
		}
		warm = append(warm, time.Since(t0))
		t0 = time.Now()
		if err := bareExec(); err != nil {
			return fmt.Errorf("one exec: %w", err)
		}
		each = append(each, time.Since(t0))
		t0 = time.Now()
		if err := echo(); err != nil {
			return fmt.Errorf("a line through the stream: %w", err)
		}
		trips = append(trips, time.Since(t0))
		t0 = time.Now()
		if err := frame(); err != nil {
			return fmt.Errorf("a framed round trip: %w", err)
		}
		frames = append(frames, time.Since(t0))
	}
	w, e, tr := median(warm), median(each), median(trips)
	report(kubeLabel()+": warm exec, one stream (p50)", us(w), "one exec per command "+us(e), float64(e)/float64(w), ">= 50x faster", e >= 50*w)
	report(kubeLabel()+": warm exec against the stream's round trip (p50)", us(w), "a line through cat "+us(tr), float64(w)/float64(tr), "(how close)", true)
	fr := median(frames)
	report(kubeLabel()+": warm exec against a framed round trip on sh (p50)", us(w), "stdout and stderr marked "+us(fr), float64(w)/float64(fr), "(how close)", true)

	// Recovery: the pod goes; the next command makes it again. Against
	// the pod's own start and first command: stop, then start the same
	// sandbox and run one command on a stream of its own (as the
	// children's floor is run -d + exec + rm): a command after a pod's
	// start cannot cost less than one stream's open.
	var recover, own, firsts, boots []time.Duration
	pod := ""
	for round := range 3 {
		// The pod's own start, from a stopped sandbox.
		if err := rt.Stop(ctx, ctr, time.Second); err != nil {
			return err
		}
		t0 := time.Now()
		if err := rt.Start(ctx, ctr); err != nil {
			return err
		}
		own = append(own, time.Since(t0))
		t1 := time.Now()
		if err := bareExec(); err != nil {
			return fmt.Errorf("round %d: the first exec after the start: %w", round, err)
		}
		firsts = append(firsts, time.Since(t1))
		if _, err := run("true"); err != nil {
			return err
		}
		// The pod deleted from under the server.
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 1 {
			return fmt.Errorf("round %d: the sandbox's pod: %v (%d)", round, err, len(pods.Items))
		}
		pod = pods.Items[0].Name
		// Gracefully, so that the pod object goes once its container has
		// (a forced deletion leaves the container to the kubelet's next
		// look).
		grace := int64(1)
		if err := admin.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			return err
		}
		for {
			if _, err := admin.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		t0 = time.Now()
		res, err := run("true")
		if err != nil {
			return err
		}
		if !res.Boot.Started {
			return fmt.Errorf("round %d: the command after the pod went did not start it again: %+v", round, res.Boot)
		}
		recover = append(recover, time.Since(t0))
		boots = append(boots, res.Boot.Took)
	}
	// The boot is the pod's start and the shell's exec stream.
	r, o, f := median(recover), median(own), median(firsts)
	floor := o + f
	report(kubeLabel()+": pod gone, next command ("+strconv.Itoa(len(recover))+" rounds)", ms(r)+" (boot "+ms(median(boots))+")",
		"pod's start "+ms(o)+" + 1st exec "+ms(f), float64(r)/float64(floor), "<= 1.2x", r <= floor*12/10)
	if err := b.kubeSpares(ctx, rt, ""); err != nil {
		return err
	}
	// The same with agent-sandbox's controller making the pods: a
	// claim hands the spare's Sandbox on.
	stopAS, why, err := c.StartAgentSandbox()
	if why != "" || err != nil {
		return fmt.Errorf("kube: agent-sandbox: %s %v", why, err)
	}
	defer stopAS()
	crt, err := kube.New(cfg, kube.Options{Namespace: ns, StartTimeout: 2 * time.Minute, SandboxCRD: true})
	if err != nil {
		return err
	}
	return b.kubeSpares(ctx, crt, "sandbox mode")
}

// kubeSpareRounds is how many new names the kube section's spare rows
// time.
const kubeSpareRounds = 5

// kubeSpares: a new name's first command with a warm spare ready (the
// claim is the runtime's rename: a record under the name takes over the
// spare's pod, or in sandbox mode its Sandbox), against a new name's
// first command with none (a boot: the record, the workspace claim, the
// pod and its first stream), one of each in turn. mode, when not "",
// names rt's mode in the row and keeps its names apart.
func (b *bench) kubeSpares(ctx context.Context, rt *kube.Runtime, mode string) error {
	tag, label := "", kubeLabel()
	if mode != "" {
		tag, label = "crd", label+", "+mode
	}
	st, err := state.New(filepath.Join(b.dir, "state-kube-spares"+tag))
	if err != nil {
		return err
	}
	warmPrefix := "benchsp" + tag
	cfg := sandbox.Config{Prefix: warmPrefix, Defaults: sandbox.Profile{Image: "localhost/mcp-dev:latest"},
		Sandboxes: st, LockDir: filepath.Join(b.dir, "locks-kube-spares"+tag)}
	warm := sandbox.NewManager(rt, cfg)
	cfg.Prefix = "benchcold" + tag
	cold := sandbox.NewManager(rt, cfg)
	var names []string
	defer func() {
		for _, n := range names {
			_, _ = warm.Destroy(context.Background(), n)
			_, _ = cold.Destroy(context.Background(), n)
		}
		warm.Close()
		cold.Close()
	}()
	warm.KeepSpares(1)
	first := func(m *sandbox.Manager, name string) (time.Duration, sandbox.BootInfo, error) {
		names = append(names, name)
		t0 := time.Now()
		res, err := m.Exec(ctx, name, shell.Request{Command: "true", Timeout: time.Minute})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%s: status %d", name, res.ExitCode)
		}
		return time.Since(t0), res.Boot, err
	}
	var takes, boots []time.Duration
	for i := range kubeSpareRounds {
		if err := waitKubeSpare(ctx, rt, warmPrefix); err != nil {
			return err
		}
		time.Sleep(spareSettle)
		took, boot, err := first(warm, fmt.Sprintf("spare%d", i))
		if err != nil {
			return err
		}
		if !boot.Spare {
			return fmt.Errorf("kube: the new name spare%d did not take the spare: %+v", i, boot)
		}
		takes = append(takes, took)
		if took, _, err = first(cold, fmt.Sprintf("cold%d", i)); err != nil {
			return err
		}
		boots = append(boots, took)
	}
	p50, c50 := median(takes), median(boots)
	report(fmt.Sprintf("%s: new name, spare ready (p50 of %d)", label, kubeSpareRounds), ms(p50),
		"new name, no spare "+ms(c50), float64(p50)/float64(c50), "<= 150 ms", p50 <= 150*time.Millisecond)
	return nil
}

// waitKubeSpare waits until prefix has a running spare on rt.
func waitKubeSpare(ctx context.Context, rt *kube.Runtime, prefix string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		cs, err := rt.List(ctx, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelRole: sandbox.RoleSpare})
		if err == nil {
			for _, c := range cs {
				if c.Running() && strings.HasPrefix(c.Name, prefix+"_spare_") {
					return nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("kube: no spare of %s within 2 minutes", prefix)
}

// kubeLabel names the kube section's rows after where its pods run.
func kubeLabel() string {
	if kubeNode {
		return "kube on a real node"
	}
	return "kube"
}

// execStream is an open exec stream: its input, and its outputs as
// they come.
type execStream struct {
	in          *io.PipeWriter
	out, stderr *io.PipeReader
	stop        func()
}

// openStream opens the exec stream at url, with stdin and stdout, and
// stderr when the url asks for it.
func openStream(ctx context.Context, cfg *rest.Config, url string, stderr bool) (*execStream, error) {
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", url)
	if err != nil {
		return nil, err
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	opts := remotecommand.StreamOptions{Stdin: inR, Stdout: outW}
	if stderr {
		opts.Stderr = errW
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := ex.StreamWithContext(sctx, opts)
		outW.CloseWithError(fmt.Errorf("stream ended: %v", err))
		errW.CloseWithError(fmt.Errorf("stream ended: %v", err))
		done <- err
	}()
	return &execStream{in: inW, out: outR, stderr: errR, stop: func() {
		inW.Close()
		cancel()
		<-done
	}}, nil
}

// readUntil reads r until what it read ends with end.
func readUntil(r io.Reader, end string) error {
	var seen []byte
	buf := make([]byte, 256)
	for !bytes.HasSuffix(seen, []byte(end)) {
		n, err := r.Read(buf)
		if err != nil {
			return err
		}
		seen = append(seen, buf[:n]...)
	}
	return nil
}

// openEcho opens an exec stream of `cat` at url and returns a function
// that sends one line through it and waits for it to come back.
func openEcho(ctx context.Context, cfg *rest.Config, url string) (echo func() error, stop func(), err error) {
	st, err := openStream(ctx, cfg, url, false)
	if err != nil {
		return nil, nil, err
	}
	echo = func() error {
		if _, err := st.in.Write([]byte("x\n")); err != nil {
			return err
		}
		return readUntil(st.out, "x\n")
	}
	return echo, st.stop, nil
}

// openFramed opens an exec stream of `sh` at url and returns a function
// that runs `true` in it framed as the persistent shell's commands are: a
// beacon and a trailer on stdout and on stderr, waiting for both trailers.
func openFramed(ctx context.Context, cfg *rest.Config, url string) (trip func() error, stop func(), err error) {
	st, err := openStream(ctx, cfg, url, true)
	if err != nil {
		return nil, nil, err
	}
	const marker = "sbxkubefloor42"
	script := []byte("printf '%s>\\n' " + marker + "; printf '%s<\\n' " + marker + " >&2; true; printf '\\n%s 0\\n%s.\\n' " + marker + " " + marker + "; printf '\\n%s\\n' " + marker + " >&2\n")
	trip = func() error {
		if _, err := st.in.Write(script); err != nil {
			return err
		}
		errc := make(chan error, 1)
		go func() { errc <- readUntil(st.stderr, "\n"+marker+"\n") }()
		if err := readUntil(st.out, marker+".\n"); err != nil {
			return err
		}
		return <-errc
	}
	return trip, st.stop, nil
}
