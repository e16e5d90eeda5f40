// Package app wires sandbox-mcp together: configuration from flags,
// environment and an optional config file, runtime selection, and the
// stdio MCP server.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/mcpserver"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/apple"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// Config is everything `sandbox-mcp serve` needs.
type Config struct {
	Runtime     string                     `json:"runtime,omitempty"` // auto|container|docker|podman
	StateDir    string                     `json:"state_dir,omitempty"`
	Prefix      string                     `json:"prefix,omitempty"`
	Defaults    sandbox.Profile            `json:"defaults"`
	Profiles    map[string]sandbox.Profile `json:"profiles,omitempty"`
	Toolsets    []string                   `json:"toolsets,omitempty"`
	BootDefault bool                       `json:"boot_default"`
	PoolSize    int                        `json:"pool_size,omitempty"`
	LogLevel    string                     `json:"log_level,omitempty"`
	Version     string                     `json:"-"`
}

// DefaultConfig is the configuration before flags, environment and file.
func DefaultConfig() Config {
	return Config{
		Runtime:     "auto",
		StateDir:    defaultStateDir(),
		Prefix:      "sandbox-mcp",
		Defaults:    sandbox.Profile{Image: "mcp-dev", CPUs: 2, Memory: "1G", Disk: "20G", Pids: 1024},
		BootDefault: true,
	}
}

func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "sandbox-mcp")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "sandbox-mcp")
	}
	return filepath.Join(home, ".local", "state", "sandbox-mcp")
}

// LoadFile merges a JSON config file into c; fields absent from the file
// keep their values.
func (c *Config) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	var f Config
	f.BootDefault = c.BootDefault
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("parse config %s: %w", path, err)
	}
	if f.Runtime != "" {
		c.Runtime = f.Runtime
	}
	if f.StateDir != "" {
		c.StateDir = f.StateDir
	}
	if f.Prefix != "" {
		c.Prefix = f.Prefix
	}
	c.Defaults = c.Defaults.Merge(f.Defaults)
	for name, p := range f.Profiles {
		if c.Profiles == nil {
			c.Profiles = map[string]sandbox.Profile{}
		}
		c.Profiles[name] = p
	}
	if len(f.Toolsets) > 0 {
		c.Toolsets = f.Toolsets
	}
	c.BootDefault = f.BootDefault
	if f.PoolSize > 0 {
		c.PoolSize = f.PoolSize
	}
	if f.LogLevel != "" {
		c.LogLevel = f.LogLevel
	}
	return nil
}

// Validate checks the configuration before anything runs.
func (c *Config) Validate() error {
	switch c.Runtime {
	case "auto", "docker", "podman", "container":
	default:
		return fmt.Errorf("runtime must be auto, container, docker or podman, not %q", c.Runtime)
	}
	if err := sandbox.ValidateName(c.Prefix); err != nil || len(c.Prefix) > 24 {
		return fmt.Errorf("prefix %q must be a valid name of at most 24 bytes", c.Prefix)
	}
	if err := c.Defaults.Validate(); err != nil {
		return err
	}
	for name, p := range c.Profiles {
		if err := sandbox.ValidateName(name); err != nil {
			return fmt.Errorf("profile %q: %w", name, err)
		}
		if err := c.Defaults.Merge(p).Validate(); err != nil {
			return fmt.Errorf("profile %q: %w", name, err)
		}
	}
	return nil
}

// NewLogger returns the server's stderr logger.
func NewLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// SelectRuntime returns the driver for kind. "auto" picks Apple's
// container CLI on macOS when present, else a docker whose daemon answers,
// else podman.
func SelectRuntime(ctx context.Context, kind string, logger *slog.Logger) (sandbox.Runtime, error) {
	return selectRuntime(ctx, kind, runtime.GOOS, logger)
}

