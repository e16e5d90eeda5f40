package sandbox_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// TestCloneRefusesATargetBootedMeanwhile: a clone checks that its target
// name is free, then saves the source, which takes a while. A command that
// boots the target name meanwhile makes an ordinary sandbox; the clone
// must then fail, not pour the source's workspace into that sandbox and
// report success.
func TestCloneRefusesATargetBootedMeanwhile(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			lockDir, stateDir := t.TempDir(), t.TempDir()
			store, err := state.New(stateDir)
			if err != nil {
				t.Fatal(err)
			}
			m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
				LockDir: lockDir, Snapshots: store, SnapshotDir: t.TempDir()})
			t.Cleanup(m.Close)
			ctx := context.Background()
			run(t, m, "src", shell.Request{Command: "echo from-src > /workspace/src-file"})

			// Hold the source's lifecycle lock, as another server booting or
			// saving it would, so the clone waits between its check of the
			// target and its boot of it.
			h, err := locks.Dir{Path: lockDir}.Lock(ctx, prefix+"-src" /* the lock key of sandbox src */, "the test holds src")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := m.CloneSandbox(ctx, "src", "dst", nil); done <- err }()
			// A step of the scenario, not a wait: by now the clone is past its
			// first check, and if it is not, it fails there, which is right too.
			time.Sleep(3 * time.Second)
			run(t, m, "dst", shell.Request{Command: "echo mine > /workspace/dst-own"})
			h.Release()
			// The clone saves the source to an image before it fails, which
			// takes minutes on a loaded machine: the bound is for a hang.
			err = waitWithin(t, done, 15*time.Minute)
			if errors.Is(err, sandbox.ErrUnsupported) {
				t.Skipf("this engine cannot clone: %v", err)
			}
			// Without an ext4 workspace volume's lost+found (Apple's, the
			// stand-in's).
			o := run(t, m, "dst", shell.Request{Command: "ls -I lost+found /workspace"})
			if err == nil || !strings.Contains(err.Error(), `sandbox "dst" exists`) {
				t.Fatalf("clone into a sandbox booted meanwhile: %v; dst holds %q", err, o.stdout)
			}
			if o.stdout != "dst-own\n" {
				t.Fatalf("the failed clone changed dst's workspace: %q", o.stdout)
			}
			// Nor does it leave the image it saved the source to.
			if il, ok := rt.(sandbox.ImageLister); ok {
				imgs, err := il.ListImages(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, im := range imgs {
					if strings.Contains(im.Ref, strings.ToLower(prefix)+"-clone:") {
						t.Errorf("the failed clone left image %s", im.Ref)
					}
				}
			}
		})
	}
}

// TestFailedCloneLeavesNothing: a clone whose workspace does not fit the
// disk it asked for fails, saying that the half-made sandbox was removed,
// and leaves no sandbox, record or workspace tar behind: a clone is there
// whole or not at all. The name then clones afresh.
func TestFailedCloneLeavesNothing(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	rt := tg.New()
	prefix := enginetest.Prefix(t, rt)
	dir := t.TempDir()
	st, err := state.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := sandbox.NewManager(rt, sandbox.Config{Prefix: prefix, Defaults: sandbox.Profile{Image: tg.Image},
		Sandboxes: st, Snapshots: st, Intents: st, SnapshotDir: dir + "/snapshots", LockDir: dir + "/locks"})
	t.Cleanup(m.Close)
	ctx := context.Background()
	// Random bytes: a file of zeros would be stored sparse and take no room.
	run(t, m, "big", shell.Request{Command: "head -c 100000000 /dev/urandom > /workspace/big && echo x > /workspace/small"})
	_, err = m.CloneSandbox(ctx, "big", "big-copy", &sandbox.Profile{Disk: "64M"})
	if err == nil {
		in, serr := m.Status(ctx, "big-copy")
		t.Skipf("nothing stops a workspace at its disk limit here (workspace: %+v, %v): the clone fitted", in.Limits.Workspace, serr)
	}
	t.Logf("the clone: %v", err)
	if !strings.Contains(err.Error(), "did not load") || !strings.Contains(err.Error(), "half-made sandbox was removed") {
		t.Fatalf("a clone that did not fit: %v", err)
	}
	list, err := m.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.Name == "big-copy" {
			t.Fatalf("the failed clone left its sandbox: %+v", in)
		}
	}
	if _, ok, _ := st.Intent("big-copy"); ok {
		t.Error("the failed clone left its record")
	}
	if left, _ := filepath.Glob(dir + "/snapshots/.clone-*"); len(left) > 0 {
		t.Errorf("the failed clone left %v", left)
	}
	// The name is free: a clone with room takes it, whole.
	if _, err := m.CloneSandbox(ctx, "big", "big-copy", nil); err != nil {
		t.Fatal(err)
	}
	if o := run(t, m, "big-copy", shell.Request{Command: "cat /workspace/small && stat -c %s /workspace/big"}); o.stdout != "x\n100000000\n" {
		t.Fatalf("the clone after: %q", o.stdout+o.stderr)
	}
}
