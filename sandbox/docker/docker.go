// Package docker is the runtime dialect for the docker and podman CLIs. The
// two share almost all argv; where they differ (stop grace on remove, volume
// creation, error texts, inspect JSON) the dialect knows which it drives.
package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/cli"
)

// Flavor tells docker from podman where their CLIs differ.
type Flavor string

// Flavors.
const (
	Docker Flavor = "docker"
	Podman Flavor = "podman"
)

// Dialect drives a docker-compatible CLI.
type Dialect struct {
	flavor Flavor
	cli    *cli.Runner

	diskMu   sync.Mutex
	disk     *sandbox.DiskSupport // cached DiskSupport
	disksDir string               // where workspace images live
	diskTag  string               // in the names of this engine's images
	squashAt int                  // see Options.SquashLayers

	store storeCache // store.go
}

var _ sandbox.Runtime = (*Dialect)(nil)

// Options configure a Dialect.
type Options struct {
	Flavor Flavor
	// Binary is the CLI to run; defaults to the flavor's name on PATH.
	Binary string
	// Env is added to the CLI's environment (e.g. CONTAINERS_CONF, DOCKER_HOST).
	Env    []string
	Logger *slog.Logger
	// SquashLayers is the layer count past which SaveImage squashes the
	// saved image into one layer; 0 means DefaultSquashLayers.
	SquashLayers int
}

// DefaultSquashLayers: overlay stacks at most 128 layers under a
// container (docker and podman refuse deeper images), and each snapshot
// of a restored sandbox adds one; a chain is squashed well before that.
const DefaultSquashLayers = 100

// New returns a dialect for the docker or podman CLI.
func New(opts Options) *Dialect {
	bin := opts.Binary
	if bin == "" {
		bin = string(opts.Flavor)
	}
	d := &Dialect{flavor: opts.Flavor, squashAt: opts.SquashLayers}
	d.store.learnDelay = storeLearnDelay
	if d.squashAt <= 0 {
		d.squashAt = DefaultSquashLayers
	}
	d.cli = &cli.Runner{
		Binary:      bin,
		Env:         opts.Env,
		Logger:      opts.Logger,
		Classify:    d.classify,
		MissingHint: installHint(opts.Flavor),
	}
	return d
}

func installHint(f Flavor) string {
	if f == Podman {
		return "install podman (Debian/Ubuntu: `sudo apt-get install podman runc`) or run `make setup`"
	}
	return "install Docker Engine (Debian/Ubuntu: `sudo apt-get install docker.io`) or use --runtime podman"
}

// Kind implements sandbox.Runtime.
func (d *Dialect) Kind() string { return string(d.flavor) }

// Binary implements sandbox.Runtime.
func (d *Dialect) Binary() string { return d.cli.Binary }

// Ping implements sandbox.Runtime: it needs the CLI and, for docker, a
// daemon that answers.
func (d *Dialect) Ping(ctx context.Context) error {
	_, err := d.Version(ctx)
	return err
}

