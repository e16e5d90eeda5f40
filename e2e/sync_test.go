package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// sandboxReads waits until cmd prints want in the sandbox; a hang is the
// failure, not a slow sync. The sandbox must be up already (see boot): a
// boot inside the wait would eat its guard.
func sandboxReads(t *testing.T, s *server, cmd, want string) {
	t.Helper()
	enginetest.WaitFor(t, fmt.Sprintf("%s to print %q", cmd, want), func() error {
		if r := s.call(t, "exec", map[string]any{"command": cmd}); r.str("stdout") != want {
			return fmt.Errorf("got %q (%s)", r.str("stdout"), r.text)
		}
		return nil
	})
}

// boot runs a command in s's default sandbox, which starts it if it is
// not running, so that a wait after it counts from a running sandbox.
func boot(t *testing.T, s *server) {
	t.Helper()
	if r := s.call(t, "exec", map[string]any{"command": "true"}); r.isError {
		t.Fatalf("boot: %s", r.text)
	}
}

// syncState waits for job id to reach state in s's sync_list.
func syncState(t *testing.T, s *server, id, state string) map[string]any {
	t.Helper()
	var job map[string]any
	enginetest.WaitFor(t, fmt.Sprintf("sync job %s to be %s", id, state), func() error {
		r := s.call(t, "sync_list", map[string]any{})
		jobs, _ := r.data["jobs"].([]any)
		for _, j := range jobs {
			if m, _ := j.(map[string]any); m["id"] == id && m["state"] == state {
				job = m
				return nil
			}
		}
		return fmt.Errorf("sync_list: %s", r.text)
	})
	return job
}

