package docker_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
)

// TestSaveImageSquashesDeepImages: past the layer limit, a save makes a
// one-layer image that keeps the container's changes (a file written, a
// file deleted), the labels and the environment, on podman (commit
// --squash) and docker (export and import). On the small image: a squash
// copies the whole root filesystem, and mcp-dev's took more than the
// guard's 3 minutes on a loaded machine.
func TestSaveImageSquashesDeepImages(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Runtime != "docker" && tg.Runtime != "podman" {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			// guarded bounds one call, from its start: it ends a hung one
			// and is no speed check.
			guarded := func() context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
				t.Cleanup(cancel)
				return ctx
			}
			prefix := enginetest.Prefix(t, tg.New())
			d := docker.New(docker.Options{Flavor: docker.Flavor(tg.Runtime), Env: tg.Env, SquashLayers: 1})
			cli := func(args ...string) string {
				t.Helper()
				cmd := exec.CommandContext(guarded(), tg.Runtime, args...)
				cmd.Env = append(os.Environ(), tg.Env...)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s %v: %v: %s", tg.Runtime, args, err, out)
				}
				return strings.TrimSpace(string(out))
			}
			ctr, ref := prefix+"-squash", strings.ToLower(prefix)+"-squashed:1"
			t.Cleanup(func() {
				exec.Command(tg.Runtime, "rm", "-f", ctr).Run()
				exec.Command(tg.Runtime, "rmi", "-f", ref).Run()
			})
			cli("run", "-d", "--name", ctr, "-e", "SQUASH_ENV=kept value", "--label", "io.sandbox-mcp.owner="+prefix, enginetest.SmallImage, "sleep", "600")
			cli("exec", ctr, "sh", "-c", "mkdir -p /opt && echo squashed >/opt/sq && rm /bin/arch")
			if err := d.SaveImage(guarded(), ctr, ref, map[string]string{"io.sandbox-mcp.test": "yes"}, nil, false); err != nil {
				t.Fatal(err)
			}
			if n := cli("image", "inspect", "--format", "{{len .RootFS.Layers}}", ref); n != "1" {
				t.Fatalf("the saved image has %s layers, want 1", n)
			}
			if l := cli("image", "inspect", "--format", `{{index .Config.Labels "io.sandbox-mcp.test"}}`, ref); l != "yes" {
				t.Fatalf("label %q", l)
			}
			out := cli("run", "--rm", ref, "sh", "-c", `cat /opt/sq; test -e /bin/arch || echo deleted; echo "$SQUASH_ENV"`)
			if out != "squashed\ndeleted\nkept value" {
				t.Fatalf("a container of the squashed image sees %q", out)
			}
		})
	}
}
