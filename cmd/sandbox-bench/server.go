package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// launcher starts sandbox-mcp servers of one build, engine, image and prefix.
type launcher struct {
	bin, engine, image, prefix string
	// allow is the host directory transfers may use.
	allow string
}

// benchServer is one running sandbox-mcp process with a go-sdk client
// session over its stdio.
type benchServer struct {
	cmd *exec.Cmd
	cs  *mcp.ClientSession
}

// start runs a server on stateDir and completes the MCP handshake with it.
// It does not boot the default sandbox, so every boot is one the bench asks
// for. extra are more serve flags.
func (l launcher) start(ctx context.Context, stateDir string, extra ...string) (*benchServer, error) {
	cmd := exec.Command(l.bin, append([]string{"serve", "--runtime", l.engine, "--image", l.image, "--prefix", l.prefix,
		"--state-dir", stateDir, "--no-boot-default", "--log-level", "warn", "--toolsets", "all", "--allow-dir", l.allow}, extra...)...)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to a server on %s: %w", stateDir, err)
	}
	return &benchServer{cmd: cmd, cs: cs}, nil
}

// pid is the server's process id.
func (s *benchServer) pid() int { return s.cmd.Process.Pid }

// call calls a tool and times it; a tool error is returned as an error.
func (s *benchServer) call(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, time.Duration, error) {
	start := time.Now()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	took := time.Since(start)
	if err != nil {
		return nil, took, fmt.Errorf("%s %v: %w", name, args, err)
	}
	if res.IsError {
		return res, took, fmt.Errorf("%s %v: %s", name, args, text(res))
	}
	return res, took, nil
}

// execTrue runs `true` in sandbox and returns how long the call took.
func (s *benchServer) execTrue(ctx context.Context, sandbox string) (time.Duration, error) {
	_, took, err := s.call(ctx, "exec", map[string]any{"sandbox": sandbox, "command": "true"})
	return took, err
}

// execTrueN runs `true` in sandbox n times in a row and returns each call's time.
func (s *benchServer) execTrueN(ctx context.Context, sandbox string, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		took, err := s.execTrue(ctx, sandbox)
		if err != nil {
			return lat, err
		}
		lat = append(lat, took)
	}
	return lat, nil
}

// serverStats is the `server` part of the health tool's structured result.
type serverStats struct {
	PID        int `json:"pid"`
	Goroutines int `json:"goroutines"`
	OpenFDs    int `json:"open_fds"`
}

// stats asks the server's health tool for its own pid, goroutines and fds.
func (s *benchServer) stats(ctx context.Context) (serverStats, error) {
	res, _, err := s.call(ctx, "health", map[string]any{})
	if err != nil {
		return serverStats{}, err
	}
	var h struct {
		Server *serverStats `json:"server"`
	}
	b, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, &h)
	}
	if err != nil {
		return serverStats{}, fmt.Errorf("health: structured result: %w", err)
	}
	if h.Server == nil {
		return serverStats{}, errors.New("health: no server figures in its structured result (an older server?)")
	}
	return *h.Server, nil
}

// kill ends the server with SIGKILL, as a crash or an OOM kill would, and
// reaps it.
func (s *benchServer) kill() error {
	if err := s.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill server %d: %w", s.pid(), err)
	}
	_ = s.cs.Close() // waits for the process; its error is the kill
	return nil
}

// close ends the session, which closes the server's stdin and lets it exit.
func (s *benchServer) close() { _ = s.cs.Close() }
