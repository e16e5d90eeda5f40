package docker_test

import (
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
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
)

// What a `podman run` or `podman start` killed part way leaves (a server
// killed with its engine commands, a call canceled) is repaired by the
// next Run, Start or Remove of the name: a container only podman's
// storage knows is removed and the run made; a container "created",
// "initialized" or "exited" whose OCI runtime container outlived the
// command starts; and a removal leaves nothing of it running on the host,
// also one made at once after the killed run, while the runtime's create
// may still run under the container's conmon.
// The kill lands at a sweep of delays, each state counted as it comes:
// the test fails if a repair fails, or if the kills never left any
// container the plain `podman start` cannot start.
func TestKilledEngineCommandsAreRepaired(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		if tg.Runtime != "podman" || tg.StandIn {
			continue // docker's daemon finishes what its CLI began
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			// Each step has a hang guard of its own (renew): on a loaded
			// machine the whole sweep takes minutes.
			ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
			defer func() { cancel() }()
			renew := func() {
				cancel()
				ctx, cancel = context.WithTimeout(context.Background(), enginetest.HangGuard)
			}
			prefix := enginetest.Prefix(t, tg.New())
			// A store of its own: a run killed part way leaves an
			// incomplete layer, which the next podman command to open the
			// store deletes, saying so on its stderr, and other tests read
			// their podman's output whole.
			env := isolatedStore(t, ctx, tg.Env, enginetest.SmallImage)
			d := docker.New(docker.Options{Flavor: docker.Podman, Env: env})
			podman := func(args ...string) (string, error) {
				cmd := exec.CommandContext(ctx, "podman", args...)
				cmd.Env = env
				out, err := cmd.Output()
				return strings.TrimSpace(string(out)), err
			}
			labels := map[string]string{sandbox.LabelOwner: prefix}
			spec := func(name string) sandbox.RunSpec {
				return sandbox.RunSpec{Name: name, Image: enginetest.SmallImage, Labels: labels, Network: "none", Command: []string{"sleep", "100000"}}
			}
			// killedAfter runs argv and SIGKILLs it after delay.
			killedAfter := func(delay time.Duration, argv ...string) {
				cmd := exec.Command("podman", argv...)
				cmd.Env = env
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(delay)
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
			}
			// The kills are spread over each command's own time here: a
			// run or start timed once, uninterrupted.
			timed := func(argv ...string) time.Duration {
				cmd := exec.CommandContext(ctx, "podman", argv...)
				cmd.Env = env
				t0 := time.Now()
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("podman %v: %v: %s", argv, err, out)
				}
				return time.Since(t0)
			}
			renew()
			runTook := timed(append([]string{"run", "-d", "--name", prefix + "-t", "--network", "none", "--", enginetest.SmallImage}, spec("").Command...)...)
			if err := d.Stop(ctx, prefix+"-t", 0); err != nil {
				t.Fatal(err)
			}
			startTook := timed("start", prefix+"-t")
			if err := d.Remove(ctx, prefix+"-t"); err != nil {
				t.Fatal(err)
			}
			t.Logf("an uninterrupted run took %s, a start %s", runTook.Round(time.Millisecond), startTook.Round(time.Millisecond))
			// at is the k-th of 24 kill delays over took, from a tenth of it
			// to all of it, in an order that alternates early and late.
			at := func(took time.Duration, k int) time.Duration {
				step := (k * 7) % 24
				return took/10 + took*9/10*time.Duration(step)/23
			}
			seen := map[string]int{}
			broken := 0
			// A storage-only container takes a kill in a narrow window: it
			// is looked for in 24 more kills, not in every kill left.
			settled := -1 // the kill by which the other cases were seen
			more := func(i int) bool {
				if broken < 3 || seen["removed while created"] == 0 {
					return true
				}
				if settled < 0 {
					settled = i
				}
				return seen["storage"] == 0 && i < settled+24
			}
			for i := 0; i < 72 && more(i); i++ {
				renew()
				name := fmt.Sprintf("%s-k%d", prefix, i)
				t.Cleanup(func() { _ = d.Remove(context.Background(), name) })
				ofStart := i%3 == 1 // a start of a stopped container, else a run
				if i%3 == 2 {
					// Removed at once, as a server's clean-up or the next
					// server's may: the runtime's create can still run.
					cidfile := filepath.Join(t.TempDir(), "cid")
					killedAfter(at(runTook, i/3), append([]string{"run", "-d", "--cidfile", cidfile, "--name", name, "--network", "none", "--", enginetest.SmallImage}, spec(name).Command...)...)
					b, _ := os.ReadFile(cidfile)
					id := strings.TrimSpace(string(b))
					if id != "" && creating(id) {
						seen["removed while created"]++
					}
					if err := d.Remove(ctx, name); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
						t.Fatalf("remove a container right after its killed run: %v", err)
					}
					// What a create still running makes comes up once it
					// ends.
					for end := time.Now().Add(10 * time.Second); id != "" && creating(id) && time.Now().Before(end); {
						time.Sleep(50 * time.Millisecond)
					}
					time.Sleep(200 * time.Millisecond)
					if left := processesOf(id); len(left) > 0 {
						t.Fatalf("removing a container right after its killed run left its processes %v", left)
					}
					continue
				}
				if ofStart {
					if _, err := d.Run(ctx, spec(name)); err != nil {
						t.Fatal(err)
					}
					if err := d.Stop(ctx, name, 0); err != nil {
						t.Fatal(err)
					}
					killedAfter(at(startTook, i/3), "start", name)
				} else {
					killedAfter(at(runTook, i/3), append([]string{"run", "-d", "--name", name, "--label", sandbox.LabelOwner + "=" + prefix, "--network", "none", "--", enginetest.SmallImage}, spec(name).Command...)...)
				}
				state, err := podman("container", "inspect", "--format", "{{.State.Status}}", name)
				if err != nil {
					if _, xerr := podman("container", "exists", "--external", name); xerr != nil {
						continue // the kill came before anything was made
					}
					// Only the storage layer has it: a run of the name fails
					// ("already in use") until it goes.
					seen["storage"]++
					if _, err := d.Run(ctx, spec(name)); err != nil {
						t.Fatalf("run over a container only the storage knows: %v", err)
					}
					if st, _ := podman("container", "inspect", "--format", "{{.State.Status}}", name); st != "running" {
						t.Fatalf("after the run over a storage-only container: %q", st)
					}
					continue
				}
				if state == "running" {
					continue // the kill came after the work was done
				}
				id, _ := podman("container", "inspect", "--format", "{{.Id}}", name)
				// Stale: the runtime's container outlived the command (a
				// plain start or rm fails on it); every other one is
				// started as well.
				stale := runtimeHas(id)
				if stale {
					broken++
					seen[state]++
				} else {
					seen[state+" (clean)"]++
				}
				if stale && broken%2 == 1 {
					// Removed as it is: nothing of it may run on.
					if err := d.Remove(ctx, name); err != nil {
						t.Fatalf("remove a %s container: %v", state, err)
					}
					if left := processesOf(id); len(left) > 0 {
						t.Fatalf("removing a %s container (a killed %s) left its processes %v", state, map[bool]string{true: "start", false: "run"}[ofStart], left)
					}
					continue
				}
				if err := d.Start(ctx, name); err != nil {
					t.Fatalf("start a %s container left by a killed %s: %v", state, map[bool]string{true: "start", false: "run"}[ofStart], err)
				}
				if out, err := podman("exec", name, "echo", "up"); err != nil || out != "up" {
					t.Fatalf("exec after the start of a %s container: %q %v", state, out, err)
				}
			}
			t.Logf("states the kills left (count): %v", seen)
			if broken == 0 {
				t.Fatal("no kill left a container whose runtime state outlived the command: the repairs went untested")
			}
		})
	}
}

