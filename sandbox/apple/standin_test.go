package apple_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/apple"
)

// standIn returns a dialect on the stand-in container CLI at version
// ("" for its newest), or skips when the container target is not enabled.
func standIn(t *testing.T, version string, env ...string) *apple.Dialect {
	t.Helper()
	if !enginetest.StandInListed() {
		// container@real alone (a Mac) is not the stand-in: these tests
		// drive the stand-in's own switches and its podman.
		t.Skipf("needs the stand-in container CLI: set %s to include container (`make test` does)", enginetest.EnvRuntimes)
	}
	if version != "" {
		env = append(env, enginetest.EnvStandInVersion+"="+version)
	}
	return apple.New(apple.Options{Binary: enginetest.StandIn(t), Env: env})
}

func uniqueName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "smtapple-" + hex.EncodeToString(b[:])
}

// ctx bounds one call: it ends a hung one and is no speed check. It
// counts from now, so take a fresh one for each call.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
	t.Cleanup(cancel)
	return c
}

// boot runs a labelled sandbox-like container and removes it (and its
// volume) when the test ends.
func boot(t *testing.T, d *apple.Dialect, name string) {
	t.Helper()
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
		defer cancel()
		_ = d.Remove(c, name)
		_ = d.VolumeRemove(c, name+"-ws")
	})
	if err := d.VolumeCreate(ctx(t), name+"-ws", map[string]string{"io.sandbox-mcp.owner": "smtapple"}); err != nil {
		t.Fatal(err)
	}
	_, err := d.Run(ctx(t), sandbox.RunSpec{
		Name: name, Image: "mcp-dev", Init: true, CPUs: 1, Memory: "256M",
		Labels:  map[string]string{"io.sandbox-mcp.owner": "smtapple", "io.sandbox-mcp.name": name},
		Mounts:  []sandbox.Mount{{Volume: name + "-ws", Target: "/workspace"}},
		Command: []string{"sleep", "infinity"},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestStandInLifecycle(t *testing.T) {
	for _, version := range []string{"", "0.9.0"} {
		t.Run("v"+version, func(t *testing.T) {
			t.Parallel()
			d := standIn(t, version)
			if err := d.Ping(ctx(t)); err != nil {
				t.Fatal(err)
			}
			f, err := d.Features(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if version == "0.9.0" && (f.Init || f.Copy || f.Version != (apple.Version{Major: 0, Minor: 9})) {
				t.Fatalf("0.9.0 features: %+v", f)
			}
			if ok, err := d.ImageExists(ctx(t), "mcp-dev"); err != nil || !ok {
				t.Fatalf("ImageExists(mcp-dev) = %v, %v", ok, err)
			}
			if ok, err := d.ImageExists(ctx(t), "no-such-image-smt"); err != nil || ok {
				t.Fatalf("ImageExists(missing) = %v, %v", ok, err)
			}

			name := uniqueName(t)
			// A missing container: 1.x errors, 0.x prints [] and exits 0.
			if _, err := d.Inspect(ctx(t), name); !errors.Is(err, sandbox.ErrNotFound) {
				t.Fatalf("Inspect(missing): %v", err)
			}
			boot(t, d, name)
			c, err := d.Inspect(ctx(t), name)
			if err != nil {
				t.Fatal(err)
			}
			if !c.Running() || c.Labels["io.sandbox-mcp.name"] != name || c.CPUs != 1 || c.Memory != 256<<20 ||
				apple.NormalizeReference(c.Image, "") != "docker.io/library/mcp-dev:latest" || c.Started.IsZero() ||
				c.Created.IsZero() != (version == "0.9.0") { // 0.x prints no creationDate

				t.Fatalf("Inspect: %+v", c)
			}
			if _, err := d.Run(ctx(t), sandbox.RunSpec{Name: name, Image: "mcp-dev", Command: []string{"true"}}); !errors.Is(err, sandbox.ErrAlreadyExists) {
				t.Fatalf("Run(duplicate): %v", err)
			}
			cs, err := d.List(ctx(t), map[string]string{"io.sandbox-mcp.name": name})
			if err != nil || len(cs) != 1 || cs[0].Name != name {
				t.Fatalf("List: %+v %v", cs, err)
			}

			out, err := d.Exec(ctx(t), name, sandbox.ExecSpec{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 3"}, Stdin: strings.NewReader("in")})
			if err != nil || string(out.Stdout) != "in" || string(out.Stderr) != "err\n" || out.ExitCode != 3 {
				t.Fatalf("Exec: %+v %v", out, err)
			}
			// A process that prints the CLI's words is still the process.
			out, err = d.Exec(ctx(t), name, sandbox.ExecSpec{Argv: []string{"sh", "-c", "echo 'Error: container x not found' >&2; exit 1"}})
			if err != nil || out.ExitCode != 1 {
				t.Fatalf("Exec printing an error-like line: %+v %v", out, err)
			}

			if err := d.Stop(ctx(t), name, 0); err != nil {
				t.Fatal(err)
			}
			if c, err := d.Inspect(ctx(t), name); err != nil || c.State != sandbox.StateStopped {
				t.Fatalf("after stop: %+v %v", c, err)
			}
			if _, err := d.Exec(ctx(t), name, sandbox.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrNotRunning) {
				t.Fatalf("Exec(stopped): %v", err)
			}
			if err := d.Start(ctx(t), name); err != nil {
				t.Fatal(err)
			}
			if err := d.Remove(ctx(t), name); err != nil {
				t.Fatal(err)
			}
			if err := d.Remove(ctx(t), name); !errors.Is(err, sandbox.ErrNotFound) {
				t.Fatalf("Remove(missing): %v", err)
			}
			if _, err := d.Exec(ctx(t), name, sandbox.ExecSpec{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrNotFound) {
				t.Fatalf("Exec(missing): %v", err)
			}
			if err := d.VolumeRemove(ctx(t), name+"-ws"); err != nil {
				t.Fatal(err)
			}
			if err := d.VolumeRemove(ctx(t), name+"-ws"); err != nil {
				t.Fatalf("VolumeRemove(missing) must be quiet: %v", err)
			}
		})
	}
}

func TestStandInSystemNotStarted(t *testing.T) {
	home := t.TempDir()
	d := standIn(t, "", enginetest.EnvStandInHome+"="+home)
	if err := d.Ping(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "system-stopped"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"Ping": d.Ping(ctx(t)),
		"Run":  runErr(d.Run(ctx(t), sandbox.RunSpec{Name: uniqueName(t), Image: "mcp-dev"})),
	} {
		if !errors.Is(err, sandbox.ErrEngineNotStarted) || !strings.Contains(err.Error(), apple.StartHint) {
			t.Errorf("%s with the system stopped: %v", what, err)
		}
	}
	_, err := d.List(ctx(t), nil)
	if !errors.Is(err, sandbox.ErrEngineNotStarted) || sandbox.HintOf(err) != "run `"+apple.StartHint+"`" {
		t.Fatalf("List with the system stopped: %v (hint %q)", err, sandbox.HintOf(err))
	}
	st, err := d.SystemStatus(ctx(t))
	if err != nil || st.Running() {
		t.Fatalf("SystemStatus: %+v %v", st, err)
	}
	// The old CLI has only the text form of system status.
	old := standIn(t, "0.9.0", enginetest.EnvStandInHome+"="+home)
	if err := old.Ping(ctx(t)); !errors.Is(err, sandbox.ErrEngineNotStarted) {
		t.Fatalf("0.9 Ping with the system stopped: %v", err)
	}
}

func TestStandInMissingBinary(t *testing.T) {
	d := apple.New(apple.Options{Binary: filepath.Join(t.TempDir(), "container")})
	err := d.Ping(context.Background())
	if !errors.Is(err, sandbox.ErrEngineMissing) || !strings.Contains(err.Error(), "github.com/apple/container") {
		t.Fatalf("Ping without the CLI: %v", err)
	}
}

func TestStandInStatsCopyExport(t *testing.T) {
	d := standIn(t, "")
	name := uniqueName(t)
	boot(t, d, name)

	st, err := d.Stats(ctx(t), name)
	if err != nil || st.Processes < 1 || st.MemoryUsage <= 0 || st.CPUTime <= 0 {
		t.Fatalf("Stats: %+v %v", st, err)
	}

	dir := t.TempDir()
	src := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(src, []byte("copied in\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyTo(ctx(t), name, src, "/workspace/in.txt"); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(dir, "back.txt")
	if err := d.CopyFrom(ctx(t), name, "/workspace/in.txt", back); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(back); err != nil || string(b) != "copied in\n" {
		t.Fatalf("round trip: %q %v", b, err)
	}

	tarFile := filepath.Join(dir, "rootfs.tar")
	if err := d.Export(ctx(t), name, tarFile); err != nil { // 1.5.0 exports running containers
		t.Fatal(err)
	}
	if fi, err := os.Stat(tarFile); err != nil || fi.Size() < 1<<20 {
		t.Fatalf("export: %v %v", fi, err)
	}

	// 1.2.0 exports only stopped containers; 0.9 has no cp.
	if err := standIn(t, "1.2.0").Export(ctx(t), name, filepath.Join(dir, "x.tar")); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("1.2.0 export of a running container: %v", err)
	}
	if err := standIn(t, "0.9.0").CopyTo(ctx(t), name, src, "/tmp/x"); err == nil || !strings.Contains(err.Error(), "1.0.0") {
		t.Fatalf("0.9 cp: %v", err)
	}
}

// TestStandInVolumeSingleWriter: like Apple's ext4 volumes, a named volume
// attached read-write to a running container cannot be attached
// read-write by a second one; read-only works, and so does a start once
// the first has stopped.
func TestStandInVolumeSingleWriter(t *testing.T) {
	d := standIn(t, "")
	first := uniqueName(t)
	boot(t, d, first)
	second := uniqueName(t)
	t.Cleanup(func() { _ = d.Remove(context.Background(), second) })
	spec := sandbox.RunSpec{Name: second, Image: "mcp-dev", Command: []string{"sleep", "infinity"},
		Mounts: []sandbox.Mount{{Volume: first + "-ws", Target: "/workspace"}}}
	_, err := d.Run(ctx(t), spec)
	if err == nil || !strings.Contains(sandbox.HintOf(err), "only one running container") {
		t.Fatalf("second read-write attach: %v", err)
	}
	_ = d.Remove(ctx(t), second)
	spec.Mounts[0].ReadOnly = true
	if _, err := d.Run(ctx(t), spec); err != nil {
		t.Fatalf("read-only attach: %v", err)
	}
	if err := d.Remove(ctx(t), second); err != nil {
		t.Fatal(err)
	}
	spec.Mounts[0].ReadOnly = false
	if err := d.Stop(ctx(t), first, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx(t), spec); err != nil {
		t.Fatalf("attach after the first stopped: %v", err)
	}
	if err := d.Start(ctx(t), first); err == nil {
		t.Fatal("restarting the first while the second holds the volume: want an error")
	}
}

// runErr is Run's error.
func runErr(_ string, err error) error { return err }
