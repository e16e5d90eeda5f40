package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// hangGuard bounds a wait or call whose only failure is a hang; it is no
// speed check. It is enginetest.HangGuard, minutes: on a loaded machine
// one boot alone has taken 36 s.
const hangGuard = enginetest.HangGuard

func newManager(t *testing.T, tg enginetest.Target, prefix string) *sandbox.Manager {
	t.Helper()
	m := sandbox.NewManager(tg.New(), sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}})
	t.Cleanup(m.Close)
	return m
}

type out struct {
	res            sandbox.ExecResult
	stdout, stderr string
}

func run(t *testing.T, m *sandbox.Manager, name string, req shell.Request) out {
	t.Helper()
	var so, se bytes.Buffer
	req.Stdout, req.Stderr = &so, &se
	res, err := m.Exec(context.Background(), name, req)
	if err != nil {
		enginetest.LogIfHung(t, err.Error())
		t.Fatalf("Exec(%s, %q): %v", name, req.Command, err)
	}
	return out{res, so.String(), se.String()}
}

// TestManagerOnEngine runs the Manager against each real engine, sharing
// one booted sandbox between the subtests that do not need their own.
func TestManagerOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			m := newManager(t, tg, prefix)
			const box = "shared"

			t.Run("first use boots", func(t *testing.T) {
				o := run(t, m, box, shell.Request{Command: "echo hello; pwd"})
				if o.stdout != "hello\n/workspace\n" || !o.res.Boot.Created {
					t.Fatalf("stdout %q boot %+v", o.stdout, o.res.Boot)
				}
				o = run(t, m, box, shell.Request{Command: "true"})
				if o.res.Boot != (sandbox.BootInfo{}) {
					t.Fatalf("warm exec: boot %+v took %v", o.res.Boot, o.res.Duration)
				}
			})
			t.Run("state persists", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "mkdir -p /tmp/d && cd /tmp/d && export GREETING='hi there'"})
				o := run(t, m, box, shell.Request{Command: `pwd; echo "$GREETING"`})
				if o.stdout != "/tmp/d\nhi there\n" {
					t.Fatalf("stdout %q", o.stdout)
				}
				run(t, m, box, shell.Request{Command: "cd /workspace"})
			})
			t.Run("stdin and binary", func(t *testing.T) {
				data := []byte("line\x00\xff\xfe no newline")
				o := run(t, m, box, shell.Request{Command: "cat", Stdin: data})
				if o.stdout != string(data) {
					t.Fatalf("stdout %q", o.stdout)
				}
				o = run(t, m, box, shell.Request{Command: "cat; echo after"})
				if o.stdout != "after\n" {
					t.Fatalf("a stdin reader got %q", o.stdout)
				}
			})
			t.Run("timeout keeps shell", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "export KEEP=1"})
				start := time.Now()
				o := run(t, m, box, shell.Request{Command: "sleep 1000", Timeout: time.Second})
				if !o.res.TimedOut {
					t.Fatalf("not timed out: %+v", o.res.Result)
				}
				if took := time.Since(start); took > hangGuard {
					t.Fatalf("timeout answered after %v", took)
				}
				o = run(t, m, box, shell.Request{Command: "echo $KEEP; ps -eo args | grep -c '^sleep 1000' || true"})
				if o.stdout != "1\n0\n" {
					t.Fatalf("after timeout: %q", o.stdout)
				}
			})
			t.Run("exit and self-kill", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "export KEEP=2"})
				// exit ends the command, not the shell.
				o := run(t, m, box, shell.Request{Command: "export KEEP=2; exit 5"})
				if o.res.ExitCode != 5 || o.res.ShellLost {
					t.Fatalf("exit: %+v", o.res.Result)
				}
				o = run(t, m, box, shell.Request{Command: "kill -9 $$"})
				if !o.res.ShellLost {
					t.Fatalf("self-kill: %+v", o.res.Result)
				}
				o = run(t, m, box, shell.Request{Command: "echo $KEEP"})
				if o.stdout != "2\n" {
					t.Fatalf("state after lost shells: %q", o.stdout)
				}
			})
			t.Run("stopped behind our back", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "echo kept > /workspace/f"})
				if err := rt.Stop(context.Background(), m.ContainerFor(box), 0); err != nil {
					t.Fatal(err)
				}
				o := run(t, m, box, shell.Request{Command: "cat /workspace/f"})
				if o.stdout != "kept\n" || o.res.Boot.Recovered == "" {
					t.Fatalf("stdout %q boot %+v", o.stdout, o.res.Boot)
				}
			})
			t.Run("removed behind our back", func(t *testing.T) {
				if err := rt.Remove(context.Background(), m.ContainerFor(box)); err != nil {
					t.Fatal(err)
				}
				o := run(t, m, box, shell.Request{Command: "cat /workspace/f"})
				if o.stdout != "kept\n" || o.res.Boot.Recovered != "was removed" {
					t.Fatalf("stdout %q boot %+v", o.stdout, o.res.Boot)
				}
			})
			t.Run("second manager adopts", func(t *testing.T) {
				m2 := newManager(t, tg, prefix)
				o := run(t, m2, box, shell.Request{Command: "cat /workspace/f"})
				if o.stdout != "kept\n" || !o.res.Boot.Adopted {
					t.Fatalf("stdout %q boot %+v", o.stdout, o.res.Boot)
				}
			})
			t.Run("concurrent first use ends with one container", func(t *testing.T) {
				ms := []*sandbox.Manager{newManager(t, tg, prefix), newManager(t, tg, prefix), newManager(t, tg, prefix)}
				var wg sync.WaitGroup
				errs := make([]error, len(ms))
				for i, mi := range ms {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, errs[i] = mi.Exec(context.Background(), "race", shell.Request{Command: "true"})
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				cs, err := rt.List(context.Background(), map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: "race"})
				if err != nil || len(cs) != 1 {
					t.Fatalf("containers: %d, %v", len(cs), err)
				}
			})
			t.Run("reset keeps workspace, not rootfs", func(t *testing.T) {
				run(t, m, box, shell.Request{Command: "echo x > /root/marker"})
				start := time.Now()
				if _, err := m.Reset(context.Background(), box, false); err != nil {
					t.Fatal(err)
				}
				t.Logf("reset took %v", time.Since(start))
				o := run(t, m, box, shell.Request{Command: "cat /workspace/f; test -e /root/marker && echo survived || echo gone"})
				if o.stdout != "kept\ngone\n" {
					t.Fatalf("after reset: %q", o.stdout)
				}
			})
			t.Run("destroy", func(t *testing.T) {
				start := time.Now()
				existed, err := m.Destroy(context.Background(), box)
				if err != nil || !existed {
					t.Fatalf("destroy: %v %v", existed, err)
				}
				if took := time.Since(start); took > hangGuard {
					t.Errorf("destroy hung for %v", took)
				}
				existed, err = m.Destroy(context.Background(), box)
				if err != nil || existed {
					t.Fatalf("second destroy: %v %v", existed, err)
				}
				if _, err := m.Status(context.Background(), box); !errors.Is(err, sandbox.ErrNotFound) {
					t.Fatalf("status after destroy: %v", err)
				}
			})
			t.Run("missing image", func(t *testing.T) {
				mi := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: "localhost/no-such-image-sbx:latest"}})
				_, err := mi.Exec(context.Background(), "noimg", shell.Request{Command: "true"})
				if !errors.Is(err, sandbox.ErrImageMissing) || !strings.Contains(err.Error(), "make setup") {
					t.Fatalf("err = %v", err)
				}
			})
			t.Run("invalid names never reach the engine", func(t *testing.T) {
				for _, name := range []string{"", "../x", "--rm", strings.Repeat("a", 64), "héllo", ".hidden", "a b"} {
					if _, err := m.Exec(context.Background(), name, shell.Request{Command: "true"}); !errors.Is(err, sandbox.ErrInvalidName) {
						t.Errorf("%q: err = %v", name, err)
					}
				}
			})
		})
	}
}

