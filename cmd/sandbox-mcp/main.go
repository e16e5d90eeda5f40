// Command sandbox-mcp is a stdio MCP server that gives AI agents long-lived
// Linux sandboxes on docker, podman or Apple's container CLI.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/app"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-mcp:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	cfg := app.DefaultConfig()
	cfg.Version = version
	var configFile, profiles, toolsets, image, cpus, memory string
	var noBoot bool

	root := &cobra.Command{
		Use:           "sandbox-mcp",
		Short:         "MCP server for long-lived Linux sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetOut(os.Stderr) // stdout belongs to the protocol
	pf := root.PersistentFlags()
	pf.StringVar(&cfg.Runtime, "runtime", envOr("SANDBOX_MCP_RUNTIME", cfg.Runtime), "container engine: auto, container, docker or podman (env SANDBOX_MCP_RUNTIME)")
	pf.StringVar(&image, "image", os.Getenv("SANDBOX_MCP_IMAGE"), "default sandbox image (env SANDBOX_MCP_IMAGE; default mcp-dev)")
	pf.StringVar(&cfg.StateDir, "state-dir", envOr("SANDBOX_MCP_STATE_DIR", cfg.StateDir), "where state lives (env SANDBOX_MCP_STATE_DIR)")
	pf.StringVar(&cfg.Prefix, "prefix", envOr("SANDBOX_MCP_PREFIX", cfg.Prefix), "container name prefix and owner label (env SANDBOX_MCP_PREFIX)")
	pf.StringVar(&configFile, "config", os.Getenv("SANDBOX_MCP_CONFIG"), "JSON config file (env SANDBOX_MCP_CONFIG)")
	pf.StringVar(&cpus, "cpus", os.Getenv("SANDBOX_MCP_CPUS"), "default CPUs per sandbox (env SANDBOX_MCP_CPUS; default 2)")
	pf.StringVar(&memory, "memory", os.Getenv("SANDBOX_MCP_MEMORY"), "default memory per sandbox, e.g. 1G (env SANDBOX_MCP_MEMORY)")
	pf.StringVar(&profiles, "profile", os.Getenv("SANDBOX_MCP_PROFILES"), "per-name profiles: NAME:key=v,key=v;NAME2:… (keys image, cpus, memory, virtualization, network, idle_ttl, disk, pids; env SANDBOX_MCP_PROFILES)")
	pf.StringVar(&cfg.LogLevel, "log-level", envOr("SANDBOX_MCP_LOG_LEVEL", "info"), "debug, info, warn or error (logs go to stderr)")

	// resolve applies the config file first, then flags and environment.
	resolve := func() error {
		flags := cfg
		if configFile != "" {
			if err := cfg.LoadFile(configFile); err != nil {
				return err
			}
			// Flags given explicitly win over the file.
			for name, v := range map[string]struct {
				dst  *string
				flag string
			}{
				"runtime":   {&cfg.Runtime, flags.Runtime},
				"state-dir": {&cfg.StateDir, flags.StateDir},
				"prefix":    {&cfg.Prefix, flags.Prefix},
				"log-level": {&cfg.LogLevel, flags.LogLevel},
			} {
				if root.PersistentFlags().Changed(name) {
					*v.dst = v.flag
				}
			}
		}
		if image != "" {
			cfg.Defaults.Image = image
		}
		if memory != "" {
			cfg.Defaults.Memory = memory
		}
		if cpus != "" {
			n, err := strconv.ParseFloat(cpus, 64)
			if err != nil {
				return fmt.Errorf("--cpus: %w", err)
			}
			cfg.Defaults.CPUs = n
		}
		for _, entry := range strings.Split(profiles, ";") {
			if strings.TrimSpace(entry) == "" {
				continue
			}
			name, spec, ok := strings.Cut(entry, ":")
			if !ok {
				return fmt.Errorf("--profile %q: want NAME:key=value,…", entry)
			}
			p, err := sandbox.ParseProfileSpec(spec)
			if err != nil {
				return fmt.Errorf("--profile %s: %w", name, err)
			}
			if cfg.Profiles == nil {
				cfg.Profiles = map[string]sandbox.Profile{}
			}
			cfg.Profiles[strings.TrimSpace(name)] = p
		}
		return cfg.Validate()
	}

	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve MCP over stdio (register with: claude mcp add sandbox -- sandbox-mcp serve)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resolve(); err != nil {
				return err
			}
			if toolsets != "" {
				cfg.Toolsets = app.SplitList(toolsets)
			}
			if noBoot {
				cfg.BootDefault = false
			}
			out, err := protocolStdout()
			if err != nil {
				return err
			}
			return app.Serve(cmd.Context(), cfg, os.Stdin, out)
		},
	}
	serve.Flags().StringVar(&toolsets, "toolsets", os.Getenv("SANDBOX_MCP_TOOLSETS"), "tool groups to expose: core,files,lifecycle or all (env SANDBOX_MCP_TOOLSETS)")
	serve.Flags().BoolVar(&noBoot, "no-boot-default", os.Getenv("SANDBOX_MCP_BOOT_DEFAULT") == "false", "do not boot the default sandbox at start (env SANDBOX_MCP_BOOT_DEFAULT=false)")

	doctor := &cobra.Command{
		Use:   "doctor",
		Short: "Check the container engine and the default image",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resolve(); err != nil {
				return err
			}
			return app.Doctor(cmd.Context(), cfg, os.Stderr)
		},
	}
	root.AddCommand(serve, doctor)
	return root
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// protocolStdout reserves the real stdout for MCP frames and points fd 1 at
// stderr, so a stray write by any code cannot corrupt the protocol.
func protocolStdout() (*os.File, error) {
	fd, err := unix.Dup(int(os.Stdout.Fd()))
	if err != nil {
		return nil, fmt.Errorf("dup stdout: %w", err)
	}
	unix.CloseOnExec(fd)
	if err := redirectFD(int(os.Stderr.Fd()), int(os.Stdout.Fd())); err != nil {
		return nil, fmt.Errorf("redirect stdout: %w", err)
	}
	os.Stdout = os.Stderr
	return os.NewFile(uintptr(fd), "mcp-stdout"), nil
}
