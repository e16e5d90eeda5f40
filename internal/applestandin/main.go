// Command container is a test stand-in for Apple's `container` CLI (macOS).
//
// It takes Apple's command lines, prints Apple's output shapes and error
// texts for a chosen CLI version, and does the real work with podman, so
// that a driver written for Apple's CLI can be tested on Linux. Built by
// tests with `go build -o <dir>/container ./internal/applestandin`.
//
// Configuration (environment):
//
//	CONTAINER_STANDIN_VERSION  emulated CLI version (default 1.5.0)
//	CONTAINER_STANDIN_ENGINE   backend CLI (default podman)
//	CONTAINER_STANDIN_HOME     directory holding the system-stopped marker
//	CONTAINER_STANDIN_SYSTEM   "stopped" or "unregistered" forces the
//	                           container system to be down
//	CONTAINER_STANDIN_LOG      file to which each invocation's argv is
//	                           appended as one JSON array line
//	CONTAINER_STANDIN_REGISTRY_DOMAIN
//	                           the default registry domain the system is
//	                           configured with (default docker.io)
//
// Facts come from the project's Apple CLI reference and captured samples;
// anything not covered there is marked "reconstructed" in the source.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Environment variable names.
const (
	envVersion = "CONTAINER_STANDIN_VERSION"
	envEngine  = "CONTAINER_STANDIN_ENGINE"
	envHome    = "CONTAINER_STANDIN_HOME"
	envSystem  = "CONTAINER_STANDIN_SYSTEM"
	envLog     = "CONTAINER_STANDIN_LOG"
	envDomain  = "CONTAINER_STANDIN_REGISTRY_DOMAIN"

	defaultVersion = "1.5.0"
	stoppedMarker  = "system-stopped"
)

// app is one invocation: the emulated version, the backend and the stdio.
type app struct {
	v      Version
	eng    *engine
	home   string
	forced string // CONTAINER_STANDIN_SYSTEM
	stdin  *os.File
	stdout io.Writer
	stderr io.Writer
}

// exitCode ends the invocation with a code and prints nothing (e.g. the
// exit status of a foreground process).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes one command line and returns the exit code.
func run(args []string) int {
	logInvocation(args)
	a, err := newApp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error: "+err.Error())
		return exitFailure
	}
	return a.finish(a.dispatch(args))
}

func newApp() (*app, error) {
	vs := os.Getenv(envVersion)
	if vs == "" {
		vs = defaultVersion
	}
	v, err := ParseVersion(vs)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", envVersion, err)
	}
	if d := os.Getenv(envDomain); d != "" {
		registryDomain = d
	}
	bin := os.Getenv(envEngine)
	if bin == "" {
		bin = "podman"
	}
	return &app{
		v:      v,
		eng:    &engine{bin: bin},
		home:   os.Getenv(envHome),
		forced: os.Getenv(envSystem),
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
	}, nil
}

// finish prints err the way the CLI would and returns the exit code.
func (a *app) finish(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	var hp *errHelp
	var ec exitCode
	switch {
	case errors.As(err, &ee):
		fmt.Fprintln(a.stderr, ee.text)
		return ee.code
	case errors.As(err, &hp):
		fmt.Fprint(a.stdout, helpText(hp.spec))
		return 0
	case errors.As(err, &ec):
		return int(ec)
	default:
		fmt.Fprintln(a.stderr, "Error: "+err.Error())
		return exitFailure
	}
}

// logInvocation appends argv as one JSON array line to CONTAINER_STANDIN_LOG
// with a single O_APPEND write, so concurrent invocations never interleave.
func logInvocation(args []string) {
	path := os.Getenv(envLog)
	if path == "" {
		return
	}
	if args == nil {
		args = []string{}
	}
	line, err := json.Marshal(args)
	if err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	_, _ = f.Write(append(line, '\n'))
	_ = f.Close()
}

