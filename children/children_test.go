package children

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sandbox-mcp/sandbox-mcp/ctl"
	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/spawn"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// engine is a sandbox manager in memory: sandboxes by name, and the order
// of destroys.
type engine struct {
	mu        sync.Mutex
	boxes     map[string]sandbox.Profile
	destroyed []string
	failBoot  bool
	// claimed are names a boot finds taken (a sandbox the user made
	// between the check and the boot).
	claimed map[string]bool
	// whileBooting runs in CreateChild before the child exists.
	whileBooting func()
	failDestroy  bool
}

func (e *engine) List(context.Context) ([]sandbox.Info, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []sandbox.Info
	for n := range e.boxes {
		in := sandbox.Info{Name: n}
		if i := strings.LastIndexByte(n, '-'); i > 0 {
			in.ChildOf = n[:i] // the engine's label, as the manager reads it
		}
		out = append(out, in)
	}
	return out, nil
}

func (e *engine) CreateChild(_ context.Context, name, _ string, prof sandbox.Profile, _ map[string]string) (sandbox.BootInfo, error) {
	if e.whileBooting != nil {
		e.whileBooting()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failBoot {
		return sandbox.BootInfo{}, errors.New("no image")
	}
	if e.claimed[name] {
		return sandbox.BootInfo{}, &sandbox.ArgError{Err: errors.New("sandbox " + name + " exists")}
	}
	e.boxes[name] = prof
	return sandbox.BootInfo{Created: true, IP: "10.0.0.9", Container: "ctr-" + name}, nil
}

func (e *engine) Destroy(_ context.Context, name string) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failDestroy {
		return false, errors.New("engine timed out")
	}
	_, ok := e.boxes[name]
	delete(e.boxes, name)
	e.destroyed = append(e.destroyed, name)
	return ok, nil
}

func (e *engine) Exec(_ context.Context, name string, req shell.Request) (sandbox.ExecResult, error) {
	io.WriteString(req.Stdout, "ran in "+name)
	return sandbox.ExecResult{Result: shell.Result{ExitCode: 3}}, nil
}

func (e *engine) Status(_ context.Context, name string) (sandbox.Info, error) {
	return sandbox.Info{Name: name, IP: "10.0.0.9"}, nil
}

func keeper(t *testing.T, policies map[string]spawn.Policy) (*Keeper, *engine, *state.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{boxes: map[string]sandbox.Profile{"default": {}, "other": {}}}
	return New(Options{Sandboxes: e, Store: st, Policies: policies, Locks: locks.Dir{Path: filepath.Join(dir, "locks")}}), e, st
}

func code(err error) string {
	var ce *ctl.Error
	var se *spawn.Error
	switch {
	case errors.As(err, &ce):
		return ce.Code
	case errors.As(err, &se):
		return string(se.Code)
	}
	return ""
}