// isolatedStore makes a podman store of its own for the test: storage,
// database and locks under a new directory, the host's OCI runtime, and
// image loaded from the host's store. It returns the environment that
// selects it; the store goes when the test ends.
func isolatedStore(t *testing.T, ctx context.Context, hostEnv []string, image string) []string {
	t.Helper()
	host := append(os.Environ(), hostEnv...)
	info := exec.CommandContext(ctx, "podman", "info", "--format", "{{.Host.OCIRuntime.Name}}")
	info.Env = host
	runtime, err := info.Output()
	if err != nil {
		t.Fatalf("podman info: %v", err)
	}
	dir, err := os.MkdirTemp("", "sandbox-mcp-store-")
	if err != nil {
		t.Fatal(err)
	}
	storage := fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(dir, "g"), filepath.Join(dir, "r"))
	conf := fmt.Sprintf("[containers]\ndefault_ulimits = []\n[engine]\nruntime = %q\nlock_type = \"file\"\ntmp_dir = %q\nevents_logger = \"none\"\n",
		strings.TrimSpace(string(runtime)), filepath.Join(dir, "t"))
	for f, text := range map[string]string{"storage.conf": storage, "containers.conf": conf} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := append(slices.Clone(host), "CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"), "CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"))
	save := exec.CommandContext(ctx, "podman", "save", image)
	save.Env = host
	load := exec.CommandContext(ctx, "podman", "load", "-q")
	load.Env = env
	load.Stdin, err = save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	out, lerr := load.CombinedOutput()
	if serr := save.Wait(); serr != nil || lerr != nil {
		t.Fatalf("copy %s into the test's store: save %v, load %v: %s", image, serr, lerr, out)
	}
	t.Cleanup(func() {
		for _, args := range [][]string{{"rm", "--all", "--force", "--time", "0"}, {"rmi", "--all", "--force"}} {
			cmd := exec.Command("podman", args...)
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("podman %v in the test's store: %v: %s", args, err, out)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("the test's store is left: %v", err)
		}
	})
	return env
}

// runtimeHas reports whether some process on the host runs in the
// cgroup of container id (its `runc init` or its command): the OCI
// runtime's container of it is there.
func runtimeHas(id string) bool { return len(processesOf(id)) > 0 }

// creating reports whether the OCI runtime's create of container id
// runs, or its conmon does with nothing in the container's cgroup yet.
func creating(id string) bool {
	conmon := false
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range dirs {
		b, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(argv[0]) == "conmon" {
			conmon = true
		} else if slices.Contains(argv, "create") {
			return true
		}
	}
	return conmon && !runtimeHas(id)
}

// processesOf lists the host's processes in container id's cgroup.
func processesOf(id string) []string { return enginetest.ProcessesLeft([]string{id}, 0) }
