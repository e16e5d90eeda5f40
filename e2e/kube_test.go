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
// name (the server keeps their /etc/hosts); a child kept to its family
// reaches its root, and no other sandbox reaches it (NetworkPolicy, which
// the kubelet stand-in enforces); network_info says so: each one's pod
// address on each of its groups, and whom it reaches by name.
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
		// A child kept to its family (the default policy) reaches its root
		// and is reached by it, by name; another root reaches it neither
		// by name nor by address, nor does it reach another root.
		if r := s.call(t, "spawn", map[string]any{"name": "default-kid", "memory": "128M"}); r.isError {
			t.Fatalf("spawn: %s", r.text)
		}
		if r := s.call(t, "bg", map[string]any{"sandbox": "default-kid", "command": "mkdir -p /tmp/www && echo hello-kid >/tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 8001"}); r.isError {
			t.Fatal(r.text)
		}
		enginetest.WaitFor(t, "the root reaching its child by name", func() error {
			r := s.call(t, "exec", map[string]any{"command": "curl -sS -m 10 http://default-kid:8001/index.html 2>&1"})
			if out := r.str("stdout"); out != "hello-kid\n" {
				return fmt.Errorf("curl http://default-kid:8001/: %s", r.text)
			}
			return nil
		})
		ipOf := func(name string) string {
			return strings.TrimSpace(s.call(t, "exec", map[string]any{"sandbox": name, "command": "hostname -I | cut -d' ' -f1"}).str("stdout"))
		}
		for _, c := range [][2]string{{"cli", ipOf("default-kid") + ":8001"}, {"default-kid", ipOf("web") + ":8000"}} {
			if r := s.call(t, "exec", map[string]any{"sandbox": c[0], "command": "curl -sS --connect-timeout 3 -m 20 http://" + c[1] + "/index.html"}); r.num("exit_code") != 28 {
				t.Fatalf("%s reached %s across a family's bounds, or was refused rather than kept out (curl's 28 is its connection timing out): %s", c[0], c[1], r.text)
			}
		}
		r := s.call(t, "network_info", map[string]any{})
		if r.isError || !strings.Contains(r.text, "the cluster's pod network") ||
			!regexp.MustCompile(`(?m)^cli \(running\): [0-9a-f.:]+ on pod network, [0-9a-f.:]+ on family of cli; egress open; reaches by name: default, web$`).MatchString(r.text) ||
			!regexp.MustCompile(`(?m)^default-kid \(running\): [0-9a-f.:]+ on family of default; egress open; reaches by name: default$`).MatchString(r.text) {
			t.Fatalf("network_info: %s", r.text)
		}
	}
	if !ran {
		t.Skipf("no kubernetes target in %s", enginetest.EnvRuntimes)
	}
}