func TestSpawnExecDestroy(t *testing.T) {
	can := spawn.DefaultPolicy()
	can.ChildCanSpawn = true
	k, e, st := keeper(t, map[string]spawn.Policy{"default": can})
	ctx := context.Background()
	c, err := k.Spawn(ctx, "default", ctl.SpawnParams{Name: "default-c", CPUs: 1, Memory: "256M"})
	if err != nil || c.Name != "default-c" || c.MemoryMB != 256 || c.IP != "10.0.0.9" || e.boxes["default-c"].Memory != "256M" || e.boxes["default-c"].IdleTTL != "off" {
		t.Fatalf("spawn: %+v %v %+v", c, err, e.boxes["default-c"])
	}
	g, err := k.Spawn(ctx, "default-c", ctl.SpawnParams{Name: "default-c-g"})
	if err != nil || g.CPUs != 1 || g.MemoryMB != 256 {
		t.Fatalf("grandchild (under the derived policy): %+v %v", g, err)
	}
	if _, err := k.Spawn(ctx, "other", ctl.SpawnParams{}); code(err) != string(spawn.PermissionDenied) {
		t.Fatalf("a sandbox without a policy: %v", err)
	}
	if !k.Wants("default") || !k.Wants("default-c") || k.Wants("default-c-g") || k.Wants("other") {
		t.Fatal("the control socket goes to the wrong sandboxes")
	}
	var out ctl.ExecResult
	var buf writer
	if out, err = k.Exec(ctx, "default", ctl.ExecParams{Name: "default-c-g", Command: "true"}, &buf, io.Discard); err != nil || out.ExitCode != 3 || buf.s != "ran in default-c-g" {
		t.Fatalf("exec in a grandchild from the root: %+v %v %q", out, err, buf.s)
	}
	if _, err := k.Exec(ctx, "other", ctl.ExecParams{Name: "default-c", Command: "true"}, io.Discard, io.Discard); code(err) != ctl.CodeNotFound {
		t.Fatalf("exec in another family's child: %v", err)
	}
	if _, err := k.Exec(ctx, "default", ctl.ExecParams{Name: "default-c", Command: "true", Timeout: -1}, io.Discard, io.Discard); code(err) != ctl.CodeInvalidRequest {
		t.Fatalf("a negative timeout: %v", err)
	}
	if _, err := k.Exec(ctx, "default", ctl.ExecParams{Name: "default-c", Command: "true", Timeout: 1e300}, io.Discard, io.Discard); code(err) != ctl.CodeInvalidRequest {
		t.Fatalf("a timeout that overflows: %v", err)
	}
	if p, l, ok, err := k.Child("default-c"); err != nil || !ok || p.Memory != "256M" || p.CPUs != 1 || l[sandbox.LabelChildOf] != "default" {
		t.Fatalf("the child's profile for its next boot: %+v %v %v %v", p, l, ok, err)
	}
	if err := k.Allowed("default-c", "destroy"); err == nil {
		t.Fatal("destroy of a child through the ordinary tool")
	}
	if k.Allowed("default-c", "reset") == nil || k.Allowed("default-c", "expose") == nil || k.Allowed("default", "reset") != nil {
		t.Fatal("reset or expose: allowed for the child, or refused for the root")
	}
	if err := k.Destroy(ctx, "default-c-g", "default-c"); code(err) != ctl.CodeNotFound {
		t.Fatalf("a grandchild destroying its parent: %v", err)
	}
	if err := k.Destroy(ctx, "default", "default-c"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(e.destroyed, []string{"default-c-g", "default-c"}) {
		t.Fatalf("destroyed %v, want the grandchild first", e.destroyed)
	}
	if recs, _ := st.Children(); len(recs) != 0 {
		t.Fatalf("records left: %+v", recs)
	}
	if counts, _ := st.Spawned(); counts["default"] != 1 || counts["default-c"] != 0 {
		t.Fatalf("spawn counts %v (a destroyed child's count goes with it)", counts)
	}
}

type writer struct{ s string }

func (w *writer) Write(p []byte) (int, error) { w.s += string(p); return len(p), nil }

// TestFailedBootLeavesNothing: a child that cannot boot leaves no record.
func TestFailedBootLeavesNothing(t *testing.T) {
	k, e, st := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
	e.failBoot = true
	if _, err := k.Spawn(context.Background(), "default", ctl.SpawnParams{}); err == nil {
		t.Fatal("no error")
	}
	if recs, _ := st.Children(); len(recs) != 0 {
		t.Fatalf("records left: %+v", recs)
	}
}

// TestTTLEndingMidBootIsTheCause: a child whose TTL ends while it boots
// (its container stops, so its shell dies at start) fails its spawn with
// the TTL as the cause, and leaves nothing; so does one the reaper took
// at its end before the spawn recorded it.
func TestTTLEndingMidBootIsTheCause(t *testing.T) {
	short := spawn.DefaultPolicy()
	short.ChildTTL = spawn.Duration(time.Second)
	for _, failBoot := range []bool{true, false} {
		k, e, st := keeper(t, map[string]spawn.Policy{"default": short})
		e.failBoot = failBoot
		e.whileBooting = func() {
			time.Sleep(1100 * time.Millisecond)
			if !failBoot {
				k.reap(false) // what the reaper does at the child's end
			}
		}
		_, err := k.Spawn(context.Background(), "default", ctl.SpawnParams{Name: "default-s"})
		if code(err) != ctl.CodeLimitReached || !strings.Contains(err.Error(), "end of its life") ||
			!strings.Contains(err.Error(), "while it booted") || !strings.Contains(err.Error(), "1s after its spawn") {
			t.Fatalf("failed boot %v: a spawn outlived by its TTL: %v", failBoot, err)
		}
		if failBoot && !strings.Contains(err.Error(), "no image") {
			t.Errorf("the boot's own error is not kept: %v", err)
		}
		if recs, _ := st.Children(); len(recs) != 0 {
			t.Fatalf("records left: %+v", recs)
		}
	}
}

// TestReapAndParentChanged: expired children and spawns left half done
// are destroyed; a parent's reset takes its children.
func TestReapAndParentChanged(t *testing.T) {
	k, e, st := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
	now := time.Now().UTC()
	for _, c := range []state.Child{
		{Name: "old", Parent: "default", Root: "default", Created: now.Add(-time.Hour), Expires: now.Add(-time.Minute), Ready: true},
		{Name: "half", Parent: "default", Root: "default", Created: now.Add(-time.Hour), Expires: now.Add(time.Hour)},
		{Name: "young", Parent: "default", Root: "default", Created: now, Expires: now.Add(time.Hour)},
		{Name: "orphan", Parent: "default", Root: "default", Created: now, Expires: now.Add(time.Hour)},
		{Name: "live", Parent: "default", Root: "default", Created: now, Expires: now.Add(time.Hour), Ready: true},
	} {
		e.boxes[c.Name] = sandbox.Profile{}
		if err := st.PutChild(c); err != nil {
			t.Fatal(err)
		}
	}
	// A child container whose server died before it recorded it.
	e.boxes["default-stray"] = sandbox.Profile{}
	// "young" is still booting: its spawning server holds its lock.
	// "orphan" was being spawned by a server that died: nobody holds it.
	booting, err := k.opt.Locks.TryLock(spawningKey("young"), "test")
	if err != nil {
		t.Fatal(err)
	}
	k.reap(true)
	recs, _ := st.Children()
	var left []string
	for _, r := range recs {
		left = append(left, r.Name)
	}
	if !slices.Equal(left, []string{"live", "young"}) {
		t.Fatalf("after reaping: %v", left)
	}
	if _, ok := e.boxes["orphan"]; ok {
		t.Fatal("the sandbox of a spawn left half done was not destroyed")
	}
	if _, ok := e.boxes["default-stray"]; ok {
		t.Fatal("a child container with no record was not destroyed")
	}
	booting.Release()
	k.ParentChanged("default", "reset")
	if recs, _ := st.Children(); len(recs) != 0 || len(e.boxes) != 2 {
		t.Fatalf("after the parent's reset: %+v %v", recs, e.boxes)
	}
}

// TestHandleRefusesBadParams: unknown fields and methods are refused.
func TestHandleRefusesBadParams(t *testing.T) {
	k, _, _ := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
	for _, req := range []ctl.Request{
		{ID: json.RawMessage("1"), Method: "spawn", Params: json.RawMessage(`{"cpus":1,"privileged":true}`)},
		{ID: json.RawMessage("1"), Method: "spawn", Params: json.RawMessage(`{"cpus":"many"}`)},
		{ID: json.RawMessage("1"), Method: "format-disk"},
		{ID: json.RawMessage("1"), Method: "spawn", Params: json.RawMessage(`{"cpus":-1}`)},
	} {
		if _, err := k.Handle(context.Background(), "default", req, nil); code(err) != ctl.CodeInvalidRequest {
			t.Errorf("%s %s: %v", req.Method, req.Params, err)
		}
	}
}

// TestSpawnNetworkRequest: a spawn may ask for less network than its
// child would get (none, or only some hosts), never for more; what it asks
// comes from inside a sandbox, and anything malformed is refused with
// nothing recorded.
func TestSpawnNetworkRequest(t *testing.T) {
	k, _, st := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
	ctx := context.Background()
	long := strings.Repeat("a", 300) + ".example"
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example", i)
	}
	for _, p := range []ctl.SpawnParams{
		{Network: "open"},
		{Network: "bridge"},
		{Network: "none\n--privileged"},
		{Network: "none", Allow: []string{"pypi.org"}},
		{Allow: []string{"bad host"}},
		{Allow: []string{"pypi.org:99999"}},
		{Allow: []string{"*"}},
		{Allow: []string{long}},
		{Allow: many},
	} {
		p.Name = "default-bad"
		if _, err := k.Spawn(ctx, "default", p); code(err) != ctl.CodeInvalidRequest {
			t.Errorf("spawn with network %q allow %.60q: %v", p.Network, p.Allow, err)
		}
	}
	if recs, _ := st.Children(); len(recs) != 0 {
		t.Fatalf("a refused spawn left records: %+v", recs)
	}
	if _, err := k.Spawn(ctx, "default", ctl.SpawnParams{Name: "default-n", Network: "none"}); err != nil {
		t.Fatal(err)
	}
	if p, _, _, _ := k.Child("default-n"); p.Network != "none" || p.Allow != nil {
		t.Fatalf("network none: the child boots with %+v", p)
	}
	if _, err := k.Spawn(ctx, "default", ctl.SpawnParams{Name: "default-a", Allow: []string{"pypi.org", "*.github.com:443"}}); err != nil {
		t.Fatal(err)
	}
	if p, _, _, _ := k.Child("default-a"); p.Network != "allowlist" || !slices.Equal(p.Allow, []string{"pypi.org", "*.github.com:443"}) {
		t.Fatalf("allow: the child boots with %+v", p)
	}
	// run spawns its child with the same request, checked the same way.
	for _, params := range []string{`{"command":"true","network":"none","allow":["pypi.org"]}`, `{"command":"true","allow":["bad host"]}`} {
		req := ctl.Request{ID: json.RawMessage("1"), Method: ctl.MethodRun, Params: json.RawMessage(params)}
		if _, err := k.Handle(ctx, "default", req, nil); code(err) != ctl.CodeInvalidRequest {
			t.Errorf("run %s: %v", params, err)
		}
	}
}

