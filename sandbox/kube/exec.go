package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// execPrelude runs a process as an engine's exec would, where a pod's
// exec has no options for them: in directory $1 (unless empty), with the
// $2 variables that follow (NAME=value each) exported. Values travel as
// arguments, never as script text; the directory is entered before any
// variable is set, and the prelude's own variables are names no
// variable given may take (execArgv checks).
const execPrelude = `sbx_prelude_d=$1; sbx_prelude_n=$2; shift 2
if [ -n "$sbx_prelude_d" ]; then unset CDPATH; cd -P -- "$sbx_prelude_d" || exit 126; fi
while [ "$sbx_prelude_n" -gt 0 ]; do export "$1"; shift; sbx_prelude_n=$((sbx_prelude_n-1)); done
unset sbx_prelude_d sbx_prelude_n
exec "$@"`

// envName is a variable name a POSIX shell exports.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// execArgv is the command a pod's exec runs for spec.
func execArgv(spec sandbox.ExecSpec) ([]string, error) {
	if spec.Workdir == "" && len(spec.Env) == 0 {
		return spec.Argv, nil
	}
	if spec.Workdir != "" && !path.IsAbs(spec.Workdir) {
		return nil, fmt.Errorf("kubernetes: exec in directory %q: not an absolute path", spec.Workdir)
	}
	argv := []string{"/bin/sh", "-c", execPrelude, "sh", spec.Workdir, strconv.Itoa(len(spec.Env))}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		if !envName.MatchString(k) || strings.HasPrefix(k, "sbx_prelude_") {
			return nil, fmt.Errorf("kubernetes: exec with variable %q: not a name a shell exports", k)
		}
		argv = append(argv, k+"="+spec.Env[k])
	}
	return append(argv, spec.Argv...), nil
}

// ExecCommand prepares an exec in the sandbox's pod, carried by the
// apiserver's exec stream (WebSocket, SPDY where a proxy in between
// does not upgrade to WebSocket).
func (r *Runtime) ExecCommand(ctx context.Context, name string, spec sandbox.ExecSpec) proc.Process {
	return &stream{r: r, ctx: ctx, name: name, spec: spec, code: -1, done: make(chan struct{}),
		sizes: make(chan remotecommand.TerminalSize, 1)}
}

// Exec runs a process to completion in the sandbox's pod. A status other
// than 0 is in the result; a pod that is not there or not running is an
// error.
func (r *Runtime) Exec(ctx context.Context, name string, spec sandbox.ExecSpec) (sandbox.ExecOutput, error) {
	var so, se bytes.Buffer
	p := r.ExecCommand(ctx, name, spec)
	if err := p.Start(spec.Stdin, &so, &se); err != nil {
		return sandbox.ExecOutput{}, err
	}
	err := p.Wait()
	res := sandbox.ExecOutput{Stdout: so.Bytes(), Stderr: se.Bytes()}
	var ee *proc.ExitError
	if err == nil || errors.As(err, &ee) {
		res.ExitCode = p.ExitCode()
		return res, nil
	}
	return res, err
}

// stream is a process in a pod, run over one exec stream.
type stream struct {
	r    *Runtime
	ctx  context.Context
	name string
	spec sandbox.ExecSpec

	cancel context.CancelFunc
	owned  []*os.File // copies of the caller's files, closed at the end
	gates  []*gate    // the caller's other writers, shut at the end
	err    error
	code   int
	done   chan struct{}
	once   sync.Once
	// sizes holds the terminal's latest size, for a TTY's stream.
	sizes  chan remotecommand.TerminalSize
	sizeMu sync.Mutex
}

// Resize implements proc.Terminal: the stream's terminal takes the size
// (the latest one given, when several come at once).
func (s *stream) Resize(cols, rows int) {
	s.sizeMu.Lock()
	defer s.sizeMu.Unlock()
	select {
	case <-s.sizes:
	default:
	}
	s.sizes <- remotecommand.TerminalSize{Width: uint16(cols), Height: uint16(rows)}
}

// Next implements remotecommand.TerminalSizeQueue; nil once the stream
// ended.
func (s *stream) Next() *remotecommand.TerminalSize {
	select {
	case sz := <-s.sizes:
		return &sz
	case <-s.done:
		return nil
	}
}