// Version implements sandbox.Runtime.
func (d *Dialect) Version(ctx context.Context) (string, error) {
	format := "{{.Server.Version}}"
	if d.flavor == Podman {
		format = "{{.Client.Version}}"
	}
	out, err := d.cli.Output(ctx, nil, "version", "--format", format)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// Run implements sandbox.Runtime.
//
// The caller owns the name (it holds the name's lock): on podman, a
// container that only the storage layer knows under it, which a `podman
// run` killed part way leaves (every later run then fails with "already
// in use" while inspect finds no such container), is removed and the run
// tried once more.
func (d *Dialect) Run(ctx context.Context, spec sandbox.RunSpec) (string, error) {
	out, err := d.cli.Output(ctx, nil, RunArgs(d.flavor, spec)...)
	if errors.Is(err, sandbox.ErrAlreadyExists) && d.flavor == Podman && d.storageOnly(ctx, spec.Name) {
		if _, rerr := d.cli.Output(ctx, nil, "rm", "--storage", "--", spec.Name); rerr != nil {
			return "", fmt.Errorf("%w (a container only podman's storage knows holds the name, and removing it failed: %v)", err, rerr)
		}
		out, err = d.cli.Output(ctx, nil, RunArgs(d.flavor, spec)...)
	}
	if err != nil {
		return "", err
	}
	return RunID(out), nil
}

// storageOnly reports whether name is a container of podman's storage
// layer alone: not one podman's own records know (`container exists`
// says no), one its storage has (`--external` says yes).
func (d *Dialect) storageOnly(ctx context.Context, name string) bool {
	var ee *sandbox.EngineError
	if _, err := d.cli.Output(ctx, nil, "container", "exists", "--", name); !errors.As(err, &ee) || ee.ExitCode != 1 {
		return false
	}
	_, err := d.cli.Output(ctx, nil, "container", "exists", "--external", "--", name)
	return err == nil
}

// RunID is the container ID `run -d` printed (its last word, 64 hex
// digits), or "" when its output holds none.
func RunID(out []byte) string {
	words := strings.Fields(string(out))
	if len(words) == 0 || !fullID(words[len(words)-1]) {
		return ""
	}
	return words[len(words)-1]
}

// fullID reports whether s is a full container ID: 64 lowercase hex digits.
func fullID(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

// RunArgs builds the argv (without the program) for starting a detached
// sandbox container.
func RunArgs(f Flavor, spec sandbox.RunSpec) []string {
	args := []string{"run", "-d", "--name", spec.Name}
	for _, k := range sortedKeys(spec.Labels) {
		args = append(args, "--label", k+"="+spec.Labels[k])
	}
	if spec.Init {
		args = append(args, "--init")
	}
	if spec.CPUs > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(spec.CPUs, 'f', -1, 64))
	}
	if spec.Memory != "" {
		args = append(args, "--memory", spec.Memory)
	}
	if spec.PidsLimit > 0 {
		args = append(args, "--pids-limit", strconv.Itoa(spec.PidsLimit))
	}
	if spec.StorageSize != "" {
		args = append(args, "--storage-opt", "size="+spec.StorageSize)
	}
	if spec.Network != "" {
		args = append(args, "--network", spec.Network)
		for _, a := range spec.Aliases {
			args = append(args, "--network-alias", a)
		}
	}
	if spec.Virtualization {
		args = append(args, "--device", "/dev/kvm")
	}
	for _, m := range spec.Mounts {
		args = append(args, "--mount", mountArg(m))
	}
	if spec.Workdir != "" {
		args = append(args, "--workdir", spec.Workdir)
	}
	for _, k := range sortedKeys(spec.Env) {
		args = append(args, "--env", k+"="+spec.Env[k])
	}
	args = append(args, "--", spec.Image)
	return append(args, spec.Command...)
}

func mountArg(m sandbox.Mount) string {
	var b strings.Builder
	if m.Volume != "" {
		b.WriteString("type=volume,source=" + m.Volume)
	} else {
		b.WriteString("type=bind,source=" + m.Source)
	}
	b.WriteString(",target=" + m.Target)
	if m.ReadOnly {
		b.WriteString(",readonly")
	}
	return b.String()
}

var _ sandbox.Networker = (*Dialect)(nil)

// EnsureNetwork implements sandbox.Networker: a bridge network, whose
// containers resolve each other's names and aliases (podman's
// aardvark-dns, docker's embedded DNS).
func (d *Dialect) EnsureNetwork(ctx context.Context, name string, labels map[string]string) error {
	if strings.HasPrefix(name, "-") {
		return fmt.Errorf("network name %q starts with '-'", name)
	}
	if _, err := d.cli.Output(ctx, nil, "network", "inspect", "--", name); err == nil {
		return nil
	}
	args := []string{"network", "create"}
	for _, k := range sortedKeys(labels) {
		args = append(args, "--label", k+"="+labels[k])
	}
	_, err := d.cli.Output(ctx, nil, append(args, "--", name)...)
	if err != nil {
		// Another server made it meanwhile.
		if _, ierr := d.cli.Output(ctx, nil, "network", "inspect", "--", name); ierr == nil {
			return nil
		}
		return fmt.Errorf("create network %s: %w", name, err)
	}
	return nil
}

// RemoveNetwork implements sandbox.Networker.
func (d *Dialect) RemoveNetwork(ctx context.Context, name string, dryRun bool) (bool, error) {
	if strings.HasPrefix(name, "-") {
		return false, fmt.Errorf("network name %q starts with '-'", name)
	}
	if _, err := d.cli.Output(ctx, nil, "network", "inspect", "--", name); err != nil {
		return false, nil
	}
	if dryRun {
		return true, nil
	}
	if _, err := d.cli.Output(ctx, nil, "network", "rm", "--", name); err != nil {
		return false, fmt.Errorf("remove network %s: %w", name, err)
	}
	return true, nil
}

// ConnectNetwork implements sandbox.Networker.
func (d *Dialect) ConnectNetwork(ctx context.Context, container, network string, aliases []string) error {
	if strings.HasPrefix(network, "-") || strings.HasPrefix(container, "-") {
		return fmt.Errorf("network %q or container %q starts with '-'", network, container)
	}
	args := []string{"network", "connect"}
	for _, a := range aliases {
		args = append(args, "--alias", a)
	}
	_, err := d.cli.Output(ctx, nil, append(args, "--", network, container)...)
	if err != nil && (errors.Is(err, sandbox.ErrAlreadyExists) || strings.Contains(strings.ToLower(err.Error()), "already connected")) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("connect %s to network %s: %w", container, network, err)
	}
	return nil
}

