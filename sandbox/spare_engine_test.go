package sandbox_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/egress"
	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// storedManager is a Manager of cfg on rt with a state store and lock
// directory of its own, as spares need, closed when the test ends.
func storedManager(t *testing.T, rt sandbox.Runtime, cfg sandbox.Config) *sandbox.Manager {
	t.Helper()
	dir := t.TempDir()
	st, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sandboxes, cfg.Intents, cfg.Jobs, cfg.LockDir = st, st, st, filepath.Join(dir, "locks")
	m := sandbox.NewManager(rt, cfg)
	t.Cleanup(m.Close)
	return m
}

// TestSparesOnEngine: a sandbox that took a spare keeps the spare's
// workspace through a reset, through its container removed behind the
// server's back and a reconcile that follows, and loses it with its
// destroy; prune leaves workspaces in use alone and removes a stopped
// spare with its workspace.
func TestSparesOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			if _, ok := rt.(sandbox.Renamer); !ok {
				t.Skipf("%s cannot rename a container, which taking a spare is: it keeps no spares", rt.Kind())
			}
			prefix := enginetest.Prefix(t, rt)
			m := storedManager(t, rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image}})
			ctx := context.Background()
			spare := func() sandbox.Info {
				t.Helper()
				deadline := time.Now().Add(hangGuard)
				for time.Now().Before(deadline) {
					sp, err := m.Spares(ctx)
					if err != nil {
						t.Fatal(err)
					}
					for _, s := range sp {
						if s.State == sandbox.StateRunning {
							return s
						}
					}
					time.Sleep(200 * time.Millisecond)
				}
				t.Fatalf("no running spare within %s", hangGuard)
				return sandbox.Info{}
			}
			volumes := func() []string {
				t.Helper()
				names, err := rt.(sandbox.VolumeLister).VolumeNames(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return names
			}
			m.KeepSpares(1)
			first := spare()
			if o := run(t, m, "a", shell.Request{Command: "echo kept > /workspace/f"}); !o.res.Boot.Spare {
				t.Fatalf("the first call on a new name did not take the spare: %+v", o.res.Boot)
			}
			c, err := rt.Inspect(ctx, m.ContainerFor("a"))
			if err != nil {
				t.Fatal(err)
			}
			vol := c.Labels[sandbox.LabelVolume]
			if !strings.HasPrefix(vol, prefix+"-ws_spare_") || first.Container == c.Name {
				t.Fatalf("the sandbox's container %s mounts %q", c.Name, vol)
			}
			if _, err := m.Reset(ctx, "a", false); err != nil {
				t.Fatal(err)
			}
			if o := run(t, m, "a", shell.Request{Command: "cat /workspace/f"}); o.stdout != "kept\n" {
				t.Fatalf("after a reset: %+v", o)
			}
			if err := rt.Remove(ctx, m.ContainerFor("a")); err != nil {
				t.Fatal(err)
			}
			if err := m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if o := run(t, m, "a", shell.Request{Command: "cat /workspace/f"}); o.stdout != "kept\n" || o.res.Boot.Spare {
				t.Fatalf("after its container was removed and a reconcile: %+v", o)
			}
			second := spare()
			if p, err := m.Prune(ctx, true); err != nil || len(p.Containers)+len(p.Volumes) != 0 {
				t.Fatalf("prune with a sandbox that was a spare and a running spare: %+v %v", p, err)
			}
			if _, err := m.Destroy(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(volumes(), vol) {
				t.Fatalf("destroy left the workspace %s", vol)
			}
			// A spare found stopped is started when taken, also after the
			// server's minute look at its own spares has seen it stopped
			// (what it held open there died with the container).
			if err := rt.Stop(ctx, second.Container, 0); err != nil {
				t.Fatal(err)
			}
			m.LookAtLocalSparesNow(ctx)
			stopped, err := rt.Inspect(ctx, second.Container)
			if err != nil {
				t.Fatal(err)
			}
			if o := run(t, m, "b", shell.Request{Command: "echo ok"}); o.stdout != "ok\n" || !o.res.Boot.Spare {
				t.Fatalf("a new name with the only spare stopped: %+v", o)
			}
			if c, err := rt.Inspect(ctx, m.ContainerFor("b")); err != nil || c.ID != stopped.ID || !c.Running() {
				t.Fatalf("the stopped spare was not the one taken: %+v %v", c, err)
			}
			if _, err := m.Destroy(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			second = spare()
			// Spares off: the one there is stops (its idle TTL, here by
			// hand) and prune removes it and its workspace.
			m.KeepSpares(0)
			if err := rt.Stop(ctx, second.Container, 0); err != nil {
				t.Fatal(err)
			}
			// The spares' own look, which spares off sets going, may
			// remove it first (it holds the spare meanwhile): either way it
			// is gone after prune, and prune does not fail on it.
			p, err := m.Prune(ctx, false)
			if _, ierr := rt.Inspect(ctx, second.Container); err != nil ||
				!slices.Contains(p.Containers, second.Container) && !errors.Is(ierr, sandbox.ErrNotFound) {
				t.Fatalf("prune with a stopped spare: %+v %v (inspect after: %v)", p, err, ierr)
			}
			if sp, _ := m.Spares(ctx); len(sp) != 0 {
				t.Fatalf("spares after prune: %+v", sp)
			}
			for _, v := range volumes() {
				if strings.HasPrefix(v, prefix+"-ws_spare_") {
					t.Fatalf("prune left the spare's workspace %s", v)
				}
			}
		})
	}
}