func selectRuntime(ctx context.Context, kind, goos string, logger *slog.Logger) (sandbox.Runtime, error) {
	switch kind {
	case "docker", "podman":
		return docker.New(docker.Options{Flavor: docker.Flavor(kind), Logger: logger}), nil
	case "container":
		return apple.New(apple.Options{Logger: logger}), nil
	}
	if goos == "darwin" {
		if _, err := exec.LookPath("container"); err == nil {
			return selectRuntime(ctx, "container", goos, logger)
		}
	}
	var candidates []sandbox.Runtime
	for _, f := range []docker.Flavor{docker.Docker, docker.Podman} {
		if _, err := exec.LookPath(string(f)); err == nil {
			candidates = append(candidates, docker.New(docker.Options{Flavor: f, Logger: logger}))
		}
	}
	if len(candidates) == 0 {
		return nil, fmt.Errorf("%w: none of container, docker, podman is on PATH (Linux: run `make setup` or `sudo apt-get install podman`; macOS: install Apple's container)", sandbox.ErrEngineMissing)
	}
	var firstErr error
	for _, rt := range candidates {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := rt.Ping(pctx)
		cancel()
		if err == nil {
			return rt, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		logger.Debug("runtime not usable", "runtime", rt.Kind(), "err", err)
	}
	// Nothing answers: use the first so tools report its error and hint.
	logger.Warn("no container engine answered", "err", firstErr)
	return candidates[0], nil
}

// reconcileDelay is how long a starting server waits before tidying the
// state against the engine.
const reconcileDelay = 3 * time.Second

// Serve runs the stdio MCP server until in closes or ctx ends.
func Serve(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := NewLogger(cfg.LogLevel)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	rt, err := SelectRuntime(ctx, cfg.Runtime, logger)
	if err != nil {
		return err
	}
	st, err := state.New(cfg.StateDir)
	if err != nil {
		return err
	}
	st.OnCorrupt = func(movedTo string, err error) {
		logger.Error("state file was unreadable; moved aside and started afresh", "moved_to", movedTo, "err", err)
	}
	m := sandbox.NewManager(rt, sandbox.Config{
		Prefix: cfg.Prefix, Defaults: cfg.Defaults, Profiles: cfg.Profiles, PoolSize: cfg.PoolSize,
		History: st, Jobs: st, Sandboxes: st, Logger: logger,
	})
	defer m.Close()
	ms, err := mcpserver.New(m, mcpserver.Options{
		Version: cfg.Version, Toolsets: cfg.Toolsets, OutputDir: filepath.Join(cfg.StateDir, "outputs"), Logger: logger,
	})
	if err != nil {
		return err
	}
	logger.Info("serving", "runtime", rt.Kind(), "image", cfg.Defaults.Image, "state_dir", cfg.StateDir)
	go func() {
		// Tidying waits a moment so it does not compete with the first
		// call, which a freshly started server usually gets at once.
		select {
		case <-ctx.Done():
			return
		case <-time.After(reconcileDelay):
		}
		if err := m.Reconcile(ctx); err != nil {
			logger.Debug("reconcile state with the engine", "err", err)
		}
	}()
	if cfg.BootDefault {
		// Boot in the background: the MCP handshake must not wait for it.
		go func() {
			if _, info, err := m.Get(ctx, sandbox.DefaultName); err != nil {
				logger.Warn("default sandbox not booted", "err", err)
			} else {
				logger.Debug("default sandbox ready", "took", info.Took)
			}
		}()
	}
	return mcpserver.ServeStdio(ctx, ms, in, out, log.New(os.Stderr, "sandbox-mcp: ", log.LstdFlags))
}

// Doctor checks the engine and the default image and writes a report to w.
func Doctor(ctx context.Context, cfg Config, w io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := NewLogger(cfg.LogLevel)
	rt, err := SelectRuntime(ctx, cfg.Runtime, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "runtime:  %s (%s)\n", rt.Kind(), rt.Binary())
	if err := rt.Ping(ctx); err != nil {
		fmt.Fprintf(w, "engine:   FAIL %v\n", err)
		return errors.New("container engine not usable")
	}
	v, err := rt.Version(ctx)
	if err != nil {
		fmt.Fprintf(w, "engine:   FAIL %v\n", err)
		return errors.New("container engine not usable")
	}
	fmt.Fprintf(w, "engine:   ok, version %s\n", v)
	ok, err := rt.ImageExists(ctx, cfg.Defaults.Image)
	switch {
	case err != nil:
		fmt.Fprintf(w, "image:    FAIL %v\n", err)
		return err
	case !ok:
		fmt.Fprintf(w, "image:    FAIL %s is missing (Linux: `make setup`; macOS: `container build -t mcp-dev -f Containerfile.mcp-dev .`)\n", cfg.Defaults.Image)
		return errors.New("default image missing")
	}
	fmt.Fprintf(w, "image:    ok, %s\n", cfg.Defaults.Image)
	lim, ds := sandbox.HostLimits(ctx, rt, cfg.Defaults)
	fmt.Fprintf(w, "limits:   %s\n", lim)
	for _, n := range ds.Notes {
		fmt.Fprintf(w, "          %s\n", n)
	}
	if lim.Workspace == sandbox.MechWatcher || lim.Rootfs == sandbox.MechWatcher {
		fmt.Fprintf(w, "          watcher: polls usage every second and stops writers past the limit (overshoot about 1 s of writing) or when host free space falls below max(5%%, 2 GB)\n")
	}
	fmt.Fprintf(w, "state:    %s\n", cfg.StateDir)
	fmt.Fprintf(w, "register: claude mcp add sandbox -- %s serve\n", selfPath())
	return nil
}

func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return "sandbox-mcp"
	}
	return p
}

// SplitList splits a comma-separated flag value.
func SplitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}
