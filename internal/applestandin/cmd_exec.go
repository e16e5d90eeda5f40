package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// drainTimeout is how long Apple's exec waits for stdout/stderr to reach
// EOF after the process exited (ProcessIO.swift).
const drainTimeout = 3 * time.Second

// cmdExec runs a command in a running container. Options end at the
// container id; everything after it, "--" included, is the command.
func cmdExec(a *app, p *parsed) error {
	id, argv := p.Pos[0], p.Pos[1:]
	if err := a.up(opListContainers); err != nil {
		return err
	}
	tty, stdin := p.Has("tty"), p.Has("interactive")
	if tty && stdin && !isTerminal(a.stdin) {
		// ContainerExec.swift: the container is looked up and must run,
		// then ProcessIO.create puts host stdin in raw mode, with -t and -i
		// only; Terminal(descriptor:)'s tcgetattr fails with ENOTTY, a
		// POSIXError, which the CLI wraps as internalError "failed to exec
		// process <error>". reconstructed: Swift's description of the
		// POSIXError.
		c, err := a.eng.inspectOne(id)
		switch {
		case err != nil:
			return err
		case c == nil:
			return a.errGetNotFound(id)
		case !c.State.Running:
			return a.errNotRunning(id)
		}
		return a.fail("internalError", `failed to exec process POSIXError(_nsError: Error Domain=NSPOSIXErrorDomain Code=25 "Inappropriate ioctl for device")`)
	}
	opts := []string{"exec"}
	if stdin {
		opts = append(opts, "-i")
	}
	if tty {
		opts = append(opts, "-t")
	}
	for _, f := range p.Vals("env-file") {
		opts = append(opts, "--env-file", f)
	}
	for _, e := range p.Vals("env") {
		opts = append(opts, "-e", e)
	}
	if w := p.Val("workdir", ""); w != "" {
		opts = append(opts, "-w", w)
	}
	if u, ok := userFlag(p); ok {
		opts = append(opts, "-u", u)
	}
	if p.Has("detach") {
		if argv[0] == "--" {
			// podman would take "--" as its own terminator; Apple runs it (and fails).
			return a.fail("notFound", "failed to find target executable --")
		}
		r := a.eng.run(append(append(append(opts, "-d"), id), argv...)...)
		if !r.ok() {
			return a.execStartError(id, r.stderr)
		}
		fmt.Fprintln(a.stdout, id)
		return nil
	}
	return a.execAttached(id, opts, argv, stdin)
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}

// execStartError maps podman's refusal to start an exec session.
func (a *app) execStartError(id string, stderr []byte) error {
	r := result{stderr: stderr, code: 125}
	switch {
	case r.contains("no such container"), r.contains("no container with name"):
		return a.errGetNotFound(id)
	case r.contains("state improper"), r.contains("not running"):
		return a.errNotRunning(id)
	}
	c, err := a.eng.inspectOne(id)
	switch {
	case err != nil:
		return err
	case c == nil:
		return a.errGetNotFound(id)
	case !c.State.Running:
		return a.errNotRunning(id)
	}
	if exe, ok := missingExecutable(r.message()); ok {
		return a.fail("notFound", "failed to find target executable "+exe)
	}
	// reconstructed
	return a.failCause("internalError", "failed to exec process", r.message())
}

// gate holds stderr back until the in-container wrapper has started, so
// that podman's own start-up errors can be replaced by Apple's texts.
type gate struct {
	mu   sync.Mutex
	open bool
	buf  bytes.Buffer
	w    io.Writer
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		return g.buf.Write(p)
	}
	return g.w.Write(p)
}

// release writes what was held back and passes everything through from now on.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		_, _ = g.w.Write(g.buf.Bytes())
		g.buf.Reset()
		g.open = true
	}
}

// held returns the held-back bytes and discards them.
func (g *gate) held() []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := append([]byte(nil), g.buf.Bytes()...)
	g.buf.Reset()
	return b
}

// wrapperEvent is one report line from the wrapper's side channel.
type wrapperEvent struct {
	kind byte
	arg  string
}