// TestSync: a mirror first, then saves, deletes and renames follow; the
// job waits through a container stop, survives a server restart, and ends
// with its reason when the host directory is deleted or the sandbox
// destroyed.
func TestSync(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			host := t.TempDir()
			s := startServer(t, tg, prefix, "", "--toolsets", "all", "--allow-dir", host)
			app := filepath.Join(host, "app")
			os.MkdirAll(filepath.Join(app, "src"), 0o755)
			os.WriteFile(filepath.Join(app, "src", "main.py"), []byte("v1"), 0o644)
			os.MkdirAll(filepath.Join(app, ".git"), 0o755)
			os.WriteFile(filepath.Join(app, ".git", "HEAD"), []byte("ref"), 0o644)
			r := s.call(t, "exec", map[string]any{"command": "mkdir -p /workspace/app/node_modules && touch /workspace/app/node_modules/kept /workspace/app/stale"})
			if r.isError {
				t.Fatal(r.text)
			}

			r = s.call(t, "sync_start", map[string]any{"local_dir": app, "sandbox_dir": "/workspace/app"})
			if r.isError || !strings.Contains(r.text, "removed 1 paths") {
				t.Fatalf("sync_start: %s", r.text)
			}
			id := r.str("id")
			sandboxReads(t, s, "cd /workspace/app && find . | sort | tr '\\n' ' '",
				". ./node_modules ./node_modules/kept ./src ./src/main.py ")

			os.WriteFile(filepath.Join(app, "src", "main.py"), []byte("v2"), 0o644)
			sandboxReads(t, s, "cat /workspace/app/src/main.py", "v2")
			os.Rename(filepath.Join(app, "src", "main.py"), filepath.Join(app, "src", "app.py"))
			os.WriteFile(filepath.Join(app, "with space.txt"), []byte("s"), 0o644)
			sandboxReads(t, s, "cd /workspace/app && ls src; cat 'with space.txt'", "app.py\ns")
			r = s.call(t, "sync_start", map[string]any{"local_dir": app, "sandbox_dir": "/workspace/app"})
			if !r.isError || !strings.Contains(r.text, "already syncs") {
				t.Fatalf("a second job on the same directory: %s", r.text)
			}

			t.Run("outside the roots", func(t *testing.T) {
				outside := t.TempDir()
				r := s.call(t, "sync_start", map[string]any{"local_dir": outside, "sandbox_dir": "/workspace/x"})
				if !r.isError || !strings.Contains(r.text, "--allow-dir") {
					t.Fatalf("%s", r.text)
				}
				os.Symlink(outside, filepath.Join(host, "door"))
				r = s.call(t, "sync_start", map[string]any{"local_dir": filepath.Join(host, "door"), "sandbox_dir": "/workspace/x"})
				if !r.isError || !strings.Contains(r.text, "--allow-dir") {
					t.Fatalf("through a symlink out of the roots: %s", r.text)
				}
			})

			t.Run("container stopped and started", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), enginetest.HangGuard)
				defer cancel()
				if err := rt.Stop(ctx, sandbox.ContainerName(prefix, "default"), time.Second); err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(app, "while-stopped"), []byte("w"), 0o644)
				syncState(t, s, id, "waiting")
				// Any command starts the sandbox again; the change arrives.
				boot(t, s)
				sandboxReads(t, s, "cat /workspace/app/while-stopped", "w")
				syncState(t, s, id, "running")
			})

			t.Run("server restart", func(t *testing.T) {
				s.cs.Close()
				os.WriteFile(filepath.Join(app, "while-no-server"), []byte("n"), 0o644)
				s2 := startServer(t, tg, prefix, "", "--toolsets", "all", "--allow-dir", host, "--state-dir", s.stateDir)
				boot(t, s2)
				sandboxReads(t, s2, "cat /workspace/app/while-no-server", "n")
				os.WriteFile(filepath.Join(app, "after-restart"), []byte("a"), 0o644)
				sandboxReads(t, s2, "cat /workspace/app/after-restart", "a")
				j := syncState(t, s2, id, "running")
				if j["runner"] != "this server" || j["files_synced"].(float64) < 3 {
					t.Fatalf("resumed job: %+v", j)
				}
				r := s2.call(t, "sync_stop", map[string]any{"job_id": id})
				if r.isError {
					t.Fatal(r.text)
				}
				os.WriteFile(filepath.Join(app, "after-stop"), []byte("x"), 0o644)
				time.Sleep(time.Second) // a running sync would send it meanwhile
				if r := s2.call(t, "exec", map[string]any{"command": "test -e /workspace/app/after-stop && echo sent"}); r.str("stdout") != "" {
					t.Fatal("a stopped sync sent a change")
				}
				if r := s2.call(t, "sync_stop", map[string]any{"job_id": id}); !r.isError || !strings.Contains(r.text, "no such sync job") {
					t.Fatalf("stop twice: %s", r.text)
				}

				// The host directory deleted while a sync runs: it stops and
				// says why; the sandbox keeps its copy.
				gone := filepath.Join(host, "gone")
				os.MkdirAll(gone, 0o755)
				os.WriteFile(filepath.Join(gone, "f"), []byte("f"), 0o644)
				r = s2.call(t, "sync_start", map[string]any{"local_dir": gone, "sandbox_dir": "/workspace/gone"})
				if r.isError {
					t.Fatal(r.text)
				}
				os.RemoveAll(gone)
				j = syncState(t, s2, r.str("id"), "stopped")
				if !strings.Contains(j["last_error"].(string), "is gone") {
					t.Fatalf("%+v", j)
				}
				sandboxReads(t, s2, "cat /workspace/gone/f", "f")

				// The sandbox destroyed while a sync runs: the job ends.
				r = s2.call(t, "sync_start", map[string]any{"local_dir": app, "sandbox_dir": "/workspace/app", "sandbox": "doomed"})
				if r.isError {
					t.Fatal(r.text)
				}
				doomed := r.str("id")
				if r := s2.call(t, "destroy", map[string]any{"sandbox": "doomed"}); r.isError {
					t.Fatal(r.text)
				}
				os.WriteFile(filepath.Join(app, "after-destroy"), []byte("d"), 0o644)
				j = syncState(t, s2, doomed, "stopped")
				if !strings.Contains(j["last_error"].(string), "destroyed") {
					t.Fatalf("%+v", j)
				}
				if r := s2.call(t, "status", map[string]any{"sandbox": "doomed"}); !r.isError {
					t.Fatalf("the sync brought the destroyed sandbox back: %s", r.text)
				}
			})
		})
	}
}
