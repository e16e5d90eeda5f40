package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAutoRuntime: auto picks Apple's container CLI on macOS when it is on
// PATH, and never on Linux, where it falls back to docker or podman.
func TestAutoRuntime(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"container", "podman"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	for goos, want := range map[string]string{"darwin": "container", "linux": "podman"} {
		rt, err := selectRuntime(ctx, "auto", goos, logger)
		if err != nil || rt.Kind() != want {
			t.Errorf("auto on %s: %v %v, want %s", goos, rt, err, want)
		}
	}
	if err := os.Remove(filepath.Join(dir, "container")); err != nil {
		t.Fatal(err)
	}
	if rt, err := selectRuntime(ctx, "auto", "darwin", logger); err != nil || rt.Kind() != "podman" {
		t.Errorf("auto on darwin without container: %v %v", rt, err)
	}
	if rt, err := selectRuntime(ctx, "container", "linux", logger); err != nil || rt.Kind() != "container" {
		t.Errorf("explicit container: %v %v", rt, err)
	}
}

// TestOpen: Open makes the state directory private and builds the manager
// on the runtime the configuration names; a bad configuration opens nothing.
func TestOpen(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Runtime = "podman"
	cfg.StateDir = filepath.Join(t.TempDir(), "state")
	env, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if env.Runtime.Kind() != "podman" || env.Manager == nil || env.State == nil || env.Logger == nil {
		t.Errorf("env %+v", env)
	}
	if fi, err := os.Stat(cfg.StateDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir: %v %v", fi, err)
	}

	cfg.Runtime = "lxc"
	cfg.StateDir = filepath.Join(t.TempDir(), "other")
	if _, err := Open(context.Background(), cfg); err == nil {
		t.Error("Open with runtime lxc: no error")
	}
	if _, err := os.Stat(cfg.StateDir); err == nil {
		t.Error("a failed Open created the state dir")
	}
}

// TestEndReader: the end of the session's input runs the shutdown once,
// before the MCP server sees it (and cancels the requests in flight).
func TestEndReader(t *testing.T) {
	ended := 0
	r := &endReader{r: strings.NewReader("{}\n"), end: func() { ended++ }}
	b := make([]byte, 8)
	if n, err := r.Read(b); n != 3 || err != nil || ended != 0 {
		t.Fatalf("first read: %d %v, ended %d", n, err, ended)
	}
	for range 2 {
		if _, err := r.Read(b); err != io.EOF || ended != 1 {
			t.Fatalf("at the end: %v, ended %d", err, ended)
		}
	}
}
