// Package apple is the runtime dialect for Apple's `container` CLI on
// macOS, where every sandbox is a lightweight VM. It builds the argv that
// CLI takes, parses each release's JSON (0.8 to 1.5 differ), maps its error
// texts to the sandbox sentinels, and picks features by the version it
// detects once.
//
// Apple's argv differs from docker's in ways that matter: there is no `--`
// option terminator (exec passes it to the process as the command), names
// are the container ids, `list` has no label filter, and there is no
// rename or commit.
package apple

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/cli"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/diskguard"
)

// Dialect drives Apple's container CLI.
type Dialect struct {
	cli *cli.Runner

	mu       sync.Mutex
	features *Features // detected once, on first need
	domain   string    // the configured default registry domain, once read
}

var (
	_ sandbox.Runtime     = (*Dialect)(nil)
	_ sandbox.StatsReader = (*Dialect)(nil)
)

// Options configure a Dialect.
type Options struct {
	// Binary is the CLI to run; defaults to "container" on PATH.
	Binary string
	// Env is added to the CLI's environment.
	Env    []string
	Logger *slog.Logger
}

// New returns a dialect for Apple's container CLI.
func New(opts Options) *Dialect {
	bin := opts.Binary
	if bin == "" {
		bin = "container"
	}
	return &Dialect{cli: &cli.Runner{
		Binary:      bin,
		Env:         opts.Env,
		Logger:      opts.Logger,
		Classify:    Classify,
		MissingHint: InstallHint,
	}}
}

// Kind implements sandbox.Runtime.
func (d *Dialect) Kind() string { return "container" }

// Binary implements sandbox.Runtime.
func (d *Dialect) Binary() string { return d.cli.Binary }

// Features detects the CLI's version (`container --version`) on first use
// and reports what it allows. A failed detection is not remembered.
func (d *Dialect) Features(ctx context.Context) (Features, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.features != nil {
		return *d.features, nil
	}
	out, err := d.cli.Output(ctx, nil, "--version")
	if err != nil {
		return Features{}, err
	}
	v, err := ParseVersion(string(out))
	if err != nil {
		return Features{}, fmt.Errorf("container --version: %w", err)
	}
	f := FeaturesOf(v)
	f.HostCPUs = runtime.NumCPU() // the server runs on the Mac whose VMs it makes
	d.features = &f
	return f, nil
}

// Version implements sandbox.Runtime: the CLI's release, e.g. "1.5.0".
func (d *Dialect) Version(ctx context.Context) (string, error) {
	f, err := d.Features(ctx)
	if err != nil {
		return "", err
	}
	return f.Version.String(), nil
}

// Ping implements sandbox.Runtime: the CLI must be installed, at least
// MinVersion, and its system service started.
func (d *Dialect) Ping(ctx context.Context) error {
	f, err := d.Features(ctx)
	if err != nil {
		return err
	}
	if !f.Version.AtLeast(MinVersion) {
		return &sandbox.EngineError{
			Argv: []string{d.cli.Binary, "--version"}, ExitCode: 0,
			Err:  fmt.Errorf("container %s is older than %s, the oldest release sandbox-mcp supports", f.Version, MinVersion),
			Hint: "upgrade it: `brew upgrade container` or a newer .pkg from https://github.com/apple/container/releases",
		}
	}
	st, err := d.SystemStatus(ctx)
	if err != nil {
		return err
	}
	if !st.Running() {
		return &sandbox.EngineError{
			Argv: []string{d.cli.Binary, "system", "status"}, ExitCode: 1,
			Kind: sandbox.ErrEngineNotStarted,
			Err:  fmt.Errorf("the container system is %s", st.Status),
			Hint: "run `" + StartHint + "`",
		}
	}
	return nil
}

