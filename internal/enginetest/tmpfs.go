package enginetest

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/cli"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
)

// Tmpfs is a small filesystem in memory mounted into a test sandbox, so a
// test can fill a filesystem without touching the host's disk.
type Tmpfs struct {
	Target   string // e.g. "/data" or "/tmp"
	Size     int64  // bytes
	ReadOnly bool
}

// WithTmpfs returns a runtime that creates every container as rt would,
// with the given tmpfs mounts added. It exists for tests only: the product
// has no tmpfs option. Every other method (and every optional capability)
// is rt's own. Only the docker and podman dialects can be wrapped; for
// other targets t is skipped.
func WithTmpfs(t testing.TB, rt sandbox.Runtime, mounts ...Tmpfs) sandbox.Runtime {
	t.Helper()
	d, ok := rt.(*docker.Dialect)
	if !ok {
		t.Skipf("tmpfs mounts need the docker or podman dialect, not %s", rt.Kind())
	}
	return &tmpfsRuntime{Dialect: d, runner: &cli.Runner{Binary: d.Binary()}, mounts: mounts}
}

type tmpfsRuntime struct {
	*docker.Dialect
	runner *cli.Runner
	mounts []Tmpfs
}

// Run implements sandbox.Runtime: the dialect's argv with the mounts added
// before the image.
func (r *tmpfsRuntime) Run(ctx context.Context, spec sandbox.RunSpec) (string, error) {
	out, err := r.runner.Output(ctx, nil, TmpfsRunArgs(docker.Flavor(r.Kind()), spec, r.mounts)...)
	if err != nil {
		return "", err
	}
	return docker.RunID(out), nil
}

// TmpfsRunArgs is docker.RunArgs with a --mount for each tmpfs.
func TmpfsRunArgs(f docker.Flavor, spec sandbox.RunSpec, mounts []Tmpfs) []string {
	args := docker.RunArgs(f, spec)
	var extra []string
	for _, m := range mounts {
		arg := "type=tmpfs,destination=" + m.Target + ",tmpfs-size=" + strconv.FormatInt(m.Size, 10)
		if m.ReadOnly {
			arg += ",ro=true"
		}
		extra = append(extra, "--mount", arg)
	}
	i := slices.Index(args, "--") // the image follows it
	return slices.Concat(args[:i], extra, args[i:])
}
