package enginetest

import (
	"reflect"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
)

func TestTmpfsRunArgs(t *testing.T) {
	got := TmpfsRunArgs(docker.Podman, sandbox.RunSpec{Name: "c", Image: "img", Command: []string{"sleep", "--", "x"}},
		[]Tmpfs{{Target: "/data", Size: 1 << 20}, {Target: "/ro", Size: 4096, ReadOnly: true}})
	want := []string{"run", "-d", "--name", "c",
		"--mount", "type=tmpfs,destination=/data,tmpfs-size=1048576",
		"--mount", "type=tmpfs,destination=/ro,tmpfs-size=4096,ro=true",
		"--", "img", "sleep", "--", "x"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// The wrapper keeps the dialect's optional capabilities, so a sandbox
// behind it boots as it would without it.
func TestWithTmpfsKeepsCapabilities(t *testing.T) {
	rt := WithTmpfs(t, docker.New(docker.Options{Flavor: docker.Podman}))
	if _, ok := rt.(sandbox.Renamer); !ok {
		t.Error("not a Renamer")
	}
	if _, ok := rt.(sandbox.SizedVolumeCreator); !ok {
		t.Error("not a SizedVolumeCreator")
	}
}
