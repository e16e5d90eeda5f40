// Package enginetest selects the real container engines an integration test
// runs against, so one suite covers podman, Docker Engine and (through its
// stand-in) Apple's container CLI.
//
// SANDBOX_MCP_TEST_RUNTIMES lists them, comma-separated (for example
// "podman,docker,container"). "container" is Apple's CLI as emulated by the
// stand-in in internal/applestandin (1.5.0 behaviour, on podman);
// "container@0.9.0" pins the stand-in to an older release's JSON and error
// texts. When the variable is unset, engine tests skip and say so; the
// README's test command and CI always set it.
package enginetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
)

// EnvRuntimes names the variable listing the engines to test.
const EnvRuntimes = "SANDBOX_MCP_TEST_RUNTIMES"

// Target is one engine under test.
type Target struct {
	// Name names the target in test names: "podman", "docker", "container"
	// or "container-0.9.0".
	Name string
	// Runtime is the --runtime value: "podman", "docker" or "container".
	Runtime string
	// Image is the sandbox image to boot (must have sh, base64, python3).
	Image string
	// Env is added to the environment of a sandbox-mcp server started for
	// this target (the stand-in's directory first on PATH, its settings).
	Env []string
	// New returns a driver for the engine.
	New func() sandbox.Runtime
}

// Targets returns the engines to test, or skips t when none are configured.
func Targets(t testing.TB) []Target {
	t.Helper()
	list := os.Getenv(EnvRuntimes)
	if list == "" {
		t.Skipf("engine tests skipped: set %s=podman (or podman,docker) to run them; `make test` does", EnvRuntimes)
	}
	var out []Target
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case "podman", "docker":
			f := docker.Flavor(name)
			out = append(out, Target{Name: name, Runtime: name, Image: image(), New: func() sandbox.Runtime {
				return docker.New(docker.Options{Flavor: f})
			}})
		case "":
		default:
			version, ok := strings.CutPrefix(name, "container")
			if !ok || (version != "" && !strings.HasPrefix(version, "@")) {
				t.Fatalf("%s: unknown runtime %q", EnvRuntimes, name)
			}
			out = append(out, standInTarget(t, strings.TrimPrefix(version, "@")))
		}
	}
	return out
}

func image() string {
	if img := os.Getenv("SANDBOX_MCP_TEST_IMAGE"); img != "" {
		return img
	}
	return "mcp-dev"
}

// Prefix returns a container-name prefix unique to this test run, and
// removes what was made under it when the test ends (see Sweep).
func Prefix(t testing.TB, rt sandbox.Runtime) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "smt" + hex.EncodeToString(b[:])
	t.Cleanup(func() { Sweep(rt, prefix) })
	return prefix
}

// Sweep removes every container and workspace volume labelled with prefix,
// the network of its sandboxes and the images its snapshots and clones
// saved.
func Sweep(rt sandbox.Runtime, prefix string) {
	// Generous: a container full of processes takes a while to remove on
	// a loaded machine, and one left behind loads every later test.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, _ := rt.List(ctx, map[string]string{sandbox.LabelOwner: prefix})
	vols := map[string]bool{}
	for _, c := range cs {
		_ = rt.Remove(ctx, c.Name)
		vols[sandbox.ContainerName(prefix+"-ws", c.Labels[sandbox.LabelName])] = true
	}
	// Only once the containers are gone, and without force, as the
	// product does (sandbox.RemoveVolume).
	for vol := range vols {
		_ = sandbox.RemoveVolume(ctx, rt, vol, time.Minute)
	}
	il, listable := rt.(sandbox.ImageLister)
	saver, removable := rt.(sandbox.ImageSaver)
	if listable && removable {
		imgs, _ := il.ListImages(ctx)
		for _, im := range imgs {
			// <prefix>-snapshot:<name>, <prefix>-clone:<target>-<time>,
			// under whatever registry the engine names local images by.
			if strings.HasPrefix(im.Ref[strings.LastIndex(im.Ref, "/")+1:], strings.ToLower(prefix)+"-") {
				_ = saver.RemoveImage(ctx, im.Ref)
			}
		}
	}
	if nw, ok := rt.(sandbox.Networker); ok {
		_, _ = nw.RemoveNetwork(ctx, sandbox.NetworkNameFor(prefix), false)
		fams, _ := nw.Networks(ctx, sandbox.LabelOwner, prefix)
		for _, n := range fams {
			if strings.HasPrefix(n, prefix+"-fam-") {
				_, _ = nw.RemoveNetwork(ctx, n, false)
			}
		}
	}
}