// SystemStatus runs `container system status`. A stopped system is a
// status, not an error, although the CLI exits 1 for it.
func (d *Dialect) SystemStatus(ctx context.Context) (SystemStatus, error) {
	f, err := d.Features(ctx)
	if err != nil {
		return SystemStatus{}, err
	}
	args := []string{"system", "status"}
	if f.StatusJSON {
		args = append(args, "--format", "json")
	}
	stdout, _, err := d.cli.Run(ctx, nil, args...)
	var ee *sandbox.EngineError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode == 1) {
		return SystemStatus{}, err
	}
	if f.StatusJSON {
		if st, perr := ParseSystemStatus(stdout); perr == nil {
			return st, nil
		}
	}
	// Text form (before 0.10, or unexpected output).
	text := strings.ToLower(string(stdout))
	switch {
	case strings.Contains(text, "not registered"):
		return SystemStatus{Status: "unregistered"}, nil
	case strings.Contains(text, "not running"):
		return SystemStatus{Status: "not running"}, nil
	case err == nil && strings.Contains(text, "running"):
		return SystemStatus{Status: "running"}, nil
	case err != nil:
		return SystemStatus{}, err
	}
	return SystemStatus{}, fmt.Errorf("container system status: unrecognised output %q", strings.TrimSpace(string(stdout)))
}

// Run implements sandbox.Runtime. It reports no ID: Apple's ID is the
// container's name, which tells no recreated container apart (the boot
// inspects it instead, for its creation time).
func (d *Dialect) Run(ctx context.Context, spec sandbox.RunSpec) (string, error) {
	f, err := d.Features(ctx)
	if err != nil {
		return "", err
	}
	args, err := RunArgs(f, spec)
	if err != nil {
		return "", err
	}
	if n := int(math.Ceil(spec.CPUs)); f.HostCPUs > 0 && n > f.HostCPUs && d.cli.Logger != nil {
		d.cli.Logger.Warn("a sandbox asks for more CPUs than this Mac has: it gets the Mac's", "sandbox", spec.Name, "cpus", n, "host_cpus", f.HostCPUs)
	}
	_, err = d.cli.Output(ctx, nil, args...)
	return "", err
}

// RunArgs builds the argv (without the program) for starting a detached
// sandbox container with the features f allows.
func RunArgs(f Features, spec sandbox.RunSpec) ([]string, error) {
	if strings.HasPrefix(spec.Name, "-") || strings.HasPrefix(spec.Image, "-") || spec.Image == "" {
		return nil, fmt.Errorf("container run: invalid name %q or image %q", spec.Name, spec.Image)
	}
	args := []string{"run", "-d", "--name", spec.Name}
	for _, k := range sortedKeys(spec.Labels) {
		l, err := runLabelArg(k, spec.Labels[k])
		if err != nil {
			return nil, fmt.Errorf("container run %s: %w", spec.Name, err)
		}
		args = append(args, "-l", l)
	}
	if spec.Init && f.Init {
		args = append(args, "--init")
	}
	if spec.CPUs > 0 {
		// Apple takes whole CPUs; a fraction rounds up. No more than the
		// host has (see Features.HostCPUs): before 0.12.0 the VM would not
		// boot, after it would get the host's count while the container
		// showed the count asked for.
		n := int(math.Ceil(spec.CPUs))
		if f.HostCPUs > 0 {
			n = min(n, f.HostCPUs)
		}
		args = append(args, "-c", strconv.Itoa(n))
	}
	if spec.Memory != "" {
		m, err := memoryArg(spec.Memory)
		if err != nil {
			return nil, err
		}
		args = append(args, "-m", m)
	}
	if spec.Network != "" {
		args = append(args, "--network", spec.Network)
	}
	if spec.Virtualization {
		args = append(args, "--virtualization")
	}
	for _, m := range spec.Mounts {
		v, err := volumeArg(m)
		if err != nil {
			return nil, err
		}
		args = append(args, "-v", v)
	}
	if spec.Workdir != "" {
		args = append(args, "-w", spec.Workdir)
	}
	for _, k := range sortedKeys(spec.Env) {
		// Apple keeps "-e K=V" whole and keys it by what precedes the first
		// '=' (Parser.allEnv): any value goes, a key must be there and hold no '='.
		if k == "" || strings.Contains(k, "=") {
			return nil, fmt.Errorf("container run %s: environment variable name %q: it must be non-empty and hold no '='", spec.Name, k)
		}
		args = append(args, "-e", k+"="+spec.Env[k])
	}
	args = append(args, spec.Image)
	return append(args, spec.Command...), nil
}

