package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestEgressEndToEnd: a server with its defaults (allowlist, presets) and
// one allowed upstream of this test's own, whose name it resolves through
// a hosts file the test wrote: a command reaches the upstream through the
// proxy, with the proxy variables set in commands and background jobs; a
// host off the list is refused with a 403 that says how to allow it;
// status, network_info, network_log and `sandbox-mcp net` show the policy,
// the refusals and the traffic.
func TestEgressEndToEnd(t *testing.T) { enginetest.RunFirstAndKubernetes(t, testEgressEndToEnd) }

// testEgressEndToEnd is TestEgressEndToEnd on one target.
func testEgressEndToEnd(t *testing.T, tg enginetest.Target) {
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
	auth := make(chan string, 10)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Authorization"); a != "" {
			auth <- a
		}
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
	egressFlags := []string{"--network", "allowlist", "--allow", up, "--allow", fmt.Sprintf("%s/32:%d", host, port), "--egress-hosts", hosts}
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

	// A secret swapped in at egress: the sandbox has a placeholder, the
	// upstream gets the value.
	r = s.call(t, "env", map[string]any{"sandbox": "box", "action": "set", "key": "API_TOKEN", "value": "tok-e2e-0123456789", "hosts": []string{"api.test"}})
	if r.isError || !strings.Contains(r.text, "SANDBOX_SECRET_API_TOKEN_") {
		t.Fatalf("env set with hosts: %s", r.text)
	}
	r = s.call(t, "env", map[string]any{"sandbox": "box"})
	if !strings.Contains(r.text, "API_TOKEN=SANDBOX_SECRET_API_TOKEN_") || !strings.Contains(r.text, "the host swaps in the value for api.test") || strings.Contains(r.text, "tok-e2e") {
		t.Fatalf("env list: %s", r.text)
	}
	r = s.call(t, "exec", map[string]any{"sandbox": "box", "command": `curl -sS --max-time 60 -H "Authorization: Bearer $API_TOKEN" http://` + up + "/auth; echo; echo $API_TOKEN"})
	if r.isError || strings.Contains(r.text, "tok-e2e") {
		t.Fatalf("exec with the secret: %s", r.text)
	}
	select {
	case a := <-auth:
		if a != "Bearer tok-e2e-0123456789" {
			t.Fatalf("the upstream got %q", a)
		}
	case <-time.After(time.Minute):
		t.Fatal("the upstream got no Authorization")
	}
	if r := s.call(t, "env", map[string]any{"sandbox": "box", "action": "set", "key": "X", "value": "v", "hosts": []string{"10.0.0.0/8"}}); !r.isError {
		t.Fatalf("a secret for an address range: %s", r.text)
	}

	// A second server on the same state directory: the sandbox's proxy
	// stays with the first one's agent, yet a secret set through the
	// second is swapped in, and forgotten when the second unsets it.
	p2 := startProc(t, tg, prefix, stateDir, append(egressFlags, "--toolsets", "all")...)
	s2 := &server{cs: p2.cs}
	r = s2.call(t, "env", map[string]any{"sandbox": "box", "action": "set", "key": "API_TOKEN2", "value": "tok-second-9876543210", "hosts": []string{"api.test"}})
	ph2 := regexp.MustCompile(`SANDBOX_SECRET_API_TOKEN2_[0-9a-f]+`).FindString(r.text)
	if r.isError || ph2 == "" {
		t.Fatalf("env set through the second server: %s", r.text)
	}
	viaFirst := func(header string) string {
		t.Helper()
		r := s.call(t, "exec", map[string]any{"sandbox": "box", "command": `curl -sS --max-time 60 -H "Authorization: Bearer ` + header + `" http://` + up + "/second"})
		if r.isError || strings.Contains(r.text, "tok-second") {
			t.Fatalf("exec with the second server's secret: %s", r.text)
		}
		select {
		case a := <-auth:
			return a
		case <-time.After(time.Minute):
			t.Fatal("the upstream got no Authorization")
		}
		return ""
	}
	if a := viaFirst("$API_TOKEN2"); a != "Bearer tok-second-9876543210" {
		t.Fatalf("a secret set through the second server: the upstream got %q", a)
	}
	if r := s2.call(t, "env", map[string]any{"sandbox": "box", "action": "unset", "key": "API_TOKEN2"}); r.isError {
		t.Fatal(r.text)
	}
	if a := viaFirst(ph2); a != "Bearer "+ph2 {
		t.Fatalf("a secret the second server unset: the upstream got %q", a)
	}

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
	// Connections come to the host through a socket mounted in where the
	// engine runs on this host, else over the engine's exec.
	carrier := "host socket"
	if tg.Runtime == "container" || tg.Runtime == enginetest.Kubernetes {
		carrier = "engine exec"
	}
	out, code := runExit(t, tg, append(append([]string{"net", "box"}, common...), "--allow", up)...)
	if code != 0 || !regexp.MustCompile(`egress: +allowlist\n`).MatchString(out) || !strings.Contains(out, "allow "+up) ||
		!strings.Contains(out, "REFUSED: evil.example:443 is not on the allowlist") || !regexp.MustCompile(`traffic: +`+regexp.QuoteMeta(up)).MatchString(out) ||
		!strings.Contains(out, "carried by:  "+carrier+"\n") {
		t.Fatalf("sandbox-mcp net: %d %q", code, out)
	}
	if out, code := runExit(t, tg, append([]string{"net", "nosuch"}, common...)...); code != 3 {
		t.Fatalf("sandbox-mcp net of a missing sandbox: %d %q", code, out)
	}

	// Both servers killed (SIGKILL), as a client's crash leaves them: the
	// next server's first command in the sandbox goes out through the
	// proxy, which its own agent serves by then (the dead servers' agents
	// held the port until their streams ended).
	for _, q := range []*proc{p, p2} {
		if err := q.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		q.waitExit(t)
	}
	p3 := startProc(t, tg, prefix, stateDir, append(egressFlags, "--toolsets", "all")...)
	s3 := &server{cs: p3.cs}
	r = s3.call(t, "exec", map[string]any{"sandbox": "box", "command": "curl -sS --max-time 60 http://" + up + "/after-kill"})
	if r.isError || !strings.Contains(r.text, "hello-from-upstream /after-kill") || !strings.Contains(r.text, "adopted") {
		t.Fatalf("the first command of a server started after the others were killed: %s", r.text)
	}
}

