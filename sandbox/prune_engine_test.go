package sandbox_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// TestPruneOnEngine: prune removes a container no sandbox uses and the
// workspace of a sandbox whose container was removed behind the server's
// back, and leaves a live sandbox and its workspace alone; a dry run
// removes nothing.
func TestPruneOnEngine(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			m := newManager(t, tg, prefix)
			ctx := context.Background()
			run(t, m, "keep", shell.Request{Command: "echo kept > /workspace/f"})
			run(t, m, "gone", shell.Request{Command: "true"})
			if err := rt.Remove(ctx, m.ContainerFor("gone")); err != nil {
				t.Fatal(err)
			}
			trash := prefix + "-old-0123456789ab"
			if _, err := rt.Run(ctx, sandbox.RunSpec{Name: trash, Image: tg.Image, Init: true, Command: []string{"sleep", "infinity"},
				Labels: map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: "keep"}}); err != nil {
				t.Fatal(err)
			}
			goneVol := prefix + "-ws-gone"
			want := sandbox.Pruned{Containers: []string{trash}, Volumes: []string{goneVol}}
			p, err := m.Prune(ctx, true)
			if err != nil || !slices.Equal(p.Containers, want.Containers) || !slices.Equal(p.Volumes, want.Volumes) {
				t.Fatalf("dry run: %+v %v, want %+v", p, err, want)
			}
			if vols := volumeNames(t, rt); !slices.Contains(vols, goneVol) {
				t.Fatalf("the dry run removed %s", goneVol)
			}
			p, err = m.Prune(ctx, false)
			if err != nil || !slices.Equal(p.Containers, want.Containers) || !slices.Equal(p.Volumes, want.Volumes) {
				t.Fatalf("prune: %+v %v, want %+v", p, err, want)
			}
			vols := volumeNames(t, rt)
			if slices.Contains(vols, goneVol) || !slices.Contains(vols, prefix+"-ws-keep") {
				t.Fatalf("volumes after prune: %v", vols)
			}
			if _, err := rt.Inspect(ctx, trash); err == nil {
				t.Fatalf("%s is still there", trash)
			}
			if o := run(t, m, "keep", shell.Request{Command: "cat /workspace/f"}); o.stdout != "kept\n" {
				t.Fatalf("the kept sandbox after prune: %+v", o)
			}
			if p, err := m.Prune(ctx, false); err != nil || len(p.Containers)+len(p.Volumes) != 0 || p.Network != "" {
				t.Fatalf("a second prune: %+v %v", p, err)
			}
			// With no sandbox left, the sandboxes' network goes too; a
			// server that made it boots the next sandbox all the same.
			if _, err := m.Destroy(ctx, "keep"); err != nil {
				t.Fatal(err)
			}
			_, networker := rt.(sandbox.Networker)
			if p, err := m.Prune(ctx, false); err != nil || (p.Network == m.NetworkName()) != networker {
				t.Fatalf("prune with no sandbox left: %+v %v", p, err)
			}
			if o := run(t, m, "keep", shell.Request{Command: "echo back"}); o.stdout != "back\n" {
				t.Fatalf("a boot after the network was pruned: %+v", o)
			}
		})
	}
}

func volumeNames(t *testing.T, rt sandbox.Runtime) []string {
	t.Helper()
	vl, ok := rt.(sandbox.VolumeLister)
	if !ok {
		t.Fatalf("%s lists no volumes", rt.Kind())
	}
	names, err := vl.VolumeNames(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return names
}