// TestRebuiltImageSpareOnEngine: once the spares' image is rebuilt under
// the same name, a new name boots from the image as it is now rather
// than take the spare booted from the old one, and the refill replaces
// that spare with one of the new image.
func TestRebuiltImageSpareOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			_, renames := rt.(sandbox.Renamer)
			_, ids := rt.(sandbox.ImageIdentifier)
			if !renames || !ids {
				t.Skipf("%s keeps no spares, or does not tell an image's ID (a rebuilt image's spares are taken as they are there)", rt.Kind())
			}
			prefix := enginetest.Prefix(t, rt)
			cli := func(args ...string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				cmd := exec.CommandContext(ctx, rt.Binary(), args...)
				cmd.Env = append(os.Environ(), tg.Env...)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %v: %v: %s", rt.Binary(), args, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			img := strings.ToLower(prefix) + "-img:1"
			cli("tag", tg.Image, img)
			t.Cleanup(func() { exec.Command(rt.Binary(), "rmi", "-f", img).Run() })
			m := storedManager(t, rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: img}})
			ctx := context.Background()
			spares := func() []sandbox.Info {
				t.Helper()
				sp, err := m.Spares(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return sp
			}
			m.KeepSpares(1)
			var old sandbox.Info
			enginetest.WaitFor(t, "a running spare", func() error {
				for _, s := range spares() {
					if s.State == sandbox.StateRunning {
						old = s
						return nil
					}
				}
				return errors.New("none yet")
			})
			// The image rebuilt: a commit of a change, under its name.
			build := prefix + "-build"
			cli("run", "-d", "--name", build, img, "sleep", "600")
			t.Cleanup(func() { exec.Command(rt.Binary(), "rm", "-f", build).Run() })
			cli("exec", build, "sh", "-c", "echo rebuilt >/etc/image-version")
			cli("commit", build, img)
			cli("rm", "-f", build)
			o := run(t, m, "b", shell.Request{Command: "cat /etc/image-version"})
			if o.stdout != "rebuilt\n" || o.res.Boot.Spare {
				t.Fatalf("a new name after the rebuild: %q, took a spare %v", o.stdout, o.res.Boot.Spare)
			}
			enginetest.WaitFor(t, "the old image's spare replaced", func() error {
				sp := spares()
				for _, s := range sp {
					if s.Container == old.Container {
						return fmt.Errorf("the old spare %s is still there", s.Container)
					}
				}
				if len(sp) == 0 || sp[0].State != sandbox.StateRunning {
					return fmt.Errorf("spares: %+v", sp)
				}
				return nil
			})
			o = run(t, m, "c", shell.Request{Command: "cat /etc/image-version"})
			if o.stdout != "rebuilt\n" || !o.res.Boot.Spare {
				t.Fatalf("a new name with the new spare: %q, took a spare %v", o.stdout, o.res.Boot.Spare)
			}
			for _, n := range []string{"b", "c"} {
				if _, err := m.Destroy(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			m.KeepSpares(0)
		})
	}
}

