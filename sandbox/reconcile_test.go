package sandbox

import (
	"context"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// staleListing is an engine whose listing was taken before a boot
// finished: List shows no container, Inspect finds the ones in have.
type staleListing struct {
	fakeRT
	have map[string]bool
}

func (staleListing) Kind() string { return "podman" }
func (staleListing) List(context.Context, map[string]string) ([]Container, error) {
	return nil, nil
}
func (r staleListing) Inspect(_ context.Context, name string) (Container, error) {
	if r.have[name] {
		return Container{Name: name, State: StateRunning}, nil
	}
	return Container{}, ErrNotFound
}

// TestReconcileKeepsWhatBootedMeanwhile: a reconcile whose listing is
// older than a boot that finished meanwhile (a server's first call, while
// the reconcile it runs at start looks) keeps that sandbox's record and
// jobs; what is gone for real is forgotten.
func TestReconcileKeepsWhatBootedMeanwhile(t *testing.T) {
	st, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "smtrec"
	rt := staleListing{have: map[string]bool{ContainerName(prefix, "fresh"): true}}
	m := NewManager(rt, Config{Prefix: prefix, Sandboxes: st, Jobs: st, LockDir: t.TempDir()})
	t.Cleanup(m.Close)
	for _, name := range []string{"fresh", "gone"} {
		if err := st.PutSandbox(state.Sandbox{Name: name, Container: ContainerName(prefix, name)}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutJob(state.Job{Sandbox: name, Name: "count", ID: "j-" + name, Container: ContainerName(prefix, name)}); err != nil {
			t.Fatal(err)
		}
	}
	// Another prefix's sandbox of the same name shares the state file:
	// its job is not this server's to forget.
	if err := st.PutJob(state.Job{Sandbox: "gone", Name: "theirs", ID: "j-theirs", Container: ContainerName("otherprefix", "gone")}); err != nil {
		t.Fatal(err)
	}
	if err := m.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, _ := st.Sandboxes()
	if len(recs) != 1 || recs[0].Name != "fresh" {
		t.Errorf("sandbox records after reconcile: %+v, want only fresh", recs)
	}
	if _, ok, _ := st.Job("fresh", "count"); !ok {
		t.Error("the job of the sandbox booted meanwhile was forgotten")
	}
	if _, ok, _ := st.Job("gone", "theirs"); !ok {
		t.Error("another prefix's job was forgotten")
	}
	if _, ok, _ := st.Job("gone", "count"); ok {
		t.Error("the job of a sandbox that is gone was kept")
	}
}
