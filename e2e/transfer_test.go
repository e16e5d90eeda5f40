package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// oddNames are host file names an upload and a download must keep.
var oddNames = []string{"with space.txt", "new\nline.txt", `quo'te"s.txt`, "bad\xffutf8.txt", "-dash.txt"}

// TestTransfer: upload and download of a tree (odd names, modes, mtimes,
// symlinks as links), host paths confined to the allowed roots, a hostile
// tar in the sandbox, overwrite rules, and git_clone with a token that
// shows up nowhere.
func TestTransfer(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			host := t.TempDir()
			outside := t.TempDir()
			s := startServer(t, tg, prefix, "", "--toolsets", "all", "--allow-dir", host, "--log-level", "debug")
			os.WriteFile(filepath.Join(outside, "secret"), []byte("HOST-SECRET"), 0o600)

			tree := filepath.Join(host, "tree")
			os.MkdirAll(filepath.Join(tree, "sub", "deep"), 0o755)
			for i, n := range oddNames {
				os.WriteFile(filepath.Join(tree, n), []byte(strings.Repeat("x", i+1)), 0o644)
			}
			os.WriteFile(filepath.Join(tree, "sub", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o750)
			os.WriteFile(filepath.Join(tree, "sub", "deep", "empty"), nil, 0o600)
			os.Symlink("sub/run.sh", filepath.Join(tree, "inlink"))
			os.Symlink(filepath.Join(outside, "secret"), filepath.Join(tree, "outlink"))
			mt := time.Unix(1600000000, 0)
			os.Chtimes(filepath.Join(tree, "sub", "run.sh"), mt, mt)

			t.Run("upload", func(t *testing.T) {
				r := s.call(t, "upload", map[string]any{"local_path": tree, "sandbox_path": "/workspace"})
				if r.isError || r.num("files") != float64(len(oddNames)+2) || r.num("symlinks") != 2 || r.str("sandbox_path") != "/workspace/tree" {
					t.Fatalf("%s %+v", r.text, r.data)
				}
				r = s.call(t, "exec", map[string]any{"command": "cd /workspace/tree && ls | wc -l && stat -c '%a %Y %U' sub/run.sh && " +
					"test \"$(stat -c %U sub/run.sh)\" = \"$(id -un)\" && readlink inlink outlink && ./inlink && cat -- \"$(printf 'bad\\377utf8.txt')\" && " +
					"cat -- \"$(printf 'new\\nline.txt')\" && test ! -e \"$(readlink outlink)\" && echo link-not-followed"})
				want := []string{"750 1600000000", "sub/run.sh", filepath.Join(outside, "secret"), "ran", "xxxx", "xx", "link-not-followed"}
				for _, w := range want {
					if !strings.Contains(r.str("stdout"), w) {
						t.Fatalf("missing %q in the sandbox's view:\n%s\n%s", w, r.str("stdout"), r.str("stderr"))
					}
				}
				if strings.Contains(r.str("stdout"), "HOST-SECRET") {
					t.Fatal("a link out of the roots was followed")
				}
				// As a new name, and a single file into a directory.
				r = s.call(t, "upload", map[string]any{"local_path": filepath.Join(tree, "sub", "run.sh"), "sandbox_path": "/workspace/renamed.sh"})
				if r.isError || r.str("sandbox_path") != "/workspace/renamed.sh" {
					t.Fatalf("file as a new name: %s", r.text)
				}
				r = s.call(t, "exec", map[string]any{"command": "/workspace/renamed.sh"})
				if r.str("stdout") != "ran\n" {
					t.Fatalf("renamed file: %+v", r)
				}
				// A directory may not replace a file.
				r = s.call(t, "upload", map[string]any{"local_path": filepath.Join(tree, "sub"), "sandbox_path": "/workspace/renamed.sh"})
				if !r.isError || !strings.Contains(r.text, "is a file") {
					t.Fatalf("a directory onto a file: %s", r.text)
				}
			})

			t.Run("read_file lines", func(t *testing.T) {
				r := s.call(t, "exec", map[string]any{"command": "seq 1 200000 >/workspace/big.txt"})
				if r.isError {
					t.Fatal(r.text)
				}
				r = s.call(t, "read_file", map[string]any{"path": "/workspace/big.txt", "line": 150000, "lines": 3})
				if r.isError || r.str("content") != "150000\n150001\n150002\n" {
					t.Fatalf("lines: %q %s", r.str("content"), r.text)
				}
				r = s.call(t, "read_file", map[string]any{"path": "/workspace/big.txt", "line": 1})
				if !r.isError || !strings.Contains(r.text, "fewer lines") {
					t.Fatalf("over 1 MiB by lines: %.300s", r.text)
				}
				r = s.call(t, "read_file", map[string]any{"path": "/workspace/big.txt", "line": 2, "offset": 5})
				if !r.isError || !strings.Contains(r.text, "not both") {
					t.Fatalf("lines and offset: %s", r.text)
				}
			})

			t.Run("download", func(t *testing.T) {
				back := filepath.Join(host, "back")
				r := s.call(t, "download", map[string]any{"sandbox_path": "/workspace/tree", "local_path": back})
				if r.isError {
					t.Fatal(r.text)
				}
				for i, n := range oddNames {
					if b, err := os.ReadFile(filepath.Join(back, n)); err != nil || len(b) != i+1 {
						t.Errorf("%q: %q %v", n, b, err)
					}
				}
				fi, err := os.Stat(filepath.Join(back, "sub", "run.sh"))
				if err != nil || fi.Mode().Perm() != 0o750 || !fi.ModTime().Equal(mt) {
					t.Errorf("run.sh: %v %v", fi, err)
				}
				if l, _ := os.Readlink(filepath.Join(back, "outlink")); l != filepath.Join(outside, "secret") {
					t.Errorf("outlink: %q", l)
				}
				// Into an existing directory it lands under its own name, and
				// what is there is replaced only with overwrite.
				os.WriteFile(filepath.Join(tree, "marker"), []byte("keep"), 0o644)
				r = s.call(t, "download", map[string]any{"sandbox_path": "/workspace/tree", "local_path": host})
				if !r.isError || !strings.Contains(r.text, "overwrite=true") {
					t.Fatalf("existing target: %s", r.text)
				}
				if _, err := os.Stat(filepath.Join(tree, "marker")); err != nil {
					t.Fatal("a refused download changed the target")
				}
				r = s.call(t, "download", map[string]any{"sandbox_path": "/workspace/tree", "local_path": host, "overwrite": true})
				if _, err := os.Stat(filepath.Join(tree, "marker")); r.isError || err == nil || r.data["replaced"] != true {
					t.Fatalf("overwrite: %s (marker still there: %v)", r.text, err == nil)
				}
				file := filepath.Join(host, "one.sh")
				os.WriteFile(file, []byte("old"), 0o644)
				r = s.call(t, "download", map[string]any{"sandbox_path": "/workspace/renamed.sh", "local_path": file})
				if b, _ := os.ReadFile(file); !r.isError || string(b) != "old" {
					t.Fatalf("existing file: %s", r.text)
				}
				r = s.call(t, "download", map[string]any{"sandbox_path": "/workspace/renamed.sh", "local_path": file, "overwrite": true})
				if b, _ := os.ReadFile(file); r.isError || !bytes.Contains(b, []byte("echo ran")) {
					t.Fatalf("overwrite a file: %s", r.text)
				}
				// Into an existing directory: under the sandbox path's name.
				r = s.call(t, "download", map[string]any{"sandbox_path": "/workspace/renamed.sh", "local_path": host})
				if b, _ := os.ReadFile(filepath.Join(host, "renamed.sh")); r.isError || !bytes.Contains(b, []byte("echo ran")) {
					t.Fatalf("into a directory: %s", r.text)
				}
				r = s.call(t, "download", map[string]any{"sandbox_path": "/workspace/nope", "local_path": filepath.Join(host, "nope")})
				if !r.isError || !strings.Contains(r.text, "no such path") {
					t.Fatalf("missing sandbox path: %s", r.text)
				}
			})

			t.Run("roots", func(t *testing.T) {
				os.Symlink(outside, filepath.Join(host, "door"))
				for _, tc := range []struct{ args map[string]any }{
					{map[string]any{"local_path": "/etc/passwd"}},
					{map[string]any{"local_path": filepath.Join(host, "..", filepath.Base(outside), "secret")}},
					{map[string]any{"local_path": filepath.Join(host, "door", "secret")}},
				} {
					r := s.call(t, "upload", tc.args)
					if !r.isError || !strings.Contains(r.text, "--allow-dir") && !strings.Contains(r.text, `".."`) {
						t.Errorf("%v: %s", tc.args, r.text)
					}
				}
				r := s.call(t, "download", map[string]any{"sandbox_path": "/etc/hostname", "local_path": filepath.Join(outside, "x")})
				if !r.isError || !strings.Contains(r.text, host) || !strings.Contains(r.text, "--allow-dir") {
					t.Errorf("download outside: %s", r.text)
				}
				r = s.call(t, "download", map[string]any{"sandbox_path": "/etc/hostname", "local_path": filepath.Join(host, "door", "x")})
				if !r.isError {
					t.Errorf("download through a link out of the root: %s", r.text)
				}
				if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
					t.Error("wrote outside the roots")
				}
				r = s.call(t, "upload", map[string]any{"local_path": filepath.Join(host, "missing")})
				if !r.isError || !strings.Contains(r.text, "does not exist") {
					t.Errorf("missing host path: %s", r.text)
				}
			})

			t.Run("hostile tar", func(t *testing.T) {
				// The sandbox replaces tar with one that sends a crafted stream.
				craft := `import io, tarfile, sys
b = io.BytesIO(); tf = tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT)
def add(name, kind=tarfile.REGTYPE, link="", data=b"evil"):
    ti = tarfile.TarInfo(name); ti.type = kind; ti.linkname = link; ti.mode = 0o4755
    ti.size = len(data) if kind == tarfile.REGTYPE else 0
    tf.addfile(ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
add("loot", tarfile.DIRTYPE)
add("loot/fine.txt")
add("../escape.txt"); add("/abs.txt"); add("loot/../../escape2.txt")
add("loot/door", tarfile.SYMTYPE, link=sys.argv[2])
add("loot/door/through.txt")
add("loot/hard", tarfile.LNKTYPE, link="/etc/passwd")
add("loot/dev", tarfile.CHRTYPE)
tf.close(); open(sys.argv[1], "wb").write(b.getvalue())
`
				r := s.call(t, "write_file", map[string]any{"path": "/tmp/craft.py", "content": craft})
				if r.isError {
					t.Fatal(r.text)
				}
				r = s.call(t, "exec", map[string]any{"command": "mkdir -p /workspace/loot && python3 /tmp/craft.py /tmp/evil.tar " + outside +
					" && printf '#!/bin/sh\\ncat /tmp/evil.tar\\n' >/usr/local/bin/tar && chmod +x /usr/local/bin/tar && hash -r && command -v tar"})
				if r.isError || !strings.Contains(r.str("stdout"), "/usr/local/bin/tar") {
					t.Fatalf("plant tar: %s %s", r.text, r.str("stderr"))
				}
				defer s.call(t, "exec", map[string]any{"command": "rm -f /usr/local/bin/tar"})
				dl := filepath.Join(host, "dl")
				os.MkdirAll(dl, 0o755)
				r = s.call(t, "download", map[string]any{"sandbox_path": "/workspace/loot", "local_path": filepath.Join(dl, "loot")})
				if r.isError {
					t.Fatal(r.text)
				}
				if b, _ := os.ReadFile(filepath.Join(dl, "loot", "fine.txt")); string(b) != "evil" {
					t.Fatalf("the good entry: %q", b)
				}
				for _, w := range []string{"escape.txt", "abs.txt", "escape2.txt", "through.txt", "hard link", "device", "set-user-id"} {
					if !strings.Contains(r.text, w) {
						t.Errorf("skipped list lacks %q:\n%s", w, r.text)
					}
				}
				for _, p := range []string{filepath.Join(host, "escape.txt"), filepath.Join(dl, "escape.txt"), filepath.Join(host, "escape2.txt"),
					filepath.Join(outside, "through.txt"), "/abs.txt", filepath.Join(dl, "loot", "hard"), filepath.Join(dl, "loot", "dev")} {
					if _, err := os.Lstat(p); err == nil {
						t.Errorf("%s was created", p)
					}
				}
				if fi, _ := os.Stat(filepath.Join(dl, "loot", "fine.txt")); fi != nil && fi.Mode()&os.ModeSetuid != 0 {
					t.Error("set-uid bit kept")
				}
			})

			t.Run("git_clone", func(t *testing.T) { gitClone(t, s) })
		})
	}
}

