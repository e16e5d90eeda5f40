package main

import (
	"archive/zip"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
)

// TestGoInstall: `go install github.com/sandbox-mcp/sandbox-mcp/cmd/sandbox-mcp@VERSION`
// works from a module proxy and gives a binary that reports VERSION. The
// proxy is a local directory (GOPROXY=file://…) holding this checkout as
// that version; the dependencies come from the local module cache, so the
// test needs no network.
func TestGoInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: go install compiles the whole module")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	// A version of this run's own: the module lands in the user's module
	// cache, where a fixed version would be the copy of an older checkout.
	// In the user's cache, the dependencies are the files every other
	// build here compiled, so go install finds them compiled (with a
	// cache of its own it compiled all of them again: 9 minutes on a
	// loaded 2-core machine).
	const module = "github.com/sandbox-mcp/sandbox-mcp"
	ver := fmt.Sprintf("v0.9.9-install.%d", time.Now().UnixNano())
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	dir := filepath.Join(proxy, module, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"list":        []byte(ver + "\n"),
		ver + ".info": []byte(`{"Version":"` + ver + `","Time":"2026-11-23T00:00:00Z"}`),
		ver + ".mod":  gomod,
		ver + ".zip":  moduleZip(t, root, module+"@"+ver),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	modCache := strings.TrimSpace(run(t, goBin, nil, "env", "GOMODCACHE"))
	goCache := strings.TrimSpace(run(t, goBin, nil, "env", "GOCACHE"))
	bin := t.TempDir()
	env := []string{
		"GOBIN=" + bin, "GOMODCACHE=" + modCache, "GOCACHE=" + goCache,
		"GOPROXY=file://" + proxy + ",file://" + filepath.Join(modCache, "cache", "download"),
		"GOSUMDB=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local",
	}
	// This run's version leaves the module cache with the test (its files
	// are read-only there).
	src := filepath.Join(modCache, "github.com", "sandbox-mcp", "sandbox-mcp@"+ver)
	t.Cleanup(func() {
		_ = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
		_ = os.RemoveAll(src)
		dl, _ := filepath.Glob(filepath.Join(modCache, "cache", "download", module, "@v", ver+".*"))
		for _, f := range dl {
			_ = os.Remove(f)
		}
	})
	start := time.Now()
	run(t, goBin, env, "install", module+"/cmd/sandbox-mcp@"+ver)
	t.Logf("go install took %s", time.Since(start).Round(time.Millisecond))
	out := run(t, filepath.Join(bin, "sandbox-mcp"), nil, "--version")
	if !strings.Contains(out, ver) {
		t.Fatalf("--version of the installed binary: %q, want %s", out, ver)
	}

	// With no second step, it builds the agent for the host's
	// architecture from its module source into the user's cache (doctor
	// does it at once; a server on first use), and says so.
	cache := t.TempDir()
	built := func(arch string) string {
		return filepath.Join(cache, "sandbox-mcp", "agents", ver, "sandbox-ctl-linux-"+arch)
	}
	env = append(env, "XDG_CACHE_HOME="+cache, "SANDBOX_MCP_CTL_DIR=")
	if runtime.GOOS == "darwin" { // os.UserCacheDir is $HOME/Library/Caches
		home := t.TempDir()
		env = append(env, "HOME="+home)
		built = func(arch string) string {
			return filepath.Join(home, "Library", "Caches", "sandbox-mcp", "agents", ver, "sandbox-ctl-linux-"+arch)
		}
	}
	arch, other := runtime.GOARCH, "arm64"
	if arch == "arm64" {
		other = "amd64"
	}
	// An engine that does not answer: doctor tells the agents first.
	podman := filepath.Join(t.TempDir(), "podman")
	if err := os.WriteFile(podman, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	out = runFails(t, filepath.Join(bin, "sandbox-mcp"), env, "doctor", "--runtime", "podman", "--engine-path", podman)
	t.Logf("doctor (building the agent) took %s", time.Since(start).Round(time.Millisecond))
	for _, want := range []string{
		"agent:    linux/" + arch + ": ok, built from the module source into " + built(arch) + "\n",
		"agent:    linux/" + other + ": ok, built on first use from the module source in " + src + " with ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor of the installed binary lacks %q:\n%s", want, out)
		}
	}
	f, err := elf.Open(built(arch))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; f.Machine != want {
		t.Fatalf("the built agent is for %s, want %s", f.Machine, want)
	}

	// And it serves: a port forward through that agent, on a real engine.
	if !slices.Contains(strings.Split(os.Getenv(enginetest.EnvRuntimes), ","), "podman") {
		t.Logf("no forward through the installed binary's agent: %s does not list podman", enginetest.EnvRuntimes)
		return
	}
	exposeThroughAgent(t, filepath.Join(bin, "sandbox-mcp"), env)
}

// exposeThroughAgent serves MCP with the binary on podman and forwards a
// host port to a web server in a sandbox: the forward must go through the
// sandbox's agent, and carry a page.
func exposeThroughAgent(t *testing.T, bin string, env []string) {
	rt := docker.New(docker.Options{Flavor: docker.Podman})
	prefix := enginetest.Prefix(t, rt)
	cmd := exec.Command(bin, "serve", "--runtime", "podman", "--image", "mcp-dev", "--prefix", prefix,
		"--state-dir", t.TempDir(), "--no-boot-default", "--toolsets", "all")
	cmd.Env = append(os.Environ(), env...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*enginetest.HangGuard)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "install-test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to the installed binary: %v", err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var text string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		if res.IsError {
			t.Fatalf("%s: %s", name, text)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	call("bg", map[string]any{"command": "mkdir -p /tmp/www && echo from-the-installed-agent >/tmp/www/index.html && cd /tmp/www && exec python3 -m http.server 18917 --bind 127.0.0.1"})
	// A port no other test forwards: packages run side by side.
	r := call("expose", map[string]any{"port": 18917})
	url, _ := r["url"].(string)
	if via, _ := r["via"].(string); via != "agent" || url == "" {
		t.Fatalf("expose through the installed binary: %v, want a forward via its agent", r)
	}
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	enginetest.WaitFor(t, "the page through the forward", func() error {
		resp, err := hc.Get(url + "/index.html")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), "from-the-installed-agent") {
			return fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
		}
		return nil
	})
	t.Logf("a page came through %s, forwarded by the agent the installed binary built", url)
}

// runFails is run for a command that is to fail: it returns its output.
func runFails(t *testing.T, name string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("%s %s succeeded:\n%s", filepath.Base(name), strings.Join(args, " "), out)
	}
	return string(out)
}

// run runs a command in a temporary directory and returns its output.
func run(t *testing.T, name string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// moduleZip packs the module's files (as `git ls-files` lists them, or
// every regular file outside .git) in the module zip layout.
func moduleZip(t *testing.T, root, prefix string) []byte {
	t.Helper()
	var names []string
	if out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard").Output(); err == nil {
		names = strings.Fields(string(out))
	} else {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == ".git" {
				return filepath.SkipDir
			}
			if d.Type().IsRegular() {
				rel, _ := filepath.Rel(root, p)
				names = append(names, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree
			}
			t.Fatal(err)
		}
		w, err := zw.Create(prefix + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