// Networks implements sandbox.Networker.
// One label only: podman 4 ORs several label filters.
func (d *Dialect) Networks(ctx context.Context, key, value string) ([]string, error) {
	out, err := d.cli.Output(ctx, nil, "network", "ls", "--format", "{{.Name}}", "--filter", "label="+key+"="+value)
	if err != nil {
		return nil, err
	}
	var names []string
	for n := range strings.FieldsSeq(string(out)) {
		if !strings.HasPrefix(n, "-") {
			names = append(names, n)
		}
	}
	return names, nil
}

var _ sandbox.Renamer = (*Dialect)(nil)

// Rename implements sandbox.Renamer.
func (d *Dialect) Rename(ctx context.Context, name, newName string) error {
	_, err := d.cli.Output(ctx, nil, "rename", "--", name, newName)
	return err
}

// Start implements sandbox.Runtime.
//
// On podman a start that fails is tried once more after `container
// cleanup`. A `podman run` or `start` killed part way (its server killed,
// its call canceled) can leave the container "created" or "exited" while
// the OCI runtime's container of it is still there: the next start fails
// ("container with given ID already exists") and removes it on its way
// out. Or "initialized" while the runtime's container runs already:
// every start fails ("cannot start an already running container") until
// a cleanup sets it back to created.
func (d *Dialect) Start(ctx context.Context, name string) error {
	_, err := d.cli.Output(ctx, nil, "start", "--", name)
	if err == nil || d.flavor != Podman || errors.Is(err, sandbox.ErrNotFound) || ctx.Err() != nil {
		return err
	}
	_, _ = d.cli.Output(ctx, nil, "container", "cleanup", "--", name)
	_, err2 := d.cli.Output(ctx, nil, "start", "--", name)
	if err2 != nil && d.unmountLeft(ctx, err2) {
		_, err2 = d.cli.Output(ctx, nil, "start", "--", name)
	}
	return err2
}

// mountedAlready is podman's start error for a volume whose filesystem is
// mounted at its data directory while podman's record says it is not: a
// `run` or `start` killed between the mount and the record leaves it so.
var mountedAlready = regexp.MustCompile(`mounting volume ([A-Za-z0-9][A-Za-z0-9_.-]*) for container [0-9a-f]+: mount: (/[^:\s]+/_data): \S+ already mounted on `)

// unmountLeft undoes what a killed podman left when a start failed with
// mountedAlready: the volume's own data directory (as its inspect gives
// it) is unmounted when no running container uses the volume
// (unmountStale). It reports whether it did.
func (d *Dialect) unmountLeft(ctx context.Context, startErr error) bool {
	m := mountedAlready.FindStringSubmatch(startErr.Error())
	if m == nil {
		return false
	}
	vol, path := m[1], m[2]
	v, err := d.volumeInspect(ctx, vol)
	if err != nil || v.Mountpoint != path {
		return false
	}
	done, err := d.unmountStale(ctx, vol, v, "status=running")
	return done && err == nil
}

// Stop implements sandbox.Runtime.
func (d *Dialect) Stop(ctx context.Context, name string, grace time.Duration) error {
	secs := strconv.Itoa(int(grace.Round(time.Second) / time.Second))
	_, err := d.cli.Output(ctx, nil, "stop", "--time", secs, "--", name)
	return err
}

// Remove implements sandbox.Runtime. A running container is killed at
// once: sandboxes hold nothing that needs a clean shutdown.
//
// podman can refuse a removal for a moment with "device or resource busy"
// (an unmount of the container's shm or rootfs while its exit's cleanup
// still holds it); such a refusal is tried again, up to removeTries times
// with a growing pause, before it is returned.
//
// On podman, a container left by a `podman run` or `start` killed part
// way can be "created" or "exited" while the OCI runtime's container of it
// is still there (podman does not know): `rm` would leave that, its `runc
// init` holding the container's mounts and its workspace. Such a
// container is initialized first, which fails on it and removes it
// (staleRuntime). One whose runtime container is still being created
// (the create outlives the killed command, under its conmon) is waited
// for first (settledProcesses). Whatever still runs in a removed
// container's cgroup once podman is done is ended (endLeftovers).
func (d *Dialect) Remove(ctx context.Context, name string) error {
	args := []string{"rm", "--force"}
	var leftovers string // the container's ID, to look for what of it outlives its removal
	if d.flavor == Podman {
		args = append(args, "--time", "0")
		out, err := d.cli.Output(ctx, nil, "container", "inspect", "--format", "{{.Id}} {{.State.Status}}", "--", name)
		id, state, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
		if err == nil && ok && notRunning(state) {
			if procs, local := d.settledProcesses(ctx, id); staleRuntime(id, state, procs, local) {
				_, _ = d.cli.Output(ctx, nil, "init", "--", name)
			}
		}
		if err == nil && ok {
			leftovers = id
		}
	}
	args = append(args, "--", name)
	err := d.remove(ctx, args)
	if err == nil && leftovers != "" {
		if n := d.endLeftovers(leftovers); n > 0 && d.cli.Logger != nil {
			d.cli.Logger.Warn("ended processes of a removed container that podman no longer knew", "container", name, "id", leftovers, "processes", n)
		}
	}
	return err
}

