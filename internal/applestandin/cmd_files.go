package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// pathRef is ContainerCopy.parsePathRef (1.0.0–1.2.2): split on ':', one
// part is a local path, two with an id and an absolute path a container
// path, anything else invalidArgument "invalid path given: <ref>".
func (a *app) pathRef(ref string) (id, path string, remote bool, err error) {
	parts := strings.Split(ref, ":")
	switch {
	case len(parts) == 1:
		return "", ref, false, nil
	case len(parts) == 2 && parts[0] != "" && strings.HasPrefix(parts[1], "/"):
		return parts[0], parts[1], true, nil
	}
	return "", "", false, a.fail("invalidArgument", "invalid path given: "+ref)
}

// cmdCopy copies between the host and a running container
// (Container/ContainerCopy.swift, 1.0.0–1.2.2). The server refuses a
// missing or stopped container, and ContainerClient.copyIn/copyOut wrap
// that as internalError "failed to copy into container <id>" / "failed to
// copy from container <id>". From 1.1.0 it prints where the copy went: the
// absolute local path (in an existing directory, the source's last
// component under it), or <id>:<path> (with the source's last component
// appended when the path ends in '/'); 1.0.0 prints nothing.
func cmdCopy(a *app, p *parsed) error {
	src, dst := p.Pos[0], p.Pos[1]
	sid, spath, sRemote, err := a.pathRef(src)
	if err != nil {
		return err
	}
	did, dpath, dRemote, err := a.pathRef(dst)
	if err != nil {
		return err
	}
	switch {
	case sRemote && dRemote:
		return a.fail("invalidArgument", "copying between containers is not supported")
	case !sRemote && !dRemote:
		return a.fail("invalidArgument", "one of source or destination must be a container reference (container_id:path)")
	}
	printed := ""
	if sRemote {
		// Copy out.
		local, _ := filepath.Abs(dpath)
		final := local
		if fi, err := os.Stat(local); err == nil && fi.IsDir() {
			final = filepath.Join(local, filepath.Base(spath))
		}
		if err := a.up("failed to copy from container " + sid); err != nil {
			return err
		}
		if err := a.copyReady(sid, "failed to copy from container "+sid); err != nil {
			return err
		}
		if r := a.eng.run("cp", src, dst); !r.ok() {
			// reconstructed: the guest's error.
			return a.failCause("internalError", "failed to copy from container "+sid, coded("internalError", r.message()))
		}
		if strings.HasSuffix(dpath, "/") {
			if fi, err := os.Stat(local); err == nil && !fi.IsDir() {
				_ = os.Remove(local)
				return a.fail("invalidArgument", "destination is not a directory: "+dpath)
			}
		}
		printed = final
	} else {
		// Copy in.
		local, _ := filepath.Abs(spath)
		fi, err := os.Stat(local)
		if err != nil {
			return a.fail("notFound", "source path does not exist: "+spath)
		}
		if strings.HasSuffix(spath, "/") && !fi.IsDir() {
			return a.fail("invalidArgument", "source path is not a directory: "+spath)
		}
		if err := a.up("failed to copy into container " + did); err != nil {
			return err
		}
		if err := a.copyReady(did, "failed to copy into container "+did); err != nil {
			return err
		}
		if r := a.eng.run("cp", src, dst); !r.ok() {
			// reconstructed: the guest's error.
			return a.failCause("internalError", "failed to copy into container "+did, coded("internalError", r.message()))
		}
		printed = dst
		if strings.HasSuffix(dpath, "/") {
			printed = dst + filepath.Base(local)
		}
	}
	if a.v.AtLeast("1.1.0") {
		fmt.Fprintln(a.stdout, printed)
	}
	return nil
}

// copyReady is ContainersService.copyIn/copyOut's check: the container
// must exist and be running, else the error comes back as the cause of
// the client's op.
func (a *app) copyReady(id, op string) error {
	c, err := a.eng.inspectOne(id)
	switch {
	case err != nil:
		return err
	case c == nil:
		return a.failCause("internalError", op, coded("notFound", "container with ID "+id+" not found"))
	case !c.State.Running:
		return a.failCause("internalError", op, coded("invalidState", "container "+id+" is not running"))
	}
	return nil
}

// cmdExport writes a tar of the container's root filesystem to -o or
// stdout; before 1.2.1 the container must be stopped.
func cmdExport(a *app, p *parsed) error {
	if a.v.Before("0.11.0") {
		return failPlain("export --image (build an image from a container) is not supported by this stand-in")
	}
	id := p.Pos[0]
	if err := a.up("failed to export container"); err != nil {
		return err
	}
	// ContainersService.exportRootfs refuses a missing container and,
	// before 1.2.1, a running one (invalidState "container is not
	// stopped"; quoted for 1.0.0 in samples §6); ContainerClient.export
	// wraps the server's error as internalError "failed to export container".
	c, err := a.eng.inspectOne(id)
	if err != nil {
		return err
	}
	if c == nil {
		return a.failCause("internalError", "failed to export container", coded("notFound", "container with ID "+id+" not found"))
	}
	if c.State.Running && a.v.Before("1.2.1") {
		return a.failCause("internalError", "failed to export container", coded("invalidState", "container is not stopped"))
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
		// reconstructed: the cause's wording.
		return a.failCause("internalError", "failed to export container", coded("internalError", r.message()))
	}
	return nil
}
