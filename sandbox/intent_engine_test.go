package sandbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// TestInterruptedRestoreOnEngine: what a server killed in the middle of a
// restore leaves (its record, the old container moved aside, a staged
// workspace whole or not, a swap part done) is undone or finished by the
// next server that boots the sandbox, which says so; the workspace is the
// old one or the snapshot's, never a mix, and nothing of the operation
// is left in it.
func TestInterruptedRestoreOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			ren, ok := rt.(sandbox.Renamer)
			if !ok {
				t.Skipf("%s cannot rename containers, which this test's set-up does", tg.Name)
			}
			prefix := enginetest.Prefix(t, rt)
			st, server := intentServers(t, tg, prefix)
			ctx := guardedSequence(t)
			const box = "interrupted"
			list := `cd /workspace && find . -path ./lost+found -prune -o ! -name . -print | sort | tr '\n' ' '; cat old.txt new.txt 2>/dev/null`
			oldWS := "mkdir -p /workspace/src && cd /workspace && echo old >old.txt && echo old-src >src/a && echo hidden >.old"
			want := map[string]string{
				"old": "./.old ./old.txt ./src ./src/a old\n",
				"new": "./.env ./new.txt ./src ./src/b new\n",
			}
			// stage fills the staging directory with the new workspace,
			// whole or in part, as a restore's extraction would.
			stage := func(m *sandbox.Manager, in state.Intent, whole bool) {
				t.Helper()
				cmd := "cd /workspace && mkdir -p " + in.Stage + "/src && echo new-src >" + in.Stage + "/src/b"
				if whole {
					cmd += " && echo new >" + in.Stage + "/new.txt && echo env >" + in.Stage + "/.env"
				}
				if o := run(t, m, box, shell.Request{Command: cmd}); o.res.ExitCode != 0 {
					t.Fatal(o.stderr)
				}
			}
			for _, tc := range []struct {
				name, phase, want, said string
				// setup leaves what the killed server did in the sandbox.
				setup func(m *sandbox.Manager, in *state.Intent)
			}{
				{"killed while staging", "begun", "old", "it was undone", func(m *sandbox.Manager, in *state.Intent) {
					stage(m, *in, false)
				}},
				{"killed after moving the container aside", "begun", "old", "it was undone: the sandbox is as it was", func(m *sandbox.Manager, in *state.Intent) {
					stage(m, *in, false)
					in.Trash = prefix + "-old-" + "0123456789ab"
					m.Close()
					if err := ren.Rename(ctx, m.ContainerFor(box), in.Trash); err != nil {
						t.Fatal(err)
					}
				}},
				{"killed after staging", "staged", "new", "it was finished", func(m *sandbox.Manager, in *state.Intent) {
					stage(m, *in, true)
				}},
				{"killed while swapping", "staged", "new", "it was finished", func(m *sandbox.Manager, in *state.Intent) {
					stage(m, *in, true)
					cmd := "cd /workspace && mkdir " + in.Old + " && mv old.txt .old " + in.Old + "/ && : >" + in.Old + "/.sandbox-mcp-moved && mv src " + in.Old + "/ && mv " + in.Stage + "/src ."
					if o := run(t, m, box, shell.Request{Command: cmd}); o.res.ExitCode != 0 {
						t.Fatal(o.stderr)
					}
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					a := server()
					if o := run(t, a, box, shell.Request{Command: "cd /workspace && find . -mindepth 1 -maxdepth 1 ! -name lost+found -exec rm -rf {} + && " + oldWS}); o.res.ExitCode != 0 {
						t.Fatal(o.stderr)
					}
					in := state.Intent{Sandbox: box, Op: "restore", Snapshot: "snap", Phase: tc.phase,
						Stage: ".sandbox-mcp-restore-0123456789ab", Old: ".sandbox-mcp-old-0123456789ab", Began: time.Now().UTC()}
					tc.setup(a, &in)
					if err := st.PutIntent(in); err != nil {
						t.Fatal(err)
					}
					a.Close() // the server that was killed

					b := server()
					_, info, err := b.Get(ctx, box)
					if err != nil {
						t.Fatal(err)
					}
					if !strings.Contains(info.Recovered, "the restore of snapshot \"snap\"") || !strings.Contains(info.Recovered, tc.said) {
						t.Errorf("the next call was told %q, want %q", info.Recovered, tc.said)
					}
					if got := run(t, b, box, shell.Request{Command: list}).stdout; got != want[tc.want] {
						t.Errorf("workspace: %q, want the %s one: %q", got, tc.want, want[tc.want])
					}
					if _, ok, _ := st.Intent(box); ok {
						t.Error("the record of the restore is still there")
					}
					if in.Trash != "" {
						if _, err := rt.Inspect(ctx, in.Trash); err == nil {
							t.Errorf("the old container %s is still there", in.Trash)
						}
					}
					if _, info, _ := b.Get(ctx, box); info.Recovered != "" {
						t.Errorf("told again: %q", info.Recovered)
					}
					b.Close()
				})
			}
		})
	}
}