// remove runs the removal argv args, trying a busy unmount again.
func (d *Dialect) remove(ctx context.Context, args []string) error {
	var err error
	for try := range removeTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(time.Duration(try) * removePause):
			}
		}
		_, err = d.cli.Output(ctx, nil, args...)
		if try > 0 && errors.Is(err, sandbox.ErrNotFound) {
			return nil // the refused try removed it after all
		}
		if err == nil || !busyUnmount(err) {
			return err
		}
	}
	return err
}

// removeTries and removePause bound Remove's retries of a busy unmount:
// pauses of 1, 2, 3 and 4 times removePause, 5 s in all.
var (
	removeTries = 5
	removePause = 500 * time.Millisecond
)

// busyUnmount reports an engine's refusal that names a busy device or
// mount, which the engine's own cleanup of the container ends shortly.
func busyUnmount(err error) bool {
	var ee *sandbox.EngineError
	return errors.As(err, &ee) && strings.Contains(strings.ToLower(ee.Stderr), "device or resource busy")
}

// Inspect implements sandbox.Runtime.
func (d *Dialect) Inspect(ctx context.Context, name string) (sandbox.Container, error) {
	out, err := d.cli.Output(ctx, nil, "container", "inspect", "--", name)
	if err != nil {
		return sandbox.Container{}, err
	}
	cs, err := ParseInspect(out)
	if err != nil {
		return sandbox.Container{}, fmt.Errorf("inspect %s: %w", name, err)
	}
	if len(cs) == 0 {
		return sandbox.Container{}, fmt.Errorf("inspect %s: %w", name, sandbox.ErrNotFound)
	}
	return cs[0], nil
}

