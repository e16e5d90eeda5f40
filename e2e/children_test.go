package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestChildren: the user spawns a child through MCP and runs commands in
// it; code in the default sandbox does the same through sandbox-ctl over
// the control socket (spawn, exec with the child's exit status, list,
// run, destroy) within the default policy, which refuses what it must; a
// sandbox without a policy has no socket; a reset of the parent takes its
// children with it.
func TestChildren(t *testing.T) { enginetest.RunFirstAndKubernetes(t, testChildren) }

// testChildren is TestChildren on one target.
func testChildren(t *testing.T, tg enginetest.Target) {
	s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "", "--toolsets", "all")
	sh := func(cmd string) result {
		t.Helper()
		return s.call(t, "exec", map[string]any{"command": cmd, "timeout": 300})
	}

	r := s.call(t, "spawn", map[string]any{"name": "default-c1", "cpus": 1, "memory": "128M"})
	if r.isError || r.str("name") != "default-c1" || r.num("memory_mb") != 128 || net.ParseIP(r.str("ip")) == nil {
		t.Fatalf("spawn (with the child's address): %s %v", r.text, r.data)
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
	// A name the user did not make shows whose child it is.
	if r := s.call(t, "status", map[string]any{"sandbox": "default-k1"}); r.isError || r.str("child_of") != "default" || !strings.Contains(r.text, "a child of default") {
		t.Fatalf("status of a child: %s", r.text)
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

// TestChildrenLifetimes: a grandchild is spawned from inside a child and
// has no socket of its own; destroying a parent while its descendants run
// commands ends the commands and the descendants; a child's TTL stops it
// with no server running, and the next server destroys it; a server
// killed mid-spawn leaves no container without a record.
func TestChildrenLifetimes(t *testing.T) {
	runBeside(t)
	enginetest.RunFirstAndKubernetes(t, testChildrenLifetimes)
}

// testChildrenLifetimes is TestChildrenLifetimes on one target.
func testChildrenLifetimes(t *testing.T, tg enginetest.Target) {
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	stateDir := t.TempDir()
	args := []string{"--toolsets", "all", "--network", "allowlist", "--profile", "default-g:network=open,allow=*.invalid",
		"--child-policy", `default:{"child_can_spawn":true,"child_ttl":"10m"}`,
		"--child-policy", `short:{"child_ttl":"60s"}`}
	ctr := func(name string) string { return sandbox.ContainerName(prefix, name) }
	present := func(name string) (exists, running bool) {
		ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
		defer cancel()
		c, err := rt.Inspect(ctx, ctr(name))
		if errors.Is(err, sandbox.ErrNotFound) {
			return false, false
		}
		if err != nil {
			t.Fatalf("inspect %s: %v", name, err)
		}
		return true, c.Running()
	}
	a := startProc(t, tg, prefix, stateDir, args...)
	sh := func(p *proc, box, cmd string) (string, bool) {
		t.Helper()
		r := (&server{cs: p.cs}).call(t, "exec", map[string]any{"sandbox": box, "command": cmd, "timeout": 300})
		return r.text, !r.isError && r.data["exit_code"] == 0.0
	}

	// A grandchild, from inside the child.
	if text, ok := sh(a, "default", "sandbox-ctl spawn --name default-g --memory 128M"); !ok {
		t.Fatalf("spawn a child: %s", text)
	}
	if text, ok := sh(a, "default", "sandbox-ctl exec default-g -- sandbox-ctl spawn --name default-g-x --memory 64M"); !ok {
		t.Fatalf("spawn a grandchild from inside the child: %s", text)
	}
	if text, ok := sh(a, "default", "sandbox-ctl exec default-g -- sandbox-ctl destroy default"); ok || !strings.Contains(text, "no child") {
		t.Fatalf("a child destroyed its parent: %s", text)
	}
	if text, ok := sh(a, "default-g-x", "sandbox-ctl spawn --memory 64M"); ok || !strings.Contains(text, "sandbox-ctl") {
		t.Fatalf("a grandchild reached a control socket: %s", text)
	}
	if text, ok := sh(a, "default", "sandbox-ctl exec default-g-x -- echo from-the-root"); !ok || !strings.Contains(text, "from-the-root") {
		t.Fatalf("the root ran nothing in its grandchild: %s", text)
	}

	// A child whose own profile asks for more than its parent has (open,
	// and names the parent's policy does not allow) gets no route, and its
	// proxy refuses what its parent's policy refuses.
	if text, _ := sh(a, "default-g", "curl -s --max-time 60 http://x.invalid/"); !strings.Contains(text, "is not on the allowlist of its parent") {
		t.Errorf("a child that asked for more than its parent: %s", text)
	}
	if r := (&server{cs: a.cs}).call(t, "status", map[string]any{"sandbox": "default-g"}); !strings.Contains(r.text, "egress allowlist") {
		t.Errorf("a child whose profile says open runs with: %s", r.text)
	}

	// A child spawned asking for only some hosts is held to them, on top
	// of its own and its parent's policies; a spawn asking for more than
	// its parent has, or for something malformed, is refused.
	if text, ok := sh(a, "default", "sandbox-ctl spawn --name default-r --memory 64M --allow pypi.org"); !ok {
		t.Fatalf("spawn with --allow: %s", text)
	}
	if text, _ := sh(a, "default-r", "curl -s --max-time 60 http://github.com:443/"); !strings.Contains(text, "is not on the allowlist of its spawn request") || !strings.Contains(text, "--allow github.com:443") {
		t.Errorf("a child spawned with --allow pypi.org reached github.com: %s", text)
	}
	if r := (&server{cs: a.cs}).call(t, "network_info", map[string]any{"sandbox": "default-r"}); !strings.Contains(r.text, "its spawn request: allowlist") {
		t.Errorf("network_info of a child spawned with --allow: %s", r.text)
	}
	// The same through the spawn tool.
	srv := &server{cs: a.cs}
	if r := srv.call(t, "spawn", map[string]any{"name": "default-rt", "cpus": 0.5, "memory": "64M", "allow": []string{"pypi.org"}}); r.isError {
		t.Fatalf("the spawn tool with allow: %s", r.text)
	}
	if r := srv.call(t, "network_info", map[string]any{"sandbox": "default-rt"}); !strings.Contains(r.text, "its spawn request: allowlist") || !strings.Contains(r.text, "pypi.org") {
		t.Errorf("network_info of a child the spawn tool made with allow: %s", r.text)
	}
	if r := srv.call(t, "spawn", map[string]any{"cpus": 0.5, "memory": "64M", "network": "none", "allow": []string{"pypi.org"}}); !r.isError || !strings.Contains(r.text, "reaches nothing") {
		t.Errorf("the spawn tool with network none and allow: %s", r.text)
	}
	if r := srv.call(t, "destroy_child", map[string]any{"name": "default-rt"}); r.isError {
		t.Fatalf("destroy_child: %s", r.text)
	}
	for bad, why := range map[string]string{"--network open": "at most its parent's", "--allow 'bad host'": "allow:", "--network none --allow pypi.org": "reaches nothing"} {
		if text, ok := sh(a, "default", "sandbox-ctl spawn --memory 64M "+bad); ok || !strings.Contains(text, why) {
			t.Errorf("spawn %s: %s", bad, text)
		}
	}

	// Allowlist sandboxes (the default) reach each other by name through
	// the egress proxy, which lets a family (peers "family") and its root
	// reach each other, and keeps other sandboxes out: a peer's closed
	// port answers 502 (the host got through to it), a refusal 403.
	const reach = `curl -s -o /dev/null -w '%{http_code}' --max-time 60 http://`
	if text, ok := sh(a, "outsider", "true"); !ok {
		t.Fatal(text)
	}
	for _, c := range []struct {
		from, to string
		reach    bool
	}{
		{"default-g", "default", true}, {"default-g", "default-g-x", true}, {"default", "default-g", true},
		{"default-g", "outsider", false}, {"outsider", "default-g", false}, {"outsider", "default", true},
	} {
		text, _ := sh(a, c.from, reach+c.to+":9/")
		if got := strings.Contains(text, "502"); got != c.reach || !strings.Contains(text, map[bool]string{true: "502", false: "403"}[c.reach]) {
			t.Errorf("%s reaches %s: %v, want %v: %s", c.from, c.to, got, c.reach, text)
		}
	}

	// The root destroyed while its descendants run commands.
	inChild := callAsync(a.cs, "exec", map[string]any{"sandbox": "default-g", "command": "sleep 600", "timeout": 900})
	viaCtl := callAsync(a.cs, "exec", map[string]any{"sandbox": "default", "command": "sandbox-ctl exec default-g-x -- sleep 600", "timeout": 900})
	waitProcess(t, rt, ctr("default-g"), "sleep 600")
	waitProcess(t, rt, ctr("default-g-x"), "sleep 600")
	if text, isErr := callText(t, a.cs, "destroy", map[string]any{"sandbox": "default"}); isErr {
		t.Fatalf("destroy the root: %s", text)
	}
	for what, ch := range map[string]<-chan string{"the child's command": inChild, "the grandchild's command": viaCtl} {
		select {
		case text := <-ch:
			if !strings.HasPrefix(text, "isError") && !strings.Contains(text, "destroyed") && !strings.Contains(text, "lost") {
				t.Errorf("%s ended well after its sandbox was destroyed: %s", what, text)
			}
		case <-time.After(enginetest.HangGuard):
			t.Fatalf("%s outlived the destroy of its root\nengine processes now:\n%s", what, enginetest.EngineProcesses())
		}
	}
	for _, n := range []string{"default-g", "default-g-x"} {
		if ok, _ := present(n); ok {
			t.Errorf("%s outlived the destroy of its root", n)
		}
	}

	// A child's TTL ends with no server running.
	if text, isErr := callText(t, a.cs, "spawn", map[string]any{"parent": "short", "name": "short-t", "memory": "64M"}); isErr {
		t.Fatalf("spawn: %s", text)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	a.waitExit(t)
	// The child's 60 s TTL runs from its spawn, before this wait begins
	// (long enough for a boot on a loaded machine to end within it).
	enginetest.WaitFor(t, "the child to stop at its TTL with no server running", func() error {
		ok, running := present("short-t")
		if !ok {
			t.Fatal("the expired child's container went without a server")
		}
		if running {
			return errors.New("short-t still runs")
		}
		return nil
	})
	b := startProc(t, tg, prefix, stateDir, args...)
	enginetest.WaitFor(t, "the next server to destroy the expired child", func() error {
		if ok, _ := present("short-t"); ok {
			return errors.New("short-t's container is still there")
		}
		return nil
	})

	// A server killed while it boots a child.
	spawned := callAsync(b.cs, "spawn", map[string]any{"name": "default-m", "memory": "64M"})
	// Polled without WaitFor's growing pauses: the kill must come while the
	// spawn still boots the container it made.
	for deadline := time.Now().Add(enginetest.HangGuard); ; time.Sleep(20 * time.Millisecond) {
		if ok, _ := present("default-m"); ok {
			break
		}
		select {
		case text := <-spawned:
			t.Fatalf("the spawn ended before its container was seen: %s", text)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child's container never appeared\nengine processes now:\n%s", enginetest.EngineProcesses())
		}
	}
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	b.waitExit(t)
	c := startProc(t, tg, prefix, stateDir, args...)
	// Whatever the kill interrupted, the next server ends with a child
	// that has both its record and its container, or with neither.
	enginetest.WaitFor(t, "a child with both its record and its container, or neither, after a kill mid-spawn", func() error {
		text, _ := callText(t, c.cs, "children", map[string]any{"parent": "default"})
		listed := strings.Contains(text, "default-m")
		ok, running := present("default-m")
		if listed == ok && (!ok || running) {
			return nil
		}
		return fmt.Errorf("listed %v, container %v (running %v): %s", listed, ok, running, text)
	})
}

// TestChildrenOnApple: on Apple's container (its stand-in here) the
// control socket rides the agent channel too: code in the default sandbox
// spawns a child, runs a command in it, runs one in a fresh child, and
// destroys the first; network_info says a family is not kept apart there.
func TestChildrenOnApple(t *testing.T) {
	tg := appleTarget(t)
	s := startServer(t, tg, enginetest.Prefix(t, tg.New()), "", "--toolsets", "all")
	sh := func(cmd string) result {
		t.Helper()
		return s.call(t, "exec", map[string]any{"command": cmd, "timeout": 300})
	}
	if r := sh("sandbox-ctl spawn --name default-a --memory 128M"); r.num("exit_code") != 0 {
		t.Fatalf("spawn: %s", r.text)
	}
	if r := sh("sandbox-ctl exec default-a -- 'uname -s; exit 4'"); r.num("exit_code") != 4 || r.str("stdout") != "Linux\n" {
		t.Fatalf("exec in the child: %s", r.text)
	}
	if r := sh("sandbox-ctl run -- echo once"); r.num("exit_code") != 0 || r.str("stdout") != "once\n" {
		t.Fatalf("run: %s", r.text)
	}
	if r := s.call(t, "network_info", map[string]any{}); r.isError || !strings.Contains(r.text, "family") {
		t.Fatalf("network_info: %s", r.text)
	}
	if r := sh("sandbox-ctl destroy default-a && sandbox-ctl list"); r.num("exit_code") != 0 || !strings.Contains(r.str("stdout"), "no children") {
		t.Fatalf("destroy: %s", r.text)
	}
}
