package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/agent/ctlbin"
	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// TestEarlyAgentHoldsNoBoot: a new allowlist sandbox starts its agent
// from its channel while the boot goes on, and neither the boot nor a
// destroy behind it waits for that agent when it never answers (an image
// whose sh hangs on it, as a sandbox can make of its own snapshot).
func TestEarlyAgentHoldsNoBoot(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Runtime != "docker" && tg.Runtime != "podman" {
			continue // channels are docker's and podman's
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			cli := func(args ...string) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				cmd := exec.CommandContext(ctx, rt.Binary(), args...)
				cmd.Env = append(os.Environ(), tg.Env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s %v: %v: %s", rt.Binary(), args, err, out)
				}
			}
			// sh hangs when it is asked to run anything from the channel.
			img, build := strings.ToLower(prefix)+"-hangsh:1", prefix+"-hangsh"
			cli("run", "-d", "--name", build, tg.Image, "sleep", "600")
			t.Cleanup(func() {
				exec.Command(rt.Binary(), "rm", "-f", build).Run()
				exec.Command(rt.Binary(), "rmi", "-f", img).Run()
			})
			cli("exec", build, "dash", "-c", `rm -f /bin/sh && printf '#!/bin/dash\ncase "$*" in *`+sandbox.ChannelMount+`*) exec sleep 1000;; esac\nexec /bin/dash "$@"\n' >/bin/sh && chmod 755 /bin/sh`)
			cli("commit", build, img)
			cli("rm", "-f", build)

			ca, err := egress.LoadOrCreateCA(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, CA: ca, Resolver: &egress.HostsResolver{},
				ChannelRoot: filepath.Join(t.TempDir(), "chan"),
				Defaults:    sandbox.Profile{Image: img, Network: egress.ModeAllowlist, Allow: []string{"api.test"}}})
			t.Cleanup(m.Close)
			ctx := context.Background()
			booted := make(chan error, 1)
			go func() {
				_, _, err := m.Get(ctx, "box")
				booted <- err
			}()
			// The agent's hello gives up after 30 s: a boot or destroy
			// that waits for it takes that long, one that does not takes
			// a few seconds on a loaded machine.
			const bound = 20 * time.Second
			select {
			case err := <-booted:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(bound):
				t.Fatalf("the boot waited past %s for an agent that never answers", bound)
			}
			destroyed := make(chan error, 1)
			go func() {
				_, err := m.Destroy(ctx, "box")
				destroyed <- err
			}()
			select {
			case err := <-destroyed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(bound):
				t.Fatalf("the destroy waited past %s for an agent that never answers", bound)
			}
		})
	}
}

// TestNewSandboxAgentCallsTheServer: a new allowlist sandbox's agent is
// started by the container's own main process and calls the server on
// its channel, with no engine exec of its own: it runs as
// `… agent SOCKET TOKEN`, a child of the container's init. Started again
// after a stop, the container's call finds no one listening, and the
// server starts the agent through an exec, as for any sandbox it finds
// running; commands work either way, with one agent at a time.
func TestNewSandboxAgentCallsTheServer(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Runtime != "docker" && tg.Runtime != "podman" {
			continue // channels are docker's and podman's
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			ca, err := egress.LoadOrCreateCA(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			// The call is readied only with a sandbox-ctl at hand (none is
			// built on a boot's way): a server without embedded agents
			// builds it at its first sandbox's agent, as this does.
			if _, err := ctlbin.Find(context.Background(), agent.GoArch(runtime.GOARCH)); err != nil {
				t.Fatal(err)
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, CA: ca, Resolver: &egress.HostsResolver{},
				ChannelRoot: filepath.Join(t.TempDir(), "chan"), LockDir: t.TempDir(),
				Defaults: sandbox.Profile{Image: tg.Image, Network: egress.ModeAllowlist, Allow: []string{"api.test"}}})
			t.Cleanup(m.Close)
			agents := func() [][]string {
				t.Helper()
				o := run(t, m, "box", shell.Request{Command: "ps -eo ppid=,args= | grep -F ' agent' | grep -v grep || true"})
				var as [][]string
				for _, l := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
					if f := strings.Fields(l); len(f) >= 3 && f[2] == "agent" {
						as = append(as, f)
					}
				}
				return as
			}
			// The first command finds the egress CA in the trust stores:
			// the main process put it there before it started the agent,
			// and the command waited for that agent, not for an install.
			pem := strings.TrimSpace(string(ca.CertPEM()))
			lines := strings.Split(pem, "\n")
			o := run(t, m, "box", shell.Request{Command: "cat /usr/local/share/ca-certificates/sandbox-mcp-egress.crt; echo; " +
				"grep -cxF -e '" + lines[len(lines)/2] + "' /etc/ssl/certs/ca-certificates.crt"})
			if got := strings.TrimSpace(o.stdout); !strings.HasPrefix(got, pem) || !strings.HasSuffix(got, "\n1") {
				t.Fatalf("the first command found the CA file and its count in the bundle as %q, want the CA and 1", got)
			}
			var first []string
			enginetest.WaitFor(t, "the called agent to run alone", func() error {
				as := agents()
				if len(as) != 1 {
					return fmt.Errorf("agents: %q", as)
				}
				first = as[0]
				return nil
			})
			if len(first) != 6 || first[0] != "1" || !strings.HasPrefix(first[3], sandbox.ChannelMount+"/a-") || first[5] != "ca" {
				t.Fatalf("the new sandbox's agent runs as %q, want a child of init (ppid 1) calling a socket in %s, saying the CA is in place", first, sandbox.ChannelMount)
			}

			stop := exec.Command(rt.Binary(), "stop", "-t", "0", m.ContainerFor("box"))
			stop.Env = append(os.Environ(), tg.Env...)
			if out, err := stop.CombinedOutput(); err != nil {
				t.Fatalf("stop: %v: %s", err, out)
			}
			enginetest.WaitFor(t, "a command after the stop", func() error {
				_, err := m.Exec(context.Background(), "box", shell.Request{Command: "true"})
				return err
			})
			enginetest.WaitFor(t, "one agent, started through an exec, after the restart", func() error {
				as := agents()
				if len(as) != 1 || len(as[0]) != 3 {
					return fmt.Errorf("agents: %q", as)
				}
				return nil
			})
		})
	}
}