// List implements sandbox.Runtime.
func (d *Dialect) List(ctx context.Context, labels map[string]string) ([]sandbox.Container, error) {
	args := []string{"ps", "--all", "--quiet", "--no-trunc"}
	for _, k := range sortedKeys(labels) {
		args = append(args, "--filter", "label="+k+"="+labels[k])
	}
	out, err := d.cli.Output(ctx, nil, args...)
	if err != nil {
		return nil, err
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return nil, nil
	}
	out, err = d.cli.Output(ctx, nil, append([]string{"container", "inspect", "--"}, ids...)...)
	if err != nil {
		// A container removed between ps and inspect: retry one by one.
		if !errors.Is(err, sandbox.ErrNotFound) {
			return nil, err
		}
		var cs []sandbox.Container
		for _, id := range ids {
			c, err := d.Inspect(ctx, id)
			if errors.Is(err, sandbox.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			cs = append(cs, c)
		}
		return cs, nil
	}
	return ParseInspect(out)
}

// ExecCommand implements sandbox.Runtime.
func (d *Dialect) ExecCommand(ctx context.Context, name string, spec sandbox.ExecSpec) proc.Process {
	return proc.FromCmd(d.cli.Command(ctx, ExecArgs(name, spec)...))
}

// DirectExecCommand implements sandbox.DirectExecer. On a podman of this
// host the process gets the pipes its Start is given as its own standard
// streams: the CLI hands them into the container as descriptors 3 to 5
// (`--preserve-fds 3`, which podman passes through conmon and the OCI
// runtime), and a shell makes them 0 to 2 before it runs argv. Its bytes
// then go straight between this host's process and the sandbox's, with no
// relay by the CLI and conmon, which costs a copy and a wake-up each way.
// docker's exec has no such flag, nor has a podman client of a remote
// service.
func (d *Dialect) DirectExecCommand(ctx context.Context, name string, spec sandbox.ExecSpec) (proc.Process, bool) {
	if d.flavor != Podman || d.remoteClient() || spec.TTY || spec.Stdin != nil || len(spec.Argv) == 0 {
		return nil, false
	}
	spec.Interactive = false // the CLI's own stdin is empty
	spec.Argv = append([]string{"sh", "-c", handedStreams, "sh"}, spec.Argv...)
	args := ExecArgs(name, spec)
	args = append([]string{"exec", "--preserve-fds", "3"}, args[1:]...)
	return proc.Handing(d.cli.Command(ctx, args...)), true
}

// handedStreams makes the descriptors the CLI handed on (3 to 5) the
// process's standard streams, closes them under their old numbers, and
// runs its arguments.
const handedStreams = `exec "$@" 0<&3 1>&4 2>&5 3<&- 4>&- 5>&-`

// remoteClient reports whether the CLI is a client of an engine service
// (podman's remote mode, which CONTAINER_HOST or CONTAINER_CONNECTION
// selects, a unix socket of this host included): such a client cannot
// hand descriptors to the service's processes.
func (d *Dialect) remoteClient() bool {
	if strings.HasSuffix(d.cli.Binary, "-remote") {
		return true
	}
	for _, kv := range append(os.Environ(), d.cli.Env...) {
		k, v, _ := strings.Cut(kv, "=")
		if (k == "CONTAINER_HOST" || k == "CONTAINER_CONNECTION") && v != "" {
			return true
		}
	}
	return false
}

// ExecArgs builds the argv (without the program) of an exec.
func ExecArgs(name string, spec sandbox.ExecSpec) []string {
	args := []string{"exec"}
	if spec.Interactive || spec.Stdin != nil {
		args = append(args, "--interactive")
	}
	if spec.TTY {
		args = append(args, "--tty")
	}
	if spec.Workdir != "" {
		args = append(args, "--workdir", spec.Workdir)
	}
	if spec.User != "" {
		args = append(args, "--user", spec.User)
	}
	for _, k := range sortedKeys(spec.Env) {
		args = append(args, "--env", k+"="+spec.Env[k])
	}
	args = append(args, "--", name)
	return append(args, spec.Argv...)
}

// Exec implements sandbox.Runtime. A non-zero exit of the process itself is
// reported in the result, not as an error; failures of the engine (missing
// or stopped container) are errors.
func (d *Dialect) Exec(ctx context.Context, name string, spec sandbox.ExecSpec) (sandbox.ExecOutput, error) {
	return d.cli.Exec(ctx, d.cli.Command(ctx, ExecArgs(name, spec)...), spec.Stdin, func(code int, stderr string) bool {
		kind, _ := d.classify(code, stderr)
		return kind != nil || (d.flavor == Podman && code == 125)
	})
}

// VolumeCreate implements sandbox.Runtime.
func (d *Dialect) VolumeCreate(ctx context.Context, name string, labels map[string]string) error {
	args := []string{"volume", "create"}
	for _, k := range sortedKeys(labels) {
		args = append(args, "--label", k+"="+labels[k])
	}
	_, err := d.cli.Output(ctx, nil, append(args, "--", name)...)
	if errors.Is(err, sandbox.ErrAlreadyExists) {
		return nil
	}
	return err
}

// VolumeNames implements sandbox.VolumeLister. podman's `volume ls`
// fails with "no such volume" when a volume is removed while it lists;
// the listing is then taken again.
func (d *Dialect) VolumeNames(ctx context.Context) ([]string, error) {
	var err error
	for range 5 {
		var out []byte
		out, err = d.cli.Output(ctx, nil, "volume", "ls", "--format", "{{.Name}}")
		if err == nil {
			return strings.Fields(string(out)), nil
		}
		if !errors.Is(err, sandbox.ErrNotFound) {
			break
		}
	}
	return nil, err
}

// VolumeRemove implements sandbox.Runtime. A sized volume's loop device
// and image file go with it. A volume a container still holds is not
// removed: the error is sandbox.ErrInUse.
func (d *Dialect) VolumeRemove(ctx context.Context, name string) error {
	v, err := d.volumeInspect(ctx, name)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if d.flavor == Podman {
		// Any container that names the volume, in any state, keeps it.
		if _, err := d.unmountStale(ctx, name, v); err != nil {
			return err
		}
	}
	_, err = d.cli.Output(ctx, nil, VolumeRemoveArgs(d.flavor, name)...)
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		// podman can drop its record of the volume and then fail to
		// clean its directory: the image goes all the same.
		if _, ierr := d.volumeInspect(ctx, name); !errors.Is(ierr, sandbox.ErrNotFound) {
			return err
		}
	}
	d.removeImage(ctx, name, v)
	return nil
}

