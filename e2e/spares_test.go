package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestWarmSpares: a server with --spares keeps a booted spare; the first
// call on a new name takes it (the container is renamed, not booted) and
// a new spare boots; the sandbox keeps the spare's workspace through a
// reset, and its destroy removes it; a spare that died is passed over and
// replaced; two servers taking spares at once never take the same one.
func TestWarmSpares(t *testing.T) {
	runBeside(t)
	enginetest.RunFirstAndKubernetes(t, testWarmSpares)
}

// testWarmSpares is TestWarmSpares on one target.
func testWarmSpares(t *testing.T, tg enginetest.Target) {
	if tg.Runtime == "container" {
		t.Skip("Apple's container CLI cannot rename a container, which a spare's claim is (the server says spares are off there)")
	}
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	stateDir := t.TempDir()
	ctr := func(name string) string { return sandbox.ContainerName(prefix, name) }
	spares := func() []sandbox.Container {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
		defer cancel()
		cs, err := rt.List(ctx, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelRole: sandbox.RoleSpare})
		if err != nil {
			t.Fatal(err)
		}
		var out []sandbox.Container
		for _, c := range cs {
			if strings.HasPrefix(c.Name, prefix+"_spare_") {
				out = append(out, c)
			}
		}
		return out
	}
	// waitSpare waits for a running spare other than those in not.
	waitSpare := func(not ...string) sandbox.Container {
		t.Helper()
		deadline := time.Now().Add(enginetest.HangGuard)
		for time.Now().Before(deadline) {
			for _, c := range spares() {
				if c.Running() && !slices.Contains(not, c.ID) {
					return c
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("no new running spare within %s", enginetest.HangGuard)
		return sandbox.Container{}
	}
	volumes := func() []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
		defer cancel()
		names, err := rt.(sandbox.VolumeLister).VolumeNames(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	a := startProc(t, tg, prefix, stateDir, "--spares", "1")
	s := &server{cs: a.cs}

	first := waitSpare()
	r := s.call(t, "exec", map[string]any{"sandbox": "fresh", "command": "echo kept > /workspace/f && echo ok"})
	if r.isError || !strings.Contains(r.text, "ok") || r.data["booted"] != "created from a warm spare" {
		t.Fatalf("first call on a new name: %s %v", r.text, r.data["booted"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	defer cancel()
	c, err := rt.Inspect(ctx, ctr("fresh"))
	if err != nil || c.ID != first.ID {
		t.Fatalf("the sandbox's container is %s (%v), not the spare %s", c.ID, err, first.ID)
	}
	if _, err := rt.Inspect(ctx, first.Name); err == nil {
		t.Fatalf("the spare %s is still there under its own name", first.Name)
	}
	second := waitSpare(first.ID)
	if r := s.call(t, "list_all", map[string]any{}); !strings.Contains(r.text, "fresh") || !strings.Contains(r.text, "warm spares: 1 running") {
		t.Errorf("list_all with a spare: %s", r.text)
	}

	// The workspace is the spare's volume, and stays through a reset.
	spareVol := first.Labels[sandbox.LabelVolume]
	if spareVol == "" || !slices.Contains(volumes(), spareVol) {
		t.Fatalf("the spare's workspace %q is not among the volumes", spareVol)
	}
	if r := s.call(t, "reset", map[string]any{"sandbox": "fresh"}); r.isError {
		t.Fatalf("reset: %s", r.text)
	}
	if r := s.call(t, "exec", map[string]any{"sandbox": "fresh", "command": "cat /workspace/f"}); r.isError || !strings.Contains(r.text, "kept") {
		t.Fatalf("the workspace after a reset: %s", r.text)
	}
	// Its container removed behind the server's back, the sandbox comes
	// back on its workspace, not on another spare.
	if err := rt.Remove(ctx, ctr("fresh")); err != nil {
		t.Fatal(err)
	}
	if r := s.call(t, "exec", map[string]any{"sandbox": "fresh", "command": "cat /workspace/f"}); r.isError || !strings.Contains(r.text, "kept") || r.data["booted"] == "created from a warm spare" {
		t.Fatalf("the workspace after the container was removed: %s %v", r.text, r.data["booted"])
	}
	if r := s.call(t, "destroy", map[string]any{"sandbox": "fresh"}); r.isError {
		t.Fatalf("destroy: %s", r.text)
	}
	if slices.Contains(volumes(), spareVol) {
		t.Errorf("destroy left the workspace %s", spareVol)
	}

	// A spare found stopped (by its idle TTL, or it died) is started when
	// it is the one taken; one that is gone is passed over, and the name
	// boots as usual; either way a new spare follows.
	kctx, kcancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	defer kcancel()
	if err := rt.Stop(kctx, second.Name, 0); err != nil {
		t.Fatal(err)
	}
	if r := s.call(t, "exec", map[string]any{"sandbox": "revived", "command": "echo ok"}); r.isError || r.data["booted"] != "created from a warm spare" {
		t.Fatalf("a new name with the only spare stopped: %s %v", r.text, r.data["booted"])
	}
	if c, err := rt.Inspect(kctx, ctr("revived")); err != nil || c.ID != second.ID || !c.Running() {
		t.Fatalf("the stopped spare taken: %+v %v", c, err)
	}
	gone := waitSpare(first.ID, second.ID)
	if err := rt.Remove(kctx, gone.Name); err != nil {
		t.Fatal(err)
	}
	if r := s.call(t, "exec", map[string]any{"sandbox": "cold", "command": "echo mine > /workspace/g"}); r.isError || r.data["booted"] != "created" {
		t.Fatalf("a new name with the only spare removed: %s %v", r.text, r.data["booted"])
	}
	third := waitSpare(first.ID, second.ID, gone.ID)
	// A sandbox that never was a spare, its container removed by hand:
	// its workspace is there, so it is no new name, and takes no spare.
	if err := rt.Remove(ctx, ctr("cold")); err != nil {
		t.Fatal(err)
	}
	if r := s.call(t, "exec", map[string]any{"sandbox": "cold", "command": "cat /workspace/g"}); r.isError || !strings.Contains(r.text, "mine") || r.data["booted"] == "created from a warm spare" {
		t.Fatalf("a removed sandbox's next call: %s %v", r.text, r.data["booted"])
	}

	// A name without a record but with a workspace volume (a sandbox
	// whose container and record went) boots on that workspace: the spare
	// renamed for it while that was looked up is put back.
	if err := rt.VolumeCreate(ctx, sandbox.ContainerName(prefix+"-ws", "hasvol"), map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: "hasvol"}); err != nil {
		t.Fatal(err)
	}
	if r := s.call(t, "exec", map[string]any{"sandbox": "hasvol", "command": "echo ok"}); r.isError || r.data["booted"] != "created" {
		t.Fatalf("a name with a workspace took a spare: %s %v", r.text, r.data["booted"])
	}
	if c, err := rt.Inspect(ctx, third.Name); err != nil || c.ID != third.ID {
		t.Fatalf("the spare was not put back under its name: %+v %v", c, err)
	}

	// Two servers on one state directory take spares at once: each name
	// gets a container of its own, and no container answers to two.
	b := startProc(t, tg, prefix, stateDir, "--spares", "1")
	var wg sync.WaitGroup
	res := map[string]string{}
	var mu sync.Mutex
	for name, p := range map[string]*proc{"race-a": a, "race-b": b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := (&server{cs: p.cs}).call(t, "exec", map[string]any{"sandbox": name, "command": "hostname"})
			mu.Lock()
			defer mu.Unlock()
			if r.isError {
				t.Errorf("%s: %s", name, r.text)
			}
			res[name], _ = r.data["booted"].(string)
		}()
	}
	wg.Wait()
	ca, erra := rt.Inspect(ctx, ctr("race-a"))
	cb, errb := rt.Inspect(ctx, ctr("race-b"))
	if erra != nil || errb != nil || ca.ID == cb.ID || !ca.Running() || !cb.Running() {
		t.Fatalf("two names, one container: %v %v %s %s", erra, errb, ca.ID, cb.ID)
	}
	if n := strings.Count(res["race-a"]+res["race-b"], "spare"); n == 0 || (ca.ID != third.ID && cb.ID != third.ID) {
		t.Errorf("neither took the spare %s: %v", third.ID, res)
	}

	// A server killed right after its claim (the rename) and before it
	// recorded the workspace: the next call adopts the container as the
	// sandbox, and its destroy removes the spare's workspace.
	last := waitSpare(first.ID, second.ID, gone.ID, third.ID, ca.ID, cb.ID)
	if err := rt.(sandbox.Renamer).Rename(ctx, last.ID, ctr("crashed")); err != nil {
		t.Fatal(err)
	}
	if r := s.call(t, "exec", map[string]any{"sandbox": "crashed", "command": "echo ok"}); r.isError || r.data["booted"] != "adopted" {
		t.Fatalf("a claimed spare whose server died: %s %v", r.text, r.data["booted"])
	}
	if r := s.call(t, "destroy", map[string]any{"sandbox": "crashed"}); r.isError {
		t.Fatalf("destroy: %s", r.text)
	}
	if vol := last.Labels[sandbox.LabelVolume]; vol == "" || slices.Contains(volumes(), vol) {
		t.Errorf("destroy left the claimed spare's workspace %q", vol)
	}
}

// TestProfileSpare: a server started with --spares 0 and a profile
// that asks for a spare keeps one for that profile's name alone, says so
// in list_all, and the name's first call takes it, booted as the profile
// says; another new name boots as usual.
func TestProfileSpare(t *testing.T) { enginetest.RunFirstAndKubernetes(t, testProfileSpare) }

// testProfileSpare is TestProfileSpare on one target.
func testProfileSpare(t *testing.T, tg enginetest.Target) {
	if tg.Runtime == "container" {
		t.Skip("Apple's container CLI cannot rename a container, which a spare's claim is (the server says spares are off there)")
	}
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	p := startProc(t, tg, prefix, t.TempDir(), "--spares", "0", "--profile", "big:memory=640M,spares=1")
	s := &server{cs: p.cs}
	enginetest.WaitFor(t, "list_all to name big's spare", func() error {
		if r := s.call(t, "list_all", map[string]any{}); !strings.Contains(r.text, "warm spares: one for the first call of each of big") {
			return fmt.Errorf("list_all: %s", r.text)
		}
		return nil
	})
	if r := s.call(t, "exec", map[string]any{"sandbox": "small", "command": "true"}); r.isError || r.data["booted"] == "created from a warm spare" {
		t.Fatalf("a name without big's profile: %s %v", r.text, r.data["booted"])
	}
	r := s.call(t, "exec", map[string]any{"sandbox": "big", "command": "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"})
	if r.isError || r.data["booted"] != "created from a warm spare" || !strings.Contains(r.text, "671088640") {
		t.Fatalf("big's first call: %s %v", r.text, r.data["booted"])
	}
	for _, name := range []string{"small", "big"} {
		if r := s.call(t, "destroy", map[string]any{"sandbox": name}); r.isError {
			t.Fatalf("destroy %s: %s", name, r.text)
		}
	}
}

// TestWarmSpareAllowlist: a spare of an allowlist profile (the default)
// comes with the agent copied in while it waited; once taken, its proxy
// answers as any allowlist sandbox's does.
func TestWarmSpareAllowlist(t *testing.T) {
	enginetest.RunFirstAndKubernetes(t, testWarmSpareAllowlist)
}

// testWarmSpareAllowlist is TestWarmSpareAllowlist on one target.
func testWarmSpareAllowlist(t *testing.T, tg enginetest.Target) {
	if tg.Runtime == "container" {
		t.Skip("Apple's container CLI cannot rename a container, which a spare's claim is")
	}
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	a := startProc(t, tg, prefix, t.TempDir(), "--spares", "1", "--network", "allowlist")
	s := &server{cs: a.cs}
	deadline := time.Now().Add(enginetest.HangGuard)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
		cs, err := rt.List(ctx, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelRole: sandbox.RoleSpare})
		cancel()
		if err == nil && slices.ContainsFunc(cs, func(c sandbox.Container) bool { return c.Running() }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no spare within %s: %v", enginetest.HangGuard, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The copy is made after the spare runs: wait for it, so the claim
	// below is the one that finds it.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
		cs, _ := rt.List(ctx, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelRole: sandbox.RoleSpare})
		var out sandbox.ExecOutput
		if len(cs) > 0 {
			out, _ = rt.Exec(ctx, cs[0].Name, sandbox.ExecSpec{Argv: []string{"sh", "-c", "ls /tmp/.sandbox-mcp/sandbox-ctl-*"}})
		}
		cancel()
		if out.ExitCode == 0 && len(out.Stdout) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent was not copied into the spare")
		}
		time.Sleep(200 * time.Millisecond)
	}
	r := s.call(t, "exec", map[string]any{"sandbox": "proxied", "command": "curl -s --max-time 60 http://x.invalid/"})
	if r.data["booted"] != "created from a warm spare" || !strings.Contains(r.text, "blocked by the sandbox's network policy") {
		t.Fatalf("an allowlist spare taken: %v %s", r.data["booted"], r.text)
	}
	if tg.Runtime == enginetest.Kubernetes {
		// A pod's agent rides the exec stream: no channel directory.
		s.call(t, "reset", map[string]any{"sandbox": "proxied"})
		r = s.call(t, "exec", map[string]any{"sandbox": "proxied", "command": "curl -s --max-time 60 http://x.invalid/"})
		if !strings.Contains(r.text, "blocked by the sandbox's network policy") {
			t.Fatalf("the proxy after a reset: %s", r.text)
		}
		return
	}
	// Its channel directory is named after the spare: a reset gives the
	// new container its own and removes the spare's.
	channelOf := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
		defer cancel()
		c, err := rt.Inspect(ctx, prefix+"-proxied")
		if err != nil {
			t.Fatal(err)
		}
		return c.Labels[sandbox.LabelChannel]
	}
	was := channelOf()
	if was == "" {
		t.Fatal("the claimed spare has no channel")
	}
	s.call(t, "reset", map[string]any{"sandbox": "proxied"})
	r = s.call(t, "exec", map[string]any{"sandbox": "proxied", "command": "curl -s --max-time 60 http://x.invalid/"})
	if !strings.Contains(r.text, "blocked by the sandbox's network policy") {
		t.Fatalf("the proxy after a reset: %s", r.text)
	}
	if now := channelOf(); now == was || now == "" {
		t.Fatalf("the channel after a reset: %q (was %q)", now, was)
	}
	if _, err := os.Stat(was); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the spare's channel directory %s is left after the reset: %v", was, err)
	}
}

