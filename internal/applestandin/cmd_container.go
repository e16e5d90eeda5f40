package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cmdStart starts a stopped container and prints its id.
func cmdStart(a *app, p *parsed) error {
	id := p.Pos[0]
	if err := a.up("failed to get container"); err != nil {
		return err
	}
	c, err := a.eng.inspectOne(id)
	if err != nil {
		return err
	}
	if c == nil {
		return a.errGetNotFound(id)
	}
	attach := p.Has("attach") || p.Has("interactive")
	if c.State.Running {
		if attach {
			return a.fail("invalidState", "attach is currently unsupported on already running containers")
		}
		fmt.Fprintln(a.stdout, id)
		return nil
	}
	var rw []string
	for _, m := range c.Mounts {
		if m.Type == "volume" && m.RW {
			rw = append(rw, m.Name)
		}
	}
	if err := a.checkAttachable(id, rw); err != nil {
		return err
	}
	if n, err := strconv.Atoi(c.Config.Labels[labelCPUs]); err == nil {
		if err := a.checkCPUs(n); err != nil {
			return err
		}
	}
	if attach {
		args := []string{"start", "--attach"}
		if p.Has("interactive") {
			args = append(args, "--interactive")
		}
		cmd := a.eng.command(append(args, id)...)
		if p.Has("interactive") {
			cmd.Stdin = a.stdin
		}
		cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
		return exitCode(exitStatus(cmd.Run()))
	}
	if r := a.eng.run("start", id); !r.ok() {
		return a.bootstrapError(r)
	}
	fmt.Fprintln(a.stdout, id)
	return nil
}

// targets resolves the ids of stop/kill/delete: the given ones (deduped,
// in order) or, with --all, every container (running ones only if
// runningOnly). It returns the containers found and the missing ids.
func (a *app) targets(p *parsed, all, runningOnly bool) ([]string, map[string]*podContainer, []string, error) {
	found := map[string]*podContainer{}
	var ids, missing []string
	if all {
		cs, err := a.eng.listContainers(!runningOnly)
		if err != nil {
			return nil, nil, nil, err
		}
		for i := range cs {
			id := cs[i].Name
			ids = append(ids, id)
			found[id] = &cs[i]
		}
		return ids, found, nil, nil
	}
	seen := map[string]bool{}
	for _, id := range p.Pos {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	cs, err := a.eng.inspectContainers(ids...)
	if err != nil {
		return nil, nil, nil, err
	}
	for i := range cs {
		found[cs[i].Name] = &cs[i]
	}
	var present []string
	for _, id := range ids {
		if found[id] == nil {
			missing = append(missing, id)
		} else {
			present = append(present, id)
		}
	}
	return present, found, missing, nil
}

// parallel runs fn for every id concurrently and returns the error lines
// in id order (Apple runs these in parallel too).
func parallel(ids []string, fn func(id string) string) []string {
	out := make([]string, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = fn(id)
		}()
	}
	wg.Wait()
	return out
}

// cmdStop stops containers (signal, then kill after --time seconds) and,
// as Apple's does, returns once each is stopped.
func cmdStop(a *app, p *parsed) error {
	// -t is an Int32, and ids or --all one of two, for the parser.
	timeout := p.Val("time", "5")
	secs, _ := strconv.Atoi(timeout)
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	ids, found, missing, err := a.targets(p, p.Has("all"), true)
	if err != nil {
		return err
	}
	sig := p.Val("signal", "")
	errs := parallel(ids, func(id string) string {
		if !found[id].State.Running {
			return ""
		}
		if sig != "" {
			a.eng.run("kill", "-s", sig, id)
		}
		if r := a.eng.run("stop", "-t", timeout, id); !r.ok() && !r.contains("no such container") {
			return withCause(coded("internalError", "failed to stop container"), coded("internalError", r.message()))
		}
		if err := a.eng.waitStopped(id, time.Duration(max(secs, 0))*time.Second+stopSettle); err != nil {
			return withCause(coded("internalError", "failed to stop container"), coded("internalError", err.Error()))
		}
		return ""
	})
	return a.finishBatch(ids, errs, missing, "stop", a.v.AtLeast("0.11.0"))
}

// stopSettle is how long, beyond a stop's --time, the stop waits for
// podman to report the container stopped. podman's stop can return while
// the container is still "stopping" (another stop of it under way, its
// cleanup not done), and Apple's returns only once it is stopped: a caller
// that inspects right after must not see it running. Generous, as a wait
// that ends when its condition holds can afford: on a loaded machine one
// podman call has taken tens of seconds.
var stopSettle = 2 * time.Minute

