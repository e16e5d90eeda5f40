// Package killpoint kills a sandbox-mcp server with SIGKILL at points
// spread over each of the operations that change a sandbox or the host
// (write_file, upload, download, snapshot, restore, clone, sync, the
// agent's installation), starts the next server on the same state
// directory, and checks what a user would: every file the operation
// touched is as it was or as the operation would have left it, never a
// mix, and nothing of the operation is left behind, in the sandbox or on
// the host, once the next server has had its say.
//
// It drives real servers through the official go-sdk client, so the same
// run serves as a test (e2e) and as a figure (sandbox-bench).
package killpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Config says which server to run and how hard to try.
type Config struct {
	// Bin is the sandbox-mcp binary; Args the serve flags besides
	// --state-dir and --allow-dir (runtime, image, prefix…); Env is added
	// to its environment.
	Bin  string
	Args []string
	Env  []string
	// StateDir and HostDir are the state directory and the host
	// directory transfers use; both are the run's own.
	StateDir, HostDir string
	// Points is how many kill points each operation gets: its time is cut
	// into Points equal slots, and one kill falls in each.
	Points int
	// Phase, in (0, 1), is where in its slot each kill falls; any other
	// value means the middle. A run with a random phase tries instants
	// that earlier runs did not.
	Phase float64
	// Size is the size of the files written, uploaded and downloaded.
	Size int
	// Logf, if set, is told of each round.
	Logf func(format string, args ...any)
}

// Result is one operation's outcome over its kill points.
type Result struct {
	Op     string
	Points int
	// Took is how long the operation took when not killed, the span the
	// kill points are spread over.
	Took time.Duration
	// Old and New count the rounds that ended with the old state and with
	// the new one; Torn those that ended with neither, Leftovers those
	// that left something of the operation behind.
	Old, New, Torn, Leftovers int
	// Failures are the rounds that failed, each with what the killed
	// server and the next one logged; Summary has a line for each, without
	// the logs.
	Failures, Summary []string
}

// server is one sandbox-mcp process and its client session.
type server struct {
	cmd *exec.Cmd
	cs  *mcp.ClientSession
	log *logTail
}

// logTail keeps the last bytes a server logged, for a failure's report.
type logTail struct {
	mu  sync.Mutex
	buf []byte
}

const logTailMax = 4096

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > logTailMax {
		l.buf = append([]byte(nil), l.buf[len(l.buf)-logTailMax:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(string(l.buf))
}

func (c Config) start(ctx context.Context) (*server, error) {
	// Egress open: the kill points are the file operations' and the
	// agent install's; an allowlist sandbox would start its agent at
	// every adoption, which is not what is measured here.
	args := append([]string{"serve", "--state-dir", c.StateDir, "--allow-dir", c.HostDir, "--no-boot-default", "--toolsets", "all", "--log-level", "info", "--network", "open"}, c.Args...)
	cmd := exec.Command(c.Bin, args...)
	cmd.Env = append(os.Environ(), c.Env...)
	log := &logTail{}
	cmd.Stderr = log
	client := mcp.NewClient(&mcp.Implementation{Name: "killpoint", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		return nil, fmt.Errorf("start a server: %w", err)
	}
	return &server{cmd: cmd, cs: cs, log: log}, nil
}

// kill ends the server with SIGKILL (its children, podman execs included,
// are left as a kill leaves them).
func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cs.Close()
}

func (s *server) close() { _ = s.cs.Close() }

// call calls a tool; a tool error is an error.
func (s *server) call(ctx context.Context, tool string, args map[string]any) (map[string]any, error) {
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			text.WriteString(t.Text)
		}
	}
	if res.IsError {
		return nil, fmt.Errorf("%s: %s", tool, text.String())
	}
	out := map[string]any{"text": text.String()}
	if raw, err := json.Marshal(res.StructuredContent); err == nil {
		_ = json.Unmarshal(raw, &out)
	}
	return out, nil
}