// execAttached runs the command under the wrapper with stdout passed
// straight through (no copy), stderr through a gate, and the report
// channel on fd 3 (podman --preserve-fds 1), then applies Apple's exit
// and drain rules.
func (a *app) execAttached(id string, opts, argv []string, stdin bool) error {
	sideR, sideW, err := os.Pipe()
	if err != nil {
		return failPlain(err.Error())
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return failPlain(err.Error())
	}
	arg0 := "sh"
	for i := 0; i+1 < len(opts); i++ {
		name, _, _ := strings.Cut(opts[i+1], "=")
		if opts[i] == "-e" && (name == "PWD" || name == "SHLVL") {
			arg0 = "sh+"
		}
	}
	args := append(append([]string(nil), opts...), "--preserve-fds", "1", id, "sh", "-c", execWrapper, arg0)
	cmd := a.eng.command(append(args, argv...)...)
	if stdin {
		cmd.Stdin = a.stdin
	}
	cmd.Stdout = a.stdout
	cmd.Stderr = errW
	cmd.ExtraFiles = []*os.File{sideW}
	if err := cmd.Start(); err != nil {
		return failPlain(err.Error())
	}
	sideW.Close()
	errW.Close()

	g := &gate{w: a.stderr}
	errDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(g, errR)
		errR.Close()
		close(errDone)
	}()
	events := make(chan wrapperEvent, 8)
	go func() {
		sc := bufio.NewScanner(sideR)
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				continue
			}
			k, arg, _ := strings.Cut(line, " ")
			events <- wrapperEvent{k[0], arg}
		}
		sideR.Close()
		close(events)
	}()
	waitCh := make(chan int, 1)
	go func() { waitCh <- exitStatus(cmd.Wait()) }()

	var (
		pid       string
		rc        = -1
		notFound  bool
		drained   bool
		heldLong  bool
		deadline  <-chan time.Time
		podRC     = -1
		signals   int
		sigCh     = make(chan os.Signal, 4)
		afterWait <-chan time.Time
	)
	stopSignals := forwardSignals(func(s os.Signal) { sigCh <- s })
	defer stopSignals()

	handle := func(ev wrapperEvent) {
		switch ev.kind {
		case 'p':
			pid = ev.arg
			g.release()
		case 'n':
			notFound = true
		case 'x':
			rc, _ = strconv.Atoi(ev.arg)
			deadline = time.After(drainTimeout)
		case 'd':
			drained = true
		case 'h':
			heldLong = true
		}
	}
loop:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				events = nil
				if podRC >= 0 {
					break loop
				}
				continue
			}
			handle(ev)
			if podRC >= 0 && (drained || heldLong || notFound) {
				break loop
			}
		case podRC = <-waitCh:
			if events == nil || drained || heldLong || notFound {
				break loop
			}
			// The last reports are normally already in the pipe.
			afterWait = time.After(300 * time.Millisecond)
		case <-afterWait:
			break loop
		case <-deadline:
			if drained || podRC >= 0 {
				continue
			}
			// Apple gives up on the streams: the real exit code is lost.
			_ = cmd.Process.Kill()
			<-waitCh
			<-errDone
			return a.fail("internalError", "failed to exec process CancellationError()")
		case s := <-sigCh:
			signals++
			a.forwardExecSignal(id, pid, rc >= 0, signals, s, cmd.Process)
		}
	}
	<-errDone
	switch {
	case pid == "":
		// The wrapper never ran: podman refused the exec.
		held := g.held()
		res := result{stderr: held, code: podRC}
		if podRC != 0 && (res.contains("`sh`") || res.contains(`"sh"`)) && res.contains("not found") {
			// No sh in the image: run the command directly (no drain emulation).
			return a.execDirect(id, opts, argv, stdin)
		}
		if podRC == 125 || podRC == 126 || podRC == 127 || podRC == 255 {
			return a.execStartError(id, held)
		}
		_, _ = a.stderr.Write(held)
		return exitCode(podRC)
	case notFound:
		exe := ""
		if len(argv) > 0 {
			exe = argv[0]
		}
		// reconstructed: the CLI's wording around vminitd's "failed to find target executable".
		return a.fail("notFound", "failed to find target executable "+exe)
	case heldLong && !drained:
		return a.fail("internalError", "failed to exec process CancellationError()")
	case rc >= 0:
		return exitCode(rc)
	default:
		return exitCode(podRC)
	}
}

// forwardExecSignal delivers SIGINT/SIGTERM to the user's command inside
// the container (podman exec itself does not proxy signals: it would exit 0
// and leave the process running). Before the wrapper reported its pid, or
// on a repeated signal, the podman child gets the signal as well.
func (a *app) forwardExecSignal(id, pid string, exited bool, n int, s os.Signal, proc *os.Process) {
	if pid == "" || n > 1 {
		_ = proc.Signal(s)
	}
	if pid == "" || exited {
		return
	}
	name := "TERM"
	if s == syscall.SIGINT {
		name = "INT"
	}
	go a.eng.run("exec", "-u", "0", id, "sh", "-c", signalForwarder, "sh", name, pid)
}

// execDirect runs the command without the wrapper (images without sh).
func (a *app) execDirect(id string, opts, argv []string, stdin bool) error {
	cmd := a.eng.command(append(append(append([]string(nil), opts...), id), argv...)...)
	if stdin {
		cmd.Stdin = a.stdin
	}
	cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
	return exitCode(exitStatus(cmd.Run()))
}