// unmountStale unmounts what a killed `podman run` or `start` left
// mounted at sized volume v's data directory while podman's record says
// it is not: podman's start fails on such a volume ("already mounted"),
// and its removal refuses it ("device or resource busy") and would leave
// its loop device. Only v's own device mounted there is unmounted, only
// while no container matching filters (ps's, beside the volume's) uses
// the volume, and only if it is still the same mount after that look (by
// its mount ID, which the kernel may give again to a mount of the same
// device made there in between: that takes another server's unmount and a
// start in that gap, and costs podman's count of the mount, not data). It
// reports whether it unmounted.
func (d *Dialect) unmountStale(ctx context.Context, name string, v volumeJSON, filters ...string) (bool, error) {
	dev := v.Options["device"]
	if dev == "" || !filepath.IsAbs(v.Mountpoint) {
		return false, nil
	}
	at := v.Mountpoint
	if real, err := filepath.EvalSymlinks(at); err == nil {
		at = real // mountinfo names the resolved path
	}
	first, ok := mountAt(at)
	if !ok || !first.of(dev) {
		return false, nil
	}
	args := []string{"ps", "--all", "--quiet", "--filter", "volume=" + name}
	for _, f := range filters {
		args = append(args, "--filter", f)
	}
	out, err := d.cli.Output(ctx, nil, args...)
	if err != nil {
		return false, fmt.Errorf("volume %s: find the containers that use it: %w", name, err)
	}
	if strings.TrimSpace(string(out)) != "" {
		return false, nil // in use
	}
	if now, ok := mountAt(at); !ok || now.id != first.id {
		return false, nil // unmounted meanwhile, or mounted again by a start
	}
	if err := unmount(at); err != nil {
		return false, fmt.Errorf("volume %s: unmount what a killed start left at %s: %w", name, at, err)
	}
	return true, nil
}

// VolumeRemoveArgs builds the argv (without the program) that removes
// volume name. podman's --force would also remove the containers that use
// the volume, taking the volume's lock and then each container's: the
// reverse of the order in which the cleanup of a container that just
// exited takes them, and podman 4.3 (Debian 12's) can then deadlock, every
// later call waiting behind the two. Without it podman refuses a volume in
// use, which the caller retries once that container is gone. docker's
// --force removes nothing more; it drops a volume whose driver fails.
func VolumeRemoveArgs(f Flavor, name string) []string {
	if f == Podman {
		return []string{"volume", "rm", "--", name}
	}
	return []string{"volume", "rm", "--force", "--", name}
}

