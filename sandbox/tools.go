package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// This file is the part of the Manager's API that tools call beyond exec:
// files, packages, Python, the env store, history and health. Each method
// builds its in-VM script with guest and runs it through the sandbox's
// shells, so front ends never write script text or reach the engine.

// scriptTimeout bounds the scripts behind file and env operations.
const scriptTimeout = 60 * time.Second

// MaxReadFile bounds the bytes ReadFile returns in one call.
const MaxReadFile = 1 << 20

// ScriptError is an operation that ran in the sandbox and failed there:
// the path is missing, a directory, not readable, the disk is full…
type ScriptError struct {
	Op       string // e.g. "write_file /etc/x"
	ExitCode int
	Stderr   string
	TimedOut bool
}

func (e *ScriptError) Error() string {
	if e.TimedOut {
		return fmt.Sprintf("%s: timed out", e.Op)
	}
	if e.Stderr == "" {
		return fmt.Sprintf("%s: exit %d", e.Op, e.ExitCode)
	}
	return fmt.Sprintf("%s: %s", e.Op, e.Stderr)
}

// ErrTooLarge means an operation's output passed its limit.
var ErrTooLarge = errors.New("output too large")

// runScript runs a tool-built script in sandbox name (booting it if
// needed) with label in the history ("" records nothing) and returns its
// stdout, at most limit bytes; a failure in the sandbox is a *ScriptError.
func (m *Manager) runScript(ctx context.Context, name, label, script string, stdin []byte, limit int) ([]byte, error) {
	var out bytes.Buffer
	capOut := &limitWriter{w: &out, n: limit}
	errb := &shell.Capture{Limit: 4096}
	res, err := m.ExecAs(ctx, name, label, shell.Request{
		Command: script, Trusted: true, Stdin: stdin, Timeout: scriptTimeout, Stdout: capOut, Stderr: errb,
	})
	if err != nil {
		return nil, err
	}
	op := label
	if op == "" {
		op = "housekeeping"
	}
	if res.TimedOut || res.ExitCode != 0 {
		head, _, _ := errb.Parts()
		return nil, &ScriptError{Op: op, ExitCode: res.ExitCode, Stderr: strings.TrimSpace(string(head)), TimedOut: res.TimedOut}
	}
	if capOut.over {
		return out.Bytes(), fmt.Errorf("%s: %w: more than %d bytes", op, ErrTooLarge, limit)
	}
	return out.Bytes(), nil
}

// limitWriter keeps the first n bytes and notes whether more came.
type limitWriter struct {
	w    *bytes.Buffer
	n    int
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room < len(p) {
		l.over = true
		if room > 0 {
			l.w.Write(p[:room])
		}
		return len(p), nil
	}
	return l.w.Write(p)
}

// Install installs packages with the image's package manager.
func (m *Manager) Install(ctx context.Context, name string, pkgs []string, req shell.Request) (ExecResult, error) {
	script, err := guest.InstallScript(pkgs)
	if err != nil {
		return ExecResult{}, &ArgError{Err: err}
	}
	req.Command = script
	return m.ExecAs(ctx, name, "install "+strings.Join(pkgs, " "), req)
}

// ArgError is a request the Manager refused before running anything.
type ArgError struct{ Err error }

func (e *ArgError) Error() string { return e.Err.Error() }
func (e *ArgError) Unwrap() error { return e.Err }

// EnvVar is one variable of a sandbox's env store. A secret's Value is
// never given out: it reads "***".
type EnvVar struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Secret bool   `json:"secret,omitempty"`
}

// Env lists the variables set with SetEnv, secrets hidden. The store lives
// in the sandbox, so every server lists the same variables and hides the
// same secrets.
func (m *Manager) Env(ctx context.Context, name string) ([]EnvVar, error) {
	out, err := m.runScript(ctx, name, "", guest.EnvListScript, nil, 4<<20)
	if err != nil {
		return nil, err
	}
	vars := guest.ParseEnvList(out)
	list := make([]EnvVar, 0, len(vars))
	for _, v := range vars {
		e := EnvVar{Name: v.Name, Value: v.Value, Secret: v.Secret}
		if v.Secret {
			m.history.AddSecret(name, v.Value)
			e.Value = "***"
		}
		list = append(list, e)
	}
	return list, nil
}

// SetEnv sets a variable for every later command of every server; secret
// keeps its value out of history, listings, logs and errors, here and in
// every other server.
func (m *Manager) SetEnv(ctx context.Context, name, key, value string, secret bool) error {
	script, err := guest.EnvSetScript(key, value, secret)
	if err != nil {
		return &ArgError{Err: err}
	}
	if secret {
		m.history.AddSecret(name, value)
	}
	_, err = m.runScript(ctx, name, "env set "+key, script, nil, 4096)
	if err == nil {
		m.forgetEgressSecret(name, key) // a plain value replaces a swapped one
	}
	return err
}

