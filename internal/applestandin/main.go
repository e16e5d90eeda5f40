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
//	CONTAINER_STANDIN_LOG      files (a path list) to each of which every
//	                           invocation is appended as one JSON line,
//	                           {"version": "1.5.0", "argv": [...]}
//	CONTAINER_STANDIN_REGISTRY_DOMAIN
//	                           the default registry domain the system is
//	                           configured with (default docker.io)
//
// A volume that `volume create` makes is, as Apple's are, an ext4
// filesystem of its size (512 GiB when none) with the formatter's
// lost+found: a sparse image on a loop device, where the host has them
// (root; see volume_disk.go), else a plain podman volume.
//
// Command lines are parsed with the emulated release's argument tables
// (internal/applecli), which refuse what that release's CLI refuses, with
// its text and exit code. Other facts come from the project's Apple CLI
// reference and captured samples; anything not covered there is marked
// "reconstructed" in the source.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/applecli"
)

// Environment variable names.
const (
	envVersion = "CONTAINER_STANDIN_VERSION"
	envEngine  = "CONTAINER_STANDIN_ENGINE"
	envHome    = "CONTAINER_STANDIN_HOME"
	envSystem  = "CONTAINER_STANDIN_SYSTEM"
	envLog     = "CONTAINER_STANDIN_LOG"
	envDomain  = "CONTAINER_STANDIN_REGISTRY_DOMAIN"
	// envGraphRoot, when set, is podman's storage root, which the stand-in
	// would otherwise ask `podman info` for at each volume it makes (a
	// command that costs several ordinary ones).
	envGraphRoot = "CONTAINER_STANDIN_GRAPHROOT"

	defaultVersion = "1.5.0"
	stoppedMarker  = "system-stopped"
	startedMarker  = "system-started" // its mtime: when `system start` last ran
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
	var ec exitCode
	switch {
	case errors.As(err, &ee):
		fmt.Fprintln(a.stderr, ee.text)
		return ee.code
	case errors.As(err, &ec):
		return int(ec)
	default:
		fmt.Fprintln(a.stderr, "Error: "+err.Error())
		return exitFailure
	}
}

// logInvocation appends the invocation, the emulated version and argv,
// as one JSON line to each file CONTAINER_STANDIN_LOG lists, each with a
// single O_APPEND write, so concurrent invocations never interleave.
func logInvocation(args []string) {
	paths := os.Getenv(envLog)
	if paths == "" {
		return
	}
	if args == nil {
		args = []string{}
	}
	version := os.Getenv(envVersion)
	if version == "" {
		version = defaultVersion
	}
	line, err := json.Marshal(struct {
		Version string   `json:"version"`
		Argv    []string `json:"argv"`
	}{version, args})
	if err != nil {
		return
	}
	line = append(line, '\n')
	for _, path := range filepath.SplitList(paths) {
		if path == "" {
			continue
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			continue
		}
		_, _ = f.Write(line)
		_ = f.Close()
	}
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

// systemStartedAt is when `system start` last started the emulated
// apiserver, which then knows the containers afresh.
func (a *app) systemStartedAt() (time.Time, bool) {
	if a.home == "" {
		return time.Time{}, false
	}
	fi, err := os.Stat(filepath.Join(a.home, startedMarker))
	if err != nil {
		return time.Time{}, false
	}
	return fi.ModTime(), true
}

// up fails with the version's XPC error when the system is down; ops
// name the requests that would have failed ("failed to list containers"),
// none the requests that fail with the bare connection error (errXPC).
func (a *app) up(ops ...string) error {
	if a.systemDown() != "" {
		return a.errXPC(ops...)
	}
	return nil
}

// Requests as the clients word their failures (errXPC).
const (
	// ContainerClient.list (ClientContainer.list before 0.10.0), which
	// ContainerClient.get goes through too.
	opListContainers = "failed to list containers"
)

// perID repeats op for every id: commands that send one request per id
// and collect the errors in an AggregateError.
func perID(op string, ids []string) []string {
	ops := make([]string, len(ids))
	for i := range ids {
		ops[i] = op
	}
	return ops
}

// dispatch parses the command line against the emulated release's
// tables and runs the command; the parser's refusals print as the CLI's.
func (a *app) dispatch(args []string) error {
	p, err := applecli.Parse(a.v, args)
	var r *applecli.Refusal
	if errors.As(err, &r) {
		return &exitError{r.Code, r.Text}
	} else if err != nil {
		return err
	}
	switch p.Outcome {
	case applecli.ShowVersion:
		fmt.Fprintf(a.stdout, "container CLI version %s (build: release, commit: %s)\n", a.v, shortCommit)
		return nil
	case applecli.ShowHelp:
		if p.Table.Command.Path == "" {
			fmt.Fprint(a.stdout, topHelp)
		} else {
			fmt.Fprint(a.stdout, helpText(p.Table))
		}
		return nil
	case applecli.RunPlugin:
		return a.plugin(p)
	}
	run, ok := handlers[p.Table.Command.Path]
	if !ok {
		return failPlain("container " + p.Table.Command.Path + " is not supported by this stand-in")
	}
	return run(a, p)
}

// plugin: a first word that names no command is looked up as a plugin
// (DefaultCommand.swift); the stand-in has none. Both errors are
// ValidationErrors: printed with the root's usage, exit 64.
func (a *app) plugin(p *parsed) error {
	exe, _ := os.Executable()
	hints := applecli.PluginHints(filepath.Dir(filepath.Dir(exe)), p.Pos[0])
	msg := applecli.PluginNotFound(p.Pos[0], hints)
	if a.systemDown() != "" {
		msg = applecli.PluginsUnavailable(hints)
	}
	return &exitError{exitUsage, "Error: " + msg + "\nUsage: " + p.Table.Usage() + "\n  See 'container --help' for more information."}
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
