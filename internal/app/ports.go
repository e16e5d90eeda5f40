package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/portfwd"
)

// withPorts runs f with a command line's set of port forwards: the same
// records and locks as the servers', serving only what it exposes itself.
func withPorts(ctx context.Context, cfg Config, f func(env *Env, ps *portfwd.Set) error) error {
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	ps := portfwd.New(portfwd.Options{Dial: env.Manager.DialExisting, Log: env.Logger, Bind: cfg.PortsBind,
		AllowPrivileged: cfg.AllowPrivilegedPorts, Store: env.State, Locks: locks.Dir{Path: filepath.Join(cfg.StateDir, "locks")},
		NoTakeOver: true})
	defer ps.Close()
	return f(env, ps)
}

// PortList writes the port forwards (of sandbox name, or all when ""):
// sandbox port, URL, and which server serves it.
func PortList(ctx context.Context, cfg Config, name string, asJSON bool, w io.Writer) error {
	return withPorts(ctx, cfg, func(_ *Env, ps *portfwd.Set) error { return writePorts(ps.List(name), asJSON, w) })
}

// writePorts writes list as a table or JSON.
func writePorts(list []portfwd.Info, asJSON bool, w io.Writer) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tPORT\tURL\tSERVED BY")
	for _, in := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", in.Sandbox, in.Port, in.URL, in.Server)
	}
	return tw.Flush()
}

// takeOverWait bounds how long PortExpose waits to see a server serve the
// forward it recorded: servers look every second, and a busy machine
// makes that longer; the wait ends as soon as one does.
const takeOverWait = 10 * time.Second

// PortExpose forwards hostPort (0: the same number when free, else any)
// to port of sandbox name. The forward is recorded as the expose tool
// records it: with foreground, this command serves it until it is
// stopped (Ctrl-C) and then removes it; without, a running server takes
// it over and keeps it, and the command says which (or that none runs).
func PortExpose(ctx context.Context, cfg Config, name string, port, hostPort int, foreground bool, w io.Writer) error {
	return withPorts(ctx, cfg, func(env *Env, ps *portfwd.Set) error {
		if err := mustExist(ctx, env.Manager, name); err != nil {
			return err
		}
		return expose(ctx, ps, name, port, hostPort, foreground, w)
	})
}

// expose is PortExpose on the command line's set ps.
func expose(ctx context.Context, ps *portfwd.Set, name string, port, hostPort int, foreground bool, w io.Writer) error {
	in, existing, err := ps.Expose(name, port, hostPort)
	if err != nil {
		return exitFor(err)
	}
	// A forward recorded but served by no server is served here now, as
	// one this command made.
	if existing && in.Server != "this server" {
		fmt.Fprintf(w, "port %d of sandbox %q is forwarded already: %s (served by %s)\n", port, name, in.URL, in.Server)
		return nil
	}
	if foreground {
		fmt.Fprintf(w, "port %d of sandbox %q: %s (served by this command until Ctrl-C)\n", port, name, in.URL)
		<-ctx.Done()
		if _, err := ps.Unexpose(name, port); err != nil && !errors.Is(err, portfwd.ErrNotForwarded) {
			return exitFor(err)
		}
		return nil
	}
	ps.Close()
	deadline := time.Now().Add(takeOverWait)
	for {
		for _, l := range ps.List(name) {
			if l.Port == port && strings.HasPrefix(l.Server, "server pid") {
				fmt.Fprintf(w, "port %d of sandbox %q: %s (served by %s)\n", port, name, l.URL, l.Server)
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprintf(w, "port %d of sandbox %q: %s, recorded; no sandbox-mcp server serves it yet: one will once it runs with this state directory (or use --foreground)\n",
		port, name, in.URL)
	return nil
}

// PortUnexpose removes the forward of port of sandbox name; the server
// that serves it stops within a second.
func PortUnexpose(ctx context.Context, cfg Config, name string, port int, w io.Writer) error {
	return withPorts(ctx, cfg, func(_ *Env, ps *portfwd.Set) error {
		in, err := ps.Unexpose(name, port)
		if errors.Is(err, portfwd.ErrNotForwarded) {
			return &ExitError{Code: ExitNotFound, Err: err}
		}
		if err != nil {
			return exitFor(err)
		}
		_, err = fmt.Fprintf(w, "port %d of sandbox %q is no longer forwarded from %s\n", port, name, in.URL)
		return err
	})
}