// TestRefusalsKeepTheirCode: a policy refusal reaches the socket with its
// code, so sandbox-ctl says what to try.
func TestRefusalsKeepTheirCode(t *testing.T) {
	k, _, _ := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
	_, err := k.Handle(context.Background(), "other", ctl.Request{ID: json.RawMessage("1"), Method: "spawn"}, nil)
	var ce *ctl.Error
	if !errors.As(err, &ce) || ce.Code != ctl.CodePermissionDenied {
		t.Fatalf("%v", err)
	}
}

// TestNameTakenAtBootIsLeftAlone: when the boot finds the name taken by
// a sandbox that is not the child, the spawn fails and that sandbox is
// never destroyed.
func TestNameTakenAtBootIsLeftAlone(t *testing.T) {
	k, e, st := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
	e.claimed = map[string]bool{"default-web": true}
	if _, err := k.Spawn(context.Background(), "default", ctl.SpawnParams{Name: "default-web"}); err == nil {
		t.Fatal("no error")
	}
	if len(e.destroyed) != 0 {
		t.Fatalf("destroyed %v", e.destroyed)
	}
	if recs, _ := st.Children(); len(recs) != 0 {
		t.Fatalf("records left: %+v", recs)
	}
}

// TestExpiredChildIsNotBooted: a command for a child past its end of
// life is refused, not run (running it would boot the container its
// main process stopped); the child's every boot carries its end.
func TestExpiredChildIsNotBooted(t *testing.T) {
	k, e, st := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
	end := time.Now().Add(-time.Second).UTC()
	if err := st.PutChild(state.Child{Name: "default-done", Parent: "default", Root: "default", Created: end.Add(-time.Minute), Expires: end, Ready: true}); err != nil {
		t.Fatal(err)
	}
	e.boxes["default-done"] = sandbox.Profile{}
	var out strings.Builder
	_, err := k.Exec(context.Background(), "default", ctl.ExecParams{Name: "default-done", Command: "true"}, &out, &out)
	if code(err) != ctl.CodeNotFound || !strings.Contains(err.Error(), "end of its life") || out.Len() != 0 {
		t.Fatalf("exec in an expired child: %v (output %q)", err, out.String())
	}
	_, labels, ok, _ := k.Child("default-done")
	if !ok || labels[sandbox.LabelEnd] != strconv.FormatInt(end.Unix(), 10) {
		t.Fatalf("the child's labels carry no end of life: %v", labels)
	}
}

