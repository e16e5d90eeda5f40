package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/app"
	"github.com/sandbox-mcp/sandbox-mcp/internal/version"
)

// TestServeHelp: serve --help names every setting's flag and variable.
func TestServeHelp(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"serve", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, s := range app.Settings() {
		if !strings.Contains(out.String(), "--"+s.Flag) || !strings.Contains(out.String(), s.Env) {
			t.Errorf("serve --help lacks --%s or %s:\n%s", s.Flag, s.Env, out.String())
		}
	}
}

// TestResolveFlags: only the flags given reach the configuration, and
// they win over the environment.
func TestResolveFlags(t *testing.T) {
	for _, s := range app.Settings() {
		t.Setenv(s.Env, "")
	}
	t.Setenv("SANDBOX_MCP_PREFIX", "fromenv")
	t.Setenv("SANDBOX_MCP_POOL_SIZE", "2")
	serve, _, err := newRoot().Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.ParseFlags([]string{"--pool-size", "3", "--no-boot-default", "--profile", "big:cpus=4",
		"--child-policy", `default:{"child_can_spawn":true}`, "--child-policy", `short:{"child_ttl":"15s"}`}); err != nil {
		t.Fatal(err)
	}
	cfg, err := resolve(serve)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PoolSize != 3 || cfg.BootDefault || cfg.Prefix != "fromenv" || cfg.Runtime != "auto" || cfg.Profiles["big"].CPUs != 4 || cfg.Version != version.String() {
		t.Errorf("got %+v", cfg)
	}
	// A repeated flag whose values hold ':' keeps each value whole.
	if len(cfg.ChildPolicies) != 2 || !cfg.ChildPolicies["default"].ChildCanSpawn || time.Duration(cfg.ChildPolicies["short"].ChildTTL) != 15*time.Second {
		t.Errorf("child policies from two flags: %+v", cfg.ChildPolicies)
	}
}

// TestBadSettingIsUsage: a setting with a bad value, from a flag or from
// the environment, exits 2 (bad command line) and says what is wrong.
func TestBadSettingIsUsage(t *testing.T) {
	for _, s := range app.Settings() {
		t.Setenv(s.Env, "")
	}
	t.Setenv("SANDBOX_MCP_STATE_DIR", t.TempDir())
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"doctor", "--toolsets", "al"}, want: `unknown toolset "al"`},
		{args: []string{"ls", "--runtime", "lxc"}, want: "lxc"},
		{args: []string{"doctor"}, env: "SANDBOX_MCP_TOOLSETS=core,nope", want: `unknown toolset "nope"`},
	} {
		if k, v, ok := strings.Cut(c.env, "="); ok {
			t.Setenv(k, v)
		}
		root := newRoot()
		root.SetArgs(c.args)
		var stderr bytes.Buffer
		code := exitCode(root.Execute(), &stderr)
		if code != app.ExitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q %s: exit %d, %q; want exit %d saying %q", c.args, c.env, code, stderr.String(), app.ExitUsage, c.want)
		}
	}
}

// TestClusterManifestArgs: the server's arguments in
// deploy/kubernetes/server.yaml are flags it has, with values it takes.
func TestClusterManifestArgs(t *testing.T) {
	for _, s := range app.Settings() {
		t.Setenv(s.Env, "")
	}
	data, err := os.ReadFile("../../deploy/kubernetes/server.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		trim := strings.TrimSpace(line)
		switch {
		case trim == "args:":
			in = true
		case in && strings.HasPrefix(trim, "- "):
			args = append(args, strings.TrimPrefix(trim, "- "))
		case in && strings.HasPrefix(trim, "#"):
		case in:
			in = false
		}
	}
	if len(args) < 2 || args[0] != "serve" {
		t.Fatalf("the manifest's args: %q", args)
	}
	serve, _, err := newRoot().Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.ParseFlags(args[1:]); err != nil {
		t.Fatalf("the manifest's args: %v", err)
	}
	cfg, err := resolve(serve)
	if err != nil {
		t.Fatalf("the manifest's args: %v", err)
	}
	if cfg.Runtime != "kubernetes" || cfg.HTTP != "0.0.0.0:8443" || cfg.TLSCert == "" || cfg.HTTPTokenFile == "" {
		t.Errorf("the manifest's server: %+v", cfg)
	}
}