// sh runs a command in the sandbox and returns its stdout; a nonzero exit
// is an error.
func (s *server) sh(ctx context.Context, command string) (string, error) {
	out, err := s.call(ctx, "exec", map[string]any{"sandbox": box, "command": command, "timeout": 120})
	if err != nil {
		return "", err
	}
	if code, _ := out["exit_code"].(float64); code != 0 {
		return "", fmt.Errorf("exec %q: exit %v: %v", command, code, out["stderr"])
	}
	stdout, _ := out["stdout"].(string)
	return stdout, nil
}

// box is the sandbox every operation works in.
const box = "kp"

// fresh is the sandbox the boot operation makes anew in every round.
const fresh = "kb"

// op is one operation under test.
type op struct {
	name string
	// setup puts the old state in place (before every round).
	setup func(ctx context.Context, s *server) error
	// act is the call that is killed.
	act func(ctx context.Context, s *server, round int) error
	// state says "old", "new" or what it found instead, once the next
	// server had its say.
	state func(ctx context.Context, s *server, round int) (string, error)
	// leftovers lists what the operation left behind.
	leftovers func(ctx context.Context, s *server) ([]string, error)
	// cleanup removes what a round made that the next setup does not
	// reset.
	cleanup func(ctx context.Context, s *server, round int) error
	// explain, if set, says what a torn state is made of (for the
	// failure's report).
	explain func(ctx context.Context, s *server) string
}

// Ops are the operations Run knows, in the order it runs them.
var Ops = []string{"write_file", "upload", "download", "sync", "snapshot", "restore", "clone", "agent", "boot"}

// Run runs the operations named (all of Ops when none) and returns their
// results. An error means the run itself could not go on.
func Run(ctx context.Context, cfg Config, names ...string) ([]Result, error) {
	if len(names) == 0 {
		names = Ops
	}
	if cfg.Points <= 0 {
		cfg.Points = 20
	}
	if cfg.Size <= 0 {
		cfg.Size = 4 << 20
	}
	ops := cfg.ops()
	var out []Result
	for _, name := range names {
		o, ok := ops[name]
		if !ok {
			return out, fmt.Errorf("no operation %q (known: %s)", name, strings.Join(Ops, ", "))
		}
		r, err := cfg.run(ctx, o)
		out = append(out, r)
		if err != nil {
			return out, fmt.Errorf("%s: %w", name, err)
		}
	}
	return out, nil
}