func TestEngineMissing(t *testing.T) {
	rt := docker.New(docker.Options{Flavor: docker.Podman, Binary: "/nonexistent/podman"})
	err := rt.Ping(context.Background())
	if !errors.Is(err, sandbox.ErrEngineMissing) || !strings.Contains(sandbox.HintOf(err), "install podman") {
		t.Fatalf("err = %v", err)
	}
}

// TestIdleReaping: a sandbox idle past its TTL stops by itself, with no
// Manager (server) running, and the next use brings it back with its
// workspace. A command longer than the TTL is not cut short. Where the
// engine keeps exit codes, the stop says it was the idle TTL's, in the
// listing and to the hook the next start calls; a stop by a person says
// nothing of the kind.
func TestIdleReaping(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			// The marks of the sandbox in use, for a failure to show.
			marks := &lockedBuffer{}
			cfg := sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
				Profiles: map[string]sandbox.Profile{"sleepy": {IdleTTL: "20s"}},
				Logger:   slog.New(slog.NewTextHandler(marks, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the server's log:\n%s", marks.String())
				}
			})
			m := sandbox.NewManager(rt, cfg)
			// The server marks a busy sandbox active every TTL/3, through
			// its agent or a shell of its own, which a loaded machine may
			// take seconds to open beside the one running the command
			// (through the container stand-in, more): a TTL of twenty
			// seconds, not one (ten was cut short once, under CI's load).
			o := run(t, m, "sleepy", shell.Request{Command: "echo kept > /workspace/f; sleep 25; echo still-here"})
			if o.stdout != "still-here\n" {
				t.Fatalf("a command longer than the TTL: %q", o.stdout)
			}
			m.Close() // no server from here on

			ctr := sandbox.ContainerName(prefix, "sleepy")
			enginetest.WaitFor(t, "the sandbox idle past its 20 s TTL to stop", func() error {
				c, err := rt.Inspect(context.Background(), ctr)
				if err != nil {
					t.Fatal(err)
				}
				if c.Running() {
					return fmt.Errorf("still %s", c.State)
				}
				return nil
			})

			codes := rt.Kind() != "container" // Apple's CLI shows no exit code
			stoppedBy := func(m *sandbox.Manager) string {
				t.Helper()
				infos, err := m.List(context.Background())
				if err != nil || len(infos) != 1 {
					t.Fatalf("list: %+v %v", infos, err)
				}
				return infos[0].StoppedBy
			}
			var hookMu sync.Mutex
			var told []string
			cfg.Stopped = func(container string, finished time.Time, why string) {
				hookMu.Lock()
				defer hookMu.Unlock()
				told = append(told, fmt.Sprintf("%s %s %v", container, why, finished.IsZero()))
			}
			m2 := sandbox.NewManager(rt, cfg)
			t.Cleanup(m2.Close)
			if by := stoppedBy(m2); codes && by != "idle" {
				t.Fatalf("stopped by %q, want idle", by)
			}
			o = run(t, m2, "sleepy", shell.Request{Command: "cat /workspace/f"})
			if o.stdout != "kept\n" || !o.res.Boot.Started {
				t.Fatalf("after reaping: stdout %q boot %+v", o.stdout, o.res.Boot)
			}
			hookMu.Lock()
			want := []string{ctr + " idle false"}
			if !codes {
				want = nil
			}
			if !slices.Equal(told, want) {
				t.Errorf("the start told %q, want %q", told, want)
			}
			hookMu.Unlock()
			if err := rt.Stop(context.Background(), ctr, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if by := stoppedBy(m2); by != "" {
				t.Fatalf("a stop by a person reads as stopped by %q", by)
			}
		})
	}
}