// memoryArg spells a memory size for `-m` in whole MiB with an explicit
// unit ("1536M"): Apple reads a bare number as bytes and keeps only whole
// MiB (Parser.memoryStringAsMiB, Measurement.parse), so "512k" would be
// 0 MiB. A K/M/G/T suffix (either case) or none (bytes) is taken, and the
// size is rounded up to a whole MiB.
func memoryArg(s string) (string, error) {
	m := memoryRE.FindStringSubmatch(s)
	if m == nil {
		return "", fmt.Errorf("memory %q: want a size such as 512M or 2G", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	shift := map[string]uint{"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[strings.ToLower(m[2])]
	if err != nil || n <= 0 || n > (1<<62)>>shift {
		return "", fmt.Errorf("memory %q: want a size such as 512M or 2G", s)
	}
	const mib = 1 << 20
	return strconv.FormatInt(((n<<shift)+mib-1)/mib, 10) + "M", nil
}

var memoryRE = regexp.MustCompile(`^([0-9]+)([KMGTkmgt]?)$`)

// volumeArg spells a mount for `-v`: name:/target for a named volume, or
// /host/dir:/target for a host path, with :ro when read-only.
func volumeArg(m sandbox.Mount) (string, error) {
	src := m.Volume
	if src != "" {
		if err := ValidVolumeName(src); err != nil {
			return "", err
		}
	} else {
		src = m.Source
		if !strings.HasPrefix(src, "/") {
			return "", fmt.Errorf("mount source %q must be an absolute host path", src)
		}
	}
	if src == "" || strings.HasPrefix(src, "-") || !strings.HasPrefix(m.Target, "/") ||
		strings.Contains(src, ":") || strings.Contains(m.Target, ":") {
		return "", fmt.Errorf("mount %q → %q: need a volume name or absolute path and an absolute target without ':'", src, m.Target)
	}
	v := src + ":" + m.Target
	if m.ReadOnly {
		v += ":ro"
	}
	return v, nil
}

// Start implements sandbox.Runtime.
func (d *Dialect) Start(ctx context.Context, name string) error {
	_, err := d.cli.Output(ctx, nil, "start", name)
	return err
}

// Stop implements sandbox.Runtime.
func (d *Dialect) Stop(ctx context.Context, name string, grace time.Duration) error {
	secs := strconv.Itoa(int(grace.Round(time.Second) / time.Second))
	_, err := d.cli.Output(ctx, nil, "stop", "-t", secs, name)
	return err
}

// Remove implements sandbox.Runtime. A running container is killed at once.
func (d *Dialect) Remove(ctx context.Context, name string) error {
	_, err := d.cli.Output(ctx, nil, "delete", "--force", name)
	return err
}

// Inspect implements sandbox.Runtime. A missing container is an error from
// 1.0 and an empty array (exit 0) before; both become ErrNotFound.
func (d *Dialect) Inspect(ctx context.Context, name string) (sandbox.Container, error) {
	out, err := d.cli.Output(ctx, nil, "inspect", name)
	if err != nil {
		return sandbox.Container{}, err
	}
	cs, err := ParseContainers(out)
	if err != nil {
		return sandbox.Container{}, fmt.Errorf("inspect %s: %w", name, err)
	}
	for _, c := range cs {
		if c.Name == name {
			return c, nil
		}
	}
	return sandbox.Container{}, &sandbox.EngineError{
		Argv: []string{d.cli.Binary, "inspect", name}, Kind: sandbox.ErrNotFound,
		Err: fmt.Errorf("container %s not found", name),
	}
}

// List implements sandbox.Runtime. Apple's list has no label filter, so
// the labels are matched here.
func (d *Dialect) List(ctx context.Context, labels map[string]string) ([]sandbox.Container, error) {
	out, err := d.cli.Output(ctx, nil, "list", "--all", "--format", "json")
	if err != nil {
		return nil, err
	}
	all, err := ParseContainers(out)
	if err != nil {
		return nil, err
	}
	var cs []sandbox.Container
next:
	for _, c := range all {
		for k, v := range labels {
			if c.Labels[k] != v {
				continue next
			}
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// ExecCommand implements sandbox.Runtime. Apple's exec has no `--`: the
// first argument after the container name is the program, so argv[0] must
// not start with '-'.
func (d *Dialect) ExecCommand(ctx context.Context, name string, spec sandbox.ExecSpec) proc.Process {
	return proc.FromCmd(d.cli.Command(ctx, ExecArgs(name, spec)...))
}

// ExecArgs builds the argv (without the program) of an exec: always -i
// when there is input, -t only for a terminal session (Apple then needs
// its stdin to be a terminal, and merges stderr into stdout).
func ExecArgs(name string, spec sandbox.ExecSpec) []string {
	args := []string{"exec"}
	if spec.Interactive || spec.Stdin != nil {
		args = append(args, "-i")
	}
	if spec.TTY {
		args = append(args, "-t")
	}
	if spec.Workdir != "" {
		args = append(args, "-w", spec.Workdir)
	}
	if spec.User != "" {
		args = append(args, "-u", spec.User)
	}
	for _, k := range sortedKeys(spec.Env) {
		args = append(args, "-e", k+"="+spec.Env[k])
	}
	args = append(args, name)
	return append(args, spec.Argv...)
}

// Exec implements sandbox.Runtime. The process's own non-zero exit is a
// result; the CLI's failures (exit 1 with an `Error: …` line it
// recognises) are errors. Callers must not leave background processes
// holding the exec's stdout or stderr: Apple then waits 3 s and fails the
// exec with a CancellationError, losing the exit code.
func (d *Dialect) Exec(ctx context.Context, name string, spec sandbox.ExecSpec) (sandbox.ExecOutput, error) {
	return d.cli.Exec(ctx, d.cli.Command(ctx, ExecArgs(name, spec)...), spec.Stdin, func(code int, stderr string) bool {
		return d.cliFailure(ctx, name, code, stderr)
	})
}

// cliFailure tells the CLI's own failure from the process's exit status.
// The CLI exits 1 with a line starting "Error: " that Classify knows, or
// with the drain timeout's CancellationError. A process can print such a
// line too, so a "not found" or "not running" is believed only when the
// container really is missing or stopped.
func (d *Dialect) cliFailure(ctx context.Context, name string, code int, stderr string) bool {
	kind, drained := cliError(code, stderr)
	switch {
	case drained:
		return true
	case kind == nil:
		return false
	case errors.Is(kind, sandbox.ErrNotFound) || errors.Is(kind, sandbox.ErrNotRunning):
		c, err := d.Inspect(ctx, name)
		return err != nil || !c.Running()
	}
	return true
}

// cliError finds the CLI's own error line in an exec's stderr: the kind
// Classify gives it, or drained when the CLI gave up waiting for the
// process's output pipes to close.
func cliError(code int, stderr string) (kind error, drained bool) {
	if code != 1 && code != 64 {
		return nil, false
	}
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.HasPrefix(line, "Error: ") {
			continue
		}
		if strings.Contains(line, "failed to exec process CancellationError") {
			return nil, true
		}
		if k, _ := Classify(code, line); k != nil {
			kind = k
		}
	}
	return kind, false
}

// VolumeCreate implements sandbox.Runtime.
func (d *Dialect) VolumeCreate(ctx context.Context, name string, labels map[string]string) error {
	args, err := VolumeCreateArgs(name, labels, 0)
	if err != nil {
		return err
	}
	_, err = d.cli.Output(ctx, nil, args...)
	if errors.Is(err, sandbox.ErrAlreadyExists) {
		return nil
	}
	return err
}

// VolumeRemove implements sandbox.Runtime. A missing volume is no error
// (`volume delete` says "failed to delete one or more volumes: [...]").
// A volume that a container still mounts, running or not, cannot go; the
// CLI says only "delete failed for one or more volumes: [...]" then (the
// reason is in a log line above it), so after any other failure the
// containers are listed, and one that mounts the volume makes the error
// sandbox.ErrInUse, which callers wait out.
func (d *Dialect) VolumeRemove(ctx context.Context, name string) error {
	if err := ValidVolumeName(name); err != nil {
		return err
	}
	_, err := d.cli.Output(ctx, nil, "volume", "delete", name)
	var ee *sandbox.EngineError
	switch {
	case err == nil, errors.Is(err, sandbox.ErrNotFound):
		return nil
	case errors.Is(err, sandbox.ErrInUse), ctx.Err() != nil, !errors.As(err, &ee), ee.Kind != nil:
		return err
	}
	users, lerr := d.volumeUsers(ctx, name)
	if lerr != nil {
		return err
	}
	if len(users) == 0 {
		// Removed meanwhile by another client (the CLI then says only
		// that the delete failed): gone is what was asked.
		if vols, verr := d.Volumes(ctx); verr == nil && !slices.ContainsFunc(vols, func(v Volume) bool { return v.Name == name }) {
			return nil
		}
		return err
	}
	inUse := *ee
	inUse.Kind = sandbox.ErrInUse
	inUse.Hint = "container " + strings.Join(users, ", ") + " still mounts it"
	return &inUse
}

// volumeUsers lists the containers, running or not, that mount volume vol.
func (d *Dialect) volumeUsers(ctx context.Context, vol string) ([]string, error) {
	out, err := d.cli.Output(ctx, nil, "list", "--all", "--format", "json")
	if err != nil {
		return nil, err
	}
	mounts, err := ParseVolumeMounts(out)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, id := range slices.Sorted(maps.Keys(mounts)) {
		if slices.Contains(mounts[id], vol) {
			users = append(users, id)
		}
	}
	return users, nil
}

// Volumes lists the volumes the system knows.
func (d *Dialect) Volumes(ctx context.Context) ([]Volume, error) {
	out, err := d.cli.Output(ctx, nil, "volume", "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	return ParseVolumes(out)
}

// VolumeNames implements sandbox.VolumeLister.
func (d *Dialect) VolumeNames(ctx context.Context) ([]string, error) {
	vols, err := d.Volumes(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(vols))
	for i, v := range vols {
		names[i] = v.Name
	}
	return names, nil
}

// Images lists the local images.
func (d *Dialect) Images(ctx context.Context) ([]Image, error) {
	out, err := d.cli.Output(ctx, nil, "image", "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	return ParseImages(out)
}

// RegistryDomain is the default registry domain the CLI puts in front of
// references without one, read from the CLI once: from 1.0 config.toml's
// [registry] domain, shown by `system property list --format json`
// (ContainerSystemConfig.registry); before, the registry.domain default
// shown by `system property get registry.domain` (DefaultsStore). When it
// cannot be read it is DefaultRegistryDomain, and it is read again next
// time.
func (d *Dialect) RegistryDomain(ctx context.Context) string {
	f, err := d.Features(ctx)
	if err != nil {
		return DefaultRegistryDomain
	}
	d.mu.Lock()
	known := d.domain
	d.mu.Unlock()
	if known != "" {
		return known
	}
	var domain string
	if f.Version.AtLeast(v1_0) {
		out, err := d.cli.Output(ctx, nil, "system", "property", "list", "--format", "json")
		var cfg struct {
			Registry struct {
				Domain string `json:"domain"`
			} `json:"registry"`
		}
		if err == nil && json.Unmarshal(out, &cfg) == nil {
			domain = cfg.Registry.Domain
		}
	} else if out, err := d.cli.Output(ctx, nil, "system", "property", "get", "registry.domain"); err == nil {
		domain = strings.TrimSpace(string(out))
	}
	if domain == "" || strings.ContainsAny(domain, " \t\n") {
		return DefaultRegistryDomain
	}
	d.mu.Lock()
	d.domain = domain
	d.mu.Unlock()
	return domain
}

// ImageExists implements sandbox.Runtime, comparing references the way
// Apple stores them ("mcp-dev" is docker.io/library/mcp-dev:latest, or
// under the configured default registry domain).
func (d *Dialect) ImageExists(ctx context.Context, ref string) (bool, error) {
	imgs, err := d.Images(ctx)
	if err != nil {
		return false, err
	}
	domain := d.RegistryDomain(ctx)
	want := NormalizeReference(ref, domain)
	for _, img := range imgs {
		if NormalizeReference(img.Reference, domain) == want {
			return true, nil
		}
		if strings.Contains(want, "@") && strings.HasSuffix(want, "@"+img.Digest) {
			return true, nil
		}
	}
	return false, nil
}

// Stats implements sandbox.StatsReader. Apple samples twice, 2 s apart,
// so a call takes about 2 s.
func (d *Dialect) Stats(ctx context.Context, name string) (sandbox.Stats, error) {
	out, err := d.cli.Output(ctx, nil, "stats", "--format", "json", "--no-stream", name)
	if err != nil {
		return sandbox.Stats{}, err
	}
	all, err := ParseStats(out)
	if err != nil {
		return sandbox.Stats{}, err
	}
	for _, s := range all {
		if s.ID == name {
			return sandbox.Stats{
				CPUTime:     time.Duration(s.CPUUsageUsec) * time.Microsecond,
				MemoryUsage: s.MemoryUsageBytes,
				MemoryLimit: s.MemoryLimitBytes,
				NetRx:       s.NetworkRxBytes,
				NetTx:       s.NetworkTxBytes,
				BlockRead:   s.BlockReadBytes,
				BlockWrite:  s.BlockWriteBytes,
				Processes:   s.NumProcesses,
			}, nil
		}
	}
	// Apple skips stopped containers silently.
	return sandbox.Stats{}, &sandbox.EngineError{
		Argv: []string{d.cli.Binary, "stats", name}, Kind: sandbox.ErrNotRunning,
		Err: fmt.Errorf("no stats for %s: it is not running", name),
	}
}

// CopyTo copies a host file or directory into a running container
// (`container cp`, 1.0.0+).
func (d *Dialect) CopyTo(ctx context.Context, name, hostPath, ctrPath string) error {
	return d.copy(ctx, hostPath, name+":"+ctrPath)
}

// CopyFrom copies a file or directory out of a running container.
func (d *Dialect) CopyFrom(ctx context.Context, name, ctrPath, hostPath string) error {
	return d.copy(ctx, name+":"+ctrPath, hostPath)
}

func (d *Dialect) copy(ctx context.Context, src, dst string) error {
	f, err := d.Features(ctx)
	if err != nil {
		return err
	}
	if !f.Copy {
		return fmt.Errorf("container cp needs container 1.0.0 or newer (this is %s)", f.Version)
	}
	if strings.HasPrefix(src, "-") || strings.HasPrefix(dst, "-") {
		return fmt.Errorf("container cp: path %q or %q starts with '-'", src, dst)
	}
	_, err = d.cli.Output(ctx, nil, "cp", src, dst)
	return err
}

// Export writes a tar of the container's root filesystem to file (volumes
// and mounts are not included). Before 1.2.1 the container must be stopped.
func (d *Dialect) Export(ctx context.Context, name, file string) error {
	f, err := d.Features(ctx)
	if err != nil {
		return err
	}
	if !f.LiveExport {
		c, err := d.Inspect(ctx, name)
		if err != nil {
			return err
		}
		if c.Running() {
			return fmt.Errorf("container %s exports only stopped containers; 1.2.1 and newer export running ones", f.Version)
		}
	}
	_, err = d.cli.Output(ctx, nil, "export", "-o", file, name)
	return err
}

// BuildSpec describes an image build.
type BuildSpec struct {
	Tag        string
	File       string // Dockerfile or Containerfile; "" lets the CLI look
	ContextDir string
	NoCache    bool
}

// BuildArgs builds the argv (without the program) of an image build.
func BuildArgs(b BuildSpec) ([]string, error) {
	if b.Tag == "" || strings.HasPrefix(b.Tag, "-") || b.ContextDir == "" || strings.HasPrefix(b.ContextDir, "-") ||
		strings.HasPrefix(b.File, "-") {
		return nil, fmt.Errorf("container build: need a tag and a context directory (tag %q, context %q)", b.Tag, b.ContextDir)
	}
	args := []string{"build", "-t", b.Tag}
	if b.File != "" {
		args = append(args, "-f", b.File)
	}
	if b.NoCache {
		args = append(args, "--no-cache")
	}
	return append(args, b.ContextDir), nil
}

// Build builds an image with the CLI's BuildKit builder (which it starts
// on first use).
func (d *Dialect) Build(ctx context.Context, b BuildSpec) error {
	args, err := BuildArgs(b)
	if err != nil {
		return err
	}
	_, err = d.cli.Output(ctx, nil, args...)
	return err
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

var (
	_ sandbox.DiskLimiter        = (*Dialect)(nil)
	_ sandbox.SizedVolumeCreator = (*Dialect)(nil)
)

// DiskSupport implements sandbox.DiskLimiter. Apple's volumes are ext4
// block images of a given size; the rootfs has no size option, and there
// is no pids flag (each sandbox is a VM with its own kernel, so a fork
// bomb exhausts only that VM's memory).
func (d *Dialect) DiskSupport(context.Context) sandbox.DiskSupport {
	return sandbox.DiskSupport{VolumeSize: true, Notes: []string{
		"rootfs: `container run` has no size option",
		"pids: `container run` has no pids limit; each sandbox is a VM of its own",
	}}
}

// VolumeCreateSized implements sandbox.SizedVolumeCreator with
// `volume create -s`. A volume of that name that was made without -s (by
// VolumeCreate, or before limits existed) is kept, and is not sized: it
// is a sparse image of the CLI's default size, 512 GiB
// (VolumeStorage.defaultVolumeSizeBytes, 0.4.0–1.2.2), which bounds
// nothing in practice. One made with -s counts as sized, whatever size it
// was made with.
func (d *Dialect) VolumeCreateSized(ctx context.Context, name string, labels map[string]string, size int64, _ bool) (bool, error) {
	args, err := VolumeCreateArgs(name, labels, size)
	if err != nil {
		return false, err
	}
	_, err = d.cli.Output(ctx, nil, args...)
	if !errors.Is(err, sandbox.ErrAlreadyExists) {
		return err == nil, err
	}
	vols, lerr := d.Volumes(ctx)
	if lerr != nil {
		return false, lerr
	}
	for _, v := range vols {
		if v.Name == name {
			return v.Sized(), nil
		}
	}
	return false, fmt.Errorf("volume %s: it existed when created, and is gone from the list: %w", name, err)
}

// VolumeCreateArgs builds the argv (without the program) of creating a
// volume; size 0 leaves the engine's default size. Sizes are whole MiB.
// A name or label the CLI would refuse or alter is an error.
func VolumeCreateArgs(name string, labels map[string]string, size int64) ([]string, error) {
	if err := ValidVolumeName(name); err != nil {
		return nil, err
	}
	args := []string{"volume", "create"}
	for _, k := range sortedKeys(labels) {
		l, err := volumeLabelArg(k, labels[k])
		if err != nil {
			return nil, fmt.Errorf("volume create %s: %w", name, err)
		}
		args = append(args, "--label", l)
	}
	if size > 0 {
		args = append(args, "-s", strconv.FormatInt((size+1<<20-1)>>20, 10)+"M")
	}
	return append(args, name), nil
}

var _ sandbox.ImageSaver = (*Dialect)(nil)

// SavesRunning reports whether SaveImage works on a running container
// (1.2.1 and newer export live); before, the container must be stopped.
func (d *Dialect) SavesRunning(ctx context.Context) (bool, error) {
	f, err := d.Features(ctx)
	if err != nil {
		return false, err
	}
	if !f.TarExport {
		return false, fmt.Errorf("%w: snapshots need container 0.11.0 or newer (its export writes a tar of the root filesystem); this is %s", sandbox.ErrUnsupported, f.Version)
	}
	return f.LiveExport, nil
}

// SaveImage implements sandbox.ImageSaver. Apple has no commit: the
// root filesystem is exported to a tar and built into an image FROM
// scratch, with env (the container's PID 1 environment) and labels set
// again, since the rootfs tar carries no image config. They are written
// so that the build reads every value back as it was (see
// snapshotContainerfile); one a Containerfile cannot hold, such as a
// value with a newline, fails the snapshot with an error naming it.
func (d *Dialect) SaveImage(ctx context.Context, name, ref string, labels map[string]string, env []string, _ bool) error {
	if _, err := d.SavesRunning(ctx); err != nil {
		return err
	}
	// Written first: an env value or label a Containerfile cannot hold
	// (see snapshotContainerfile) fails the snapshot before the export.
	cf, err := snapshotContainerfile(env, labels)
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", name, err)
	}
	dir, err := os.MkdirTemp("", "sandbox-mcp-save-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The root filesystem lands on the host: the export stops before the
	// host's free space falls under the disk watcher's floor.
	err = diskguard.Watch(ctx, dir, "the export of "+name+"'s root filesystem", nil, func(ctx context.Context) error {
		return d.Export(ctx, name, filepath.Join(dir, "rootfs.tar"))
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(cf), 0o600); err != nil {
		return err
	}
	return d.Build(ctx, BuildSpec{Tag: ref, File: filepath.Join(dir, "Containerfile"), ContextDir: dir})
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// RemoveImage implements sandbox.ImageSaver. Apple's containers keep
// their own root filesystems, so an image in use can go. A missing image
// is no error: from 0.9.0 `--force` ignores it; before, the CLI says the
// same ("failed to delete one or more images") of a missing image and of
// one that failed to go, so the image list decides.
func (d *Dialect) RemoveImage(ctx context.Context, ref string) error {
	if strings.HasPrefix(ref, "-") {
		return fmt.Errorf("image delete: %q starts with '-'", ref)
	}
	f, err := d.Features(ctx)
	if err != nil {
		return err
	}
	args := []string{"image", "delete"}
	if f.ImageDeleteForce {
		args = append(args, "--force")
	}
	_, err = d.cli.Output(ctx, nil, append(args, ref)...)
	if err == nil || f.ImageDeleteForce || ctx.Err() != nil {
		return err
	}
	if ok, lerr := d.ImageExists(ctx, ref); lerr == nil && !ok {
		return nil
	}
	return err
}

var (
	_ sandbox.ImageBuilder = (*Dialect)(nil)
	_ sandbox.ImageLister  = (*Dialect)(nil)
)

// BuildImage implements sandbox.ImageBuilder, streaming the build's output.
func (d *Dialect) BuildImage(ctx context.Context, b sandbox.BuildSpec, log io.Writer) error {
	args, err := BuildArgs(BuildSpec{Tag: b.Tag, File: b.File, ContextDir: b.ContextDir})
	if err != nil {
		return err
	}
	cmd := d.cli.Command(ctx, args...)
	var tail bytes.Buffer
	w := io.MultiWriter(log, &limitTail{buf: &tail, n: 4096})
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return d.cli.Failure(ctx, cmd.Args, err, tail.Bytes())
	}
	return nil
}

// limitTail keeps the last n bytes written to it in buf.
type limitTail struct {
	buf *bytes.Buffer
	n   int
}

func (l *limitTail) Write(p []byte) (int, error) {
	l.buf.Write(p)
	if l.buf.Len() > l.n {
		keep := append([]byte(nil), l.buf.Bytes()[l.buf.Len()-l.n:]...)
		l.buf.Reset()
		l.buf.Write(keep)
	}
	return len(p), nil
}

// ListImages implements sandbox.ImageLister. Under a configured default
// registry domain other than docker.io, that domain is dropped from the
// references, as the CLI's own table does (ClientImage.denormalizeReference),
// so that local names such as a snapshot's read as they were given; Docker
// Hub references are kept whole.
func (d *Dialect) ListImages(ctx context.Context) ([]sandbox.ImageInfo, error) {
	imgs, err := d.Images(ctx)
	if err != nil {
		return nil, err
	}
	domain := d.RegistryDomain(ctx)
	out := make([]sandbox.ImageInfo, 0, len(imgs))
	for _, img := range imgs {
		ref := img.Reference
		if domain != DefaultRegistryDomain {
			ref = strings.TrimPrefix(ref, domain+"/")
		}
		out = append(out, sandbox.ImageInfo{Ref: ref, ID: img.Digest})
	}
	return out, nil
}