// TestProfileSparesOnEngine: a named profile with spares has one booted
// for its name, as the profile says, while the name has no sandbox: the
// name's first call takes it, another new name does not (not even one
// that boots as that profile does), none waits while the name is in use,
// one boots again after its destroy, and one is removed once its profile
// is gone.
func TestProfileSparesOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			if _, ok := rt.(sandbox.Renamer); !ok {
				t.Skipf("%s cannot rename a container, which taking a spare is: it keeps no spares", rt.Kind())
			}
			prefix := enginetest.Prefix(t, rt)
			defaults := sandbox.Profile{Image: tg.Image}
			// twin boots as the defaults do: its spare is its own all the same.
			m := storedManager(t, rt, sandbox.Config{Prefix: prefix, Defaults: defaults,
				Profiles: map[string]sandbox.Profile{"big": {Memory: "640M", Spares: 1}, "twin": {Spares: 1}}})
			ctx := context.Background()
			spareFor := func() map[string]int {
				t.Helper()
				sp, err := m.Spares(ctx)
				if err != nil {
					t.Fatal(err)
				}
				out := map[string]int{}
				for _, s := range sp {
					if s.State == sandbox.StateRunning {
						out[s.SpareFor]++
					}
				}
				return out
			}
			m.KeepSpares(0) // none of the defaults: the profiles' only
			enginetest.WaitFor(t, "a running spare for big and one for twin", func() error {
				if got := spareFor(); got["big"] != 1 || got["twin"] != 1 || len(got) != 2 {
					return fmt.Errorf("running spares by profile: %v", got)
				}
				return nil
			})
			if o := run(t, m, "other", shell.Request{Command: "true"}); o.res.Boot.Spare {
				t.Fatalf("a name without a profile took a profile's spare: %+v", o.res.Boot)
			}
			o := run(t, m, "big", shell.Request{Command: "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"})
			if !o.res.Boot.Spare {
				t.Fatalf("big's first call did not take its profile's spare: %+v", o.res.Boot)
			}
			if got := strings.TrimSpace(o.stdout); got != fmt.Sprint(640<<20) {
				t.Fatalf("big's memory limit is %q, not its profile's 640M", got)
			}
			if c, err := rt.Inspect(ctx, m.ContainerFor("big")); err != nil || c.Labels[sandbox.LabelSpareFor] != "big" || c.Labels[sandbox.LabelVolume] == "" {
				t.Fatalf("big's container is not the spare booted for it: %+v %v", c, err)
			}
			m.RefillSparesNow(ctx)
			if got := spareFor(); got["big"] != 0 || got["twin"] != 1 {
				t.Fatalf("with big in use, running spares by profile: %v", got)
			}
			if _, err := m.Destroy(ctx, "big"); err != nil {
				t.Fatal(err)
			}
			enginetest.WaitFor(t, "big's spare again after its destroy", func() error {
				if got := spareFor(); got["big"] != 1 {
					return fmt.Errorf("running spares by profile: %v", got)
				}
				return nil
			})
			// The profiles gone (a reload): their spares go with the next look.
			m.SetProfiles(defaults, nil)
			m.KeepSpares(0)
			m.RefillSparesNow(ctx)
			if sp, err := m.Spares(ctx); err != nil || len(sp) != 0 {
				t.Fatalf("after the profiles went: spares %+v %v", sp, err)
			}
			if _, err := m.Destroy(ctx, "other"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSpareClaimCutAfterRenameOnEngine: a server killed right after it
// renamed a spare to a sandbox's name, before it recorded the claim,
// leaves the next server a sandbox container on the spare's workspace
// and no record of it. The next call adopts it, with its workspace, and
// makes no workspace of its own that nothing would remove; its destroy
// leaves no volume behind.
func TestSpareClaimCutAfterRenameOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			ren, ok := rt.(sandbox.Renamer)
			if !ok {
				t.Skipf("%s cannot rename a container, which taking a spare is: it keeps no spares", rt.Kind())
			}
			prefix := enginetest.Prefix(t, rt)
			_, server := intentServers(t, tg, prefix) // intent_engine_test.go
			ctx := guardedSequence(t)
			volumes := func() []string {
				t.Helper()
				names, err := rt.(sandbox.VolumeLister).VolumeNames(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var ours []string
				for _, n := range names {
					if strings.HasPrefix(n, prefix+"-") {
						ours = append(ours, n)
					}
				}
				return ours
			}
			a := server()
			a.KeepSpares(1)
			spare := runningSpare(t, ctx, a)
			a.KeepSpares(0)
			a.Close() // killed as it took the spare for "b": renamed, not recorded
			if err := ren.Rename(ctx, spare.Container, a.ContainerFor("b")); err != nil {
				t.Fatal(err)
			}
			before := volumes()

			b := server()
			if o := run(t, b, "b", shell.Request{Command: "echo here >/workspace/f"}); o.res.ExitCode != 0 || o.res.Boot.Created {
				t.Fatalf("the next call on the name: %+v", o)
			}
			if after := volumes(); !slices.Equal(after, before) {
				t.Errorf("the call on the name made volumes: %v, were %v", after, before)
			}
			if _, err := b.Destroy(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			if left := volumes(); len(left) != 0 {
				t.Errorf("the destroy left volumes: %v", left)
			}
		})
	}
}