// Start implements proc.Process. The caller's *os.File streams are
// copied (dup), as a child process would hold them: the caller closes
// its own after Start.
func (s *stream) Start(stdin io.Reader, stdout, stderr io.Writer) error {
	if u := s.spec.User; u != "" && u != "root" && u != "0" {
		return fmt.Errorf("%w: exec as user %q in a pod", sandbox.ErrUnsupported, u)
	}
	if len(s.spec.Argv) == 0 {
		return errors.New("kubernetes: exec of an empty command")
	}
	argv, err := execArgv(s.spec)
	if err != nil {
		return err
	}
	// The pod of the sandbox the name or ID names, before anything is
	// held: one its record made, never another of the same name.
	pod, err := s.r.podOf(s.ctx, s.name)
	if err != nil {
		return err
	}
	if stdin, err = s.own(stdin); err != nil {
		return err
	}
	if stdout, err = s.ownWriter(stdout); err != nil {
		s.closeOwned()
		return err
	}
	if stderr, err = s.ownWriter(stderr); err != nil {
		s.closeOwned()
		return err
	}
	hasStdin := stdin != nil && (s.spec.Interactive || s.spec.Stdin != nil || s.spec.TTY)
	opts := &corev1.PodExecOptions{Container: containerName, Command: argv,
		Stdin: hasStdin, Stdout: true, Stderr: !s.spec.TTY, TTY: s.spec.TTY}
	url := s.r.cs.CoreV1().RESTClient().Post().Namespace(s.r.opt.Namespace).Resource("pods").
		Name(pod).SubResource("exec").VersionedParams(opts, scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(s.r.cfg, "GET", url.String())
	if err != nil {
		s.closeOwned()
		return fmt.Errorf("kubernetes: exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(s.r.cfg, "POST", url)
	if err != nil {
		s.closeOwned()
		return fmt.Errorf("kubernetes: exec: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		s.closeOwned()
		return fmt.Errorf("kubernetes: exec: %w", err)
	}
	so := remotecommand.StreamOptions{Stdout: stdout, Tty: s.spec.TTY}
	if s.spec.TTY {
		so.TerminalSizeQueue = s
	}
	if so.Stdout == nil {
		so.Stdout = io.Discard
	}
	if opts.Stderr {
		so.Stderr = stderr
		if so.Stderr == nil {
			so.Stderr = io.Discard
		}
	}
	if hasStdin {
		so.Stdin = stdin
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.cancel = cancel
	go func() {
		defer close(s.done)
		err := ex.StreamWithContext(ctx, so)
		var ce utilexec.CodeExitError
		switch {
		case err == nil:
			s.code = 0
		case errors.As(err, &ce):
			s.code, s.err = ce.Code, &proc.ExitError{Code: ce.Code}
		case ctx.Err() != nil:
			s.err = fmt.Errorf("kubernetes: exec in %s: %w", s.name, ctx.Err())
		default:
			if code, why, ok := notStarted(err, argv[0]); ok {
				// As an engine's exec says it: a status, and why on
				// stderr.
				s.code, s.err = code, &proc.ExitError{Code: code}
				w := so.Stderr
				if w == nil {
					w = so.Stdout
				}
				fmt.Fprintf(w, "%s: %s\n", argv[0], why)
				break
			}
			s.err = s.r.execFailure(s.name, err)
		}
		cancel()
		for _, g := range s.gates {
			g.shut()
		}
		s.closeOwned()
	}()
	return nil
}

// notStarted reads, in the error of a stream that failed, a node's word
// that the program could not be started: the OCI runtime's exec failing
// on a program that is not there (status 127, as a shell and an engine's
// exec give) or that may not be run (126). A kubelet reports these as an
// internal error of the stream, not as a status. runc says
// `exec: "PROG": executable file not found in $PATH` (or `exec: "PROG":
// stat PROG: no such file or directory`, `exec: "PROG": permission
// denied`); crun `executable file `PROG` not found in $PATH` (or
// `PROG: No such file or directory`, `PROG: Permission denied`). Other
// failures of the runtime (a directory or device it could not set up)
// are not the program's and stay errors.
func notStarted(err error, prog string) (code int, why string, ok bool) {
	msg := strings.ToLower(err.Error())
	if !strings.Contains(msg, "exec failed") {
		return 0, "", false
	}
	p := strings.ToLower(prog)
	named := strings.Contains(msg, `exec: "`+p+`": `) || strings.Contains(msg, "`"+p+"`") || strings.Contains(msg, ": "+p+": ")
	switch {
	case !named:
		return 0, "", false
	case strings.Contains(msg, "executable file not found") || strings.Contains(msg, "executable file `"+p+"` not found"):
		return 127, "executable file not found in $PATH", true
	case strings.Contains(msg, "no such file or directory"):
		return 127, "no such file or directory", true
	case strings.Contains(msg, "permission denied"):
		return 126, "permission denied", true
	}
	return 0, "", false
}

// execFailure says why an exec stream failed: the sandbox's pod missing
// or not running, or the stream's own error.
func (r *Runtime) execFailure(name string, err error) error {
	// Briefly: an apiserver that is gone would hold Wait as long.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, ierr := r.Inspect(ctx, name)
	switch {
	case errors.Is(ierr, sandbox.ErrNotFound):
		return fmt.Errorf("kubernetes: exec in %s: %w", name, sandbox.ErrNotFound)
	case ierr == nil && !c.Running():
		return fmt.Errorf("kubernetes: exec in %s: %w", name, sandbox.ErrNotRunning)
	}
	err = scrubbed{err}
	msg := err.Error()
	switch {
	case ierr == nil && (strings.Contains(msg, "error dialing backend") || strings.Contains(msg, "error sending request")):
		// The apiserver answered the inspect and the pod runs: what it
		// could not reach is the pod's node.
		return fmt.Errorf("kubernetes: exec in %s: the apiserver could not reach the pod's node (a kubelet restarting, say); the pod is kept, call again: %w", name, err)
	case ierr != nil:
		return fmt.Errorf("kubernetes: exec in %s: the apiserver did not answer (%v); call again: %w", name, ierr, err)
	}
	return fmt.Errorf("kubernetes: exec in %s: %w", name, err)
}

// quotedQuery is the query of a quoted URL in an error's text: an exec's
// carries the whole command line, which says nothing of the failure.
var quotedQuery = regexp.MustCompile(`("https?://[^"?]*)\?[^"]*"`)

// scrubbed is an error whose text leaves out the queries of the URLs in
// it; it unwraps to the error as it was.
type scrubbed struct{ err error }

func (e scrubbed) Error() string { return quotedQuery.ReplaceAllString(e.err.Error(), `$1"`) }
func (e scrubbed) Unwrap() error { return e.err }

// own returns what the stream reads: a copy of an *os.File, or r as it is.
func (s *stream) own(r io.Reader) (io.Reader, error) {
	f, ok := r.(*os.File)
	if !ok || f == nil {
		return r, nil
	}
	return s.dup(f)
}

// ownWriter returns what the stream writes to: a copy of an *os.File
// (closed at the end), or w behind a gate that shuts at the end.
func (s *stream) ownWriter(w io.Writer) (io.Writer, error) {
	if w == nil {
		return nil, nil
	}
	f, ok := w.(*os.File)
	if !ok {
		g := &gate{w: w, sem: make(chan struct{}, 1)}
		s.gates = append(s.gates, g)
		return g, nil
	}
	if f == nil {
		return nil, nil
	}
	return s.dup(f)
}

// gateWait bounds the wait for a write under way when a stream ends, as
// os/exec's WaitDelay bounds a command's copies.
const gateWait = 2 * time.Second

// gate passes a stream's output on to the caller's writer until the
// stream ends: client-go's copies may outlive the stream, and what they
// write after Wait returned is dropped, never written into a buffer the
// caller reads by then.
type gate struct {
	w      io.Writer
	sem    chan struct{} // held by the write under way
	closed atomic.Bool
}

func (g *gate) Write(p []byte) (int, error) {
	if g.closed.Load() {
		return len(p), nil
	}
	g.sem <- struct{}{}
	defer func() { <-g.sem }()
	if g.closed.Load() {
		return len(p), nil
	}
	return g.w.Write(p)
}

// shut lets the caller's writer go: once a write under way is done, or
// after gateWait when it is not.
func (g *gate) shut() {
	t := time.NewTimer(gateWait)
	defer t.Stop()
	select {
	case g.sem <- struct{}{}:
		g.closed.Store(true)
		<-g.sem
	case <-t.C:
		g.closed.Store(true)
	}
}

// dup copies f without touching its mode (Fd would make it blocking):
// the copy stays one the runtime's poller serves, which a close
// interrupts.
func (s *stream) dup(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = dupCloexec(int(fd))
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("kubernetes: exec: copy %s: %w", f.Name(), derr)
	}
	c := os.NewFile(uintptr(nfd), f.Name())
	s.owned = append(s.owned, c)
	return c, nil
}

func dupCloexec(fd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

func (s *stream) closeOwned() {
	s.once.Do(func() {
		for _, f := range s.owned {
			_ = f.Close()
		}
	})
}

// Wait implements proc.Process.
func (s *stream) Wait() error {
	if s.cancel == nil {
		return errors.New("kubernetes: exec not started")
	}
	<-s.done
	return s.err
}

// Kill implements proc.Process: the stream is closed. The process in
// the pod is not ended by that (the kubelet leaves it); callers end it
// by its run ID.
func (s *stream) Kill() error {
	if s.cancel == nil {
		return errors.New("kubernetes: exec not started")
	}
	s.cancel()
	return nil
}

// ExitCode implements proc.Process.
func (s *stream) ExitCode() int {
	select {
	case <-s.done:
		return s.code
	default:
		return -1
	}
}

var _ proc.Terminal = (*stream)(nil)
