package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/kubetest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// standIn runs a kubelet stand-in for ns, or skips the test on a machine
// without podman (CI has it, and may not skip).
func standIn(t *testing.T, ns string) *kubetest.Kubelet {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		if ciRun() {
			t.Fatal("CI may not skip the exec tests: the kubelet stand-in needs podman")
		}
		t.Skip("the kubelet stand-in runs pods on podman, which this machine lacks")
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	k, stop, err := cluster.StartKubelet(cluster.Admin(t), ns, "kt"+hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return k
}

// onStandIn is a namespace of its own with a kubelet stand-in for it, the
// cluster's admin, and the runtime with the rights rbac.yaml grants there.
func onStandIn(t *testing.T) (ns string, admin kubernetes.Interface, kl *kubetest.Kubelet, rt *Runtime) {
	t.Helper()
	ns, token, admin := namespace(t)
	kl = standIn(t, ns)
	rt, err := New(cluster.Config(token), Options{Namespace: ns, StartTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return ns, admin, kl, rt
}

// testImage is the image the exec tests' pods run: the small one, made
// by scripts/build-images.sh.
const testImage = "localhost/sandbox-mcp-minimal:latest"

// podHost starts the persistent shell of a sandbox on the runtime, as
// the Manager's does.
type podHost struct {
	rt   *Runtime
	name string
}

func (h podHost) Command(ctx context.Context) proc.Process {
	return h.rt.ExecCommand(ctx, h.name, sandbox.ExecSpec{Argv: []string{"sh"}, Interactive: true})
}

func (h podHost) KillRun(ctx context.Context, pid int, runID string, self bool) error {
	s := "0"
	if self {
		s = "1"
	}
	_, err := h.rt.Exec(ctx, h.name, sandbox.ExecSpec{Argv: []string{"sh", "-c", guest.KillRunScript, "sh", strconv.Itoa(pid), runID, s}})
	return err
}

// openShell opens the persistent shell of sandbox name, and a function
// that runs one command in it and returns its stdout and status.
func openShell(ctx context.Context, t *testing.T, rt *Runtime, name string) (*shell.Shell, func(string) (string, int)) {
	t.Helper()
	sh, err := shell.Open(ctx, podHost{rt, name}, shell.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return sh, func(cmd string) (string, int) {
		t.Helper()
		var so bytes.Buffer
		res, err := sh.Run(ctx, shell.Request{Command: cmd, Stdout: &so, Timeout: time.Minute}, "")
		if err != nil {
			t.Fatal(err)
		}
		return so.String(), res.ExitCode
	}
}

// TestExecThroughTheKubelet: processes in a sandbox's pod run over the
// apiserver's exec stream to the node's kubelet: with their directory,
// variables, input and exit status; a large output whole; a killed stream
// ends at once; the persistent shell is one long stream that keeps its
// state between commands; a stopped or unknown sandbox is an error that
// says so, as is a pod in its place that it did not make; and the
// workspace claim outlives a restart of the pod.
func TestExecThroughTheKubelet(t *testing.T) {
	ns, admin, kl, rt := onStandIn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const name, vol = "box_1", "box_1-ws"
	if err := rt.VolumeCreate(ctx, vol, nil); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.RunSpec{Name: name, Image: testImage, Command: []string{"sleep", "infinity"},
		Mounts: []sandbox.Mount{{Volume: vol, Target: "/workspace"}}, Labels: map[string]string{sandbox.LabelOwner: "smt1"}}
	if _, err := rt.Run(ctx, spec); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Remove(context.Background(), name) }()

	out, err := rt.Exec(ctx, name, sandbox.ExecSpec{Argv: []string{"sh", "-c", `echo "$GREETING"; pwd; cat; exit 3`},
		Env: map[string]string{"GREETING": "hello 'there' $HOME"}, Workdir: "/tmp", Stdin: strings.NewReader("from stdin\n")})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out.Stdout), "hello 'there' $HOME\n/tmp\nfrom stdin\n"; got != want || out.ExitCode != 3 {
		t.Fatalf("exec: stdout %q (want %q), status %d (want 3), stderr %q", got, want, out.ExitCode, out.Stderr)
	}
	if kl.Execs.Load() == 0 {
		t.Fatal("the exec did not reach the kubelet")
	}

	// Variables named as the prelude's own, or that are no names, and a
	// directory that is not absolute, change nothing and are refused.
	out, err = rt.Exec(ctx, name, sandbox.ExecSpec{Argv: []string{"sh", "-c", `pwd; echo "$n $d"`},
		Env: map[string]string{"n": "2", "d": "/etc", "CDPATH": "/usr"}, Workdir: "/tmp"})
	if err != nil || string(out.Stdout) != "/tmp\n2 /etc\n" || out.ExitCode != 0 {
		t.Fatalf("variables named n and d: %q %q %v", out.Stdout, out.Stderr, err)
	}
	for _, bad := range []sandbox.ExecSpec{
		{Argv: []string{"true"}, Env: map[string]string{"1X": "y"}},
		{Argv: []string{"true"}, Env: map[string]string{"A=B": "y"}},
		{Argv: []string{"true"}, Env: map[string]string{"sbx_prelude_n": "9"}},
		{Argv: []string{"true"}, Workdir: "-P"},
		{Argv: []string{"true"}, Workdir: "tmp"},
	} {
		if _, err := rt.Exec(ctx, name, bad); err == nil {
			t.Errorf("exec with %+v was not refused", bad)
		}
	}

	// A cancelled exec returns with nothing written into its result
	// after (the race detector watches the buffers).
	cctx, ccancel := context.WithCancel(ctx)
	go func() { time.Sleep(300 * time.Millisecond); ccancel() }()
	if _, err := rt.Exec(cctx, name, sandbox.ExecSpec{Argv: []string{"sh", "-c", "yes | head -c 100000000; yes >&2"}}); err == nil {
		t.Fatal("a cancelled exec succeeded")
	}
	ccancel()

	// 8 MiB of output, whole, or an error: never a short output read as
	// whole. stderr apart. The apiserver's WebSocket translator may reset
	// a stream it closes while the client's heartbeat is unread, which
	// drops the tail still in flight (kubernetes/kubernetes#124571); the
	// client then says so, and the command (a read) is tried again.
	for try := 1; ; try++ {
		out, err = rt.Exec(ctx, name, sandbox.ExecSpec{Argv: []string{"sh", "-c", "head -c 8388608 /dev/zero; echo oops >&2"}})
		if err != nil && try < 3 && strings.Contains(err.Error(), "connection reset by peer") {
			t.Logf("large output, try %d: %v", try, err)
			continue
		}
		if err != nil || len(out.Stdout) != 8<<20 || string(out.Stderr) != "oops\n" || out.ExitCode != 0 {
			t.Fatalf("large output: %d bytes, stderr %q, status %d, err %v", len(out.Stdout), out.Stderr, out.ExitCode, err)
		}
		break
	}

	// Input to its end: the process sees the end of its input.
	p := rt.ExecCommand(ctx, name, sandbox.ExecSpec{Argv: []string{"wc", "-c"}, Interactive: true})
	var wc bytes.Buffer
	in, err := proc.Input(p, &wc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write(bytes.Repeat([]byte("x"), 100000)); err != nil {
		t.Fatal(err)
	}
	in.Close()
	if err := p.Wait(); err != nil || strings.TrimSpace(wc.String()) != "100000" {
		t.Fatalf("stdin to its end: %q, %v", wc.String(), err)
	}

	// A process that ends while its input is still open ends its stream
	// (a shell killed under a command, say).
	p = rt.ExecCommand(ctx, name, sandbox.ExecSpec{Argv: []string{"sh", "-c", "kill -9 $$"}, Interactive: true})
	in, out2, err := proc.Piped(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ended := make(chan error, 1)
	go func() { _, _ = io.Copy(io.Discard, out2); ended <- p.Wait() }()
	select {
	case err := <-ended:
		var ee *proc.ExitError
		if !errors.As(err, &ee) || ee.Code != 137 {
			t.Fatalf("a process killed with its input open: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the stream of a process that ended with its input open did not end")
	}
	out2.Close()

	// A killed stream ends at once, with no status.
	p = rt.ExecCommand(ctx, name, sandbox.ExecSpec{Argv: []string{"sleep", "600"}})
	if err := p.Start(nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_ = p.Kill()
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	select {
	case err := <-waited:
		var ee *proc.ExitError
		if err == nil || errors.As(err, &ee) || p.ExitCode() != -1 {
			t.Fatalf("a killed stream: %v, status %d", err, p.ExitCode())
		}
	case <-time.After(time.Minute):
		t.Fatal("a killed stream did not end")
	}

	// The persistent shell: one stream, its state kept between commands.
	sh, run := openShell(ctx, t, rt, name)
	before := kl.Execs.Load()
	run("cd /workspace && export MARK=kept")
	for i := range 20 {
		if got, code := run(`echo "$MARK $(pwd) ` + strconv.Itoa(i) + `" > f; cat f; exit_code() { return 7; }; exit_code`); got != "kept /workspace "+strconv.Itoa(i)+"\n" || code != 7 {
			t.Fatalf("shell command %d: %q, status %d", i, got, code)
		}
	}
	if n := kl.Execs.Load() - before; n != 0 {
		t.Fatalf("the shell's commands took %d exec streams of their own", n)
	}
	// exit ends the command, not the shell.
	if _, code := run("exit 5"); code != 5 || sh.Dead() {
		t.Fatalf("exit in the shell: status %d, dead %v", code, sh.Dead())
	}
	if got, _ := run("echo $MARK"); got != "kept\n" {
		t.Fatalf("after exit: %q", got)
	}
	sh.Close()

	// A sandbox without network has only its loopback.
	offline := sandbox.RunSpec{Name: "box_2", Image: testImage, Command: []string{"sleep", "infinity"}, Network: "none",
		Labels: map[string]string{sandbox.LabelOwner: "smt1"}}
	if _, err := rt.Run(ctx, offline); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Remove(context.Background(), offline.Name) }()
	out, err = rt.Exec(ctx, offline.Name, sandbox.ExecSpec{Argv: []string{"sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"}})
	if err != nil || string(out.Stdout) != "lo\n" {
		t.Fatalf("the interfaces of a sandbox without network: %q %v", out.Stdout, err)
	}

	// Stopped: an error that says so; the claim keeps the workspace.
	if err := rt.Stop(ctx, name, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Exec(ctx, name, sandbox.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrNotRunning) {
		t.Fatalf("exec in a stopped sandbox: %v", err)
	}
	if _, err := rt.Exec(ctx, "box_none", sandbox.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("exec in an unknown sandbox: %v", err)
	}
	// A pod of the sandbox's name that its record did not make (one made
	// in its place by another hand) is not the sandbox's: no exec, by name
	// or by the sandbox's ID, runs there.
	c, err := rt.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	noToken := false
	stray := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(name), Labels: map[string]string{labelManaged: managedBy}, Annotations: map[string]string{annName: name}},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: &noToken,
			Containers: []corev1.Container{{Name: containerName, Image: testImage, Command: []string{"sleep", "infinity"}}}},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(ctx, t, "the stray pod to run", func() (bool, error) {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, stray.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	})
	for _, ref := range []string{name, c.ID} {
		if out, err := rt.Exec(ctx, ref, sandbox.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrNotRunning) {
			t.Fatalf("exec in %s with a stray pod in the sandbox's place: %+v, %v", ref, out, err)
		}
	}
	zero := int64(0)
	if err := admin.CoreV1().Pods(ns).Delete(ctx, stray.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	until(ctx, t, "the stray pod to go", func() (bool, error) {
		_, err := admin.CoreV1().Pods(ns).Get(ctx, stray.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if err := rt.Start(ctx, name); err != nil {
		t.Fatal(err)
	}
	out, err = rt.Exec(ctx, name, sandbox.ExecSpec{Argv: []string{"cat", "/workspace/f"}})
	if err != nil || string(out.Stdout) != "kept /workspace 19\n" {
		t.Fatalf("the workspace after a restart: %q, %v", out.Stdout, err)
	}
}

// until polls cond every 100 ms until it holds, failing the test on an
// error of cond's or when ctx ends first.
func until(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	for {
		ok, err := cond()
		switch {
		case err != nil:
			t.Fatalf("waiting for %s: %v", what, err)
		case ok:
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ciRun() bool { return os.Getenv("CI") == "true" }

// TestNotStarted: a node's word that an exec's program could not start,
// as runc and crun put it under containerd, is status 127 (not there) or
// 126 (not to be run); the runtime's other failures, and words about
// another program, are not.
func TestNotStarted(t *testing.T) {
	const pre = `Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "e7d6": OCI runtime exec failed: exec failed: `
	for _, c := range []struct {
		prog, msg string
		code      int
	}{
		{"no-such-program", pre + `unable to start container process: exec: "no-such-program": executable file not found in $PATH: unknown`, 127},
		{"/no/such/program", pre + `unable to start container process: exec: "/no/such/program": stat /no/such/program: no such file or directory: unknown`, 127},
		{"/tmp/x", pre + `unable to start container process: exec: "/tmp/x": permission denied: unknown`, 126},
		{"nope", pre + "executable file `nope` not found in $PATH: No such file or directory: OCI runtime attempted to invoke a command that was not found", 127},
		{"/bin/x", pre + "/bin/x: Permission denied: OCI permission denied", 126},
		{"sh", pre + `unable to start container process: chdir to cwd ("/gone") set in config.json failed: no such file or directory: unknown`, 0},
		{"sh", pre + `unable to start container process: exec: "other": executable file not found in $PATH: unknown`, 0},
		{"sh", `error dialing backend: dial tcp 10.0.0.1:10250: connect: connection refused`, 0},
	} {
		code, _, ok := notStarted(errors.New(c.msg), c.prog)
		if ok != (c.code != 0) || code != c.code {
			t.Errorf("%s: %q: status %d (%v), want %d", c.prog, c.msg, code, ok, c.code)
		}
	}
}