// TestSpareBootCutOnEngine: a server killed while it booted a spare,
// after the spare's workspace and channel directory were made and before
// its container was, leaves both; the next server's start removes them,
// and leaves alone the workspace of a sandbox that began as a spare,
// whose container is gone but whose record names it.
func TestSpareBootCutOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			if _, ok := rt.(sandbox.VolumeLister); !ok {
				t.Skipf("%s does not list volumes", rt.Kind())
			}
			if _, ok := rt.(sandbox.Renamer); !ok {
				t.Skipf("%s cannot rename a container, which taking a spare is: it keeps no spares, and leaves no spare's workspace to sweep", rt.Kind())
			}
			prefix := enginetest.Prefix(t, rt)
			dir := t.TempDir()
			st, err := state.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			ctx := guardedSequence(t)
			chanRoot := filepath.Join(dir, "chan")
			left, owned := prefix+"-ws_spare_0123456789abcdef", prefix+"-ws_spare_fedcba9876543210"
			for _, v := range []string{left, owned} {
				t.Cleanup(func() { _ = rt.VolumeRemove(context.Background(), v) })
				if err := rt.VolumeCreate(ctx, v, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelRole: sandbox.RoleSpare}); err != nil {
					t.Fatal(err)
				}
			}
			sum := sha256.Sum256([]byte(prefix + "_spare_0123456789abcdef"))
			chanDir := filepath.Join(chanRoot, hex.EncodeToString(sum[:8]))
			if err := os.MkdirAll(chanDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := st.PutSandbox(state.Sandbox{Name: "was-a-spare", Container: prefix + "-was-a-spare", Volume: owned, Created: time.Now()}); err != nil {
				t.Fatal(err)
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
				Sandboxes: st, Intents: st, Jobs: st, LockDir: filepath.Join(dir, "locks"), ChannelRoot: chanRoot})
			t.Cleanup(m.Close)
			if err := m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			names, err := rt.(sandbox.VolumeLister).VolumeNames(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(names, left) {
				t.Errorf("the workspace of the cut spare boot is still there")
			}
			if !slices.Contains(names, owned) {
				t.Errorf("the workspace a sandbox's record names was removed")
			}
			if _, err := os.Stat(chanDir); !os.IsNotExist(err) && tg.Runtime != "container" {
				t.Errorf("the channel directory of the cut spare boot: %v", err)
			}

			// prune removes the same leftovers, channel directory too.
			left2 := prefix + "-ws_spare_00112233445566ff"
			t.Cleanup(func() { _ = rt.VolumeRemove(context.Background(), left2) })
			if err := rt.VolumeCreate(ctx, left2, map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelRole: sandbox.RoleSpare}); err != nil {
				t.Fatal(err)
			}
			sum = sha256.Sum256([]byte(prefix + "_spare_00112233445566ff"))
			chanDir2 := filepath.Join(chanRoot, hex.EncodeToString(sum[:8]))
			if err := os.MkdirAll(chanDir2, 0o755); err != nil {
				t.Fatal(err)
			}
			if p, err := m.Prune(ctx, false); err != nil || !slices.Contains(p.Volumes, left2) {
				t.Fatalf("prune: %+v %v", p, err)
			}
			if _, err := os.Stat(chanDir2); !os.IsNotExist(err) {
				t.Errorf("prune left the channel directory of the cut spare boot: %v", err)
			}
		})
	}
}