// gitServer is a smart-HTTP git server that asks for a token (Basic
// auth), run inside the sandbox: the tests have no internet.
const gitServer = `import base64, http.server, os, subprocess, sys
root, token, port = sys.argv[1], open(sys.argv[2]).read().strip(), int(sys.argv[3])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self): self.cgi()
    def do_POST(self): self.cgi()
    def cgi(self):
        auth = self.headers.get("Authorization", "")
        try:
            ok = auth.startswith("Basic ") and base64.b64decode(auth[6:]).decode().split(":", 1)[1] == token
        except Exception:
            ok = False
        if not ok:
            self.send_response(401); self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0"); self.end_headers(); return
        path, _, query = self.path.partition("?")
        env = dict(os.environ, GIT_PROJECT_ROOT=root, GIT_HTTP_EXPORT_ALL="1", PATH_INFO=path, QUERY_STRING=query,
                   REQUEST_METHOD=self.command, CONTENT_TYPE=self.headers.get("Content-Type", ""), REMOTE_USER="u",
                   HTTP_CONTENT_ENCODING=self.headers.get("Content-Encoding", ""), GIT_PROTOCOL=self.headers.get("Git-Protocol", ""))
        n = int(self.headers.get("Content-Length") or 0)
        out = subprocess.run(["git", "http-backend"], input=self.rfile.read(n) if n else b"", env=env, capture_output=True).stdout
        sep = b"\r\n\r\n" if b"\r\n\r\n" in out else b"\n\n"
        head, _, body = out.partition(sep)
        status, hdrs = 200, []
        for line in head.decode().splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status": status = int(v.split()[0])
            elif k: hdrs.append((k, v.strip()))
        self.send_response(status)
        for k, v in hdrs: self.send_header(k, v)
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
`

