package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/atomicfile"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/apple"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/docker"
)

// engineMemoFile is the file in the state directory that keeps the engine
// --runtime auto chose, so that every server and CLI call of that state
// directory uses the same one.
const engineMemoFile = "engine.json"

// firstCheckWait is how long auto waits for an engine's first answer. An
// engine that is there but slow (podman behind another client's lock) is
// still chosen after it: only one that says it is not running is passed
// over.
const firstCheckWait = 20 * time.Second

// engineMemo is what engineMemoFile holds.
type engineMemo struct {
	Runtime string    `json:"runtime"`
	Binary  string    `json:"binary"`
	Chosen  time.Time `json:"chosen"`
	Why     string    `json:"why"`
}

// engineChooser picks the engine for a runtime setting.
type engineChooser struct {
	goos string
	find engineFinder
	// memoDir is the state directory that keeps auto's choice; "" keeps
	// none.
	memoDir string
	// dockerDaemon reports whether docker's CLI has a daemon to talk to,
	// and where it looked.
	dockerDaemon func() (bool, string)
	// wait bounds each engine's first check.
	wait   time.Duration
	logger *slog.Logger
}

func newEngineChooser(enginePath, stateDir string, logger *slog.Logger) engineChooser {
	return engineChooser{goos: hostOS, find: newEngineFinder(enginePath), memoDir: stateDir,
		dockerDaemon: func() (bool, string) { return dockerDaemonPresent(os.Getenv, hostOS) },
		wait:         firstCheckWait, logger: logger}
}

// runtimeOf returns the driver of engine kind, found where find looks;
// one not found fails each call with the install hint.
func (c engineChooser) runtimeOf(kind string) sandbox.Runtime {
	bin := c.find.find(kind)
	if bin == "" {
		bin = kind
	}
	if kind == "container" {
		return apple.New(apple.Options{Binary: bin, Logger: c.logger})
	}
	return docker.New(docker.Options{Flavor: docker.Flavor(kind), Binary: bin, Logger: c.logger})
}

// choose returns the runtime for kind and why it is the one. An explicit
// kind is used as is. "auto" uses the engine remembered in the state
// directory while it is still installed and running; else it takes, in
// order, Apple's container CLI (macOS), docker when its daemon's socket is
// there, and podman (no daemon), passing over only an engine that is not
// installed, whose daemon is absent, or whose first check says it cannot
// work; a slow one is waited for and kept. The choice of an engine that
// answered is remembered.
func (c engineChooser) choose(ctx context.Context, kind string) (sandbox.Runtime, string) {
	switch kind {
	case "docker", "podman", "container":
		return c.runtimeOf(kind), "set by --runtime"
	}
	if rt, why, ok := c.remembered(); ok {
		return rt, why
	}
	order := []string{"docker", "podman"}
	if c.goos == "darwin" {
		order = append([]string{"container"}, order...)
	}
	var notes []string
	var present []string // installed, with a daemon where one is needed
	for _, k := range order {
		if c.find.find(k) == "" {
			notes = append(notes, k+": not installed")
			continue
		}
		if k == "docker" {
			if ok, where := c.dockerDaemon(); !ok {
				notes = append(notes, "docker: installed, but no daemon ("+where+")")
				continue
			}
		}
		present = append(present, k)
	}
	if len(present) == 0 {
		preferred := "podman"
		if c.goos == "darwin" {
			preferred = "container"
		}
		for _, k := range order {
			if c.find.find(k) != "" {
				preferred = k // installed but not running: its calls say so
				break
			}
		}
		why := "no engine installed and running (" + strings.Join(notes, "; ") + ")"
		c.logger.Warn("no container engine is installed and running; tools will say what to do",
			"searched", c.find.searched(), "using", preferred, "why", why)
		return c.runtimeOf(preferred), why
	}
	for i, k := range present {
		rt := c.runtimeOf(k)
		if k == "container" {
			// Apple's CLI is the platform's engine; its system service is
			// started on demand and its errors say how.
			return c.remember(rt, k, appendNotes("the platform's engine", notes))
		}
		pctx, cancel := context.WithTimeout(ctx, c.wait)
		err := rt.Ping(pctx)
		cancel()
		switch {
		case err == nil:
			return c.remember(rt, k, appendNotes(k+" answered", notes))
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			why := appendNotes(fmt.Sprintf("%s is installed and did not answer within %s; taken as slow, not absent", k, c.wait), notes)
			c.logger.Warn("the container engine is slow to answer; using it", "runtime", k, "err", err)
			return rt, why
		case i == len(present)-1:
			why := appendNotes(fmt.Sprintf("%s is installed but failed its check: %v", k, err), notes)
			c.logger.Warn("no container engine answered", "runtime", present[0], "err", err)
			return c.runtimeOf(present[0]), why
		default:
			notes = append(notes, fmt.Sprintf("%s: failed its check: %v", k, err))
			c.logger.Warn("container engine not usable; trying the next", "runtime", k, "err", err)
		}
	}
	panic("unreachable")
}

func appendNotes(why string, notes []string) string {
	if len(notes) == 0 {
		return why
	}
	return why + " (" + strings.Join(notes, "; ") + ")"
}

