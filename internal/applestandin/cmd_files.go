package main

import (
	"bytes"
	"fmt"
	"strings"
)

// containerPath splits "id:/path"; a local path has no colon before its
// first slash.
func containerPath(s string) (id, path string, ok bool) {
	i := strings.Index(s, ":")
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// cmdCopy copies between the host and a running container (1.0.0+) and
// prints the destination.
func cmdCopy(a *app, p *parsed) error {
	src, dst := p.Pos[0], p.Pos[1]
	if err := a.up("failed to get container"); err != nil {
		return err
	}
	sid, _, sRemote := containerPath(src)
	did, _, dRemote := containerPath(dst)
	switch {
	case sRemote && dRemote:
		// reconstructed
		return a.fail("invalidArgument", "copying between containers is not supported")
	case !sRemote && !dRemote:
		// reconstructed
		return a.fail("invalidArgument", "one of source or destination must be a container path (<container-id>:<path>)")
	}
	id := sid
	if dRemote {
		id = did
	}
	c, err := a.eng.inspectOne(id)
	if err != nil {
		return err
	}
	if c == nil {
		return a.errGetNotFound(id)
	}
	if !c.State.Running {
		return a.errNotRunning(id)
	}
	if r := a.eng.run("cp", src, dst); !r.ok() {
		// reconstructed
		return a.failCause("internalError", "failed to copy "+src+" to "+dst, r.message())
	}
	fmt.Fprintln(a.stdout, dst)
	return nil
}

// cmdExport writes a tar of the container's root filesystem to -o or
// stdout; before 1.2.1 the container must be stopped.
func cmdExport(a *app, p *parsed) error {
	if a.v.Before("0.11.0") {
		return failPlain("export --image (build an image from a container) is not supported by this stand-in")
	}
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
	if c.State.Running && a.v.Before("1.2.1") {
		// Quoted in the coded form for 1.0.0 (samples §6).
		return failPlain(coded("invalidState", "container is not stopped"))
	}
	args := []string{"export"}
	if o := p.Val("output", ""); o != "" {
		args = append(args, "-o", o)
	}
	var errb bytes.Buffer
	cmd := a.eng.command(append(args, id)...)
	cmd.Stdout, cmd.Stderr = a.stdout, &errb
	if rc := exitStatus(cmd.Run()); rc != 0 {
		r := result{stderr: errb.Bytes(), code: rc}
		// reconstructed
		return a.failCause("internalError", "failed to export container "+id, r.message())
	}
	return nil
}
