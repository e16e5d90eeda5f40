package apple

import (
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// StartHint is what to run when the container system is not started. Both
// kernel flags matter: without one, `system start` asks on stdin whether to
// install a kernel, and a non-interactive caller would hang.
const StartHint = "container system start --enable-kernel-install"

// InstallHint tells a user without the CLI where to get it.
const InstallHint = "install Apple's container CLI (a signed .pkg from https://github.com/apple/container/releases, or `brew install container`), then run `" + StartHint + "`"

// Classify maps a failed `container` run's exit code and output to a
// sandbox sentinel error and a hint. It understands both error forms:
// `Error: <code>: "<message>"` before 0.10.0 and `Error: <message>` after,
// including the AggregateError form that stop and delete keep printing
// (`internalError: "failed to stop container" (cause: "notFound: …")`).
func Classify(code int, stderr string) (error, string) {
	s := strings.ToLower(stderr)
	has := func(subs ...string) bool {
		for _, sub := range subs {
			if strings.Contains(s, sub) {
				return true
			}
		}
		return false
	}
	switch {
	case has("xpc connection error", "container system start", "plugins are unavailable",
		"apiserver is not running", "not registered with launchd", "failed to get a response from apiserver"):
		return sandbox.ErrEngineNotStarted, "run `" + StartHint + "`"
	case has("plugin 'container-"):
		// An unknown subcommand is looked up as a plugin: the CLI is too old.
		return nil, "this container CLI lacks a command sandbox-mcp needs; upgrade it (`brew upgrade container` or a newer .pkg)"
	case code == 64 || has("unknown option", "error: missing expected argument"):
		return nil, "this container CLI rejected an option sandbox-mcp uses; upgrade it to " + MinVersion.String() + " or newer"
	case has("nested virtualization is not supported"):
		return nil, "nested virtualization needs an M3 or newer Mac and macOS 15+; drop virtualization from the profile"
	case has("rosetta is not installed"):
		return nil, "run `softwareupdate --install-rosetta`, or use an arm64 image"
	case has("storage device attachment is invalid"):
		return nil, "a volume can be attached read-write to only one running container; stop the other container using it"
	case has("already exists"):
		return sandbox.ErrAlreadyExists, ""
	case has("is currently in use"):
		// VolumeError.volumeInUse (ContainerResource/Volume/VolumeConfiguration.swift).
		return sandbox.ErrInUse, ""
	case has("is not running"):
		return sandbox.ErrNotRunning, ""
	case has("not found", "no such container", "failed to delete one or more containers",
		"failed to delete one or more volumes"):
		// The last two are what container and volume delete say of ids they
		// did not find (ContainerDelete.swift before 0.11.0, VolumeDelete.swift
		// 0.8.0–1.2.2, notFound). "failed to delete one or more images" is not
		// among them: image delete says it of images that failed to go too.
		return sandbox.ErrNotFound, ""
	case has("failed with response: 404", "failed with response: 401 unauthorized"):
		// A registry answering for an image that is not there (Docker Hub
		// says 401 for a repository that does not exist).
		return sandbox.ErrNotFound, "the registry has no such image, or it needs `container registry login`"
	}
	return nil, ""
}
