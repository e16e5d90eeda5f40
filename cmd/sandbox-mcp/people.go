package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandbox-mcp/sandbox-mcp/internal/app"
)

// peopleCommands are the commands for people at a terminal: they work on
// the same sandboxes and state as the MCP servers, while those run.
// exits is what the people's commands' exit statuses mean.
const exits = "\n\nExit status: 0 done, 1 failed, 2 bad command line or setting, 3 no such sandbox, job or snapshot."

func peopleCommands() []*cobra.Command {
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the sandboxes",
		Long:  "List the sandboxes of this prefix: name, state, image, address, creation time." + exits,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.List(cmd.Context(), cfg, asJSON, console.Output(os.Stdout))
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")

	var statusJSON bool
	status := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a sandbox and its agent",
		Long: "Show one sandbox without starting it: state, image, address, limits, and its agent: whether port\n" +
			"forwards and children's control socket go through it, or why they use one engine exec per connection." + exits,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Status(cmd.Context(), cfg, args[0], statusJSON, console.Output(os.Stdout))
		},
	}
	status.Flags().BoolVar(&statusJSON, "json", false, "print JSON")

	var timeout time.Duration
	execCmd := &cobra.Command{
		Use:   "exec NAME -- CMD...",
		Short: "Run a command in a sandbox; its exit status is this command's",
		Long: "Run a command in a sandbox through its shells, with the working directory and variables an agent's\n" +
			"commands see, streaming its output. One argument is a shell command line (pipes and all); several are\n" +
			"words, each quoted. Exit status: the command's; 124 when it timed out; 125 when sandbox-mcp failed.",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return &app.ExitError{Code: app.ExitUsage, Err: errUsage(cmd)}
			}
			cfg, err := resolve(cmd)
			if err != nil {
				return &app.ExitError{Code: app.ExitEngine, Err: err}
			}
			return app.Exec(cmd.Context(), cfg, args[0], args[1:], timeout, console.Output(os.Stdout), console.Output(os.Stderr))
		},
	}
	execCmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "stop the command after this long")

	var command string
	shell := &cobra.Command{
		Use:   "shell NAME",
		Short: "Open an interactive shell in a sandbox",
		Long: "Open an interactive login shell (or --command) in a sandbox on this terminal, which it follows\n" +
			"when resized. Exit status: the shell's; 125 when sandbox-mcp failed.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return &app.ExitError{Code: app.ExitEngine, Err: err}
			}
			return app.Shell(cmd.Context(), cfg, args[0], command, isTerminal(os.Stdin), os.Stdin, os.Stdout, os.Stderr)
		},
	}
	shell.Flags().StringVar(&command, "command", "", "run this command line instead of the login shell")

	var follow bool
	logs := &cobra.Command{
		Use:   "logs NAME JOB",
		Short: "Print a background job's log",
		Long:  "Print the log of a background job started with the bg tool; with -f, keep printing until it ends." + exits,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Logs(cmd.Context(), cfg, args[0], args[1], follow, console.Output(os.Stdout))
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing what the job adds until it ends")

	destroy := &cobra.Command{
		Use:   "destroy NAME",
		Short: "Destroy a sandbox, its workspace and its children",
		Long:  "Destroy a sandbox: its container, its workspace and its child sandboxes." + exits,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Destroy(cmd.Context(), cfg, args[0], console.Output(os.Stdout))
		},
	}

	var workspace bool
	snapshot := &cobra.Command{
		Use:   "snapshot NAME SNAPSHOT",
		Short: "Save a sandbox as a named snapshot",
		Long:  "Save a sandbox's filesystem and its workspace (--workspace=false leaves the workspace out) as a named snapshot, as the snapshot tool does." + exits,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Snapshot(cmd.Context(), cfg, args[0], args[1], workspace, console.Output(os.Stdout))
		},
	}
	snapshot.Flags().BoolVar(&workspace, "workspace", true, "include the workspace (/workspace); --workspace=false leaves it out")

	restore := &cobra.Command{
		Use:   "restore NAME SNAPSHOT",
		Short: "Replace a sandbox with a snapshot",
		Long:  "Replace a sandbox's container with one booted from a snapshot." + exits,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Restore(cmd.Context(), cfg, args[0], args[1], console.Output(os.Stdout))
		},
	}
	var forget bool
	deleteSnapshot := &cobra.Command{
		Use:   "delete-snapshot SNAPSHOT",
		Short: "Delete a snapshot",
		Long: "Delete a snapshot's image, volume snapshot and saved workspace, as the delete_snapshot tool does. " +
			"--forget drops only the record (and workspace tar) of a snapshot made on an engine or Kubernetes namespace " +
			"this server does not reach, for one that is gone for good; what it kept there stays." + exits,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.DeleteSnapshot(cmd.Context(), cfg, args[0], forget, console.Output(os.Stdout))
		},
	}
	deleteSnapshot.Flags().BoolVar(&forget, "forget", false, "only forget the record of a snapshot made where this server does not reach")

	var netJSON, netRefused bool
	var netLast int
	netCmd := &cobra.Command{
		Use:   "net NAME",
		Short: "Show a sandbox's egress: policy, refusals, traffic and its network log",
		Long: "Show how a sandbox reaches out: its egress mode (open, allowlist or none) and the policy in force,\n" +
			"the hosts refused lately, bytes per host, then the last decisions of its egress proxy." + exits,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Net(cmd.Context(), cfg, args[0], netLast, netRefused, netJSON, console.Output(os.Stdout))
		},
	}
	netCmd.Flags().BoolVar(&netJSON, "json", false, "print JSON")
	netCmd.Flags().BoolVar(&netRefused, "refused", false, "only refused connections in the log")
	netCmd.Flags().IntVar(&netLast, "last", 20, "how many log entries to show")

	var auditOpts app.AuditOptions
	auditCmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the tool calls the servers answered",
		Long: "Show the audit log of tool calls kept in the state directory, oldest first: time, tool, sandbox,\n" +
			"status, duration, result size, client and arguments (secrets hidden, file contents by their size).\n" +
			"With --follow, go on printing calls as they come. No engine is needed." + exits,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Audit(cmd.Context(), cfg, auditOpts, console.Output(os.Stdout))
		},
	}
	auditCmd.Flags().BoolVar(&auditOpts.JSON, "json", false, "print the records as kept, one JSON object per line")
	auditCmd.Flags().BoolVarP(&auditOpts.Follow, "follow", "f", false, "go on printing calls as they come")
	auditCmd.Flags().StringVar(&auditOpts.Sandbox, "sandbox", "", "only the calls on sandbox `NAME`")
	auditCmd.Flags().DurationVar(&auditOpts.Since, "since", 0, "only the calls of the last `duration` (e.g. 1h)")

	var cpOpts app.CopyOptions
	cpCmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between the host and a sandbox",
		Long: "Copy between the host and a sandbox, in docker cp's form: one side is NAME:PATH, a path in sandbox\n" +
			"NAME (relative to /workspace), the other a host path. A directory as the destination receives the copy\n" +
			"under the source's name; an existing file is replaced only with --overwrite. What comes from the\n" +
			"sandbox is unpacked under the destination's directory only: its symlinks and names cannot lead out." + exits,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return app.Copy(cmd.Context(), cfg, args[0], args[1], cpOpts, console.Output(os.Stdout))
		},
	}
	cpCmd.Flags().BoolVar(&cpOpts.Overwrite, "overwrite", false, "let a copy from the sandbox replace what is at the host path")
	cpCmd.Flags().StringArrayVar(&cpOpts.Ignore, "ignore", nil, "leave out entries of this `name` from a copy to the sandbox (repeatable)")
	cpCmd.Flags().BoolVar(&cpOpts.JSON, "json", false, "print the result as JSON")

	portCmd := &cobra.Command{
		Use:   "port",
		Short: "List, add and remove port forwards from the host into sandboxes",
		Long: "Port forwards, the same ones the expose tool makes: recorded in the state directory and served by the\n" +
			"running sandbox-mcp servers, whichever holds each." + exits,
	}
	var portJSON bool
	portLs := &cobra.Command{
		Use:   "ls [NAME]",
		Short: "List the port forwards (of one sandbox)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return app.PortList(cmd.Context(), cfg, name, portJSON, console.Output(os.Stdout))
		},
	}
	portLs.Flags().BoolVar(&portJSON, "json", false, "print JSON")
	var hostPort int
	var foreground bool
	portExpose := &cobra.Command{
		Use:   "expose NAME PORT",
		Short: "Forward a host port to a TCP port of a sandbox",
		Long: "Forward a host port (--host-port; by default the same number when it is free, else a free one) to PORT\n" +
			"inside sandbox NAME, and print its URL. A running server takes the forward over and keeps it, as if the\n" +
			"agent had exposed it; with --foreground this command serves it until Ctrl-C and then removes it." + exits,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			port, err := portArg(cmd, args[1])
			if err != nil {
				return err
			}
			return app.PortExpose(cmd.Context(), cfg, args[0], port, hostPort, foreground, console.Output(os.Stdout))
		},
	}
	portExpose.Flags().IntVar(&hostPort, "host-port", 0, "host `port` to listen on (0: the same number when free, else any)")
	portExpose.Flags().BoolVar(&foreground, "foreground", false, "serve the forward from this command until Ctrl-C, then remove it")
	portUnexpose := &cobra.Command{
		Use:   "unexpose NAME PORT",
		Short: "Remove a port forward",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			port, err := portArg(cmd, args[1])
			if err != nil {
				return err
			}
			return app.PortUnexpose(cmd.Context(), cfg, args[0], port, console.Output(os.Stdout))
		},
	}
	portCmd.AddCommand(portLs, portExpose, portUnexpose)

	return append([]*cobra.Command{ls, status, execCmd, shell, logs, destroy, snapshot, restore, deleteSnapshot, netCmd, auditCmd, cpCmd, portCmd}, workCommands()...)
}