// run times o once, then kills it at cfg.Points points spread over that
// time, checking after each.
func (cfg Config) run(ctx context.Context, o op) (Result, error) {
	r := Result{Op: o.name, Points: cfg.Points}
	phase := cfg.Phase
	if phase <= 0 || phase >= 1 {
		phase = 0.5
	}
	s, err := cfg.start(ctx)
	if err != nil {
		return r, err
	}
	if err := o.setup(ctx, s); err != nil {
		s.close()
		return r, fmt.Errorf("setup: %w", err)
	}
	t0 := time.Now()
	if err := o.act(ctx, s, -1); err != nil {
		s.close()
		return r, fmt.Errorf("uninterrupted run: %w", err)
	}
	r.Took = time.Since(t0)
	if o.cleanup != nil {
		_ = o.cleanup(ctx, s, -1)
	}
	for i := range cfg.Points {
		if err := o.setup(ctx, s); err != nil {
			s.close()
			return r, fmt.Errorf("setup of round %d: %w", i, err)
		}
		// Spread over the operation's time, and a little past it.
		at := time.Duration(float64(r.Took) * 1.1 * (float64(i) + phase) / float64(cfg.Points))
		done := make(chan struct{})
		go func() { _ = o.act(ctx, s, i); close(done) }()
		time.Sleep(at)
		s.kill()
		<-done
		killed := s.log
		if s, err = cfg.start(ctx); err != nil {
			return r, err
		}
		st, left, err := cfg.settle(ctx, s, o, i)
		if err != nil {
			s.close()
			return r, fmt.Errorf("round %d: %w", i, err)
		}
		var failed []string
		switch {
		case st == "old":
			r.Old++
		case st == "new":
			r.New++
		default:
			r.Torn++
			if o.explain != nil {
				st += " (" + o.explain(ctx, s) + ")"
			}
			failed = append(failed, st)
		}
		if len(left) > 0 {
			r.Leftovers++
			failed = append(failed, "left "+strings.Join(left, ", "))
		}
		if len(failed) > 0 {
			line := fmt.Sprintf("round %d, killed at %s of %s: %s", i, at.Round(time.Millisecond), r.Took.Round(time.Millisecond), strings.Join(failed, "; "))
			r.Summary = append(r.Summary, line)
			r.Failures = append(r.Failures, fmt.Sprintf("%s\nthe killed server logged:\n%s\nthe next server logged:\n%s", line, killed, s.log))
		}
		if cfg.Logf != nil {
			cfg.Logf("%s: killed at %s of %s: %s%s", o.name, at.Round(time.Millisecond), r.Took.Round(time.Millisecond), st, map[bool]string{true: ", left " + strings.Join(left, ", "), false: ""}[len(left) > 0])
		}
		if o.cleanup != nil {
			if err := o.cleanup(ctx, s, i); err != nil {
				s.close()
				return r, fmt.Errorf("cleanup of round %d: %w", i, err)
			}
		}
	}
	s.close()
	return r, nil
}

// settleTime bounds how long the next server may take to finish or undo
// what a killed one left (its start-up sweep runs in the background).
const settleTime = 90 * time.Second

// settle waits until the state is old or new and nothing is left behind,
// or settleTime passed; it returns what it last saw.
func (cfg Config) settle(ctx context.Context, s *server, o op, round int) (string, []string, error) {
	deadline := time.Now().Add(settleTime)
	for {
		st, err := o.state(ctx, s, round)
		if err != nil {
			return "", nil, err
		}
		left, err := o.leftovers(ctx, s)
		if err != nil {
			return "", nil, err
		}
		left = append(left, cfg.hostLeftovers()...)
		if (st == "old" || st == "new") && len(left) == 0 || time.Now().After(deadline) {
			return st, left, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// hostLeftovers lists what a server left half written on the host: a
// download's staging directory, a snapshot's partial tar, a clone's tar.
func (cfg Config) hostLeftovers() []string {
	var out []string
	for _, pat := range []string{
		filepath.Join(cfg.HostDir, "*", ".sandbox-mcp-*"), filepath.Join(cfg.HostDir, ".sandbox-mcp-*"),
		filepath.Join(cfg.StateDir, "snapshots", ".sandbox-mcp-*"), filepath.Join(cfg.StateDir, "snapshots", ".clone-*"),
		filepath.Join(cfg.StateDir, "state.db.salvage-*"),
	} {
		m, _ := filepath.Glob(pat)
		out = append(out, m...)
	}
	return out
}

// sandboxLeftovers is the find that lists what the server's own staging
// left in the sandbox under dirs.
func sandboxLeftovers(ctx context.Context, s *server, dirs ...string) ([]string, error) {
	out, err := s.sh(ctx, "find "+strings.Join(dirs, " ")+" -xdev \\( -name '.sandbox-mcp-w*' -o -name '.sandbox-mcp-up-*' -o -name '.sandbox-mcp-restore-*' -o -name '.sandbox-mcp-old-*' -o -name 'batch-*' -o -name 'sandbox-ctl-*.[0-9]*' \\) -print 2>/dev/null; true")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func fill(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

// whichOf names the state a digest shows.
func whichOf(got, old, new string) string {
	switch got {
	case old:
		return "old"
	case new:
		return "new"
	}
	return "neither old nor new: " + got
}
