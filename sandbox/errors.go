package sandbox

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors shared by every runtime dialect. Dialects wrap them in an
// *EngineError so callers can test with errors.Is and still show the CLI's
// own words.
var (
	// ErrNotFound means the container (or volume, or image) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNotRunning means the container exists but is not running.
	ErrNotRunning = errors.New("not running")
	// ErrAlreadyExists means a container with that name already exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrInUse means a volume cannot go because a container still holds
	// it (one being removed, for a while).
	ErrInUse = errors.New("in use")
	// ErrEngineNotStarted means the CLI is installed but its service
	// (dockerd, the podman socket, `container system`) is not running.
	ErrEngineNotStarted = errors.New("container engine not started")
	// ErrEngineMissing means no usable container CLI was found.
	ErrEngineMissing = errors.New("container engine not installed")
	// ErrInvalidName means a sandbox name failed validation before any CLI saw it.
	ErrInvalidName = errors.New("invalid sandbox name")
	// ErrUnsupported means the engine (or its version) cannot do what
	// was asked.
	ErrUnsupported = errors.New("not supported by this engine")
	// ErrPaused means the sandbox's container was paused outside
	// sandbox-mcp: nothing runs in it until it is unpaused.
	ErrPaused = errors.New("paused")
)

// EngineError is a failed container CLI invocation: what was run, how it
// ended, what it printed, which sentinel it maps to and what the user can do.
type EngineError struct {
	Argv     []string // full argv, program first
	ExitCode int      // -1 when the process did not run or was killed
	Stderr   string   // trimmed, bounded
	Kind     error    // one of the sentinels above, or nil
	Hint     string   // an action for the user, or ""
	Err      error    // underlying error (exec failure, context), or nil
}

func (e *EngineError) Error() string {
	var b strings.Builder
	b.WriteString(strings.Join(e.Argv[:min(len(e.Argv), 3)], " "))
	if len(e.Argv) > 3 {
		b.WriteString(" …")
	}
	switch {
	case e.Stderr != "":
		fmt.Fprintf(&b, ": %s", e.Stderr)
	case e.Err != nil:
		fmt.Fprintf(&b, ": %v", e.Err)
	default:
		fmt.Fprintf(&b, ": exit status %d", e.ExitCode)
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, " (try: %s)", e.Hint)
	}
	return b.String()
}

// Unwrap exposes both the sentinel kind and the underlying cause.
func (e *EngineError) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// HintOf returns the user-facing hint carried by err, if any.
func HintOf(err error) string {
	var ee *EngineError
	if errors.As(err, &ee) {
		return ee.Hint
	}
	return ""
}
