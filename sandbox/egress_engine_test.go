package sandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// hostAddr is an address of this host other than the loopback, which a
// sandbox with a route reaches (and one without does not).
func hostAddr(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			return p.Addr()
		}
	}
	t.Skip("this host has no IPv4 address besides the loopback")
	return netip.Addr{}
}

// TestEgressOnEngine: an allowlist sandbox has no route out and no DNS;
// through its proxy (plain HTTP, CONNECT and SOCKS5) it reaches what the
// policy allows, on this test's own upstream, resolved by a table the test
// controls; everything else is refused with an answer the program shows.
// An open sandbox reaches the same upstream directly (the control); a
// sandbox with network none reaches nothing. The network log and state
// tell what happened. A killed agent shuts egress until it runs again.
func TestEgressOnEngine(t *testing.T) {
	targets := enginetest.Targets(t)
	for _, tg := range targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			host := hostAddr(t)
			ln, err := net.Listen("tcp", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			var seenMu sync.Mutex
			var seen []string // the Authorization headers the upstreams got
			echo := func(w http.ResponseWriter, r *http.Request) {
				seenMu.Lock()
				seen = append(seen, r.Header.Get("Authorization"))
				seenMu.Unlock()
				fmt.Fprintf(w, "hello-from-upstream %s auth=%s", r.URL.Path, r.Header.Get("Authorization"))
			}
			mux := http.NewServeMux()
			mux.HandleFunc("/", echo)
			gitDir := hostGitRepo(t)
			if gitDir != "" {
				mux.Handle("/git/", http.StripPrefix("/git/", http.FileServer(http.Dir(gitDir))))
			}
			mux.HandleFunc("/simple/tinypkg/", func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, `<!DOCTYPE html><html><body><a href="/files/tinypkg-0.1-py3-none-any.whl#sha256=00">tinypkg-0.1-py3-none-any.whl</a></body></html>`)
			})
			mux.HandleFunc("/npm/tinypkg", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"name":"tinypkg","dist-tags":{"latest":"1.2.3"},"versions":{"1.2.3":{"name":"tinypkg","version":"1.2.3"}}}`)
			})
			srv := &http.Server{Handler: mux}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			port := ln.Addr().(*net.TCPAddr).Port
			up := fmt.Sprintf("api.test:%d", port)
			// An HTTPS upstream (its certificate names example.com).
			tlsUp := httptest.NewUnstartedServer(http.HandlerFunc(echo))
			tlsUp.Listener.Close()
			if tlsUp.Listener, err = net.Listen("tcp", net.JoinHostPort(host.String(), "0")); err != nil {
				t.Fatal(err)
			}
			tlsUp.StartTLS()
			t.Cleanup(tlsUp.Close)
			tlsPort := tlsUp.Listener.Addr().(*net.TCPAddr).Port
			roots := x509.NewCertPool()
			roots.AddCert(tlsUp.Certificate())
			ca, err := egress.LoadOrCreateCA(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			res := &egress.HostsResolver{Hosts: map[string][]netip.Addr{
				"api.test":    {host},
				"example.com": {host},
				"loop.test":   {netip.MustParseAddr("127.0.0.1")},
				"meta.test":   {netip.MustParseAddr("169.254.169.254")},
			}}
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			elog := &egress.Log{Dir: t.TempDir()}
			warnings := &lockedBuffer{}
			cfg := sandbox.Config{Prefix: prefix, Resolver: res, ChannelRoot: filepath.Join(t.TempDir(), "chan"),
				Logger: slog.New(slog.NewTextHandler(warnings, &slog.HandlerOptions{Level: slog.LevelWarn})), EgressLog: elog, CA: ca, UpstreamRoots: roots,
				Defaults: sandbox.Profile{Image: tg.Image, Network: egress.ModeAllowlist, Intercept: []string{"example.com"},
					Allow: []string{up, "loop.test", "meta.test", fmt.Sprintf("%s/32:%d", host, port),
						fmt.Sprintf("example.com:%d", tlsPort), fmt.Sprintf("%s/32:%d", host, tlsPort)}},
				Profiles: map[string]sandbox.Profile{"wide": {Network: egress.ModeOpen}, "shut": {Network: egress.ModeNone}}}
			m := sandbox.NewManager(rt, cfg)
			t.Cleanup(m.Close)
			ctx := context.Background()

			curlOn := func(m *sandbox.Manager, name, args string) string {
				t.Helper()
				o := run(t, m, name, shell.Request{Command: "curl -sS --max-time 60 " + args + " 2>&1; echo \" [exit $?]\""})
				return o.stdout
			}
			curl := func(name, args string) string { t.Helper(); return curlOn(m, name, args) }
			for _, c := range []struct{ what, args string }{
				{"plain HTTP", "http://" + up + "/plain"},
				{"CONNECT", "-p http://" + up + "/tunnel"},
				{"SOCKS5", "--proxy socks5h://127.0.0.1:3128 http://" + up + "/socks"},
			} {
				if got := curl("box", c.args); !strings.Contains(got, "hello-from-upstream") {
					t.Fatalf("%s through the proxy: %q", c.what, got)
				}
			}
			// The usual tools find the proxy by themselves.
			tools := []struct{ what, cmd, want string }{
				{"python's urllib", `python3 -c 'import urllib.request; print(urllib.request.urlopen("http://` + up + `/py").read().decode())'`, "hello-from-upstream /py"},
				{"pip", "pip index versions tinypkg --trusted-host api.test --index-url http://" + up + "/simple/ 2>&1", "tinypkg (0.1)"},
				{"npm", "npm view tinypkg version --registry http://" + up + "/npm/ 2>&1", "1.2.3"},
			}
			if gitDir != "" {
				tools = append(tools, struct{ what, cmd, want string }{"git", "rm -rf /tmp/r && git clone -q http://" + up + "/git/repo.git /tmp/r 2>&1 && cat /tmp/r/hello.txt", "hello-from-git"})
			} else {
				t.Log("git is not on this host: the git clone through the proxy is not tried")
			}
			// The tools read the same variables and reach the same proxy on
			// every engine: they run on the first (npm and pip cost seconds
			// of CPU each, which four engines at once take from the tests
			// running beside them).
			if tg.Name != targets[0].Name {
				tools = tools[:1]
			}
			for _, c := range tools {
				if o := run(t, m, "box", shell.Request{Command: c.cmd, Timeout: 120 * time.Second}); !strings.Contains(o.stdout, c.want) {
					t.Errorf("%s through the proxy: %+v", c.what, o)
				}
			}
			for _, c := range []struct{ what, args, want string }{
				{"a name off the list", "-i http://evil.test/", "blocked by the sandbox's network policy"},
				{"a name that resolves to the loopback", "-i http://loop.test/", "loopback"},
				{"a name that resolves to the metadata address", "-i http://meta.test/", "cloud metadata"},
				{"an address literal", "-i --noproxy '' http://169.254.169.254/latest/", "no CIDR rule holds"},
				{"an IPv6 literal", "-i --noproxy '' http://[::1]:" + fmt.Sprint(port) + "/", "no CIDR rule holds"},
				{"CONNECT to a port the rule does not allow", "-p -i http://api.test:22/", "403"},
			} {
				if got := curl("box", c.args); !strings.Contains(got, c.want) || strings.Contains(got, "hello-from-upstream") {
					t.Errorf("%s: %q, want %q", c.what, got, c.want)
				}
			}
			// No route and no DNS: a program that ignores the proxy gets
			// nowhere, at once.
			raw := fmt.Sprintf(`python3 -c '