// TestLostSnapshotRecordsAdoptedOnEngine: a snapshot whose record the
// state file lost (damaged and repaired) is found again by its image at
// the next reconcile, with its workspace tar, and restores as before.
func TestLostSnapshotRecordsAdoptedOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			dir := t.TempDir()
			st, err := state.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
				Sandboxes: st, Snapshots: st, SnapshotDir: dir + "/snapshots", Intents: st, LockDir: dir + "/locks"})
			t.Cleanup(m.Close)
			ctx := guardedSequence(t)
			const box = "adopt"
			run(t, m, box, shell.Request{Command: "echo kept >/workspace/f"})
			if _, err := m.Snapshot(ctx, box, sandbox.SnapshotRequest{Name: "lost1", IncludeWorkspace: true}); err != nil {
				t.Skipf("no snapshots here: %v", err)
			}
			if _, err := st.DeleteSnapshot("lost1"); err != nil {
				t.Fatal(err)
			}
			if err := m.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			rec, ok, err := st.Snapshot("lost1")
			if err != nil || !ok || !rec.Workspace || !strings.Contains(rec.Note, "adopted") {
				t.Fatalf("after reconcile: %+v %v %v", rec, ok, err)
			}
			run(t, m, box, shell.Request{Command: "echo changed >/workspace/f"})
			if _, _, err := m.Restore(ctx, "lost1", box); err != nil {
				t.Fatal(err)
			}
			if got := run(t, m, box, shell.Request{Command: "cat /workspace/f"}).stdout; got != "kept\n" {
				t.Fatalf("restored workspace: %q", got)
			}
			if _, err := m.DeleteSnapshot(ctx, "lost1"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestInterruptedCloneOnEngine: a clone whose server was killed before
// the source's workspace arrived whole is undone by the next server: the
// half-made sandbox goes (at its start, without a call), and the next call
// on the name is told.
func TestInterruptedCloneOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			st, server := intentServers(t, tg, prefix)
			ctx := guardedSequence(t)
			const box = "halfclone"
			a := server()
			run(t, a, box, shell.Request{Command: "mkdir -p /workspace/.sandbox-mcp-restore-0123456789ab && echo part >/workspace/.sandbox-mcp-restore-0123456789ab/x"})
			in := state.Intent{Sandbox: box, Op: "clone", Snapshot: "src", Phase: "begun",
				Stage: ".sandbox-mcp-restore-0123456789ab", Old: ".sandbox-mcp-old-0123456789ab", Began: time.Now().UTC()}
			if err := st.PutIntent(in); err != nil {
				t.Fatal(err)
			}
			a.Close()
			b := server()
			if err := b.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := rt.Inspect(ctx, b.ContainerFor(box)); err == nil {
				t.Fatal("the half-made clone is still there after the next server's start")
			}
			if _, ok, _ := st.Intent(box); ok {
				t.Error("the record of the clone is still there")
			}
			var out strings.Builder
			res, err := b.Exec(ctx, box, shell.Request{Command: "ls -A /workspace | grep -v lost+found | wc -l", Stdout: &out})
			if err != nil || !strings.Contains(res.Boot.Recovered, "half-made sandbox was removed") || strings.TrimSpace(out.String()) != "0" {
				t.Fatalf("the next call: %+v %q %v", res, out.String(), err)
			}
		})
	}
}