// systemDown returns "" when the container system is up, else the status
// the CLI reports: "unregistered" or "not running".
func (a *app) systemDown() string {
	switch strings.ToLower(a.forced) {
	case "unregistered":
		return "unregistered"
	case "stopped", "not running", "not-running":
		return "not running"
	}
	if a.home != "" {
		if _, err := os.Stat(filepath.Join(a.home, stoppedMarker)); err == nil {
			return "unregistered"
		}
	}
	return ""
}

// up fails with the version's XPC error when the system is down; op names
// the request that would have failed ("failed to list containers").
func (a *app) up(op string) error {
	if a.systemDown() != "" {
		return a.errXPC(op)
	}
	return nil
}

// handler runs one command with its already-selected spec.
type handler struct {
	spec *cmdSpec
	run  func(a *app, p *parsed) error
}

// dispatch routes the top-level command line.
func (a *app) dispatch(args []string) error {
	// Global options before the subcommand.
	for len(args) > 0 {
		switch args[0] {
		case "--debug":
			args = args[1:]
			continue
		case "--version":
			fmt.Fprintf(a.stdout, "container CLI version %s (build: release, commit: %s)\n", a.v, shortCommit)
			return nil
		case "-h", "--help", "help":
			fmt.Fprint(a.stdout, topHelp)
			return nil
		}
		break
	}
	if len(args) == 0 {
		fmt.Fprint(a.stdout, topHelp)
		return nil
	}
	name, rest := args[0], args[1:]
	switch name {
	case "image", "images", "i":
		return a.group("container image", imageCommands(a.v), rest)
	case "volume", "v":
		return a.group("container volume", volumeCommands(a.v), rest)
	case "system", "s":
		return a.group("container system", systemCommands(a.v), rest)
	case "builder":
		return a.group("container builder", builderCommands(), rest)
	}
	h, ok := containerCommands(a.v)[name]
	if !ok {
		return a.unknownCommand(name)
	}
	return a.invoke(h, rest)
}

// invoke parses rest against h's spec and runs it.
func (a *app) invoke(h handler, rest []string) error {
	p, err := parseArgs(a.v, h.spec, rest)
	if err != nil {
		return err
	}
	return h.run(a, p)
}

// group dispatches a command group such as `container image …`.
func (a *app) group(path string, cmds map[string]handler, rest []string) error {
	spec := &cmdSpec{path: path, usage: path + " <subcommand>"}
	if len(rest) == 0 {
		return usageError(spec, "Missing expected argument '<subcommand>'")
	}
	if rest[0] == "-h" || rest[0] == "--help" {
		return &errHelp{spec}
	}
	h, ok := cmds[rest[0]]
	if !ok {
		return usageError(spec, "Unexpected argument '%s'", rest[0])
	}
	return a.invoke(h, rest[1:])
}

// unknownCommand: an unknown subcommand is looked up as a plugin.
func (a *app) unknownCommand(name string) error {
	if strings.HasPrefix(name, "-") {
		return usageError(&cmdSpec{path: "container", usage: "container <subcommand>"}, "Unknown option '%s'", name)
	}
	if a.systemDown() != "" {
		// Captured on 1.2.0 (shortened by the source); reconstructed: the tail after the colon.
		return &exitError{exitUsage, "Error: Plugins are unavailable. Start the container system services and retry: container system start\nUsage: container [--debug] <subcommand>\n  See 'container --help' for more information."}
	}
	return failPlain("Plugin 'container-" + name + "' not found.")
}

// reconstructed: an abridged version of the CLI's overview screen.
const topHelp = `OVERVIEW: A container platform for macOS

USAGE: container [--debug] <subcommand>

CONTAINER SUBCOMMANDS:
  create, delete (rm), exec, export, inspect, kill, list (ls), logs, prune,
  run, start, stats, stop, copy (cp)

IMAGE SUBCOMMANDS:
  build, image (i)

VOLUME SUBCOMMANDS:
  volume (v)

OTHER SUBCOMMANDS:
  builder, system (s)

This is a test stand-in backed by podman.
`
