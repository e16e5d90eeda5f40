package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/proc"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// frameParts shows where a warm exec's time goes between the floor
// section's framed round trip and the MCP answer, one part added at a
// time, each on a shell of its own in the default sandbox and timed in
// turn with the others (so drift weighs on all alike): the floor's frame;
// the same with the server's start beacons; the frame the server writes
// (guest.CommandFrame on a shell begun with guest.InitFrame), read by a
// loop of the bench's own; the shell package's Run of it, over `exec -i`
// and then on the bench's own pipes handed in as the server's shells get
// them on podman; then exec and ping through the go-sdk client. The rows
// are a breakdown, not targets.
func (b *bench) frameParts() error {
	ctr := b.launch.prefix + "-default"
	if _, err := b.main.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	type part struct {
		name string
		open func() (func() error, func(), error)
	}
	beacons := func(m, _ string) string {
		return "printf '%s>\\n' " + m + "; printf '%s<\\n' " + m + " >&2\ntrue\n" +
			"printf '\\n%s %d 0 0\\n%s.\\n' " + m + " $? " + m + "; printf '\\n%s\\n' " + m + " >&2\n"
	}
	serverFrame := func(m, runID string) string {
		fr, err := guest.CommandFrame(m, guest.Command{Command: "true", RunID: runID}, "")
		if err != nil {
			panic(err) // a constant command and a run ID of the right form
		}
		return fr.Script
	}
	init := guest.InitFrame(partMarker(0), "", guest.Outputs{})
	parts := []part{
		{"floor frame", func() (func() error, func(), error) { return openFrameShell(b.engine, ctr) }},
		{"+ start beacons", func() (func() error, func(), error) { return openScriptShell(b.engine, ctr, "", beacons) }},
		{"server frame (guest), read plainly", func() (func() error, func(), error) {
			return openScriptShell(b.engine, ctr, init, serverFrame)
		}},
		{"server frame through shell.Run", func() (func() error, func(), error) {
			return b.runTrueOn(engineShell{engine: b.engine, ctr: ctr})
		}},
		{"exec `true`, MCP (go-sdk)", func() (func() error, func(), error) {
			return func() error { _, err := b.main.execTrue(b.ctx, "default"); return err }, func() {}, nil
		}},
		{"ping, MCP (go-sdk)", func() (func() error, func(), error) {
			return func() error { return b.main.cs.Ping(b.ctx, nil) }, func() {}, nil
		}},
	}
	if h := (handedShell{rt: docker.New(docker.Options{Flavor: docker.Flavor(b.engine)}), ctr: ctr}); h.works(b.ctx) {
		handed := part{"the same on the bench's own pipes, handed in", func() (func() error, func(), error) {
			return b.runTrueOn(h)
		}}
		parts = slices.Insert(parts, 4, handed) // after the shell package's Run over exec -i
	}
	calls := make([]func() error, 0, len(parts))
	for _, p := range parts {
		call, closeFn, err := p.open()
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		defer closeFn()
		calls = append(calls, call)
	}
	lat, err := timeInterleaved(b.n, calls...)
	if err != nil {
		return err
	}
	floor := pct(lat[0], 0.5)
	for i, p := range parts {
		p50 := pct(lat[i], 0.5)
		fmt.Printf("%-44s %-22s %-26s %-9s %-18s\n", "  p50, "+p.name, us(p50), us(floor)+" (floor frame)",
			fmt.Sprintf("%.3gx", ratio(p50, floor)), "breakdown")
	}
	return nil
}

// runTrueOn opens a shell of the shell package on h and returns a call
// that runs `true` on it, and the shell's close.
func (b *bench) runTrueOn(h shell.Host) (func() error, func(), error) {
	sh, err := shell.Open(b.ctx, h, shell.Options{})
	if err != nil {
		return nil, nil, err
	}
	return func() error {
		_, err := sh.Run(b.ctx, shell.Request{Command: "true"}, "")
		return err
	}, sh.Close, nil
}

// partMarker is the frame marker of a script shell's call i.
func partMarker(i int) string { return fmt.Sprintf("sbxpart%025d", i) }

// openScriptShell starts `engine exec -i ctr sh`, writes init (answered
// with a frame of marker partMarker(0), when not empty), and returns a
// function that writes script(marker, runID) for a new marker each call
// and reads both streams up to that marker's ends: the server's frame
// format, read with no more work than the floor's.
func openScriptShell(engine, ctr, init string, script func(marker, runID string) string) (func() error, func(), error) {
	cmd, in, out, errs, err := startEngineShell(engine, ctr)
	if err != nil {
		return nil, nil, err
	}
	exchange := func(text, m string) error {
		return exchangeLines(in, out, errs, []byte(text),
			func(line []byte) bool { return string(line) == m+".\n" },
			func(line []byte) bool { return string(line) == m+"\n" })
	}
	closeFn := closeEngineShell(cmd, in, out)
	if init != "" {
		if err := exchange(init, partMarker(0)); err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("start the shell: %w", err)
		}
	}
	i := 0
	return func() error {
		i++
		m := partMarker(i)
		return exchange(script(m, fmt.Sprintf("%016d", i)), m)
	}, closeFn, nil
}

// engineShell is a shell.Host of `engine exec -i ctr sh`, for the shell
// package's own part of the breakdown (no command there needs a kill).
// handedShell is a shell.Host of the shells the server opens on podman:
// `podman exec --preserve-fds 3 ctr sh` on the bench's own pipes.
type handedShell struct {
	rt  *docker.Dialect
	ctr string
}

func (h handedShell) Command(ctx context.Context) proc.Process {
	p, _ := h.rt.DirectExecCommand(ctx, h.ctr, sandbox.ExecSpec{Argv: []string{"sh"}})
	return p
}

// works reports whether the engine hands descriptors on (podman's does).
func (h handedShell) works(ctx context.Context) bool {
	_, ok := h.rt.DirectExecCommand(ctx, h.ctr, sandbox.ExecSpec{Argv: []string{"sh"}})
	return ok
}

func (h handedShell) KillRun(context.Context, int, string, bool) error {
	return errors.New("the bench's shells run no command that needs a kill")
}

type engineShell struct{ engine, ctr string }

func (h engineShell) Command(ctx context.Context) proc.Process {
	return proc.FromCmd(exec.CommandContext(ctx, h.engine, "exec", "-i", h.ctr, "sh"))
}

func (h engineShell) KillRun(context.Context, int, string, bool) error {
	return errors.New("the bench's shells run no command that needs a kill")
}