func gitClone(t *testing.T, s *server) {
	const token = "tok-SECRET-4242"
	r := s.call(t, "write_file", map[string]any{"path": "/srv/gitserver.py", "content": gitServer})
	if r.isError {
		t.Fatal(r.text)
	}
	r = s.call(t, "exec", map[string]any{"command": "set -e; mkdir -p /srv/git /tmp/src && cd /tmp/src && git init -q -b main . && " +
		"git -c user.name=t -c user.email=t@t commit -q --allow-empty -m one && echo hi >f && git add f && " +
		"git -c user.name=t -c user.email=t@t commit -q -m two && git clone -q --bare /tmp/src /srv/git/proj.git && git rev-parse HEAD"})
	if r.isError {
		t.Fatalf("make repo: %s %s", r.text, r.str("stderr"))
	}
	head := strings.TrimSpace(r.str("stdout"))
	if r = s.call(t, "write_file", map[string]any{"path": "/srv/token", "content": token}); r.isError {
		t.Fatal(r.text)
	}
	r = s.call(t, "bg", map[string]any{"command": "python3 /srv/gitserver.py /srv/git /srv/token 8765", "name": "gitsrv"})
	if r.isError {
		t.Fatal(r.text)
	}
	defer s.call(t, "kill", map[string]any{"name": "gitsrv"})
	enginetest.WaitFor(t, "the git server to listen", func() error {
		r := s.call(t, "exec", map[string]any{"command": "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8765))'"})
		if r.isError {
			return fmt.Errorf("%s %s", r.text, r.str("stderr"))
		}
		return nil
	})
	url := "http://127.0.0.1:8765/proj.git"

	r = s.call(t, "git_clone", map[string]any{"repo": url, "token": "wrong-" + token})
	if !r.isError || strings.Contains(r.text, token) {
		t.Fatalf("a wrong token: %s", r.text)
	}
	r = s.call(t, "git_clone", map[string]any{"repo": url, "token": token})
	if r.isError || r.str("path") != "/workspace/proj" || r.str("commit") != head || strings.Contains(r.text, token) {
		t.Fatalf("clone: %s %+v", r.text, r.data)
	}
	// Credentials in the URL are taken out of it, used, and never kept.
	r = s.call(t, "git_clone", map[string]any{"repo": "http://u:" + token + "@127.0.0.1:8765/proj.git", "path": "/workspace/second", "shallow": false})
	if r.isError || strings.Contains(r.text, token) {
		t.Fatalf("clone with URL credentials: %s", r.text)
	}
	r = s.call(t, "exec", map[string]any{"command": "cat /workspace/proj/.git/config /workspace/second/.git/config; git -C /workspace/second rev-list --count HEAD; " +
		"ls -a /tmp | grep -c sandbox-mcp-git || true; cat /workspace/proj/f"})
	out := r.str("stdout")
	if strings.Contains(out, token) || !strings.Contains(out, "\n2\n0\nhi") {
		t.Fatalf("after the clones:\n%s", out)
	}
	// Every other form git takes a password in: used where git can use
	// it, refused where it cannot, and shown nowhere.
	for _, c := range []struct{ repo, want string }{
		{"http://alice:" + token + "%zz@127.0.0.1:8765/proj.git", "git clone of http://127.0.0.1:8765/proj.git"}, // no URL parser takes it
		{"http://alice:" + token + "@127.0.0.1:1/proj.git", "git clone of http://127.0.0.1:1/proj.git"},
		{"ssh://alice:" + token + "@127.0.0.1:1/proj.git", "ssh://alice:***@127.0.0.1:1/proj.git holds a password"},
		{"git://alice:" + token + "@127.0.0.1:1/proj.git", "git://alice:***@127.0.0.1:1/proj.git holds a password"},
		{"alice:" + token + "@127.0.0.1:proj.git", "alice:***@127.0.0.1:proj.git holds a credential"},
	} {
		r = s.call(t, "git_clone", map[string]any{"repo": c.repo, "path": "/workspace/third", "timeout": 30})
		if !r.isError || strings.Contains(r.text, token) || !strings.Contains(r.text, c.want) {
			t.Fatalf("git_clone %s: %s", strings.ReplaceAll(c.repo, token, "TOKEN"), strings.ReplaceAll(r.text, token, "TOKEN"))
		}
	}
	s.call(t, "exec", map[string]any{"command": "git ls-remote ssh://alice:" + token + "@127.0.0.1:1/x alice:" + token + "@127.0.0.1:x; true"})
	r = s.call(t, "history", map[string]any{"limit": 20})
	if strings.Contains(r.text, token) || !strings.Contains(r.text, "git_clone") || !strings.Contains(r.text, "ssh://alice:***@") {
		t.Fatalf("history: %s", r.text)
	}
	b, _ := os.ReadFile(filepath.Join(s.stateDir, "state.db"))
	if bytes.Contains(b, []byte(token)) {
		t.Fatal("the token is in the state file")
	}
	if strings.Contains(s.log(), token) {
		t.Fatal("the token is in the server's log")
	}
	r = s.call(t, "git_clone", map[string]any{"repo": url, "token": token})
	if !r.isError || !strings.Contains(r.text, "not empty") {
		t.Fatalf("clone onto a clone: %s", r.text)
	}
}