// TestSpareBornDestroyCutOnEngine: a destroy of a sandbox that began as a
// spare, killed after its container went, is finished by the next
// server's start with the spare's workspace and channel directory, which
// only the gone container's labels named.
func TestSpareBornDestroyCutOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			if _, ok := rt.(sandbox.Renamer); !ok {
				t.Skipf("%s cannot rename a container, which taking a spare is: it keeps no spares", rt.Kind())
			}
			prefix := enginetest.Prefix(t, rt)
			dir := t.TempDir()
			st, err := state.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			server := func() *sandbox.Manager {
				m := sandbox.NewManager(tg.New(), sandbox.Config{Prefix: prefix, Resolver: &egress.HostsResolver{},
					Defaults:  sandbox.Profile{Image: tg.Image, Network: egress.ModeAllowlist, Allow: []string{"api.test"}},
					Sandboxes: st, Intents: st, Jobs: st, LockDir: filepath.Join(dir, "locks"), ChannelRoot: filepath.Join(dir, "chan")})
				t.Cleanup(m.Close)
				return m
			}
			ctx := guardedSequence(t)
			a := server()
			a.KeepSpares(1)
			runningSpare(t, ctx, a)
			if o := run(t, a, "born", shell.Request{Command: "echo x >/workspace/f"}); !o.res.Boot.Spare {
				t.Fatalf("the first call did not take the spare: %+v", o.res.Boot)
			}
			a.KeepSpares(0)
			c, err := rt.Inspect(ctx, a.ContainerFor("born"))
			if err != nil {
				t.Fatal(err)
			}
			chanDir, vol := c.Labels[sandbox.LabelChannel], c.Labels[sandbox.LabelVolume]
			if chanDir == "" {
				t.Skipf("%s gives sandboxes no channel directory (a local docker or podman on Linux does)", rt.Kind())
			}
			a.Close() // killed in the middle of the destroy, after the container went
			if err := st.PutIntent(state.Intent{Sandbox: "born", Op: "destroy", Phase: "begun", Began: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
			if err := rt.Remove(ctx, c.ID); err != nil {
				t.Fatal(err)
			}
			if err := server().Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(chanDir); !os.IsNotExist(err) {
				t.Errorf("the spare's channel directory %s: %v", chanDir, err)
			}
			names, _ := rt.(sandbox.VolumeLister).VolumeNames(ctx)
			if slices.Contains(names, vol) {
				t.Errorf("the spare's workspace %s is still there", vol)
			}
		})
	}
}

// runningSpare waits for m to have a running spare and returns it.
func runningSpare(t *testing.T, ctx context.Context, m *sandbox.Manager) sandbox.Info {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		sp, err := m.Spares(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sp {
			if s.State == sandbox.StateRunning {
				return s
			}
		}
	}
	t.Fatalf("no running spare within %s", hangGuard)
	return sandbox.Info{}
}