// TestEgressPolicyReload: the config file's allowlist changed while a
// sandbox downloads: the download goes on to its end, the next connection
// to the host no longer allowed is refused, and one allowed again goes
// through, with neither the sandbox nor the server restarted.
func TestEgressPolicyReload(t *testing.T) {
	enginetest.RunFirstAndKubernetes(t, testEgressPolicyReload)
}

// testEgressPolicyReload is TestEgressPolicyReload on one target.
func testEgressPolicyReload(t *testing.T, tg enginetest.Target) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const chunks = 40 // of 64 KiB, one every 100 ms: four seconds
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			fmt.Fprint(w, "quick")
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(chunks<<16))
		for i := 0; i < chunks; i++ {
			w.Write(make([]byte, 1<<16))
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 api.test other.test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "config.json")
	writeCfg := func(allow ...string) {
		b, _ := json.Marshal(map[string]any{"defaults": map[string]any{"network": "allowlist", "presets": []string{}, "allow": allow}})
		tmp := cfgFile + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgFile); err != nil {
			t.Fatal(err)
		}
	}
	loop := fmt.Sprintf("127.0.0.1/32:%d", port)
	writeCfg(fmt.Sprintf("api.test:%d", port), loop)
	prefix := enginetest.Prefix(t, tg.New())
	p := startProc(t, tg, prefix, t.TempDir(), "--config", cfgFile, "--egress-hosts", hosts)
	s := &server{cs: p.cs}
	url := fmt.Sprintf("http://api.test:%d", port)
	if r := s.call(t, "exec", map[string]any{"sandbox": "box", "command": "curl -sS --max-time 60 " + url + "/"}); r.isError || !strings.Contains(r.text, "quick") {
		t.Fatalf("before the change: %s", r.text)
	}
	long := callAsync(p.cs, "exec", map[string]any{"sandbox": "box", "command": "curl -sS --max-time 120 -o /dev/null -w 'got=%{size_download}' " + url + "/slow", "timeout": 300})
	time.Sleep(time.Second)
	writeCfg(fmt.Sprintf("other.test:%d", port), loop)
	enginetest.WaitFor(t, "the new policy to refuse api.test", func() error {
		r := s.call(t, "exec", map[string]any{"sandbox": "box", "command": "curl -sS -o /dev/null -w '%{http_code}' --max-time 60 " + url + "/"})
		if !strings.Contains(r.text, "403") {
			return fmt.Errorf("%s", r.text)
		}
		return nil
	})
	if r := s.call(t, "exec", map[string]any{"sandbox": "box", "command": fmt.Sprintf("curl -sS --max-time 60 http://other.test:%d/", port)}); !strings.Contains(r.text, "quick") {
		t.Fatalf("a host the new policy allows: %s", r.text)
	}
	select {
	case text := <-long:
		if !strings.Contains(text, fmt.Sprintf("got=%d", chunks<<16)) {
			t.Fatalf("the download under way when the policy changed: %s", text)
		}
	case <-time.After(enginetest.HangGuard):
		t.Fatal("the download under way did not end")
	}
}
