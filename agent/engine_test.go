package agent_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestAgentInContainer: the static sandbox-ctl, copied into a container
// and run over the engine's `exec -i` as `sandbox-ctl agent`, carries many
// HTTP connections to a server inside the container, each as one stream
// (no process start per connection), on a container with no network.
func TestAgentInContainer(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Runtime != "podman" && tg.Runtime != "docker" {
			continue // the Apple stand-in runs on podman too: one is enough
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			// guarded bounds one step, from its start: it ends a hung one
			// and is no speed check.
			guarded := func() context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
				t.Cleanup(cancel)
				return ctx
			}
			bin := filepath.Join(t.TempDir(), "sandbox-ctl")
			build := exec.CommandContext(guarded(), "go", "build", "-o", bin, "../cmd/sandbox-ctl")
			build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build sandbox-ctl: %v: %s", err, out)
			}
			prefix := enginetest.Prefix(t, tg.New())
			ctr := prefix + "-agent"
			cli := func(stdin io.Reader, args ...string) string {
				t.Helper()
				cmd := exec.CommandContext(guarded(), tg.Runtime, args...)
				cmd.Env = append(os.Environ(), tg.Env...)
				cmd.Stdin = stdin
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %v: %v: %s", tg.Runtime, args, err, out)
				}
				return string(out)
			}
			t.Cleanup(func() { exec.Command(tg.Runtime, "rm", "-f", "-t", "0", ctr).Run() })
			cli(nil, "run", "-d", "--network", "none", "--label", "io.sandbox-mcp.owner="+prefix, "--name", ctr, tg.Image, "sleep", "600")
			f, err := os.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cli(f, "exec", "-i", ctr, "sh", "-c", "cat >/tmp/sandbox-ctl && chmod 755 /tmp/sandbox-ctl")
			cli(nil, "exec", "-d", ctr, "sh", "-c", "mkdir -p /tmp/www && echo hello-from-inside >/tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8765 --bind 127.0.0.1")

			// The agent lives until the test ends it.
			life, end := context.WithCancel(context.Background())
			t.Cleanup(end)
			cmd := exec.CommandContext(life, tg.Runtime, "exec", "-i", ctr, "/tmp/sandbox-ctl", "agent")
			cmd.Env = append(os.Environ(), tg.Env...)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			c, err := agent.NewClient(stdout, stdin, func() error { stdin.Close(); _ = cmd.Process.Kill(); return nil })
			if err != nil {
				t.Fatal(err)
			}
			defer func() { c.Close(); cmd.Wait() }()

			get := func() (string, error) {
				conn, err := c.Dial(context.Background(), 8765)
				if err != nil {
					return "", err
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(enginetest.HangGuard)) // ends a hang; no speed check
				// HTTP/1.0: the server answers and closes.
				if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
					return "", err
				}
				b, err := io.ReadAll(conn)
				return string(b), err
			}
			enginetest.WaitFor(t, "an answer from the server in the container", func() error {
				body, err := get()
				if err != nil {
					return err
				}
				if !strings.Contains(body, "hello-from-inside") {
					return fmt.Errorf("it answered %q", body)
				}
				return nil
			})
			for i := range 30 {
				if body, err := get(); err != nil || !strings.Contains(body, "hello-from-inside") {
					t.Fatalf("request %d: %v %q", i, err, body)
				}
			}
			if _, err := c.Dial(context.Background(), 8766); err == nil || !strings.Contains(err.Error(), "refused") {
				t.Fatalf("a port nothing listens on: %v", err)
			}
		})
	}
}