// TestSpawnLosesToParentReset: a parent reset while its child boots takes
// the child too; the spawn finishing after it neither records the child
// nor leaves its container.
func TestSpawnLosesToParentReset(t *testing.T) {
	for _, event := range []string{"reset", "destroy"} {
		t.Run(event, func(t *testing.T) {
			k, e, st := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
			e.whileBooting = func() { k.ParentChanged("default", event) }
			_, err := k.Spawn(context.Background(), "default", ctl.SpawnParams{Name: "default-c"})
			if code(err) != ctl.CodeNotFound || !strings.Contains(err.Error(), "while it booted") {
				t.Fatalf("spawn: %v", err)
			}
			if recs, _ := st.Children(); len(recs) != 0 {
				t.Fatalf("records: %+v", recs)
			}
			if _, ok := e.boxes["default-c"]; ok {
				t.Fatal("the child's container was left")
			}
		})
	}
}

// TestDestroyReportsFailure: a child the engine failed to destroy is not
// reported destroyed, and its record stays for the reaper.
func TestDestroyReportsFailure(t *testing.T) {
	k, e, st := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
	if _, err := k.Spawn(context.Background(), "default", ctl.SpawnParams{Name: "default-c"}); err != nil {
		t.Fatal(err)
	}
	e.failDestroy = true
	err := k.Destroy(context.Background(), "", "default-c")
	if err == nil || !strings.Contains(err.Error(), "engine timed out") {
		t.Fatalf("destroy: %v", err)
	}
	if recs, _ := st.Children(); len(recs) != 1 {
		t.Fatalf("records: %+v", recs)
	}
	e.failDestroy = false
	if err := k.Destroy(context.Background(), "", "default-c"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.boxes["default-c"]; ok {
		t.Fatal("still there")
	}
}

// TestTimeoutBounds: a timeout that would round to no limit is refused,
// as is one over the maximum.
func TestTimeoutBounds(t *testing.T) {
	k, _, _ := keeper(t, nil)
	for _, secs := range []float64{1e-10, 0.001, -1, 1e300} {
		if d, err := k.timeout(secs); code(err) != ctl.CodeInvalidRequest {
			t.Errorf("timeout %v: %v %v", secs, d, err)
		}
	}
	if d, err := k.timeout(0.5); err != nil || d != 500*time.Millisecond {
		t.Errorf("timeout 0.5: %v %v", d, err)
	}
}

// TestUnreadableStateFailsClosed: with the state file held by another
// process, a possible child is neither booted as a root, nor given a
// root's socket, nor destroyed or restored through the ordinary tools.
func TestUnreadableStateFailsClosed(t *testing.T) {
	k, _, st := keeper(t, map[string]spawn.Policy{"default": spawn.DefaultPolicy()})
	if _, err := k.Spawn(context.Background(), "default", ctl.SpawnParams{Name: "default-c"}); err != nil {
		t.Fatal(err)
	}
	st.LockTimeout = 50 * time.Millisecond
	held, err := bolt.Open(st.Path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, _, ok, err := k.Child("default-c"); err == nil || ok {
		t.Fatalf("Child with the state held: %v %v", ok, err)
	}
	if k.Wants("default-c") {
		t.Fatal("a control socket for a sandbox that may be a child")
	}
	for _, op := range []string{"destroy", "restore"} {
		if err := k.Allowed("default-c", op); err == nil {
			t.Fatalf("%s allowed with the state held", op)
		}
	}
}
