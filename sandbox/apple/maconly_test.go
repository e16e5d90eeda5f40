package apple_test

// Checks only a Mac can make (TestMacOnly*): they run on Apple's own container CLI
// (SANDBOX_MCP_TEST_RUNTIMES=container@real, which `make test-mac` sets)
// and skip everywhere else. The stand-in runs containers on podman, so it
// has no virtiofs share, no vsock between host and guest and no Rosetta.
// Each is small; timings are logged, never asserted.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/apple"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// realBox boots a VM from the target's image with the given mounts, under a
// prefix that enginetest sweeps when the test ends.
func realBox(t *testing.T, tg enginetest.Target, mounts ...sandbox.Mount) (*apple.Dialect, string) {
	t.Helper()
	d, ok := tg.New().(*apple.Dialect)
	if !ok {
		t.Fatalf("the real target's driver is %T", tg.New())
	}
	prefix := enginetest.Prefix(t, d)
	name := prefix + "-real"
	start := time.Now()
	_, err := d.Run(ctx(t), sandbox.RunSpec{
		Name: name, Image: tg.Image, Init: true, CPUs: 1, Memory: "512M",
		Labels:  map[string]string{sandbox.LabelOwner: prefix, sandbox.LabelName: "real"},
		Mounts:  mounts,
		Command: []string{"sleep", "infinity"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot: %v", time.Since(start).Round(time.Millisecond))
	return d, name
}

// sh runs script in the VM and returns its stdout, failing t on a non-zero exit.
func sh(t *testing.T, d *apple.Dialect, name, script string) string {
	t.Helper()
	out, err := d.Exec(ctx(t), name, sandbox.ExecSpec{Argv: []string{"sh", "-c", script}})
	if err != nil || out.ExitCode != 0 {
		t.Fatalf("%q: exit %d, %v: %s", script, out.ExitCode, err, out.Stderr)
	}
	return string(out.Stdout)
}

// settle polls cond under the hang guard and returns how long it took to hold.
func settle(t *testing.T, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	if err := enginetest.Poll(context.Background(), enginetest.HangGuard, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return time.Since(start)
}

// TestMacOnlyHostDirectory: a host directory mounted into the VM (a
// Mount with a Source, which Apple shares over virtiofs) is one directory
// seen from both sides: files written on either side are read on the
// other, a rewrite on the host reaches the guest, and a removal in the
// guest reaches the host. How long each took is logged.
func TestMacOnlyHostDirectory(t *testing.T) {
	tg := enginetest.RealContainerTarget(t)
	dir, err := filepath.EvalSymlinks(t.TempDir()) // /var is /private/var on macOS
	if err != nil {
		t.Fatal(err)
	}
	hostFile := filepath.Join(dir, "from-host.txt")
	if err := os.WriteFile(hostFile, []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, name := realBox(t, tg, sandbox.Mount{Source: dir, Target: "/host"})

	if got := sh(t, d, name, "cat /host/from-host.txt"); got != "from the host\n" {
		t.Fatalf("the guest reads %q", got)
	}
	sh(t, d, name, "echo from the guest >/host/from-guest.txt")
	took := settle(t, "the host to read the guest's file", func() error {
		b, err := os.ReadFile(filepath.Join(dir, "from-guest.txt"))
		if err != nil || string(b) != "from the guest\n" {
			return fmt.Errorf("%q %v", b, err)
		}
		return nil
	})
	t.Logf("guest write seen on the host after %v", took.Round(time.Millisecond))
	if fi, err := os.Stat(filepath.Join(dir, "from-guest.txt")); err == nil {
		t.Logf("the guest's file on the host: mode %v, %s", fi.Mode(), owner(fi))
	}

	// A rewrite of a file the guest has read (and may cache), longer
	// than before.
	if err := os.WriteFile(hostFile, []byte("rewritten on the host, longer than before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	took = settle(t, "the guest to read the host's rewrite", func() error {
		out, err := d.Exec(ctx(t), name, sandbox.ExecSpec{Argv: []string{"cat", "/host/from-host.txt"}})
		if err != nil || string(out.Stdout) != "rewritten on the host, longer than before\n" {
			return fmt.Errorf("%q %v", out.Stdout, err)
		}
		return nil
	})
	t.Logf("host rewrite seen in the guest after %v", took.Round(time.Millisecond))

	sh(t, d, name, "rm /host/from-guest.txt")
	took = settle(t, "the host to see the guest's removal", func() error {
		if _, err := os.Stat(filepath.Join(dir, "from-guest.txt")); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	t.Logf("guest removal seen on the host after %v", took.Round(time.Millisecond))
}

// TestMacOnlyExecRelayTiming logs what the relay between the host and the
// VM (vsock, under `container exec`) costs: a cold exec, bytes through
// stdin, and a warm command through the product's persistent shell. Only
// the results are checked; the times are for the log and the README.
func TestMacOnlyExecRelayTiming(t *testing.T) {
	tg := enginetest.RealContainerTarget(t)
	d, name := realBox(t, tg)

	var cold []time.Duration
	for range 10 {
		start := time.Now()
		out, err := d.Exec(ctx(t), name, sandbox.ExecSpec{Argv: []string{"true"}})
		if err != nil || out.ExitCode != 0 {
			t.Fatalf("exec true: %+v %v", out, err)
		}
		cold = append(cold, time.Since(start))
	}
	t.Logf("container exec true, 10 runs: %s", spread(cold))

	const size = 16 << 20
	start := time.Now()
	out, err := d.Exec(ctx(t), name, sandbox.ExecSpec{Argv: []string{"wc", "-c"}, Stdin: bytes.NewReader(make([]byte, size))})
	if err != nil || strings.TrimSpace(string(out.Stdout)) != fmt.Sprint(size) {
		t.Fatalf("16 MiB through stdin: %q %v", out.Stdout, err)
	}
	took := time.Since(start)
	t.Logf("16 MiB through exec stdin: %v (%.0f MiB/s)", took.Round(time.Millisecond), 16/took.Seconds())

	// The product's path: a persistent shell in its own sandbox.
	m := sandbox.NewManager(d, sandbox.Config{Prefix: enginetest.Prefix(t, d), Defaults: sandbox.Profile{Image: tg.Image}})
	t.Cleanup(m.Close)
	warm := func() time.Duration {
		start := time.Now()
		res, err := m.Exec(context.Background(), "relay", shell.Request{Command: "true", Timeout: enginetest.HangGuard})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec in the sandbox: %+v %v", res, err)
		}
		return time.Since(start)
	}
	t.Logf("first command (boots the sandbox): %v", warm().Round(time.Millisecond))
	var warms []time.Duration
	for range 50 {
		warms = append(warms, warm())
	}
	t.Logf("warm command through the persistent shell, 50 runs: %s", spread(warms))
}

// owner is a file's uid and gid, as the host sees them.
func owner(fi os.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("uid %d gid %d (the test runs as uid %d)", st.Uid, st.Gid, os.Getuid())
	}
	return "owner unknown"
}

// spread is the minimum, median and maximum of ds.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return fmt.Sprintf("min %v, median %v, max %v", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}

// EnvAMD64Image names a linux/amd64 image reference for TestMacOnlyRosetta
// (pulled by `container run` if missing, so it needs the network).
const EnvAMD64Image = "SANDBOX_MCP_TEST_AMD64_IMAGE"

// TestMacOnlyRosetta: an amd64 image runs in a VM through Rosetta, or, on a
// Mac without Rosetta, Apple's error is one the dialect turns into the
// install hint. Opt-in (it pulls an image): set SANDBOX_MCP_TEST_AMD64_IMAGE,
// e.g. to docker.io/library/alpine:3.23. Sandboxes themselves boot the
// host's architecture: the product passes no --arch.
func TestMacOnlyRosetta(t *testing.T) {
	tg := enginetest.RealContainerTarget(t)
	ref := os.Getenv(EnvAMD64Image)
	if ref == "" {
		t.Skipf("opt-in, it pulls an image: set %s to a linux/amd64 image, e.g. docker.io/library/alpine:3.23", EnvAMD64Image)
	}
	bin := tg.New().(*apple.Dialect).Binary()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a pull
	defer cancel()
	cmd := exec.CommandContext(c, bin, "run", "--rm", "--arch", "amd64", ref, "uname", "-m")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		if _, hint := apple.Classify(code, stderr.String()); strings.Contains(hint, "install-rosetta") {
			t.Skipf("Rosetta is not installed, and the dialect says what to do: %s", hint)
		}
		t.Fatalf("container run --arch amd64 %s: %v: %s", ref, err, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != "x86_64" {
		t.Fatalf("uname -m in an amd64 VM: %q", got)
	}
	t.Logf("amd64 run through Rosetta (pull included): %v", time.Since(start).Round(time.Millisecond))
}