// UnsetEnv removes a variable set with SetEnv.
func (m *Manager) UnsetEnv(ctx context.Context, name, key string) error {
	script, err := guest.EnvUnsetScript(key)
	if err != nil {
		return &ArgError{Err: err}
	}
	_, err = m.runScript(ctx, name, "env unset "+key, script, nil, 4096)
	if err == nil {
		m.forgetEgressSecret(name, key)
	}
	return err
}

// noteSecrets keeps redaction in step with the env store: when a shell
// reports a store generation not seen here yet (a SetEnv through this
// server or another), the secrets it names are read (once per change) and
// their values hidden from then on. Both the pool's shared state and the
// state the latest command started in are looked at: a store loaded
// before a command that changed nothing reaches only the latter.
func (m *Manager) noteSecrets(ctx context.Context, sb *Sandbox) {
	var fresh []string
	load := false
	for _, get := range []func() (shell.State, bool){sb.pool.State, sb.pool.LastStart} {
		st, ok := get()
		if !ok {
			continue
		}
		gen, _ := guest.ExportedValue(st.Exports, guest.EnvGenVar)
		if !sb.noteEnvGen(gen) {
			continue
		}
		fresh = append(fresh, gen)
		if names, _ := guest.ExportedValue(st.Exports, guest.EnvSecretsVar); names != "" {
			load = true
		}
	}
	if !load {
		return
	}
	out, err := sb.housekeep(ctx, guest.EnvListScript, scriptTimeout)
	if err != nil {
		sb.forgetEnvGens(fresh) // try again after the next command
		return
	}
	for _, v := range guest.ParseEnvList(out) {
		if v.Secret {
			m.history.AddSecret(sb.Name, v.Value)
		}
	}
}

// noteEnvGen records gen as seen and reports whether it was new.
func (sb *Sandbox) noteEnvGen(gen string) bool {
	sb.envMu.Lock()
	defer sb.envMu.Unlock()
	if slices.Contains(sb.envGens, gen) {
		return false
	}
	if len(sb.envGens) >= 8 {
		sb.envGens = sb.envGens[1:]
	}
	sb.envGens = append(sb.envGens, gen)
	return true
}

// forgetEnvGens drops gens, so their secrets are read again.
func (sb *Sandbox) forgetEnvGens(gens []string) {
	sb.envMu.Lock()
	defer sb.envMu.Unlock()
	sb.envGens = slices.DeleteFunc(sb.envGens, func(g string) bool { return slices.Contains(gens, g) })
}

// CommandHistory returns up to n of the newest commands run in a sandbox
// by any server, oldest first, secrets redacted.
func (m *Manager) CommandHistory(name string, n int) ([]HistoryEntry, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return m.history.Recent(name, n)
}

// Health is the state of the engine, the default image and the sandboxes.
type Health struct {
	Runtime       string `json:"runtime"`
	EngineVersion string `json:"engine_version,omitempty"`
	EngineError   string `json:"engine_error,omitempty"`
	DefaultImage  string `json:"default_image"`
	ImagePresent  bool   `json:"image_present"`
	ImageError    string `json:"image_error,omitempty"`
	// ImageHint says how to get a missing default image.
	ImageHint string `json:"image_hint,omitempty"`
	// Sandboxes maps each sandbox to its state in the words of status
	// (running, stopped, …); for a running one this server has shells in,
	// whether they answered: "running, responding" or "running, not
	// responding".
	Sandboxes map[string]string `json:"sandboxes"`
}

// The states of health for a sandbox whose shells were asked.
const (
	HealthResponding    = "running, responding"
	HealthNotResponding = "running, not responding"
)

// OK reports whether everything answered.
func (h Health) OK() bool {
	if h.EngineError != "" || !h.ImagePresent {
		return false
	}
	for _, st := range h.Sandboxes {
		if st == HealthNotResponding {
			return false
		}
	}
	return true
}

// Health pings the engine, looks for the default image and checks that
// every sandbox this server is connected to answers.
func (m *Manager) Health(ctx context.Context) Health {
	h := Health{Runtime: m.rt.Kind(), DefaultImage: m.ProfileFor(DefaultName).Image, Sandboxes: map[string]string{}}
	err := m.rt.Ping(ctx)
	if err == nil {
		h.EngineVersion, err = m.rt.Version(ctx)
	}
	if err != nil {
		h.EngineError = err.Error()
		return h
	}
	h.ImagePresent, err = m.rt.ImageExists(ctx, h.DefaultImage)
	if err != nil {
		h.ImageError = err.Error()
	} else if !h.ImagePresent {
		h.ImageHint = ImageHint(m.rt)
	}
	list, err := m.List(ctx)
	if err != nil {
		h.EngineError = "list sandboxes: " + err.Error()
	}
	for _, in := range list {
		st := string(in.State)
		if sb, ok := m.Lookup(in.Name); ok {
			if _, err := sb.housekeep(ctx, "true", 5*time.Second); err != nil {
				st = HealthNotResponding
			} else {
				st = HealthResponding
			}
		}
		h.Sandboxes[in.Name] = st
	}
	return h
}
