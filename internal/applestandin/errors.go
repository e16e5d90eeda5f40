package main

import (
	"strings"
)

// exitError ends the command: text goes to stderr as is (it already holds
// the "Error: " prefix and any extra lines), code is the process exit code.
type exitError struct {
	code int
	text string
}

func (e *exitError) Error() string { return e.text }

// Exit codes of swift-argument-parser: 1 for thrown errors, 64 for usage.
const (
	exitFailure = 1
	exitUsage   = 64
)

// coded renders ContainerizationError's description: `code: "message"`.
func coded(code, msg string) string { return code + `: "` + msg + `"` }

// withCause appends Foundation's cause suffix: ` (cause: "<cause>")`.
func withCause(text, cause string) string {
	if cause == "" {
		return text
	}
	return text + ` (cause: "` + cause + `")`
}

// errText renders one thrown ContainerizationError as the emulated version
// prints it: before 0.10.0 `code: "message"`, from 0.10.0 the message only
// (LocalizedError), each with an optional cause.
func errText(v Version, code, msg, cause string) string {
	if codeErrors(v) {
		return withCause(coded(code, msg), cause)
	}
	return withCause(msg, cause)
}

// fail returns the exit-1 error for one ContainerizationError.
func (a *app) fail(code, msg string) error {
	return &exitError{exitFailure, "Error: " + errText(a.v, code, msg, "")}
}

// failCause is fail with a cause.
func (a *app) failCause(code, msg, cause string) error {
	return &exitError{exitFailure, "Error: " + errText(a.v, code, msg, cause)}
}

// failPlain prints `Error: <text>` in every version (errors that are not
// ContainerizationErrors, e.g. plugin lookup or registry HTTP errors).
func failPlain(text string) error {
	return &exitError{exitFailure, "Error: " + text}
}

// aggregate prints several errors the way AggregateError does for stop,
// kill and delete: the first line has the "Error: " prefix, each line is
// in the coded form whatever the version.
func aggregate(lines []string) error {
	return &exitError{exitFailure, "Error: " + strings.Join(lines, "\n")}
}

// opNotFound is one AggregateError line for a missing id (samples §6, §6.2).
func opNotFound(verb, id string) string {
	return withCause(coded("internalError", "failed to "+verb+" container"), coded("notFound", "container with ID "+id+" not found"))
}

// Common container errors (samples §6).

func (a *app) errGetNotFound(id string) error {
	return a.fail("notFound", "get failed: container "+id+" not found")
}

func (a *app) errNotRunning(id string) error {
	return a.fail("invalidState", "container "+id+" is not running")
}

func (a *app) errExists(id string) error {
	return a.fail("exists", "container with id "+id+" already exists")
}

// errXPC is what a command prints when the apiserver is not running
// (samples §6.1). Application.swift wraps any error whose description
// holds "XPC connection error" in ContainerizationError(.interrupted,
// "<description>\nEnsure …"), so the failing request's description is
// always in the coded form. ops are the failing requests' messages, one
// per request ("failed to list containers", ContainerClient.list), each
// with the connection error as cause; none means the bare connection
// error (requests that do not wrap it: ClientImage.list, ClientVolume).
// Several print one per line, as AggregateError does.
func (a *app) errXPC(ops ...string) error {
	conn := coded("interrupted", "XPC connection error: Connection invalid")
	inner := conn
	if len(ops) > 0 {
		lines := make([]string, len(ops))
		for i, op := range ops {
			lines[i] = withCause(coded("internalError", op), conn)
		}
		inner = strings.Join(lines, "\n")
	}
	return a.errXPCText(inner)
}

// errXPCText is Application.swift's handling of an error whose
// description (inner) holds "XPC connection error": wrapped with the hint
// in interrupted "<inner>\nEnsure …", printed by its message from 0.10.0
// and whole before (issue #829).
func (a *app) errXPCText(inner string) error {
	const hint = "Ensure container system service has been started with `container system start`."
	if codeErrors(a.v) {
		return &exitError{exitFailure, "Error: " + coded("interrupted", inner+"\n"+hint)}
	}
	return &exitError{exitFailure, "Error: " + inner + "\n" + hint}
}

// errCreateExists is the server's refusal of a container id in use
// (ContainersService.create: exists "container already exists: <id>"),
// as ContainerClient.create passes it on: wrapped as internalError
// "failed to create container" with it as the cause before 1.2.0, as is
// from 1.2.0 (ContainerClient.swift@1.2.0 rethrows ContainerizationErrors).
func (a *app) errCreateExists(id string) error {
	if a.v.AtLeast("1.2.0") {
		return a.fail("exists", "container already exists: "+id)
	}
	return a.failCause("internalError", "failed to create container", coded("exists", "container already exists: "+id))
}