// TestClientRoots: with no --allow-dir, the client's roots decide, on the
// newest protocol (asked by multi round-trip) and on 2025-06-18 (asked by
// roots/list); a root the client adds later counts once it says so.
func TestClientRoots(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	for _, protocol := range []string{"", "2025-06-18"} {
		t.Run("protocol "+protocol, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			a, b := t.TempDir(), t.TempDir()
			os.WriteFile(filepath.Join(a, "fa"), []byte("a"), 0o644)
			os.WriteFile(filepath.Join(b, "fb"), []byte("b"), 0o644)
			client := mcp.NewClient(&mcp.Implementation{Name: "e2e-roots", Version: "0"}, nil)
			client.AddRoots(&mcp.Root{URI: "file://" + a, Name: "a"})
			s := &server{stateDir: t.TempDir()}
			cmd := exec.Command(binary, "serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix,
				"--state-dir", s.stateDir, "--no-boot-default", "--toolsets", "all")
			cmd.Dir = b // the start directory is no root when the client offers roots
			cmd.Env = append(os.Environ(), tg.Env...)
			cmd.Stderr = &prefixWriter{t: t}
			var opts *mcp.ClientSessionOptions
			if protocol != "" {
				opts = &mcp.ClientSessionOptions{ProtocolVersion: protocol}
			}
			// The connect includes the server's start: a hang guard, not seconds.
			ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
			defer cancel()
			cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			s.cs = cs

			r := s.call(t, "upload", map[string]any{"local_path": filepath.Join(a, "fa"), "sandbox_path": "/tmp/fa"})
			if r.isError {
				t.Fatalf("from the client's root: %s", r.text)
			}
			r = s.call(t, "upload", map[string]any{"local_path": filepath.Join(b, "fb"), "sandbox_path": "/tmp/fb"})
			if !r.isError || !strings.Contains(r.text, a) || !strings.Contains(r.text, "--allow-dir") {
				t.Fatalf("outside the client's roots: %s", r.text)
			}
			client.AddRoots(&mcp.Root{URI: "file://" + b, Name: "b"})
			enginetest.WaitFor(t, "an upload from a root added later", func() error {
				if r := s.call(t, "upload", map[string]any{"local_path": filepath.Join(b, "fb"), "sandbox_path": "/tmp/fb"}); r.isError {
					return errors.New(r.text)
				}
				return nil
			})
		})
	}
}
