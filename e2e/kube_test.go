package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestKubernetesOffTheNetwork: on the Kubernetes runtime a sandbox on the
// default egress mode (allowlist) is a pod with only its loopback, kept
// off the cluster's network by a NetworkPolicy; the proxy the agent
// serves in it refuses a host outside the list, with the reason.
func TestKubernetesOffTheNetwork(t *testing.T) {
	ran := false
	for _, tg := range enginetest.Targets(t) {
		if tg.Runtime != enginetest.Kubernetes {
			continue
		}
		ran = true
		s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "", "--network", "allowlist")
		r := s.call(t, "exec", map[string]any{"command": "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; curl -sS -m 30 http://outside.example.test/ 2>&1"})
		if out := r.str("stdout"); !strings.HasPrefix(out, "lo\n") || strings.Contains(out, "eth") || !strings.Contains(out, "blocked by the sandbox's network policy") {
			t.Fatalf("egress from a pod: %s", out)
		}
	}
	if !ran {
		t.Skipf("no kubernetes target in %s", enginetest.EnvRuntimes)
	}
}

// TestKubernetesPeersByName: on the Kubernetes runtime, open sandboxes
// are pods on the cluster's pod network that reach each other by sandbox
// name (the server keeps their /etc/hosts), and network_info says so:
// each one's pod address, and whom it reaches by name.
func TestKubernetesPeersByName(t *testing.T) {
	ran := false
	for _, tg := range enginetest.Targets(t) {
		if tg.Runtime != enginetest.Kubernetes {
			continue
		}
		ran = true
		s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "", "--network", "open", "--toolsets", "all")
		if r := s.call(t, "bg", map[string]any{"sandbox": "web", "command": "mkdir -p /tmp/www && echo hello-peer >/tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8000"}); r.isError {
			t.Fatal(r.text)
		}
		if r := s.call(t, "exec", map[string]any{"sandbox": "cli", "command": "true"}); r.isError {
			t.Fatal(r.text)
		}
		enginetest.WaitFor(t, "cli reaching web by name", func() error {
			r := s.call(t, "exec", map[string]any{"sandbox": "cli", "command": "curl -sS -m 10 http://web:8000/index.html 2>&1"})
			if out := r.str("stdout"); out != "hello-peer\n" {
				return fmt.Errorf("curl http://web:8000/: %s", r.text)
			}
			return nil
		})
		r := s.call(t, "network_info", map[string]any{})
		if r.isError || !strings.Contains(r.text, "the cluster's pod network") ||
			!regexp.MustCompile(`(?m)^cli \(running\): [0-9a-f.:]+ on pod network; egress open; reaches by name: web$`).MatchString(r.text) {
			t.Fatalf("network_info: %s", r.text)
		}
	}
	if !ran {
		t.Skipf("no kubernetes target in %s", enginetest.EnvRuntimes)
	}
}