// ImageExists implements sandbox.Runtime.
func (d *Dialect) ImageExists(ctx context.Context, ref string) (bool, error) {
	_, err := d.ImageID(ctx, ref)
	if errors.Is(err, sandbox.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

var _ sandbox.ImageIdentifier = (*Dialect)(nil)

// ImageID implements sandbox.ImageIdentifier.
// While the engine's image names file is as it was when the CLI last
// answered for ref, that answer stands (store.go).
func (d *Dialect) ImageID(ctx context.Context, ref string) (string, error) {
	cached, version := d.cachedImageID(ref)
	if cached != "" {
		return cached, nil
	}
	id, err := d.inspectImageID(ctx, ref)
	if err == nil {
		d.keepImageID(ref, id, version)
	}
	return id, err
}

// inspectImageID is ImageID through the CLI.
func (d *Dialect) inspectImageID(ctx context.Context, ref string) (string, error) {
	out, err := d.cli.Output(ctx, nil, "image", "inspect", "--format", "{{.Id}}", "--", ref)
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(out))
	if id == "" {
		return "", fmt.Errorf("image %s: %w", ref, sandbox.ErrNotFound)
	}
	return id, nil
}

// classify maps docker's and podman's error texts to sentinels.
func (d *Dialect) classify(code int, stderr string) (error, string) {
	return Classify(d.flavor, code, stderr)
}

// Classify maps an exit code and stderr text of the docker or podman CLI to
// a sandbox sentinel error and a hint.
func Classify(f Flavor, _ int, stderr string) (error, string) {
	s := strings.ToLower(stderr)
	has := func(subs ...string) bool {
		for _, sub := range subs {
			if strings.Contains(s, sub) {
				return true
			}
		}
		return false
	}
	switch {
	case has("cannot connect to the docker daemon", "is the docker daemon running", "cannot connect to podman",
		"connect: no such file or directory", "connection refused"):
		if f == Podman {
			return sandbox.ErrEngineNotStarted, "check `podman info`; for a remote podman start its service (`systemctl --user start podman.socket`)"
		}
		return sandbox.ErrEngineNotStarted, "start the Docker daemon (`sudo systemctl start docker`) or set DOCKER_HOST"
	case has("already in use", "already exists"):
		return sandbox.ErrAlreadyExists, ""
	case has("volume is being used", "volume is in use"):
		// podman: "volume X is being used by the following container(s):
		// ID: volume is being used"; docker: "remove X: volume is in use - [ID]".
		return sandbox.ErrInUse, ""
	case has("is not running", "state improper", "container is stopped", "is paused"):
		return sandbox.ErrNotRunning, ""
	// "container not known" is podman's storage layer on a container
	// removed while the command ran (an inspect of what ps had just listed).
	case has("no such container", "no such object", "no container with name or id", "no such volume",
		"container not known", "no such image", "image not known", "image not found", "not found in local storage", "no such file or directory: image"):
		return sandbox.ErrNotFound, ""
	}
	return nil, ""
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

var _ sandbox.ImageSaver = (*Dialect)(nil)

// SaveImage implements sandbox.ImageSaver with commit.
func (d *Dialect) SaveImage(ctx context.Context, name, ref string, labels map[string]string, _ []string, pause bool) error {
	if strings.HasPrefix(ref, "-") || strings.HasPrefix(name, "-") {
		return fmt.Errorf("commit: %q or %q starts with '-'", name, ref)
	}
	changes := labelChanges(labels)
	if n, err := d.layers(ctx, name); err == nil && n >= d.squashAt {
		return d.saveSquashed(ctx, name, ref, changes, pause)
	}
	args := []string{"commit", fmt.Sprintf("--pause=%t", pause)}
	_, err := d.cli.Output(ctx, nil, append(append(args, changes...), name, ref)...)
	return err
}

// labelChanges turns labels into --change LABEL arguments.
func labelChanges(labels map[string]string) []string {
	var args []string
	for _, k := range sortedKeys(labels) {
		args = append(args, "--change", fmt.Sprintf("LABEL %q=%q", k, labels[k]))
	}
	return args
}

// layers counts the layers of container name's image.
func (d *Dialect) layers(ctx context.Context, name string) (int, error) {
	out, err := d.cli.Output(ctx, nil, "container", "inspect", "--format", "{{.Image}}", "--", name)
	if err != nil {
		return 0, err
	}
	img := strings.TrimSpace(string(out))
	if img == "" || strings.HasPrefix(img, "-") {
		return 0, fmt.Errorf("container %s: no image", name)
	}
	out, err = d.cli.Output(ctx, nil, "image", "inspect", "--format", "{{len .RootFS.Layers}}", "--", img)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}

// saveSquashed saves container name as a one-layer image: podman commits
// with --squash; docker has no such commit, so the container's filesystem
// is exported and imported, with the config a sandbox boot relies on
// (environment, working directory, user) carried over.
func (d *Dialect) saveSquashed(ctx context.Context, name, ref string, changes []string, pause bool) error {
	if d.flavor == Podman {
		args := []string{"commit", "--squash", fmt.Sprintf("--pause=%t", pause)}
		_, err := d.cli.Output(ctx, nil, append(append(args, changes...), name, ref)...)
		return err
	}
	out, err := d.cli.Output(ctx, nil, "container", "inspect", "--format", "{{json .Config}}", "--", name)
	if err != nil {
		return err
	}
	var cfg struct {
		Env        []string
		WorkingDir string
		User       string
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		return fmt.Errorf("container %s: read its config: %w", name, err)
	}
	for _, kv := range cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			changes = append(changes, "--change", fmt.Sprintf("ENV %s=%q", k, v))
		}
	}
	if cfg.WorkingDir != "" {
		changes = append(changes, "--change", "WORKDIR "+cfg.WorkingDir)
	}
	if cfg.User != "" {
		changes = append(changes, "--change", "USER "+cfg.User)
	}
	if pause {
		if _, err := d.cli.Output(ctx, nil, "pause", "--", name); err != nil {
			return err
		}
		defer func() { _, _ = d.cli.Output(context.WithoutCancel(ctx), nil, "unpause", "--", name) }()
	}
	export := d.cli.Command(ctx, "export", "--", name)
	imp := d.cli.Command(ctx, append(append([]string{"import"}, changes...), "-", ref)...)
	pipe, err := export.StdoutPipe()
	if err != nil {
		return err
	}
	imp.Stdin = pipe
	eTail, iTail := &tailWriter{n: 2048}, &tailWriter{n: 2048}
	export.Stderr, imp.Stdout, imp.Stderr = eTail, io.Discard, iTail
	if err := export.Start(); err != nil {
		return err
	}
	ierr := imp.Run()
	if ierr != nil {
		_ = export.Process.Kill()
	}
	eerr := export.Wait()
	if eerr != nil {
		return d.cli.Failure(ctx, export.Args, eerr, eTail.bytes())
	}
	if ierr != nil {
		return d.cli.Failure(ctx, imp.Args, ierr, iTail.bytes())
	}
	return nil
}

// RemoveImage implements sandbox.ImageSaver. docker's `rmi --force` only
// untags an image a container uses; podman's would remove the container,
// so podman untags it instead.
func (d *Dialect) RemoveImage(ctx context.Context, ref string) error {
	if strings.HasPrefix(ref, "-") {
		return fmt.Errorf("rmi: %q starts with '-'", ref)
	}
	if d.flavor == Podman {
		_, err := d.cli.Output(ctx, nil, "rmi", ref)
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "in use") {
			_, err = d.cli.Output(ctx, nil, "untag", ref, ref)
		}
		return err
	}
	_, err := d.cli.Output(ctx, nil, "rmi", "--force", ref)
	return err
}