import socket
for what, fn in [("tcp", lambda: socket.create_connection(("%s", %d), timeout=20)),
                 ("udp53", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("%s", 53))),
                 ("tcp53", lambda: socket.create_connection(("%s", 53), timeout=20)),
                 ("dns", lambda: socket.getaddrinfo("api.test", 80))]:
    try:
        fn(); print(what, "reached")
    except Exception as e:
        print(what, "failed:", type(e).__name__)
'`, host, port, host, host)
			if o := run(t, m, "box", shell.Request{Command: raw}); strings.Contains(o.stdout, "reached") || strings.Count(o.stdout, "failed") != 4 {
				t.Fatalf("without the proxy: %q %q", o.stdout, o.stderr)
			}
			// Another sandbox, by its name, through the proxy and into it
			// through its agent.
			if o := run(t, m, "peer", shell.Request{Command: "mkdir -p /tmp/www && echo hi-from-peer >/tmp/www/hello.txt && cd /tmp/www && " +
				"(nohup python3 -m http.server 8000 >/dev/null 2>&1 &)"}); o.res.ExitCode != 0 {
				t.Fatalf("peer: %+v", o)
			}
			enginetest.WaitFor(t, "the peer's web server to answer through the proxy", func() error {
				if got := curl("box", "http://peer:8000/hello.txt"); !strings.Contains(got, "hi-from-peer") {
					return fmt.Errorf("%q", got)
				}
				return nil
			})
			if got := curl("box", "-i http://nosuchpeer:8000/"); !strings.Contains(got, "403") {
				t.Errorf("a sandbox that does not exist: %q", got)
			}
			// The control: an open sandbox reaches the upstream directly.
			direct := fmt.Sprintf("--noproxy '*' http://%s:%d/direct", host, port)
			if got := curl("wide", direct); !strings.Contains(got, "hello-from-upstream") {
				t.Fatalf("an open sandbox, directly: %q", got)
			}
			if got := curl("shut", "http://"+up+"/"); strings.Contains(got, "hello-from-upstream") || !strings.Contains(got, "[exit") {
				t.Fatalf("a sandbox with network none: %q", got)
			}

			st, err := m.NetworkState(ctx, "box")
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode != egress.ModeAllowlist || st.Proxy == "" || len(st.Bytes) == 0 || st.Bytes[0].Host != up || st.Bytes[0].Down == 0 {
				t.Fatalf("state: %+v", st)
			}
			refused := map[string]bool{}
			for _, r := range st.Refused {
				refused[r.Host] = true
			}
			for _, h := range []string{"evil.test:80", "loop.test:80", "169.254.169.254:80", "api.test:22"} {
				if !refused[h] {
					t.Errorf("%s is not among the refused: %+v", h, st.Refused)
				}
			}
			// On docker and podman the proxy's connections come on the
			// host socket mounted in, which the sandbox cannot write
			// beside; elsewhere through the exec.
			if rt.Kind() == "container" {
				if st.Transport != "engine exec" {
					t.Errorf("transport on %s: %q", rt.Kind(), st.Transport)
				}
			} else {
				if st.Transport != "host socket" || st.ChannelConns == 0 {
					t.Errorf("transport on %s: %q, %d connections on the host socket", rt.Kind(), st.Transport, st.ChannelConns)
				}
				ch := sandbox.ChannelMount
				o := run(t, m, "box", shell.Request{Command: "touch " + ch + "/planted 2>&1; mkdir " + ch + "/d 2>&1; ls -A " + ch + " | grep -v '^e-[0-9a-f]*[.]s$' | grep -v '^sandbox-ctl-[0-9]*-[0-9a-f]*$'; true"})
				if strings.Count(o.stdout, "Read-only file system") != 2 || strings.Count(o.stdout, "\n") != 2 {
					t.Errorf("the channel seen from the sandbox: %q", o.stdout)
				}
				// The agent runs from the channel, where the server put
				// it (no copy in the sandbox), and the sandbox cannot
				// change it there.
				o = run(t, m, "box", shell.Request{Command: "readlink /usr/local/bin/sandbox-ctl; ls /tmp/.sandbox-mcp 2>/dev/null | grep -c '^sandbox-ctl'; " +
					"for f in " + ch + "/sandbox-ctl-*; do printf x >\"$f\"; done 2>&1; sandbox-ctl help >/dev/null 2>&1 && echo runs"})
				if lines := strings.Split(o.stdout, "\n"); len(lines) != 5 || !strings.HasPrefix(lines[0], ch+"/sandbox-ctl-") ||
					lines[1] != "0" || !strings.Contains(lines[2], "Read-only file system") || lines[3] != "runs" {
					t.Errorf("the agent in the channel: %q", o.stdout)
				}
				// The server takes only a handed TCP connection on its
				// socket: a request written on the socket itself, and a
				// UDP socket handed as a connection, are closed unanswered.
				o = run(t, m, "box", shell.Request{Command: `python3 - <<'EOF'
import glob, socket
p = glob.glob("` + ch + `/e-*.s")[0]
def answer(send):
    s = socket.socket(socket.AF_UNIX)
    s.connect(p)
    s.settimeout(20)
    try:
        send(s)
        return s.recv(100) or "closed"
    except ConnectionResetError:
        return "closed"
print("raw", answer(lambda s: s.sendall(b"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n")))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
print("udp", answer(lambda s: socket.send_fds(s, [b"H"], [u.fileno()])))
EOF`})
				if o.stdout != "raw closed\nudp closed\n" {
					t.Errorf("the server's socket answered what is not a handed connection: %q %q", o.stdout, o.stderr)
				}
			}
			if ws, err := m.NetworkState(ctx, "wide"); err != nil || ws.Mode != egress.ModeOpen {
				t.Errorf("open sandbox state: %+v %v", ws, err)
			}

			// A secret swapped in at egress: the sandbox holds a
			// placeholder; the named host gets the value, over plain HTTP
			// and over HTTPS opted in to interception; no other host
			// does, and the value never comes back into the sandbox.
			const value = "s3cr3t-v4lue-never-in-the-sandbox"
			ph, err := m.SetEgressSecret(ctx, "box", "API_TOKEN", value, []string{"api.test", "example.com"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.SetEgressSecret(ctx, "wide", "API_TOKEN", value, []string{"api.test"}); err == nil || !strings.Contains(err.Error(), "egress mode open") {
				t.Fatalf("a secret for an open sandbox: %v", err)
			}
			seenMu.Lock()
			seen = nil
			seenMu.Unlock()
			out := curl("box", `-H "Authorization: Bearer $API_TOKEN" http://`+up+"/plain") +
				curl("box", fmt.Sprintf(`-H "Authorization: Bearer $API_TOKEN" https://example.com:%d/tls`, tlsPort)) +
				curl("box", `-H "Authorization: Bearer $API_TOKEN" http://peer:8000/hello.txt`) +
				run(t, m, "box", shell.Request{Command: "echo $API_TOKEN"}).stdout
			if strings.Contains(out, value) || strings.Count(out, ph) != 3 || !strings.Contains(out, "/tls auth=Bearer "+ph) {
				t.Fatalf("in the sandbox: %q (placeholder %s)", out, ph)
			}
			seenMu.Lock()
			got := append([]string(nil), seen...)
			seenMu.Unlock()
			if len(got) != 2 || got[0] != "Bearer "+value || got[1] != "Bearer "+value {
				t.Fatalf("the upstreams got %q", got)
			}
			// curl asks for HTTP/2, and gets it from the proxy, which
			// reaches this host over HTTP/1.1; the value goes as well.
			if v := curl("box", fmt.Sprintf(`--http2 -o /dev/null -w '%%{http_version}' -H "Authorization: Bearer $API_TOKEN" https://example.com:%d/tls`, tlsPort)); !strings.HasPrefix(v, "2 [exit 0]") {
				t.Fatalf("HTTP/2 to an intercepted host: %q", v)
			}
			seenMu.Lock()
			got = append([]string(nil), seen...)
			seenMu.Unlock()
			if len(got) != 3 || got[2] != "Bearer "+value {
				t.Fatalf("the upstream got %q over HTTP/2 from the sandbox", got)
			}
			if w := warnings.String(); strings.Contains(w, "CA") {
				t.Fatalf("installing the CA warned: %s", w)
			}
			if o := run(t, m, "box", shell.Request{Command: "grep -rlsF '" + value + "' /proc/[0-9]*/environ /proc/[0-9]*/cmdline /tmp /workspace /root /etc 2>/dev/null; true"}); strings.TrimSpace(o.stdout) != "" {
				t.Fatalf("the value is in the sandbox: %q", o.stdout)
			}

			// The agent killed: the next connections fail (nothing else
			// opens), and egress is back once the server starts it again.
			agentPID := "pgrep -f 'sandbox-ctl-[0-9a-f-]* agent' | head -1"
			before := run(t, m, "box", shell.Request{Command: agentPID}).stdout
			if o := run(t, m, "box", shell.Request{Command: "kill -9 " + before}); before == "" || o.res.ExitCode != 0 {
				t.Fatalf("kill the agent %q: %+v", before, o)
			}
			enginetest.WaitFor(t, "egress to come back after the agent was killed", func() error {
				if got := curl("box", "http://"+up+"/again"); !strings.Contains(got, "hello-from-upstream") {
					return fmt.Errorf("%q", got)
				}
				return nil
			})
			if after := run(t, m, "box", shell.Request{Command: agentPID}).stdout; after == before || after == "" {
				t.Fatalf("the agent was not started again: %q then %q", before, after)
			}

			// The server exits (its agent, and so the proxy, with it), and
			// a new one adopts the running sandbox. The container carries
			// the print of the CA its creator installed, this one's, so
			// the first command does not wait for the install; it still
			// waits for the new server's agent, so the proxy is there for
			// it, and the CA in the trust store since the first boot. The
			// install runs a little later all the same, and puts back the
			// CA file that went meanwhile.
			c, err := rt.Inspect(ctx, m.ContainerFor("box"))
			sum := sha256.Sum256(ca.CertPEM())
			if err != nil || c.Labels[sandbox.LabelCA] != hex.EncodeToString(sum[:8]) {
				t.Fatalf("the container's CA label: %q (%v), want the CA's print %x", c.Labels[sandbox.LabelCA], err, sum[:8])
			}
			const caFile = "/usr/local/share/ca-certificates/sandbox-mcp-egress.crt"
			run(t, m, "box", shell.Request{Command: "rm " + caFile})
			m.Close()
			enginetest.WaitFor(t, "the closed server's agent to end", func() error {
				o, err := rt.Exec(ctx, c.ID, sandbox.ExecSpec{Argv: []string{"sh", "-c", agentPID}})
				if err != nil {
					return err
				}
				if pid := strings.TrimSpace(string(o.Stdout)); pid != "" {
					return fmt.Errorf("agent %s runs", pid)
				}
				return nil
			})
			m2 := sandbox.NewManager(rt, cfg)
			t.Cleanup(m2.Close)
			if got := curlOn(m2, "box", fmt.Sprintf("https://example.com:%d/tls", tlsPort)); !strings.Contains(got, "/tls") || !strings.Contains(got, "[exit 0]") {
				t.Fatalf("the first command of a server that adopted the sandbox, over TLS to an intercepted host: %q", got)
			}
			enginetest.WaitFor(t, "the adopting server to put the CA file back", func() error {
				if o := run(t, m2, "box", shell.Request{Command: "test -s " + caFile}); o.res.ExitCode != 0 {
					return errors.New("not there")
				}
				return nil
			})

			// A new name that takes a spare: its first command reaches an
			// intercepted host over TLS, the CA put in while the spare
			// waited, the spare's agent serving the proxy.
			if _, ok := rt.(sandbox.Renamer); !ok {
				return // no spares on this engine
			}
			m3 := storedManager(t, rt, cfg)
			m3.KeepSpares(1)
			enginetest.WaitFor(t, "a spare ready", func() error {
				if m3.ReadySpares() == 0 {
					return errors.New("none yet")
				}
				return nil
			})
			o := run(t, m3, "fresh", shell.Request{Command: fmt.Sprintf("test -s %s && curl -sS --max-time 60 https://example.com:%d/tls 2>&1; echo \" [exit $?]\"", caFile, tlsPort)})
			if !o.res.Boot.Spare || !strings.Contains(o.stdout, "/tls") || !strings.Contains(o.stdout, "[exit 0]") {
				t.Fatalf("the first command of a new name on a spare (took it: %v), over TLS to an intercepted host: %q", o.res.Boot.Spare, o.stdout)
			}
			m3.KeepSpares(0)
			if _, err := m3.Destroy(ctx, "fresh"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// hostGitRepo makes a bare repository served over git's dumb HTTP (one
// commit with hello.txt) and returns the directory holding repo.git, or
// "" when this host has no git.
func hostGitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		return ""
	}
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	for _, argv := range [][]string{
		{"git", "init", "-q", work},
		{"sh", "-c", "echo hello-from-git > " + filepath.Join(work, "hello.txt")},
		{"git", "-C", work, "add", "hello.txt"},
		{"git", "-C", work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one"},
		{"git", "clone", "-q", "--bare", work, filepath.Join(dir, "srv", "repo.git")},
		{"git", "-C", filepath.Join(dir, "srv", "repo.git"), "update-server-info"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", argv, err, out)
		}
	}
	return filepath.Join(dir, "srv")
}

// lockedBuffer is a bytes.Buffer safe for a logger's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Reset empties the buffer.
func (l *lockedBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}
