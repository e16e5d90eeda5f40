package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Exit statuses of sandbox-ctl besides a child command's own.
const (
	ExitFailed = 1 // the host refused or failed the call
	ExitUsage  = 2 // the command line is wrong
)

const usage = `usage: sandbox-ctl [--json] COMMAND
  ping                                    check the host answers
  spawn [--image I] [--name N] [--cpus C] [--memory M] [--network none|allowlist] [--allow HOST]...
                                          start a child sandbox (--allow, repeated: the only
                                          hosts it may reach, within what this sandbox may)
  list                                    list this sandbox's children
  destroy NAME                            destroy a child
  exec NAME [--timeout S] [--workdir D] -- CMD...
                                          run CMD in a child (its exit status is sandbox-ctl's)
  run [--image I] [--timeout S] [--workdir D] [--network none|allowlist] [--allow HOST]... -- CMD...
                                          spawn a child, run CMD in it, destroy it
The host is reached at $SANDBOX_CTL_SOCK, else /run/sandbox-ctl.sock.`

// Main runs sandbox-ctl with args (without the program name) and returns
// its exit status.
func Main(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, stdout, stderr, getenv)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	asJSON := false
	if len(args) > 0 && args[0] == "--json" {
		asJSON, args = true, args[1:]
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, usage)
		if len(args) == 0 {
			return ExitUsage
		}
		return 0
	}
	sock := getenv(EnvSocket)
	if sock == "" {
		sock = DefaultSocket
	}
	c := &cli{ctx: ctx, sock: sock, json: asJSON, stdout: stdout, stderr: stderr}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "ping":
		return c.simple(MethodPing, nil, rest, func(r json.RawMessage) string {
			var p PingResult
			_ = json.Unmarshal(r, &p)
			return "ok: the host answers for sandbox " + p.Parent
		})
	case "list":
		return c.simple(MethodList, nil, rest, func(r json.RawMessage) string {
			var l ListResult
			_ = json.Unmarshal(r, &l)
			if len(l.Children) == 0 {
				return "no children"
			}
			var b strings.Builder
			for _, ch := range l.Children {
				fmt.Fprintf(&b, "%s  %s  %g cpus  %d MiB  expires %s\n", ch.Name, ch.Image, ch.CPUs, ch.MemoryMB, ch.ExpiresAt.Format(time.RFC3339))
			}
			return strings.TrimSuffix(b.String(), "\n")
		})
	case "destroy":
		if len(rest) != 1 || strings.HasPrefix(rest[0], "-") {
			return c.usage("destroy takes one child name")
		}
		return c.simple(MethodDestroy, NameParams{Name: rest[0]}, nil, func(json.RawMessage) string { return "destroyed " + rest[0] })
	case "spawn":
		fs := c.flags("spawn")
		var p SpawnParams
		fs.StringVar(&p.Image, "image", "", "image (default: the first the policy allows)")
		fs.StringVar(&p.Name, "name", "", "name (default: PARENT-child-NNNN)")
		fs.Float64Var(&p.CPUs, "cpus", 0, "cpus (default: the most allowed)")
		fs.StringVar(&p.Memory, "memory", "", "memory such as 256M (default: the most allowed)")
		networkFlags(fs, &p.Network, &p.Allow)
		if err := fs.Parse(rest); err != nil || fs.NArg() > 0 {
			return c.usage("spawn takes only flags")
		}
		return c.simple(MethodSpawn, p, nil, func(r json.RawMessage) string {
			var ch Child
			_ = json.Unmarshal(r, &ch)
			s := fmt.Sprintf("%s  %s  %g cpus  %d MiB  ip %s  expires %s", ch.Name, ch.Image, ch.CPUs, ch.MemoryMB, orNone(ch.IP), ch.ExpiresAt.Format(time.RFC3339))
			for _, n := range ch.Notes {
				s += "\nnote: " + n
			}
			return s
		})
	case "exec":
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			return c.usage("exec takes a child name, then -- and the command")
		}
		fs := c.flags("exec")
		p := ExecParams{Name: rest[0]}
		fs.Float64Var(&p.Timeout, "timeout", 0, "seconds (default: the host's)")
		fs.StringVar(&p.Workdir, "workdir", "", "directory to run in")
		cmdArgs, ok := c.command(fs, rest[1:])
		if !ok {
			return c.usage("exec NAME [flags] -- CMD...")
		}
		p.Command = cmdArgs
		return c.runCommand(MethodExec, p)
	case "run":
		fs := c.flags("run")
		var p RunParams
		fs.StringVar(&p.Image, "image", "", "image (default: the first the policy allows)")
		fs.Float64Var(&p.Timeout, "timeout", 0, "seconds (default: the host's)")
		fs.StringVar(&p.Workdir, "workdir", "", "directory to run in")
		networkFlags(fs, &p.Network, &p.Allow)
		cmdArgs, ok := c.command(fs, rest)
		if !ok {
			return c.usage("run [flags] -- CMD...")
		}
		p.Command = cmdArgs
		return c.runCommand(MethodRun, p)
	}
	return c.usage(fmt.Sprintf("unknown command %q", cmd))
}