var (
	_ sandbox.ImageBuilder = (*Dialect)(nil)
	_ sandbox.ImageLister  = (*Dialect)(nil)
)

// BuildImage implements sandbox.ImageBuilder.
func (d *Dialect) BuildImage(ctx context.Context, b sandbox.BuildSpec, log io.Writer) error {
	if b.Tag == "" || strings.HasPrefix(b.Tag, "-") || b.ContextDir == "" || strings.HasPrefix(b.ContextDir, "-") || strings.HasPrefix(b.File, "-") {
		return fmt.Errorf("build: need a tag and a context directory (tag %q, context %q)", b.Tag, b.ContextDir)
	}
	cmd := d.cli.Command(ctx, "build", "-t", b.Tag, "-f", b.File, b.ContextDir)
	tail := &tailWriter{n: 4096}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(log, tail), io.MultiWriter(log, tail)
	if err := cmd.Run(); err != nil {
		return d.cli.Failure(ctx, cmd.Args, err, tail.bytes())
	}
	return nil
}

// ListImages implements sandbox.ImageLister.
func (d *Dialect) ListImages(ctx context.Context) ([]sandbox.ImageInfo, error) {
	out, err := d.listImages(ctx, "images", "--format", "{{.Repository}}\t{{.Tag}}\t{{.ID}}\t{{.Size}}\t{{.CreatedSince}}")
	if err != nil {
		return nil, err
	}
	var imgs []sandbox.ImageInfo
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			continue
		}
		ref := f[0] + ":" + f[1]
		if f[0] == "<none>" {
			ref = ""
		}
		imgs = append(imgs, sandbox.ImageInfo{Ref: ref, ID: f[2], Size: f[3], Created: f[4]})
	}
	return imgs, nil
}

// PruneImages implements sandbox.ImagePruner. Untagged images are listed
// and their labels checked here (podman 4 ORs several label filters), then
// removed one by one: one a container uses is kept.
func (d *Dialect) PruneImages(ctx context.Context, labels map[string]string, dryRun bool) ([]string, error) {
	args := []string{"images", "-q", "--no-trunc", "--filter", "dangling=true"}
	if v := labels[sandbox.LabelOwner]; v != "" {
		args = append(args, "--filter", "label="+sandbox.LabelOwner+"="+v)
	}
	out, err := d.listImages(ctx, args...)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, id := range slices.Compact(slices.Sorted(strings.FieldsSeq(string(out)))) {
		if !strings.HasPrefix(id, "-") {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var gone []string
	for _, id := range ids {
		// One by one: an image another client removes meanwhile fails
		// only its own inspect.
		out, err := d.cli.Output(ctx, nil, "image", "inspect", "--format", "{{json .Config.Labels}}", "--", id)
		if errors.Is(err, sandbox.ErrNotFound) {
			continue
		}
		if err != nil {
			return gone, err
		}
		var have map[string]string
		if json.Unmarshal(bytes.TrimSpace(out), &have) != nil || !hasLabels(have, labels) {
			continue
		}
		// podman matches an ancestor by its bare hex ID only.
		if used, err := d.cli.Output(ctx, nil, "ps", "-aq", "--no-trunc", "--filter", "ancestor="+strings.TrimPrefix(id, "sha256:")); err != nil || len(strings.TrimSpace(string(used))) > 0 {
			continue
		}
		if !dryRun {
			if _, err := d.cli.Output(ctx, nil, "rmi", id); err != nil {
				continue // taken by a container meanwhile
			}
		}
		gone = append(gone, id)
	}
	return gone, nil
}

// listImages runs an image listing. podman fails a whole listing with
// "image not known" when another client removes one of the images while
// it lists them; the listing is then tried again, a few times.
func (d *Dialect) listImages(ctx context.Context, args ...string) ([]byte, error) {
	for try := 1; ; try++ {
		out, err := d.cli.Output(ctx, nil, args...)
		if err == nil || !errors.Is(err, sandbox.ErrNotFound) || try == 5 {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(try) * 200 * time.Millisecond):
		}
	}
}

// hasLabels says whether have carries every label of want (an empty
// value: the key with any value).
func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		got, ok := have[k]
		if !ok || (v != "" && got != v) {
			return false
		}
	}
	return true
}

// tailWriter keeps the last n bytes written to it.
type tailWriter struct {
	n   int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
	}
	return len(p), nil
}

func (t *tailWriter) bytes() []byte { return t.buf }