// TestInterruptedResetOnEngine: a reset whose server was killed after it
// moved the old container aside and before the new one had the env
// variables carried over is finished by the next server: the variables
// are there, the old container is gone, and the call says so.
func TestInterruptedResetOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			ren, ok := rt.(sandbox.Renamer)
			if !ok {
				t.Skipf("%s cannot rename containers, which this test's set-up does", tg.Name)
			}
			prefix := enginetest.Prefix(t, rt)
			st, server := intentServers(t, tg, prefix)
			ctx := guardedSequence(t)
			const box = "halfreset"
			a := server()
			if err := a.SetEnv(ctx, box, "KEPT", "over the reset", false); err != nil {
				t.Fatal(err)
			}
			run(t, a, box, shell.Request{Command: "echo gone >/root/rootfs-file"})
			trash := prefix + "-old-0123456789ab"
			a.Close()
			if err := st.PutIntent(state.Intent{Sandbox: box, Op: "reset", Phase: "begun", Trash: trash, Began: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
			if err := ren.Rename(ctx, a.ContainerFor(box), trash); err != nil {
				t.Fatal(err)
			}
			b := server()
			_, info, err := b.Get(ctx, box)
			if err != nil || !strings.Contains(info.Recovered, "the reset begun at") || !strings.Contains(info.Recovered, "finished") {
				t.Fatalf("the next call: %+v %v", info, err)
			}
			if got := run(t, b, box, shell.Request{Command: `echo "$KEPT"; cat /root/rootfs-file 2>/dev/null || echo none`}).stdout; got != "over the reset\nnone\n" {
				t.Errorf("after the finished reset: %q", got)
			}
			if _, err := rt.Inspect(ctx, trash); err == nil {
				t.Error("the old container is still there")
			}
			if _, ok, _ := st.Intent(box); ok {
				t.Error("the record of the reset is still there")
			}
		})
	}
}

// TestInterruptedDestroyOnEngine: a destroy whose server was killed after
// it removed the container and before it removed the workspace is
// finished by the next server, at its start or at the next call on the
// name, before anything boots there: the next call gets a new sandbox
// with an empty workspace, never the old one's files, and is told.
func TestInterruptedDestroyOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			st, server := intentServers(t, tg, prefix)
			ctx := guardedSequence(t)
			for _, atStart := range []bool{false, true} {
				box := "halfdestroy"
				if atStart {
					box += "-start"
				}
				t.Run(box, func(t *testing.T) {
					a := server()
					if o := run(t, a, box, shell.Request{Command: "echo secret >/workspace/kept"}); o.res.ExitCode != 0 {
						t.Fatal(o.stderr)
					}
					a.Close() // the server killed in the middle of the destroy
					if err := st.PutIntent(state.Intent{Sandbox: box, Op: "destroy", Phase: "begun", Began: time.Now().UTC()}); err != nil {
						t.Fatal(err)
					}
					// Listed as it is: still there, its destroy unfinished.
					if in, err := server().Status(ctx, box); err != nil || !strings.Contains(in.Pending, "a destroy begun at") {
						t.Errorf("status of a sandbox whose destroy was cut: %+v %v", in, err)
					}
					if err := rt.Remove(ctx, a.ContainerFor(box)); err != nil {
						t.Fatal(err)
					}
					b := server()
					if atStart {
						if err := b.Reconcile(ctx); err != nil {
							t.Fatal(err)
						}
						if _, ok, _ := st.Intent(box); ok {
							t.Error("the record of the destroy is still there after the next server's start")
						}
						if _, err := rt.Inspect(ctx, b.ContainerFor(box)); err == nil {
							t.Error("the next server's start booted the destroyed sandbox")
						}
					}
					var out strings.Builder
					res, err := b.Exec(ctx, box, shell.Request{Command: "cat /workspace/kept 2>/dev/null || echo none", Stdout: &out})
					if err != nil {
						t.Fatal(err)
					}
					if got := out.String(); got != "none\n" {
						t.Errorf("the destroyed sandbox's workspace came back: %q", got)
					}
					if !strings.Contains(res.Boot.Recovered, "the destroy of this sandbox") || !strings.Contains(res.Boot.Recovered, "it was finished") {
						t.Errorf("the next call was told %q", res.Boot.Recovered)
					}
					if _, ok, _ := st.Intent(box); ok {
						t.Error("the record of the destroy is still there")
					}
					if existed, err := b.Destroy(ctx, box); err != nil || !existed {
						t.Fatalf("destroy: %v %v", existed, err)
					}
					if _, ok, _ := st.Intent(box); ok {
						t.Error("a destroy that finished left its record")
					}
				})
			}
		})
	}
}

