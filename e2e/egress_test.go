package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestEgressEndToEnd: a server with its defaults (allowlist, presets) and
// one allowed upstream of this test's own, whose name it resolves through
// a hosts file the test wrote: a command reaches the upstream through the
// proxy, with the proxy variables set in commands and background jobs; a
// host off the list is refused with a 403 that says how to allow it;
// status, network_info, network_log and `sandbox-mcp net` show the policy,
// the refusals and the traffic.
func TestEgressEndToEnd(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	addrs, _ := net.InterfaceAddrs()
	var host netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			host = p.Addr()
			break
		}
	}
	if !host.IsValid() {
		t.Skip("this host has no IPv4 address besides the loopback")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello-from-upstream %s", r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte(fmt.Sprintf("%s api.test\n", host)), 0o600); err != nil {
		t.Fatal(err)
	}
	up := fmt.Sprintf("api.test:%d", port)
	prefix := enginetest.Prefix(t, tg.New())
	stateDir := t.TempDir()
	common := []string{"--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", stateDir}
	egressFlags := []string{"--allow", up, "--allow", fmt.Sprintf("%s/32:%d", host, port), "--egress-hosts", hosts}
	p := startProc(t, tg, prefix, stateDir, append(egressFlags, "--toolsets", "all")...)
	s := &server{cs: p.cs}

	r := s.call(t, "exec", map[string]any{"sandbox": "box", "command": "echo $HTTPS_PROXY; curl -sS --max-time 60 http://" + up + "/through"})
	if r.isError || !strings.Contains(r.text, "http://127.0.0.1:3128") || !strings.Contains(r.text, "hello-from-upstream /through") {
		t.Fatalf("exec through the proxy: %s", r.text)
	}
	r = s.call(t, "exec", map[string]any{"sandbox": "box", "command": "curl -sS --max-time 60 -i https://evil.example/ 2>&1; curl -sS --max-time 60 http://evil.example/ 2>&1"})
	if !strings.Contains(r.text, "403") || !strings.Contains(r.text, "blocked by the sandbox's network policy") || !strings.Contains(r.text, "allow=evil.example:80") {
		t.Fatalf("a host off the list: %s", r.text)
	}
	if r := s.call(t, "bg", map[string]any{"sandbox": "box", "name": "env", "command": "echo job:$HTTP_PROXY:$NODE_USE_ENV_PROXY"}); r.isError {
		t.Fatal(r.text)
	}
	enginetest.WaitFor(t, "the job's output", func() error {
		r := s.call(t, "logs", map[string]any{"sandbox": "box", "name": "env"})
		if !strings.Contains(r.text, "job:http://127.0.0.1:3128:1") {
			return fmt.Errorf("%s", r.text)
		}
		return nil
	})

	r = s.call(t, "status", map[string]any{"sandbox": "box"})
	if r.isError || !strings.Contains(r.text, "egress allowlist: allowlist: presets packages,git; allow "+up) || !strings.Contains(r.text, "refused lately: evil.example:") {
		t.Fatalf("status: %s", r.text)
	}
	r = s.call(t, "network_info", map[string]any{"sandbox": "box"})
	if r.isError || !strings.Contains(r.text, "box (running): no network; egress allowlist") || !strings.Contains(r.text, "traffic: "+up) {
		t.Fatalf("network_info: %s", r.text)
	}
	r = s.call(t, "network_log", map[string]any{"sandbox": "box", "refused_only": true})
	evs, _ := r.data["events"].([]any)
	if r.isError || len(evs) != 2 || !strings.Contains(r.text, "evil.example:443 via connect: refused") {
		t.Fatalf("network_log: %s", r.text)
	}
	if r := s.call(t, "network_log", map[string]any{"sandbox": "box", "limit": 0}); !r.isError {
		t.Fatalf("network_log with limit 0: %s", r.text)
	}

	// The command line reads the policy from its own settings, as the
	// server does.
	out, code := runExit(t, tg, append(append([]string{"net", "box"}, common...), "--allow", up)...)
	if code != 0 || !regexp.MustCompile(`egress: +allowlist\n`).MatchString(out) || !strings.Contains(out, "allow "+up) ||
		!strings.Contains(out, "REFUSED: evil.example:443 is not on the allowlist") || !strings.Contains(out, "traffic:  "+up) {
		t.Fatalf("sandbox-mcp net: %d %q", code, out)
	}
	if out, code := runExit(t, tg, append([]string{"net", "nosuch"}, common...)...); code != 3 {
		t.Fatalf("sandbox-mcp net of a missing sandbox: %d %q", code, out)
	}
}
