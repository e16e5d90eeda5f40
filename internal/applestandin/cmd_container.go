package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// containerCommands is the top-level command table for the version.
func containerCommands(v Version) map[string]handler {
	m := map[string]handler{
		"run":     {runSpec("run"), cmdRun},
		"create":  {runSpec("create"), cmdCreate},
		"start":   {startSpec, cmdStart},
		"stop":    {stopSpec, cmdStop},
		"kill":    {killSpec, cmdKill},
		"delete":  {deleteSpec("delete"), cmdDelete},
		"rm":      {deleteSpec("rm"), cmdDelete},
		"list":    {listSpec("list"), cmdList},
		"ls":      {listSpec("ls"), cmdList},
		"inspect": {inspectSpec, cmdInspect},
		"logs":    {logsSpec, cmdLogs},
		"exec":    {execSpec(), cmdExec},
		"stats":   {statsSpec, cmdStats},
		"build":   {buildSpec, cmdBuild},
		"prune":   {pruneSpec, cmdPrune},
		"export":  {exportSpec(v), cmdExport},
	}
	if v.AtLeast("1.0.0") {
		m["copy"] = handler{copySpec("copy"), cmdCopy}
		m["cp"] = handler{copySpec("cp"), cmdCopy}
	}
	return m
}

var startSpec = &cmdSpec{
	path:  "container start",
	usage: "container start [--attach] [--interactive] [--debug] <container-id>",
	opts:  []opt{flag("-a", "--attach"), flag("-i", "--interactive"), flag("--debug")},
	args:  []string{"<container-id>"},
}

// cmdStart starts a stopped container and prints its id.
func cmdStart(a *app, p *parsed) error {
	id := p.pos[0]
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
	attach := p.has("attach") || p.has("interactive")
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
		if p.has("interactive") {
			args = append(args, "--interactive")
		}
		cmd := a.eng.command(append(args, id)...)
		if p.has("interactive") {
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

var stopSpec = &cmdSpec{
	path:  "container stop",
	usage: "container stop [--all] [--signal <signal>] [--time <time>] [<container-ids> ...]",
	opts:  []opt{flag("-a", "--all"), option("signal", "-s", "--signal"), option("time", "-t", "--time")},
}

var killSpec = &cmdSpec{
	path:  "container kill",
	usage: "container kill [--all] [--signal <signal>] [<container-ids> ...]",
	opts:  []opt{flag("-a", "--all"), option("signal", "-s", "--signal")},
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
	for _, id := range p.pos {
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

// noTargets is the error for stop/kill/delete without ids or --all.
func (a *app) noTargets() error {
	return a.fail("invalidArgument", "no containers specified and --all not supplied")
}

// cmdStop stops containers (signal, then kill after --time seconds) and,
// as Apple's does, returns once each is stopped.
func cmdStop(a *app, p *parsed) error {
	timeout := p.val("time", "5")
	secs, err := strconv.Atoi(timeout)
	if err != nil {
		return usageError(stopSpec, "The value '%s' is invalid for '-t <time>'", timeout)
	}
	if len(p.pos) == 0 && !p.has("all") {
		return a.noTargets()
	}
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	ids, found, missing, err := a.targets(p, p.has("all"), true)
	if err != nil {
		return err
	}
	sig := p.val("signal", "")
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
	if len(p.pos) == 0 && !p.has("all") {
		return a.noTargets()
	}
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	ids, found, missing, err := a.targets(p, p.has("all"), true)
	if err != nil {
		return err
	}
	sig := p.val("signal", "KILL")
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

func deleteSpec(name string) *cmdSpec {
	return &cmdSpec{
		path:  "container " + name,
		usage: "container " + name + " [--all] [--force] [<container-ids> ...]",
		opts:  []opt{flag("-a", "--all"), flag("-f", "--force")},
	}
}

// cmdDelete removes containers; running ones need --force (SIGKILL at once).
func cmdDelete(a *app, p *parsed) error {
	force, all := p.has("force"), p.has("all")
	if len(p.pos) == 0 && !all {
		return a.noTargets()
	}
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

var pruneSpec = &cmdSpec{path: "container prune", usage: "container prune"}

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

func listSpec(name string) *cmdSpec {
	return &cmdSpec{
		path:  "container " + name,
		usage: "container " + name + " [--all] [--format <format>] [--quiet]",
		opts:  []opt{flag("-a", "--all"), option("format", "--format"), flag("-q", "--quiet")},
	}
}

// checkFormat validates --format (json|table; yaml and toml are not emulated).
func (a *app) checkFormat(spec *cmdSpec, p *parsed) (string, error) {
	f := p.val("format", "table")
	switch f {
	case "json", "table":
		return f, nil
	case "yaml":
		if a.v.AtLeast("0.12.0") {
			return "", failPlain("--format yaml is not supported by this stand-in")
		}
	case "toml":
		if a.v.AtLeast("1.0.0") {
			return "", failPlain("--format toml is not supported by this stand-in")
		}
	}
	return "", usageError(spec, "The value '%s' is invalid for '--format <format>'", f)
}

// cmdList prints containers as a table, ids (-q) or JSON.
func cmdList(a *app, p *parsed) error {
	format, err := a.checkFormat(listSpec("list"), p)
	if err != nil {
		return err
	}
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	cs, err := a.eng.listContainers(p.has("all"))
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
	case p.has("quiet"):
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

var inspectSpec = &cmdSpec{
	path:  "container inspect",
	usage: "container inspect <container-ids> ...",
	args:  []string{"<container-ids>"},
}

// cmdInspect prints the containers as JSON; 1.x fails on missing ids,
// 0.x silently leaves them out.
func cmdInspect(a *app, p *parsed) error {
	if err := a.up("failed to list containers"); err != nil {
		return err
	}
	cs, err := a.eng.inspectContainers(p.pos...)
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
	for _, id := range p.pos {
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

var logsSpec = &cmdSpec{
	path:  "container logs",
	usage: "container logs [--boot] [--follow] [-n <n>] <container-id>",
	opts:  []opt{flag("--boot"), flag("-f", "--follow"), option("n", "-n")},
	args:  []string{"<container-id>"},
}

// cmdLogs prints the init process's output (podman logs).
func cmdLogs(a *app, p *parsed) error {
	id := p.pos[0]
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
	if p.has("boot") {
		// reconstructed: there is no VM boot log behind podman.
		return nil
	}
	args := []string{"logs"}
	if p.has("follow") {
		args = append(args, "-f")
	}
	if n := p.val("n", ""); n != "" {
		args = append(args, "--tail", n)
	}
	cmd := a.eng.command(append(args, id)...)
	cmd.Stdout, cmd.Stderr = a.stdout, a.stderr
	return exitCode(exitStatus(cmd.Run()))
}