// networkFlags adds spawn's and run's --network and --allow to fs.
func networkFlags(fs *flag.FlagSet, network *string, allow *[]string) {
	fs.StringVar(network, "network", "", "none or allowlist (default: what the policies give)")
	fs.Func("allow", "a host pattern the child may reach (repeatable)", func(v string) error {
		*allow = append(*allow, v)
		return nil
	})
}

type cli struct {
	ctx            context.Context
	sock           string
	json           bool
	stdout, stderr io.Writer
}

func (c *cli) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func (c *cli) usage(msg string) int {
	fmt.Fprintf(c.stderr, "sandbox-ctl: %s\n%s\n", msg, usage)
	return ExitUsage
}

// command parses flags up to "--" and returns what follows as one shell
// command: a single word as it is (a command line), several quoted.
func (c *cli) command(fs *flag.FlagSet, args []string) (string, bool) {
	i := indexOf(args, "--")
	if i < 0 {
		return "", false
	}
	if err := fs.Parse(args[:i]); err != nil || fs.NArg() > 0 {
		return "", false
	}
	words := args[i+1:]
	switch len(words) {
	case 0:
		return "", false
	case 1:
		return words[0], true
	}
	quoted := make([]string, len(words))
	for j, w := range words {
		quoted[j] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(quoted, " "), true
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// simple makes a call without output and prints its result.
func (c *cli) simple(method string, params any, extra []string, text func(json.RawMessage) string) int {
	if len(extra) > 0 {
		return c.usage(method + " takes no arguments")
	}
	res, err := Call(c.ctx, c.sock, method, params, io.Discard, io.Discard)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		fmt.Fprintln(c.stdout, string(res))
	} else {
		fmt.Fprintln(c.stdout, text(res))
	}
	return 0
}

// runCommand runs exec or run: the output streams as it comes (or, with
// --json, is gathered into the printed result), and the exit status is
// the command's.
func (c *cli) runCommand(method string, params any) int {
	var so, se bytes.Buffer
	out, errw := c.stdout, c.stderr
	if c.json {
		out, errw = &so, &se
	}
	res, err := Call(c.ctx, c.sock, method, params, out, errw)
	if err != nil {
		return c.fail(err)
	}
	var r ExecResult
	if err := json.Unmarshal(res, &r); err != nil {
		return c.fail(fmt.Errorf("the host's result: %w", err))
	}
	if c.json {
		b, _ := json.Marshal(struct {
			ExecResult
			Stdout string `json:"stdout"`
			Stderr string `json:"stderr"`
		}{r, so.String(), se.String()})
		fmt.Fprintln(c.stdout, string(b))
	}
	if r.TimedOut {
		fmt.Fprintf(c.stderr, "sandbox-ctl: the command in %s timed out. Try: --timeout with more seconds\n", r.Name)
	}
	if r.ExitCode < 0 || r.ExitCode > 255 {
		return ExitFailed
	}
	return r.ExitCode
}

// fail prints err with what to try next.
func (c *cli) fail(err error) int {
	var ce *Error
	msg, hint := err.Error(), ""
	switch {
	case errors.As(err, &ce):
		msg = ce.Message
		switch ce.Code {
		case CodePermissionDenied:
			hint = "ask the user to allow it in the sandbox-mcp configuration (children.policies)"
		case CodeLimitReached:
			hint = "sandbox-ctl list, then sandbox-ctl destroy NAME"
		case CodeNotFound:
			hint = "sandbox-ctl list"
		case CodeInvalidRequest:
			hint = "sandbox-ctl --help"
		default:
			hint = "again; if it persists, the host's log says more"
		}
	case errors.Is(err, context.Canceled):
		msg, hint = "interrupted", "again"
	default:
		hint = "check that sandbox-mcp runs on the host and that this sandbox's policy gives it the control socket"
	}
	if c.json {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": msg, "hint": hint}})
		fmt.Fprintln(c.stdout, string(b))
	}
	fmt.Fprintf(c.stderr, "sandbox-ctl: %s. Try: %s\n", strings.TrimSuffix(msg, "."), hint)
	return ExitFailed
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