// TestInterruptedWipeOnEngine: a reset with wipe_workspace whose server
// was killed, before or after it removed the old container, is finished
// by the next call on the name: the workspace is empty, never the old
// one, the env variables come over when the old container was still
// there, and the call says which.
func TestInterruptedWipeOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			st, server := intentServers(t, tg, prefix)
			ctx := guardedSequence(t)
			for _, removed := range []bool{false, true} {
				box := "halfwipe"
				if removed {
					box += "-removed"
				}
				t.Run(box, func(t *testing.T) {
					a := server()
					if err := a.SetEnv(ctx, box, "KEPT", "over the wipe", false); err != nil {
						t.Fatal(err)
					}
					if o := run(t, a, box, shell.Request{Command: "echo old >/workspace/kept"}); o.res.ExitCode != 0 {
						t.Fatal(o.stderr)
					}
					a.Close()
					if err := st.PutIntent(state.Intent{Sandbox: box, Op: "wipe", Phase: "begun", Began: time.Now().UTC()}); err != nil {
						t.Fatal(err)
					}
					if removed {
						if err := rt.Remove(ctx, a.ContainerFor(box)); err != nil {
							t.Fatal(err)
						}
					}
					b := server()
					var out strings.Builder
					res, err := b.Exec(ctx, box, shell.Request{Command: `cat /workspace/kept 2>/dev/null || echo none; echo "[$KEPT]"`, Stdout: &out})
					if err != nil {
						t.Fatal(err)
					}
					want := "none\n[over the wipe]\n"
					if removed {
						want = "none\n[]\n"
					}
					if out.String() != want {
						t.Errorf("after the finished wipe: %q, want %q", out.String(), want)
					}
					if !strings.Contains(res.Boot.Recovered, "wipe_workspace") || !strings.Contains(res.Boot.Recovered, "the workspace is empty") {
						t.Errorf("the next call was told %q", res.Boot.Recovered)
					}
					if _, ok, _ := st.Intent(box); ok {
						t.Error("the record of the wipe is still there")
					}
					if _, err := b.Reset(ctx, box, true); err != nil {
						t.Fatal(err)
					}
					if _, ok, _ := st.Intent(box); ok {
						t.Error("a reset with wipe_workspace that finished left its record")
					}
				})
			}
		})
	}
}

// TestFailedRestorePutsBackOnEngine: a restore whose workspace does not
// arrive (the sandbox's tar refuses to extract) puts the sandbox back as
// it was, usable at once by the same server, its jobs still running and
// listed.
func TestFailedRestorePutsBackOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			if _, ok := rt.(sandbox.Renamer); !ok {
				t.Skipf("%s cannot put a container back", tg.Name)
			}
			prefix := enginetest.Prefix(t, rt)
			dir := t.TempDir()
			st, err := state.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
				Sandboxes: st, Snapshots: st, SnapshotDir: dir + "/snapshots", Intents: st, Jobs: st, LockDir: dir + "/locks"})
			t.Cleanup(m.Close)
			ctx := guardedSequence(t)
			const box = "putback"
			// A tar that refuses to extract, planted in the sandbox's image
			// by the snapshot: the restore's staging fails in the new
			// container.
			run(t, m, box, shell.Request{Command: `echo before >/workspace/f; mkdir -p /usr/local/bin && printf '#!/bin/sh\ncase "$1" in -x) echo refused >&2; exit 1;; esac\nexec /usr/bin/tar "$@"\n' >/usr/local/bin/tar && chmod +x /usr/local/bin/tar`})
			if _, err := m.Snapshot(ctx, box, sandbox.SnapshotRequest{Name: "badtar", IncludeWorkspace: true}); err != nil {
				t.Skipf("no snapshots here: %v", err)
			}
			startJob(t, m, box, "sleeper", "sleep 1000")
			run(t, m, box, shell.Request{Command: "echo after >/workspace/f"})
			if _, _, err := m.Restore(ctx, "badtar", box); err == nil || !strings.Contains(err.Error(), "put back as it was") {
				t.Fatalf("restore with a refusing tar: %v", err)
			}
			if got := run(t, m, box, shell.Request{Command: "cat /workspace/f"}); got.stdout != "after\n" {
				t.Fatalf("after the failed restore: %+v", got)
			}
			if j := jobAt(t, m, box, "sleeper", func(sandbox.JobStatus) bool { return true }); j.State != "running" {
				t.Errorf("the job after the failed restore: %+v", j)
			}
			_, _ = m.DeleteSnapshot(ctx, "badtar")
		})
	}
}

// intentServers makes a state file and returns it with a maker of servers
// (Managers) sharing it and its lock directory, each closed at the end.
func intentServers(t *testing.T, tg enginetest.Target, prefix string) (*state.Store, func() *sandbox.Manager) {
	t.Helper()
	dir := t.TempDir()
	st, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st, func() *sandbox.Manager {
		m := sandbox.NewManager(tg.New(), sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
			Sandboxes: st, Intents: st, LockDir: dir + "/locks"})
		t.Cleanup(m.Close)
		return m
	}
}
