package e2e

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// TestChildren: the user spawns a child through MCP and runs commands in
// it; code in the default sandbox does the same through sandbox-ctl over
// the control socket (spawn, exec with the child's exit status, list,
// run, destroy) within the default policy, which refuses what it must; a
// sandbox without a policy has no socket; a reset of the parent takes its
// children with it.
func TestChildren(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "", "--toolsets", "all")
	sh := func(cmd string) result {
		t.Helper()
		return s.call(t, "exec", map[string]any{"command": cmd, "timeout": 300})
	}

	r := s.call(t, "spawn", map[string]any{"name": "default-c1", "cpus": 1, "memory": "128M"})
	if r.isError || r.str("name") != "default-c1" || r.num("memory_mb") != 128 {
		t.Fatalf("spawn: %s", r.text)
	}
	if r := s.call(t, "exec", map[string]any{"sandbox": "default-c1", "command": "echo in-child"}); r.str("stdout") != "in-child\n" {
		t.Fatalf("exec in the child: %s", r.text)
	}

	// From inside the parent.
	if r := sh("sandbox-ctl ping"); r.num("exit_code") != 0 || !strings.Contains(r.str("stdout"), "sandbox default") {
		t.Fatalf("ping: %s", r.text)
	}
	if r := sh("sandbox-ctl spawn --name default-k1 --cpus 0.5 --memory 128M"); r.num("exit_code") != 0 || !strings.Contains(r.str("stdout"), "default-k1") {
		t.Fatalf("spawn from inside: %s", r.text)
	}
	if r := sh("sandbox-ctl exec default-k1 -- 'echo hi; echo err >&2; exit 7'"); r.num("exit_code") != 7 || r.str("stdout") != "hi\n" || r.str("stderr") != "err\n" {
		t.Fatalf("exec from inside: %s", r.text)
	}
	if r := sh("sandbox-ctl list"); !strings.Contains(r.str("stdout"), "default-k1") || !strings.Contains(r.str("stdout"), "default-c1") {
		t.Fatalf("list: %s", r.text)
	}
	// The ordinary tools refuse what the child's policy does not allow.
	for tool, want := range map[string]string{"destroy": "destroy_child", "reset": "does not allow reset", "snapshot": "does not allow snapshot",
		"expose": "does not allow expose"} {
		args := map[string]any{"sandbox": "default-k1"}
		switch tool {
		case "snapshot":
			args["snapshot_name"] = "s1"
		case "expose":
			args["port"] = 8000
		}
		if r := s.call(t, tool, args); !r.isError || !strings.Contains(r.text, want) {
			t.Errorf("%s of a child: %s", tool, r.text)
		}
	}
	if r := sh("sandbox-ctl --json run -- uname -s"); r.num("exit_code") != 0 || !strings.Contains(r.str("stdout"), `"stdout":"Linux\n"`) {
		t.Fatalf("run: %s", r.text)
	}
	for cmd, want := range map[string]string{
		"sandbox-ctl spawn --image alpine": "not allowed for children of \"default\" (allowed: [mcp-dev]). Try: ask the user",
		"sandbox-ctl spawn --cpus -1":      "cpus",
		"sandbox-ctl spawn --memory 10M":   "minimum",
		"sandbox-ctl spawn --name web":     "must start with \"default-\"",
		"sandbox-ctl exec nosuch -- true":  "Try: sandbox-ctl list",
	} {
		if r := sh(cmd); r.num("exit_code") == 0 || !strings.Contains(r.str("stderr"), want) {
			t.Errorf("%s: %s", cmd, r.text)
		}
	}
	// default-c1 and default-k1 live: one more fits, the next is over max_concurrent.
	if r := sh("sandbox-ctl spawn --name default-k2 --cpus 0.5 --memory 64M"); r.num("exit_code") != 0 {
		t.Fatalf("a third child: %s", r.text)
	}
	if r := sh("sandbox-ctl spawn --cpus 0.5 --memory 64M"); r.num("exit_code") != 1 || !strings.Contains(r.str("stderr"), "live children") ||
		!strings.Contains(r.str("stderr"), "Try: sandbox-ctl list, then sandbox-ctl destroy NAME") {
		t.Fatalf("a fourth child: %s", r.text)
	}
	if r := sh("sandbox-ctl destroy default-k2"); r.num("exit_code") != 0 {
		t.Fatalf("destroy: %s", r.text)
	}
	if r := s.call(t, "children", map[string]any{}); r.isError || !strings.Contains(r.text, "default-c1") || !strings.Contains(r.text, "default-k1") || strings.Contains(r.text, "default-k2") {
		t.Fatalf("children: %s", r.text)
	}

	// A sandbox without a policy has no socket (nor sandbox-ctl, unless
	// its agent runs for a port forward).
	if r := s.call(t, "exec", map[string]any{"sandbox": "other", "command": "sandbox-ctl ping", "timeout": 60}); r.num("exit_code") == 0 ||
		!strings.Contains(r.str("stderr"), "sandbox-ctl") {
		t.Fatalf("ping from a sandbox without a policy: %s", r.text)
	}

	if r := s.call(t, "destroy_child", map[string]any{"name": "default-c1"}); r.isError {
		t.Fatalf("destroy_child: %s", r.text)
	}
	if r := s.call(t, "reset", map[string]any{}); r.isError {
		t.Fatalf("reset: %s", r.text)
	}
	if r := s.call(t, "children", map[string]any{}); !strings.Contains(r.text, "no children") {
		t.Fatalf("children after the parent's reset: %s", r.text)
	}
	if r := s.call(t, "status", map[string]any{"sandbox": "default-k1"}); !r.isError {
		t.Fatalf("k1 outlived its parent's reset: %s", r.text)
	}
}