// TestWarmPoolSpares: with --kube-warm-pools the server's spare is a
// Sandbox of agent-sandbox's warm pool, which its controller fills; in
// the allowlist egress mode (the default), the first command on a new
// name takes it and runs behind the sandbox's proxy, and a reset keeps
// it there on the same workspace. Warm pools are agent-sandbox's: only
// the kubernetes@crd target runs this.
func TestWarmPoolSpares(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Name != enginetest.Kubernetes+"-crd" {
			t.Logf("%s: not run: warm pools are agent-sandbox's (kubernetes@crd runs it)", tg.Name)
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			a := startProc(t, tg, prefix, t.TempDir(), "--spares", "1", "--network", "allowlist", "--kube-warm-pools")
			s := &server{cs: a.cs}
			// The server lists the pool's ready Sandbox as its spare.
			deadline := time.Now().Add(enginetest.HangGuard)
			for {
				r := s.call(t, "list_all", map[string]any{})
				if strings.Contains(r.text, "warm spares: 1 running") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no Sandbox ready in the warm pool within %s: %s", enginetest.HangGuard, r.text)
				}
				time.Sleep(500 * time.Millisecond)
			}
			r := s.call(t, "exec", map[string]any{"sandbox": "pooled", "command": "echo kept > /workspace/f; curl -s --max-time 60 http://x.invalid/"})
			if r.data["booted"] != "created from a warm spare" || !strings.Contains(r.text, "blocked by the sandbox's network policy") {
				t.Fatalf("a pool's spare taken: %v %s", r.data["booted"], r.text)
			}
			s.call(t, "reset", map[string]any{"sandbox": "pooled"})
			r = s.call(t, "exec", map[string]any{"sandbox": "pooled", "command": "cat /workspace/f; curl -s --max-time 60 http://x.invalid/"})
			if !strings.HasPrefix(r.text, "exit") || !strings.Contains(r.text, "kept") || !strings.Contains(r.text, "blocked by the sandbox's network policy") {
				t.Fatalf("after a reset: %s", r.text)
			}
		})
	}
}