// workCommands are the twins of the work tools: a sandbox's work as the
// branch sandbox/NAME of a host repository.
func workCommands() []*cobra.Command {
	var o app.WorkOptions
	run := func(fn func(ctx context.Context, cfg app.Config, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			cfg, err := resolve(cmd)
			if err != nil {
				return err
			}
			return fn(cmd.Context(), cfg, args)
		}
	}
	// Each command has its own --refresh: a variable bound by several
	// commands would take the last one's default.
	refresh := func(c *cobra.Command, def bool, usage string) *bool {
		c.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
		return c.Flags().Bool("refresh", def, usage)
	}
	const refreshUsage = "checkpoint first, so that the answer holds the sandbox's latest changes"
	fromRepo := &cobra.Command{
		Use:   "from-repo NAME [DIR]",
		Short: "Clone a host repository into a sandbox, its work to come back as a branch",
		Long: "Clone the git repository holding DIR (default: the current directory) into sandbox NAME, at --ref, on the branch sandbox/NAME, " +
			"which is made in the repository too; checkpoint, log, diff and apply then bring its work back. The working tree, remotes and credentials stay out." + exits,
		Args: cobra.RangeArgs(1, 2),
		RunE: run(func(ctx context.Context, cfg app.Config, args []string) error {
			dir := ""
			if len(args) == 2 {
				dir = args[1]
			}
			return app.WorkStart(ctx, cfg, args[0], dir, o, console.Output(os.Stdout))
		}),
	}
	fromRepo.Flags().StringVar(&o.Ref, "ref", "HEAD", "branch, tag or commit to start from")
	fromRepo.Flags().StringVar(&o.Path, "path", "", "where the clone goes in the sandbox (default /workspace/<repository name>)")
	fromRepo.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	checkpoint := &cobra.Command{
		Use:   "checkpoint NAME",
		Short: "Commit a sandbox's changes onto its branch sandbox/NAME",
		Long:  "Commit what changed in sandbox NAME's clone, with the commands run since the last checkpoint in the message, and bring its commits onto sandbox/NAME." + exits,
		Args:  cobra.ExactArgs(1),
		RunE: run(func(ctx context.Context, cfg app.Config, args []string) error {
			return app.Checkpoint(ctx, cfg, args[0], o, console.Output(os.Stdout))
		}),
	}
	checkpoint.Flags().StringVarP(&o.Message, "message", "m", "", "commit message")
	checkpoint.Flags().StringArrayVar(&o.Include, "include", nil, "a `path` of the clone .gitignore leaves out, to record too (repeatable)")
	checkpoint.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	logCmd := &cobra.Command{
		Use:   "log NAME",
		Short: "List a sandbox's commits since it started from its repository",
		Long:  "List the commits of sandbox/NAME since the revision the sandbox started from, newest first (git log sandbox/NAME works too)." + exits,
		Args:  cobra.ExactArgs(1),
	}
	logCmd.Flags().IntVarP(&o.Max, "max-count", "n", 20, "at most this many commits")
	logRefresh := refresh(logCmd, true, refreshUsage)
	logCmd.RunE = run(func(ctx context.Context, cfg app.Config, args []string) error {
		o.Refresh = *logRefresh
		return app.WorkLog(ctx, cfg, args[0], o, console.Output(os.Stdout))
	})
	diff := &cobra.Command{
		Use:   "diff NAME [PATH...]",
		Short: "Show a sandbox's work as a diff",
		Long:  "Show the diff from the revision sandbox NAME started from (or --from) to its branch (or --to), for PATHs of the repository if given." + exits,
		Args:  cobra.MinimumNArgs(1),
	}
	diff.Flags().BoolVar(&o.Diff.Stat, "stat", false, "files changed and their line counts")
	diff.Flags().StringVar(&o.Diff.From, "from", "", "a revision of the repository to diff from")
	diff.Flags().StringVar(&o.Diff.To, "to", "", "a revision of the repository to diff to")
	diffRefresh := refresh(diff, true, refreshUsage)
	diff.RunE = run(func(ctx context.Context, cfg app.Config, args []string) error {
		o.Diff.Paths, o.Refresh = args[1:], *diffRefresh
		return app.WorkDiff(ctx, cfg, args[0], o, console.Output(os.Stdout))
	})
	apply := &cobra.Command{
		Use:   "apply NAME",
		Short: "Merge a sandbox's work into the branch checked out",
		Long: "Bring sandbox/NAME, as the last checkpoint left it (what diff showed), into the branch checked out in its repository (--how merge, squash or cherry-pick); " +
			"refused when that tree has uncommitted changes, or when the work changes .gitattributes, .gitmodules or .lfsconfig or is too large; a conflict changes nothing." + exits,
		Args: cobra.ExactArgs(1),
	}
	apply.Flags().StringVar(&o.How, "how", "merge", "merge, squash or cherry-pick")
	apply.Flags().StringVar(&o.At, "at", "", "apply the branch as it was at this `commit` (the one diff showed), leaving out records made since")
	applyRefresh := refresh(apply, false, "checkpoint first (merges what changed since, unreviewed)")
	apply.RunE = run(func(ctx context.Context, cfg app.Config, args []string) error {
		o.Refresh = *applyRefresh
		return app.WorkApply(ctx, cfg, args[0], o, console.Output(os.Stdout))
	})
	return []*cobra.Command{fromRepo, checkpoint, logCmd, diff, apply}
}

// portArg reads a TCP port of the command line.
func portArg(cmd *cobra.Command, s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, &app.ExitError{Code: app.ExitUsage, Err: fmt.Errorf("%s: %q is not a TCP port (1 to 65535)", cmd.Name(), s)}
	}
	return p, nil
}

func errUsage(cmd *cobra.Command) error {
	return &usageError{use: cmd.UseLine()}
}

type usageError struct{ use string }

func (e *usageError) Error() string { return "usage: " + e.use }
