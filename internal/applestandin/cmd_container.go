package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cmdStart starts a stopped container and prints its id
// (Container/ContainerStart.swift, 0.8.0–1.2.2): a running one is
// printed at once, unless attaching, which is refused; a bind mount whose
// source is gone stops it before the boot.
func cmdStart(a *app, p *parsed) error {
	id := p.Pos[0]
	if err := a.up(opListContainers); err != nil {
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
			return a.fail("invalidArgument", "attach is currently unsupported on already running containers")
		}
		fmt.Fprintln(a.stdout, id)
		return nil
	}
	for _, m := range c.Mounts {
		if m.Type != "bind" {
			continue
		}
		if _, err := os.Stat(m.Source); err != nil {
			if a.v.Before("0.12.0") {
				return a.fail("invalidState", "path '"+m.Source+"' is not a directory")
			}
			return a.fail("invalidState", "mount source path '"+m.Source+"' does not exist")
		}
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

// upFor checks the system for stop, kill and delete: before the release
// that sends a request per id (strict) they list the containers first;
// from it, each id's request fails on its own, as does the list of --all.
func (a *app) upFor(p *parsed, strict bool, op string) error {
	if !strict || p.Has("all") {
		return a.up(opListContainers)
	}
	ids := p.Pos
	if a.v.AtLeast("1.0.0") {
		ids = uniq(ids) // ContainerDelete.swift@1.0.0 dedupes; harmless for the others
	}
	return a.up(perID(op, ids)...)
}

func uniq(ids []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// cmdStop stops containers (signal, then kill after --time seconds) and,
// as Apple's does, returns once each is stopped
// (Container/ContainerStop.swift). --all takes every container, running
// or not (ContainerClient.list() unfiltered), and stopping a stopped one
// succeeds (ContainersService.stop is idempotent), so it prints every id.
// Before 0.11.0 the ids are looked up in the list and missing ones are
// left out silently; from 0.11.0 each is sent and a missing one fails.
// Before 0.10.0 a failure is logged and the command ends in internalError
// "stop failed for one or more containers <a,b>"; from 0.10.0 the
// failures end in an AggregateError.
func cmdStop(a *app, p *parsed) error {
	// -t is an Int32, and ids or --all one of two, for the parser.
	timeout := p.Val("time", "5")
	secs, _ := strconv.Atoi(timeout)
	strict := a.v.AtLeast("0.11.0")
	if err := a.upFor(p, strict, "failed to stop container"); err != nil {
		return err
	}
	ids, found, missing, err := a.targets(p, p.Has("all"), false)
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
	if !strict {
		missing = nil
	}
	return a.finishBatch(ids, errs, missing, "stop")
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

// cmdKill sends a signal (default KILL) to containers, one after the
// other (Container/ContainerKill.swift). Before 0.10.0 only the running
// ones among the ids (or all of them with --all) are signalled: missing
// and stopped ids are left out silently, and a failure is logged and
// ends in internalError "kill failed for one or more containers <a,b>".
// From 0.10.0 every id is sent: a missing one fails with the server's
// notFound, a stopped one with its invalidState "no sandbox client
// exists: container is stopped" ("no runtime client" from 1.0.0:
// ContainersService's ContainerState.getClient), each wrapped by
// ContainerClient.kill, in an AggregateError in the order given.
func cmdKill(a *app, p *parsed) error {
	strict := a.v.AtLeast("0.10.0")
	if err := a.upFor(p, strict, "failed to kill container"); err != nil {
		return err
	}
	sig := p.Val("signal", "KILL")
	var ids []string
	found := map[string]*podContainer{}
	if p.Has("all") {
		var err error
		if ids, found, _, err = a.targets(p, true, true); err != nil {
			return err
		}
	} else {
		ids = p.Pos
		cs, err := a.eng.inspectContainers(uniq(ids)...)
		if err != nil {
			return err
		}
		for i := range cs {
			found[cs[i].Name] = &cs[i]
		}
	}
	client := "runtime"
	if a.v.Before("1.0.0") {
		client = "sandbox"
	}
	var lines, failed []string
	for _, id := range ids {
		c := found[id]
		var line string
		switch {
		case c == nil:
			if !strict {
				continue
			}
			line = opNotFound("kill", id)
		case !c.State.Running:
			if !strict {
				continue
			}
			line = withCause(coded("internalError", "failed to kill container"),
				coded("invalidState", "no "+client+" client exists: container is stopped"))
		default:
			if r := a.eng.run("kill", "-s", sig, id); !r.ok() {
				line = withCause(coded("internalError", "failed to kill container"), coded("internalError", r.message())) // reconstructed cause
			}
		}
		if line == "" {
			fmt.Fprintln(a.stdout, id)
			continue
		}
		if !strict {
			// log.error("failed to kill container <id>: <error>") (ContainerKill.swift@0.9.0).
			fmt.Fprintf(a.stderr, "failed to kill container %s: %s\n", id, line)
			failed = append(failed, id)
			continue
		}
		lines = append(lines, line)
	}
	if len(failed) > 0 {
		return a.fail("internalError", "kill failed for one or more containers "+strings.Join(failed, ","))
	}
	if len(lines) > 0 {
		return aggregate(lines)
	}
	return nil
}

// finishBatch prints the ids that succeeded and returns stop's error for
// the failures and, from 0.11.0, the missing ids (their server notFound).
func (a *app) finishBatch(ids, errs, missing []string, verb string) error {
	var lines, failed []string
	for i, id := range ids {
		switch {
		case errs[i] == "":
			fmt.Fprintln(a.stdout, id)
		case a.v.Before("0.10.0"):
			// log.error("failed to <verb> container <id>: <error>") (ContainerStop.swift@0.9.0).
			fmt.Fprintf(a.stderr, "failed to %s container %s: %s\n", verb, id, errs[i])
			failed = append(failed, id)
		default:
			lines = append(lines, errs[i])
		}
	}
	if len(failed) > 0 {
		return a.fail("internalError", verb+" failed for one or more containers "+strings.Join(failed, ","))
	}
	for _, id := range missing {
		lines = append(lines, opNotFound(verb, id))
	}
	if len(lines) > 0 {
		return aggregate(lines)
	}
	return nil
}

// cmdDelete removes containers; running ones need --force (SIGKILL at
// once) (Container/ContainerDelete.swift).
func cmdDelete(a *app, p *parsed) error {
	force, all := p.Has("force"), p.Has("all")
	if err := a.upFor(p, a.v.AtLeast("0.11.0"), "failed to delete container"); err != nil {
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
			return withCause(coded("internalError", "failed to delete container"), coded("internalError", r.message())) // reconstructed cause
		}
		return ""
	})
	var lines, failed []string
	for i, id := range ids {
		e := errs[i]
		switch {
		case e == "":
			fmt.Fprintln(a.stdout, id)
			continue
		case a.v.AtLeast("0.11.0") && e == "running":
			e = withCause(coded("internalError", "failed to delete container"),
				coded("invalidState", "container "+id+" is running and can not be deleted"))
		case e == "running":
			// Refused by the CLI itself before 0.11.0.
			e = coded("invalidState", "container is running")
		}
		if a.v.Before("0.10.0") {
			// Each failure is logged by StderrLogHandler (message only at the
			// default level; 0.7.x's StreamLogHandler added a timestamp and
			// label), the ids end in one error (ContainerDelete.swift@0.9.0).
			fmt.Fprintf(a.stderr, "failed to delete container %s: %s\n", id, e)
			failed = append(failed, id)
			continue
		}
		lines = append(lines, e)
	}
	if len(failed) > 0 {
		return failPlain(coded("internalError", "delete failed for one or more containers: "+swiftArray(failed)))
	}
	for _, id := range missing {
		lines = append(lines, opNotFound("delete", id))
	}
	if len(lines) > 0 {
		return aggregate(lines)
	}
	return nil
}

// swiftSet prints ids the way Swift describes a Set<String> or an Array
// (Collection description: the elements' debugDescription between
// brackets, ", " apart): ["a", "b"].
func swiftSet(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = swiftQuote(id)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// swiftQuote is String.debugDescription: quoted, with \\, \", \n, \r, \t
// and \0 escaped (other control characters as \u{x}).
func swiftQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case 0:
			b.WriteString(`\0`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u{%x}`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// cmdPrune deletes every stopped container and prints their ids, then
// the space freed (Container/ContainerPrune.swift, 0.10.0–1.2.2): a
// failure is logged and skipped; "Reclaimed <size> in disk space" is
// printed on stdout before 1.0.0 and logged (stderr) from 1.0.0.
func cmdPrune(a *app, p *parsed) error {
	if err := a.up(opListContainers); err != nil {
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
	var pruned []string
	for _, id := range ids {
		if r := a.eng.run("rm", id); !r.ok() && !r.contains("no such container") {
			// reconstructed: the error's description.
			fmt.Fprintf(a.stderr, "failed to prune container: [\"id\": %s, \"error\": %s]\n", id, coded("internalError", r.message()))
			continue
		}
		pruned = append(pruned, id)
	}
	for _, id := range pruned {
		fmt.Fprintln(a.stdout, id)
	}
	// reconstructed: the freed size is not measured; ByteCountFormatter prints 0 as "Zero KB".
	a.reclaimed(0)
	return nil
}

// reclaimed prints how much a prune or image delete freed: on stdout
// before 1.0.0, as a log line (stderr) from 1.0.0.
func (a *app) reclaimed(n int64) {
	line := "Reclaimed " + decimalSize(n) + " in disk space"
	if oneX(a.v) {
		fmt.Fprintln(a.stderr, line)
		return
	}
	fmt.Fprintln(a.stdout, line)
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

// cmdList prints containers as a table, ids (-q) or JSON
// (Container/ContainerList.swift). Before 0.10.0 the CLI filters running
// containers itself, and only for the table and -q: --format json lists
// every container, --all or not (ContainerList.swift@0.9.0).
func cmdList(a *app, p *parsed) error {
	format, err := a.checkFormat(p)
	if err != nil {
		return err
	}
	if err := a.up(opListContainers); err != nil {
		return err
	}
	all := p.Has("all") || (format == "json" && a.v.Before("0.10.0"))
	cs, err := a.eng.listContainers(all)
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

// cmdInspect prints the containers as JSON: those of the list whose id
// is given, each once, in the list's order (Container/ContainerInspect.swift).
// 0.x leaves missing ids out; from 1.0.0 any missing id fails the command
// with notFound "container not found: <ids>", the missing ids sorted and
// joined by ", ".
func cmdInspect(a *app, p *parsed) error {
	if err := a.up(opListContainers); err != nil {
		return err
	}
	ids := uniq(p.Pos)
	cs, err := a.eng.inspectContainers(ids...)
	if err != nil {
		return err
	}
	byName := map[string]bool{}
	for _, c := range cs {
		byName[c.Name] = true
	}
	var missing []string
	for _, id := range ids {
		if !byName[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 && oneX(a.v) {
		sort.Strings(missing)
		return a.fail("notFound", "container not found: "+strings.Join(missing, ", "))
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Created.Before(cs[j].Created) })
	arr := []any{}
	seen := map[string]bool{}
	for i := range cs {
		if seen[cs[i].Name] {
			continue
		}
		seen[cs[i].Name] = true
		arr = append(arr, a.containerJSON(view(&cs[i])))
	}
	a.printJSON(arr, true)
	return nil
}

// cmdLogs prints the container's log, the init process's stdout and
// stderr as one file, on stdout (Container/ContainerLogs.swift,
// 0.8.0–1.2.2): the whole log without its leading and trailing newlines
// and with one newline added (nothing for an empty log); with -n the last
// n lines that are not empty; with --follow then each new line that is
// not empty. A missing container: before 0.10.0 the CLI's own get fails
// and is wrapped as invalidArgument "failed to fetch container logs for
// <id>: <error>"; from 0.10.0 the server's logs request fails and
// ContainerClient.logs wraps it as "failed to get logs for container <id>".
func cmdLogs(a *app, p *parsed) error {
	id := p.Pos[0]
	if a.v.Before("0.10.0") {
		if err := a.up(opListContainers); err != nil {
			return err
		}
	} else if err := a.up("failed to get logs for container " + id); err != nil {
		return err
	}
	c, err := a.eng.inspectOne(id)
	if err != nil {
		return err
	}
	if c == nil {
		if a.v.Before("0.10.0") {
			return a.fail("invalidArgument", "failed to fetch container logs for "+id+": "+coded("notFound", "get failed: container "+id+" not found"))
		}
		inner := `internalError: "failed to open container logs: notFound: "container with ID ` + id + ` not found""`
		return a.failCause("internalError", "failed to get logs for container "+id, inner)
	}
	if p.Has("boot") {
		// reconstructed: there is no VM boot log behind podman.
		return nil
	}
	n := -1
	if s := p.Val("n", ""); s != "" {
		n, _ = strconv.Atoi(s)
	}
	// One pipe for both streams keeps their lines in the log's order.
	var log bytes.Buffer
	cmd := a.eng.command("logs", id)
	cmd.Stdout, cmd.Stderr = &log, &log
	if rc := exitStatus(cmd.Run()); rc != 0 {
		r := result{stderr: log.Bytes(), code: rc}
		// reconstructed: the log file could not be read.
		return a.failCause("internalError", "failed to get logs for container "+id, coded("internalError", "failed to open container logs: "+r.message()))
	}
	_, _ = io.WriteString(a.stdout, logText(log.String(), n))
	if !p.Has("follow") {
		return nil
	}
	// podman prints the log again from its start: what was printed is skipped.
	follow := a.eng.command("logs", "-f", id)
	lines := &nonEmptyLines{w: a.stdout, skip: log.Len()}
	follow.Stdout, follow.Stderr = lines, lines
	_ = follow.Run()
	return nil
}

// logText is what `container logs` prints of a whole log: with n < 0 the
// log trimmed of newlines at both ends plus one newline ("" for an empty
// log), else its last n lines that are not empty, each with a newline
// (String.components(separatedBy: .newlines), empty ones dropped).
func logText(log string, n int) string {
	if n < 0 {
		if log == "" {
			return ""
		}
		return strings.Trim(log, "\n\r\v\f\u0085\u2028\u2029") + "\n"
	}
	var lines []string
	for _, l := range strings.FieldsFunc(log, isNewline) {
		if l != "" {
			lines = append(lines, l)
		}
	}
	if n < len(lines) {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// isNewline is CharacterSet.newlines: U+000A–U+000D, U+0085, U+2028, U+2029.
func isNewline(r rune) bool {
	return r >= '\n' && r <= '\r' || r == '\u0085' || r == '\u2028' || r == '\u2029'
}

// nonEmptyLines writes each complete line that is not empty, as
// ContainerLogs.followFile prints what the log gains.
type nonEmptyLines struct {
	mu   sync.Mutex
	w    io.Writer
	skip int // bytes still to drop: those already printed
	buf  []byte
}

func (l *nonEmptyLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	drop := min(l.skip, len(p))
	l.skip -= drop
	l.buf = append(l.buf, p[drop:]...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimRight(string(l.buf[:i]), "\r"); line != "" {
			_, _ = io.WriteString(l.w, line+"\n")
		}
		l.buf = l.buf[i+1:]
	}
	return n, nil
}