// remembered returns the engine auto chose before, while it is still
// installed and (docker) its daemon's socket is there. It is not asked
// whether it works: an engine that fails for a while (a daemon
// restarting) must not trade this state directory's sandboxes for
// another engine's, whose server would then forget their records; its
// tools say what the engine says, and doctor too.
func (c engineChooser) remembered() (sandbox.Runtime, string, bool) {
	if c.memoDir == "" {
		return nil, "", false
	}
	file := filepath.Join(c.memoDir, engineMemoFile)
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, "", false
	}
	var m engineMemo
	if err := json.Unmarshal(b, &m); err != nil {
		c.logger.Warn("the remembered engine choice is unreadable; choosing again", "file", file, "err", err)
		return nil, "", false
	}
	switch m.Runtime {
	case "docker", "podman":
	case "container":
		if c.goos != "darwin" {
			return nil, "", false
		}
	default:
		return nil, "", false
	}
	if c.find.find(m.Runtime) == "" {
		c.logger.Warn("the engine chosen before is no longer installed; choosing again", "runtime", m.Runtime, "file", file)
		return nil, "", false
	}
	if m.Runtime == "docker" {
		if ok, where := c.dockerDaemon(); !ok {
			c.logger.Warn("the engine chosen before has no daemon now; choosing again", "runtime", "docker", "where", where)
			return nil, "", false
		}
	}
	why := fmt.Sprintf("chosen on %s: %s; remembered in %s (delete it, or set --runtime, to choose otherwise)",
		m.Chosen.Local().Format("2006-01-02 15:04"), m.Why, file)
	return c.runtimeOf(m.Runtime), why, true
}

// remember writes the choice of an engine that answered to the state
// directory, whole or not at all; a failure to write costs only the
// memory.
func (c engineChooser) remember(rt sandbox.Runtime, kind, why string) (sandbox.Runtime, string) {
	if c.memoDir == "" {
		return rt, why
	}
	b, _ := json.Marshal(engineMemo{Runtime: kind, Binary: c.find.find(kind), Chosen: time.Now().UTC(), Why: why})
	if err := writeFileAtomic(filepath.Join(c.memoDir, engineMemoFile), append(b, '\n')); err != nil {
		c.logger.Warn("could not remember the engine choice", "err", err)
	}
	return rt, why
}

// writeFileAtomic writes data to file (mode 0600), whole or not at all,
// making its directory first.
func writeFileAtomic(file string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(file, data, 0o600)
}

// dockerDaemonPresent reports whether the docker CLI has a daemon to talk
// to, as the CLI itself finds it: DOCKER_HOST, else the context DOCKER_CONTEXT
// or the config's currentContext names, else the default socket. A unix
// socket is present when its file is; another transport (tcp, ssh) is
// taken as present. where says what was looked at.
func dockerDaemonPresent(getenv func(string) string, goos string) (bool, string) {
	if h := getenv("DOCKER_HOST"); h != "" {
		return endpointPresent(h, "DOCKER_HOST")
	}
	cfgDir := getenv("DOCKER_CONFIG")
	if cfgDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return socketPresent("/var/run/docker.sock")
		}
		cfgDir = filepath.Join(home, ".docker")
	}
	name := getenv("DOCKER_CONTEXT")
	if name == "" {
		var cf struct {
			CurrentContext string `json:"currentContext"`
		}
		if b, err := os.ReadFile(filepath.Join(cfgDir, "config.json")); err == nil && json.Unmarshal(b, &cf) == nil {
			name = cf.CurrentContext
		}
	}
	if name != "" && name != "default" {
		sum := sha256.Sum256([]byte(name))
		meta := filepath.Join(cfgDir, "contexts", "meta", hex.EncodeToString(sum[:]), "meta.json")
		var m struct {
			Endpoints map[string]struct {
				Host string `json:"Host"`
			} `json:"Endpoints"`
		}
		b, err := os.ReadFile(meta)
		if err != nil || json.Unmarshal(b, &m) != nil || m.Endpoints["docker"].Host == "" {
			return true, "docker context " + name // the CLI will say what is wrong with it
		}
		return endpointPresent(m.Endpoints["docker"].Host, "docker context "+name)
	}
	if goos == "darwin" {
		// Docker Desktop's socket; /var/run/docker.sock links to it when
		// the user allowed it.
		if home, err := os.UserHomeDir(); err == nil {
			if ok, where := socketPresent(filepath.Join(home, ".docker", "run", "docker.sock")); ok {
				return ok, where
			}
		}
	}
	return socketPresent("/var/run/docker.sock")
}

// endpointPresent reports whether a docker endpoint URL from source is
// there: a unix socket's file exists; other transports are taken as there.
func endpointPresent(host, source string) (bool, string) {
	if p, ok := strings.CutPrefix(host, "unix://"); ok {
		ok, where := socketPresent(p)
		return ok, source + ": " + where
	}
	return true, source + "=" + host
}

func socketPresent(p string) (bool, string) {
	st, err := os.Stat(p)
	if err != nil {
		return false, "no socket at " + p
	}
	if st.Mode().Type() != os.ModeSocket {
		return false, p + " is not a socket"
	}
	return true, "socket " + p
}