// stopsOnceAfterStart is an engine whose first start of a container is
// undone at once, as podman's late clean-up of a container that stopped
// by itself undoes a start on a loaded machine.
type stopsOnceAfterStart struct {
	sandbox.Runtime
	starts atomic.Int32
}

func (s *stopsOnceAfterStart) Start(ctx context.Context, name string) error {
	if err := s.Runtime.Start(ctx, name); err != nil {
		return err
	}
	if s.starts.Add(1) == 1 {
		return s.Runtime.Stop(ctx, name, 0)
	}
	return nil
}

// TestStartThatDoesNotHoldOnEngine: a stopped sandbox whose container
// stops again right after the server starts it is started once more, and
// the command runs, with the workspace as it was.
func TestStartThatDoesNotHoldOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}})
			run(t, m, "flaky", shell.Request{Command: "echo kept > /workspace/f"})
			m.Close()
			ctr := sandbox.ContainerName(prefix, "flaky")
			if err := rt.Stop(context.Background(), ctr, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			wrapped := &stopsOnceAfterStart{Runtime: rt}
			m2 := sandbox.NewManager(wrapped, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}})
			t.Cleanup(m2.Close)
			o := run(t, m2, "flaky", shell.Request{Command: "cat /workspace/f"})
			if o.stdout != "kept\n" || !o.res.Boot.Started {
				t.Fatalf("after a start that did not hold: stdout %q boot %+v", o.stdout, o.res.Boot)
			}
			if n := wrapped.starts.Load(); n != 2 {
				t.Fatalf("%d starts, want 2", n)
			}
		})
	}
}

func TestIdleTTLDefaults(t *testing.T) {
	m := sandbox.NewManager(nil, sandbox.Config{Defaults: sandbox.Profile{Image: "x", IdleTTL: "1h"},
		Profiles: map[string]sandbox.Profile{"quick": {IdleTTL: "5m"}, "keep": {IdleTTL: "off"}}})
	defer m.Close()
	for name, want := range map[string]time.Duration{"default": 0, "other": time.Hour, "quick": 5 * time.Minute, "keep": 0} {
		if got := m.IdleTTL(name); got != want {
			t.Errorf("IdleTTL(%s) = %v, want %v", name, got, want)
		}
	}
	m2 := sandbox.NewManager(nil, sandbox.Config{Defaults: sandbox.Profile{Image: "x"},
		Profiles: map[string]sandbox.Profile{"default": {IdleTTL: "2h"}}})
	defer m2.Close()
	if m2.IdleTTL("default") != 2*time.Hour || m2.IdleTTL("x") != sandbox.DefaultIdleTTL {
		t.Errorf("default %v, x %v", m2.IdleTTL("default"), m2.IdleTTL("x"))
	}
	if _, err := sandbox.ParseProfileSpec("idle_ttl=5"); err == nil {
		t.Error("idle_ttl=5 (no unit) must be refused")
	}
}
