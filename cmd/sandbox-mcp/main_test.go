package main

import (
	"bytes"
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
