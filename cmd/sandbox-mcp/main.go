// Command sandbox-mcp is a stdio MCP server that gives AI agents long-lived
// Linux sandboxes on docker, podman or Apple's container CLI.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/app"
	"github.com/sandbox-mcp/sandbox-mcp/internal/version"
	"github.com/sandbox-mcp/sandbox-mcp/mcpserver"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		first := time.Now()
		cancel() // an orderly end
		for s := range sigs {
			// A person's second Ctrl-C ends the process at once. One
			// press that reaches it twice (from the terminal and relayed
			// by an MCP client a moment later), or a SIGTERM, does not
			// cut the orderly end short.
			if s == syscall.SIGINT && time.Since(first) > time.Second {
				// End by the signal itself, as its default does, so that
				// a shell loop around the command stops too.
				signal.Reset(syscall.SIGINT)
				_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
				time.Sleep(time.Second)
				os.Exit(130)
			}
		}
	}()
	os.Exit(exitCode(newRoot().ExecuteContext(ctx), console.Lines(os.Stderr)))
}

// exitCode is the process's exit status for err, which it reports on w:
// an *app.ExitError's code (a command's own status is not reported), 2
// for a command line cobra refused, else 1.
func exitCode(err error, w io.Writer) int {
	if err == nil {
		return app.ExitOK
	}
	var ee *app.ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintln(w, "sandbox-mcp:", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintln(w, "sandbox-mcp:", err)
	if isUsageError(err) {
		return app.ExitUsage
	}
	return app.ExitFailed
}

// isUsageError reports whether cobra refused the command line.
func isUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "invalid argument", "flag needs an argument", "requires exactly"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

const precedence = "Each setting comes from its flag, else its environment variable, else the config file, else the default."

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "sandbox-mcp",
		Short:         "MCP server for long-lived Linux sandboxes",
		Long:          "MCP server for long-lived Linux sandboxes.\n\n" + precedence,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	root.SetOut(os.Stderr) // stdout belongs to the protocol
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve MCP over stdio (register with: claude mcp add --scope user sandbox -- sandbox-mcp serve), or over HTTP with --http",
		Long: "Serve MCP over stdio. Register with: claude mcp add --scope user sandbox -- sandbox-mcp serve\n\n" +
			"With --http 127.0.0.1:PORT, serve several clients over streamable HTTP instead, at http://127.0.0.1:PORT/mcp;\n" +
			"each request carries the bearer token kept in --http-token-file; sandbox-mcp doctor --http ADDR prints the client setup.\n\n" + precedence +
			"\n\nToolsets (--toolsets):\n" + mcpserver.DescribeToolsets(),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			if cfg.HTTP != "" {
				return app.Serve(cmd.Context(), cfg, nil, nil)
			}
			if isTerminal(os.Stdin) {
				fmt.Fprintln(os.Stderr, "sandbox-mcp: waiting for an MCP client on stdin. An MCP client (Claude Code, Claude Desktop, Cursor…) starts this command itself; `sandbox-mcp doctor` prints the configuration to give it. Ctrl-C stops.")
			}
			out, err := protocolStdout()
			if err != nil {
				return err
			}
			return app.Serve(cmd.Context(), cfg, os.Stdin, out)
		},
	}
	doctor := &cobra.Command{
		Use:   "doctor",
		Short: "Check the container engine and the default image",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Doctor(cmd.Context(), cfg, givenFlags(cmd), os.Stderr)
		},
	}
	var dryRun bool
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove what servers left on the host: unused containers, workspaces without a sandbox, saved outputs",
		Long: "Remove what servers of this prefix left on the host: containers no sandbox uses (left by a reset),\n" +
			"workspace volumes whose sandbox's container is gone, and the saved full outputs in the state\n" +
			"directory. Sandboxes and their workspaces stay (destroy removes one).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Prune(cmd.Context(), cfg, dryRun, os.Stderr)
		},
	}
	prune.Flags().BoolVar(&dryRun, "dry-run", false, "only say what would be removed")
	for _, s := range app.Settings() {
		fs := root.PersistentFlags()
		if s.ServeOnly {
			fs = serve.Flags()
			// doctor takes them too, to print the client setup with them.
			switch {
			case s.Bool:
				doctor.Flags().Bool(s.Flag, false, s.Help())
			case s.List:
				doctor.Flags().StringArray(s.Flag, nil, s.Help())
			default:
				doctor.Flags().String(s.Flag, s.Default, s.Help())
			}
		}
		switch {
		case s.Bool:
			fs.Bool(s.Flag, false, s.Help())
		case s.List:
			fs.StringArray(s.Flag, nil, s.Help())
		default:
			fs.String(s.Flag, s.Default, s.Help())
		}
	}
	root.AddCommand(serve, doctor, prune)
	root.AddCommand(peopleCommands()...)
	return root
}

// givenFlags are the setting flags given to cmd, as arguments to repeat
// to serve.
func givenFlags(cmd *cobra.Command) []string {
	var args []string
	for _, s := range app.Settings() {
		f := cmd.Flags().Lookup(s.Flag)
		if f == nil || !f.Changed {
			continue
		}
		switch {
		case s.Bool:
			args = append(args, "--"+s.Flag)
		case s.List:
			for _, v := range listValues(f) {
				args = append(args, "--"+s.Flag, v)
			}
		default:
			args = append(args, "--"+s.Flag, f.Value.String())
		}
	}
	return args
}

// listValues are the values of a repeatable flag.
func listValues(f *pflag.Flag) []string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return sv.GetSlice()
	}
	return []string{f.Value.String()}
}

// console is this process's terminal: the commands' output, the log and
// the final message share it, and the log and the message start lines of
// their own there.
var console = new(app.Console)

// resolve turns the flags given to cmd, the environment and the config
// file into the configuration.
func resolve(cmd *cobra.Command) (app.Config, error) {
	flags := app.FlagValues{}
	for _, s := range app.Settings() {
		if f := cmd.Flags().Lookup(s.Flag); f != nil && f.Changed {
			flags[s.Flag] = f.Value.String()
			if s.List {
				flags[s.Flag] = strings.Join(listValues(f), s.ListSep())
			}
		}
	}
	cfg, err := app.Resolve(flags, os.Getenv, os.ReadFile)
	cfg.Version = version.String()
	cfg.Console = console
	cfg.Reload = func() (app.Config, error) {
		c, err := app.Resolve(flags, os.Getenv, os.ReadFile)
		c.Version, c.Console = version.String(), console
		return c, err
	}
	if err != nil {
		// A setting that is wrong, on the command line, in the
		// environment or in the config file, is a usage error.
		return cfg, &app.ExitError{Code: app.ExitUsage, Err: err}
	}
	return cfg, nil
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

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), ioctlGetTermios)
	return err == nil
}