// waitStopped polls podman until container id is neither running nor
// stopping, or is gone, for at most bound; past it, it says what podman
// last reported.
func (e *engine) waitStopped(id string, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	pause := 20 * time.Millisecond
	for {
		c, err := e.inspectOne(id)
		var last string
		switch {
		case err != nil:
			last = "its inspect failed: " + strings.TrimPrefix(err.Error(), "Error: ")
		case c == nil:
			return nil
		default:
			switch state := strings.ToLower(c.State.Status); state {
			case "running", "stopping":
				last = "it is still " + state
			default:
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("container %s did not stop within %v: %s", id, bound, last)
		}
		time.Sleep(pause)
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// cmdKill sends a signal (default KILL) to running containers.
func cmdKill(a *app, p *parsed) error {
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	ids, found, missing, err := a.targets(p, p.Has("all"), true)
	if err != nil {
		return err
	}
	sig := p.Val("signal", "KILL")
	errs := parallel(ids, func(id string) string {
		if !found[id].State.Running {
			// reconstructed: killing a stopped container is refused.
			return withCause(coded("internalError", "failed to kill container"), coded("invalidState", "container "+id+" is not running"))
		}
		if r := a.eng.run("kill", "-s", sig, id); !r.ok() {
			return withCause(coded("internalError", "failed to kill container"), coded("internalError", r.message()))
		}
		return ""
	})
	return a.finishBatch(ids, errs, missing, "kill", a.v.AtLeast("0.11.0"))
}

// finishBatch prints the ids that succeeded and returns the AggregateError
// for the failures (missing ids are errors only when strictMissing).
func (a *app) finishBatch(ids, errs, missing []string, verb string, strictMissing bool) error {
	var lines []string
	for i, id := range ids {
		if errs[i] == "" {
			fmt.Fprintln(a.stdout, id)
		} else {
			lines = append(lines, errs[i])
		}
	}
	if strictMissing {
		for _, id := range missing {
			lines = append(lines, opNotFound(verb, id))
		}
	}
	if len(lines) > 0 {
		return aggregate(lines)
	}
	return nil
}

// cmdDelete removes containers; running ones need --force (SIGKILL at once).
func cmdDelete(a *app, p *parsed) error {
	force, all := p.Has("force"), p.Has("all")
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	ids, found, missing, err := a.targets(p, all, false)
	if err != nil {
		return err
	}
	if a.v.Before("0.11.0") && len(missing) > 0 {
		// ContainerDelete.swift, 0.8.0–0.10.x: the ids are looked up in the
		// list first, and a missing one ends the command before any delete
		// (a Set, printed as ["a", "b"]; sorted here).
		sort.Strings(missing)
		return a.fail("notFound", "failed to delete one or more containers: "+swiftSet(missing))
	}
	if all && !force {
		kept := ids[:0]
		for _, id := range ids {
			if !found[id].State.Running {
				kept = append(kept, id)
			}
		}
		ids = kept
	}
	var running []string
	errs := parallel(ids, func(id string) string {
		if found[id].State.Running && !force {
			return "running"
		}
		args := []string{"rm", "-f", "-t", "0", id}
		if !force {
			args = []string{"rm", id}
		}
		if r := a.eng.run(args...); !r.ok() && !r.contains("no such container") {
			if r.contains("running") || r.contains("state improper") {
				return "running"
			}
			return withCause(coded("internalError", "failed to delete container"), coded("internalError", r.message()))
		}
		return ""
	})
	var lines []string
	for i, id := range ids {
		switch errs[i] {
		case "":
			fmt.Fprintln(a.stdout, id)
		case "running":
			running = append(running, id)
		default:
			lines = append(lines, errs[i])
		}
	}
	switch {
	case a.v.AtLeast("0.11.0"):
		for _, id := range running {
			lines = append(lines, withCause(coded("internalError", "failed to delete container"),
				coded("invalidState", "container "+id+" is running and can not be deleted")))
		}
		for _, id := range missing {
			lines = append(lines, opNotFound("delete", id))
		}
	case a.v.AtLeast("0.10.0"):
		// reconstructed from the 0.10.0 sources (samples §6).
		for range running {
			lines = append(lines, coded("invalidState", "container is running"))
		}
	default:
		// ContainerDelete.swift, 0.8.0–0.9.0: missing ids end the command
		// before any delete; each failure is logged by StderrLogHandler
		// (message only at the default level; 0.7.x's StreamLogHandler
		// added a timestamp and label).
		if len(running) > 0 {
			for _, id := range running {
				fmt.Fprintf(a.stderr, "failed to delete container %s: %s\n", id, coded("invalidState", "container is running"))
			}
			return failPlain(coded("internalError", "delete failed for one or more containers: "+swiftSet(running)))
		}
	}
	if len(lines) > 0 {
		return aggregate(lines)
	}
	return nil
}

// swiftSet prints ids the way Swift describes a Set<String>: ["a", "b"].
func swiftSet(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = `"` + id + `"`
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// cmdPrune deletes every stopped container and prints their ids.
func cmdPrune(a *app, p *parsed) error {
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	cs, err := a.eng.listContainers(true)
	if err != nil {
		return err
	}
	var ids []string
	for _, c := range cs {
		if !c.State.Running {
			ids = append(ids, c.Name)
		}
	}
	errs := parallel(ids, func(id string) string {
		if r := a.eng.run("rm", id); !r.ok() && !r.contains("no such container") {
			return r.message()
		}
		return ""
	})
	for i, id := range ids {
		if errs[i] == "" {
			fmt.Fprintln(a.stdout, id)
		}
	}
	// reconstructed: the freed size is not measured; ByteCountFormatter prints 0 as "Zero KB".
	fmt.Fprintln(a.stderr, "Reclaimed Zero KB in disk space")
	return nil
}

// checkFormat returns --format (the parser took only the release's
// formats); yaml and toml are not emulated.
func (a *app) checkFormat(p *parsed) (string, error) {
	switch f := p.Val("format", "table"); f {
	case "json", "table":
		return f, nil
	default:
		return "", failPlain("--format " + f + " is not supported by this stand-in")
	}
}

// cmdList prints containers as a table, ids (-q) or JSON.
func cmdList(a *app, p *parsed) error {
	format, err := a.checkFormat(p)
	if err != nil {
		return err
	}
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	cs, err := a.eng.listContainers(p.Has("all"))
	if err != nil {
		return err
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Created.Before(cs[j].Created) })
	views := make([]*ctrView, len(cs))
	for i := range cs {
		views[i] = view(&cs[i])
	}
	switch {
	case format == "json":
		arr := make([]any, len(views))
		for i, v := range views {
			arr[i] = a.containerJSON(v)
		}
		a.printJSON(arr, false)
	case p.Has("quiet"):
		for _, v := range views {
			fmt.Fprintln(a.stdout, v.id)
		}
	default:
		rows := [][]string{a.listHeader()}
		for _, v := range views {
			rows = append(rows, a.listRow(v))
		}
		fmt.Fprintln(a.stdout, renderTable(rows))
	}
	return nil
}

// printJSON writes v as the version prints it: 1.x pretty (inspect) or
// compact (lists); 0.x always compact.
func (a *app) printJSON(v any, pretty bool) {
	enc := encodingFor(a.v)
	var b []byte
	if pretty && oneX(a.v) {
		b = enc.Pretty(v)
	} else {
		b = enc.Compact(v)
	}
	_, _ = a.stdout.Write(append(b, '\n'))
}

// cmdInspect prints the containers as JSON; 1.x fails on missing ids,
// 0.x silently leaves them out.
func cmdInspect(a *app, p *parsed) error {
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	cs, err := a.eng.inspectContainers(p.Pos...)
	if err != nil {
		return err
	}
	byName := map[string]*podContainer{}
	for i := range cs {
		byName[cs[i].Name] = &cs[i]
	}
	var missing []string
	arr := []any{}
	seen := map[string]bool{}
	for _, id := range p.Pos {
		c := byName[id]
		if c == nil {
			missing = append(missing, id)
			continue
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		arr = append(arr, a.containerJSON(view(c)))
	}
	if len(missing) > 0 && oneX(a.v) {
		return a.fail("notFound", "container not found: "+strings.Join(missing, ", "))
	}
	a.printJSON(arr, true)
	return nil
}

// cmdLogs prints the init process's output (podman logs).
func cmdLogs(a *app, p *parsed) error {
	id := p.Pos[0]
	if err := a.up("failed to get container"); err != nil {
		return err
	}
	c, err := a.eng.inspectOne(id)
	if err != nil {
		return err
	}
	if c == nil {
		inner := `internalError: "failed to open container logs: notFound: "container with ID ` + id + ` not found""`
		return a.failCause("internalError", "failed to get logs for container "+id, inner)
	}
	if p.Has("boot") {
		// reconstructed: there is no VM boot log behind podman.
		return nil
	}
	args := []string{"logs"}
	if p.Has("follow") {
		args = append(args, "-f")
	}
	if n := p.Val("n", ""); n != "" {
		args = append(args, "--tail", n)
	}
	cmd := a.eng.command(append(args, id)...)
	cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
	return exitCode(exitStatus(cmd.Run()))
}
