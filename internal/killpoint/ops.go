package killpoint

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// names returns the "name" (or "id") fields of the objects in list.
func names(v any, key string) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			if s, ok := m[key].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// workspaceFiles lists, sorted, the files of a workspace a clone copies
// (not its volume's lost+found, not the server's own staging files): what
// a clone's digest covers and filesOf lists.
const workspaceFiles = "cd /workspace && find . -path ./lost+found -prune -o -type f ! -name '.sandbox-mcp-*' -print | sort"

// filesOf lists the files of sandbox name's workspace that a clone's
// digest covers, each as "path size sha256-prefix".
func filesOf(ctx context.Context, s *server, name string) ([]string, error) {
	out, err := s.call(ctx, "exec", map[string]any{"sandbox": name, "command": workspaceFiles + " | " +
		`while read -r f; do printf '%s %s ' "$f" "$(stat -c %s "$f")"; sha256sum <"$f" | cut -c1-12; done`})
	if err != nil {
		return nil, err
	}
	stdout, _ := out["stdout"].(string)
	return strings.Split(strings.TrimSpace(stdout), "\n"), nil
}

// onlyIn lists, at most 10, the lines of a that b lacks.
func onlyIn(a, b []string) string {
	var out []string
	for _, l := range a {
		if l != "" && !contains(b, l) {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return "nothing"
	}
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("and %d more", len(out)-10))
	}
	return strings.Join(out, ", ")
}

// ops builds the operations of a run.
func (cfg Config) ops() map[string]op {
	n := cfg.Size
	ws := "/workspace/kp"
	leftIn := func(dirs ...string) func(ctx context.Context, s *server) ([]string, error) {
		return func(ctx context.Context, s *server) ([]string, error) { return sandboxLeftovers(ctx, s, dirs...) }
	}
	shHash := func(ctx context.Context, s *server, path string) (string, error) {
		out, err := s.sh(ctx, "if [ -e "+path+" ]; then sha256sum <"+path+" | cut -c1-64; else echo absent; fi")
		return strings.TrimSpace(out), err
	}
	fillCmd := func(c byte, path string, size int) string {
		return fmt.Sprintf("mkdir -p %s && head -c %d /dev/zero | tr '\\0' %c >%s.t && mv -f %s.t %s", filepath.Dir(path), size, c, path, path, path)
	}
	ops := map[string]op{}

	// write_file: a file of n bytes of 'a' replaced by n of 'b'.
	oldW, newW := hashOf(fill('a', n)), hashOf(fill('b', n))
	ops["write_file"] = op{name: "write_file",
		setup: func(ctx context.Context, s *server) error {
			_, err := s.sh(ctx, fillCmd('a', ws+"/w.txt", n))
			return err
		},
		act: func(ctx context.Context, s *server, _ int) error {
			_, err := s.call(ctx, "write_file", map[string]any{"sandbox": box, "path": ws + "/w.txt", "content": string(fill('b', n))})
			return err
		},
		state: func(ctx context.Context, s *server, _ int) (string, error) {
			h, err := shHash(ctx, s, ws+"/w.txt")
			return whichOf(h, oldW, newW), err
		},
		leftovers: leftIn("/workspace", "/tmp/.sandbox-mcp"),
	}

	// upload: a host file of 'c' over one of 'a' in the sandbox.
	up := filepath.Join(cfg.HostDir, "up", "u.bin")
	oldU, newU := hashOf(fill('a', n)), hashOf(fill('c', n))
	ops["upload"] = op{name: "upload",
		setup: func(ctx context.Context, s *server) error {
			if err := os.MkdirAll(filepath.Dir(up), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(up, fill('c', n), 0o644); err != nil {
				return err
			}
			_, err := s.sh(ctx, fillCmd('a', ws+"/u.bin", n))
			return err
		},
		act: func(ctx context.Context, s *server, _ int) error {
			_, err := s.call(ctx, "upload", map[string]any{"sandbox": box, "local_path": up, "sandbox_path": ws + "/u.bin"})
			return err
		},
		state: func(ctx context.Context, s *server, _ int) (string, error) {
			h, err := shHash(ctx, s, ws+"/u.bin")
			return whichOf(h, oldU, newU), err
		},
		leftovers: leftIn("/workspace"),
	}

	// download: a sandbox file of 'd' to a host path that has none.
	dl := filepath.Join(cfg.HostDir, "dl", "d.bin")
	newD := hashOf(fill('d', n))
	ops["download"] = op{name: "download",
		setup: func(ctx context.Context, s *server) error {
			if err := os.RemoveAll(dl); err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(dl), 0o755); err != nil {
				return err
			}
			_, err := s.sh(ctx, fillCmd('d', ws+"/d.bin", n))
			return err
		},
		act: func(ctx context.Context, s *server, _ int) error {
			_, err := s.call(ctx, "download", map[string]any{"sandbox": box, "sandbox_path": ws + "/d.bin", "local_path": dl})
			return err
		},
		state: func(ctx context.Context, s *server, _ int) (string, error) {
			data, err := os.ReadFile(dl)
			if os.IsNotExist(err) {
				return "old", nil
			}
			if err != nil {
				return "", err
			}
			return whichOf(hashOf(data), "absent", newD), nil
		},
		leftovers: func(context.Context, *server) ([]string, error) { return nil, nil }, // the host's, checked for every op
	}

	// sync: five host files of 'n' mirrored over five of 'o'. A mirror
	// killed part way may have landed some files: each must be whole.
	syncDir := filepath.Join(cfg.HostDir, "sync")
	part := n / 5
	oldS, newS := hashOf(fill('o', part)), hashOf(fill('n', part))
	stopSyncs := func(ctx context.Context, s *server) error {
		out, err := s.call(ctx, "sync_list", map[string]any{})
		if err != nil {
			return err
		}
		for _, id := range names(out["jobs"], "id") {
			if _, err := s.call(ctx, "sync_stop", map[string]any{"job_id": id}); err != nil {
				return err
			}
		}
		return nil
	}
	ops["sync"] = op{name: "sync",
		setup: func(ctx context.Context, s *server) error {
			if err := stopSyncs(ctx, s); err != nil {
				return err
			}
			if err := os.MkdirAll(syncDir, 0o755); err != nil {
				return err
			}
			var cmd []string
			for i := range 5 {
				if err := os.WriteFile(filepath.Join(syncDir, fmt.Sprintf("f%d", i)), fill('n', part), 0o644); err != nil {
					return err
				}
				cmd = append(cmd, fillCmd('o', fmt.Sprintf("%s/sync/f%d", ws, i), part))
			}
			_, err := s.sh(ctx, strings.Join(cmd, " && "))
			return err
		},
		act: func(ctx context.Context, s *server, _ int) error {
			_, err := s.call(ctx, "sync_start", map[string]any{"sandbox": box, "local_dir": syncDir, "sandbox_dir": ws + "/sync"})
			return err
		},
		state: func(ctx context.Context, s *server, _ int) (string, error) {
			out, err := s.sh(ctx, "cd "+ws+"/sync && for f in f0 f1 f2 f3 f4; do sha256sum <$f | cut -c1-64; done")
			if err != nil {
				return "", err
			}
			olds, news := 0, 0
			for i, h := range strings.Fields(out) {
				switch h {
				case oldS:
					olds++
				case newS:
					news++
				default:
					return fmt.Sprintf("f%d is torn", i), nil
				}
			}
			if olds == 5 {
				return "old", nil
			}
			return "new", nil // every file whole: a mirror part way is one
		},
		leftovers: leftIn(ws + "/sync"),
		cleanup:   func(ctx context.Context, s *server, _ int) error { return stopSyncs(ctx, s) },
	}

	// snapshot: made whole with its workspace, or not at all.
	const snap = "kp-snap"
	snapFiles := func() []string {
		m, _ := filepath.Glob(filepath.Join(cfg.StateDir, "snapshots", snap+"-*.workspace.tar"))
		return m
	}
	listSnaps := func(ctx context.Context, s *server) ([]string, error) {
		out, err := s.call(ctx, "list_snapshots", map[string]any{})
		if err != nil {
			return nil, err
		}
		return names(out["snapshots"], "name"), nil
	}
	dropSnap := func(ctx context.Context, s *server) error {
		have, err := listSnaps(ctx, s)
		if err != nil || !contains(have, snap) {
			return err
		}
		_, err = s.call(ctx, "delete_snapshot", map[string]any{"snapshot_name": snap})
		return err
	}
	ops["snapshot"] = op{name: "snapshot",
		setup: func(ctx context.Context, s *server) error {
			if err := dropSnap(ctx, s); err != nil {
				return err
			}
			_, err := s.sh(ctx, fillCmd('s', ws+"/s.bin", n))
			return err
		},
		act: func(ctx context.Context, s *server, _ int) error {
			_, err := s.call(ctx, "snapshot", map[string]any{"sandbox": box, "snapshot_name": snap, "include_workspace": true})
			return err
		},
		state: func(ctx context.Context, s *server, _ int) (string, error) {
			have, err := listSnaps(ctx, s)
			if err != nil {
				return "", err
			}
			files := snapFiles()
			switch {
			case contains(have, snap) && len(files) == 1:
				return "new", nil
			case !contains(have, snap) && len(files) == 0:
				return "old", nil
			}
			return fmt.Sprintf("listed %v with workspace tars %v", contains(have, snap), files), nil
		},
		leftovers: func(context.Context, *server) ([]string, error) { return nil, nil },
		cleanup:   func(ctx context.Context, s *server, _ int) error { return dropSnap(ctx, s) },
	}

	// restore: a workspace of 'A' files back to the snapshot's 'B' ones.
	const base = "kp-base"
	digestR := func(ctx context.Context, s *server) (string, error) {
		out, err := s.sh(ctx, "cd "+ws+"/r && ls -A | sort | while read -r f; do printf '%s ' \"$f\"; sha256sum <\"$f\" | cut -c1-64; done | sha256sum | cut -c1-64")
		return strings.TrimSpace(out), err
	}
	var oldR, newR string
	ops["restore"] = op{name: "restore",
		setup: func(ctx context.Context, s *server) error {
			have, err := listSnaps(ctx, s)
			if err != nil {
				return err
			}
			if !contains(have, base) {
				cmd := []string{"rm -rf " + ws + "/r"}
				for i := range 10 {
					cmd = append(cmd, fillCmd('B', fmt.Sprintf("%s/r/b%d", ws, i), n/10))
				}
				if _, err := s.sh(ctx, strings.Join(cmd, " && ")); err != nil {
					return err
				}
				if _, err := s.call(ctx, "snapshot", map[string]any{"sandbox": box, "snapshot_name": base, "include_workspace": true}); err != nil {
					return err
				}
				if newR, err = digestR(ctx, s); err != nil {
					return err
				}
			}
			cmd := []string{"rm -rf " + ws + "/r"}
			for i := range 12 {
				cmd = append(cmd, fillCmd('A', fmt.Sprintf("%s/r/a%d", ws, i), n/10))
			}
			if _, err := s.sh(ctx, strings.Join(cmd, " && ")); err != nil {
				return err
			}
			oldR, err = digestR(ctx, s)
			return err
		},
		act: func(ctx context.Context, s *server, _ int) error {
			_, err := s.call(ctx, "restore", map[string]any{"sandbox": box, "snapshot_name": base})
			return err
		},
		state: func(ctx context.Context, s *server, _ int) (string, error) {
			d, err := digestR(ctx, s)
			return whichOf(d, oldR, newR), err
		},
		leftovers: leftIn("/workspace"),
	}

	// clone: the clone there whole, with the source's workspace, or not
	// there at all.
	const target = "kp-clone"
	digestOf := func(ctx context.Context, s *server, name string) (string, error) {
		out, err := s.call(ctx, "exec", map[string]any{"sandbox": name, "command": workspaceFiles + " | xargs -r sha256sum | sha256sum | cut -c1-64"})
		if err != nil {
			return "", err
		}
		if text, _ := out["text"].(string); strings.Contains(text, "half-made sandbox was removed") {
			// This very call found the clone half made and removed it
			// (before the next server's start-up tidying did); the
			// sandbox it ran in is a new one of its own.
			return "undone", nil
		}
		stdout, _ := out["stdout"].(string)
		return strings.TrimSpace(stdout), nil
	}
	exists := func(ctx context.Context, s *server, name string) (bool, error) {
		out, err := s.call(ctx, "list_all", map[string]any{})
		if err != nil {
			return false, err
		}
		return contains(names(out["sandboxes"], "name"), name), nil
	}
	// undone marks the rounds whose clone a call found half made and
	// removed (it then made a new sandbox of its own, which later looks
	// must not take for the clone).
	undone := map[int]bool{}
	destroy := func(ctx context.Context, s *server) error {
		_, err := s.call(ctx, "destroy", map[string]any{"sandbox": target})
		return err
	}
	ops["clone"] = op{name: "clone",
		setup: func(ctx context.Context, s *server) error {
			if _, err := s.sh(ctx, fillCmd('k', ws+"/k.bin", n)); err != nil {
				return err
			}
			return destroy(ctx, s)
		},
		act: func(ctx context.Context, s *server, _ int) error {
			_, err := s.call(ctx, "clone", map[string]any{"source": box, "target": target})
			return err
		},
		state: func(ctx context.Context, s *server, round int) (string, error) {
			if undone[round] {
				return "old", nil
			}
			there, err := exists(ctx, s, target)
			if err != nil || !there {
				return "old", err
			}
			want, err := digestOf(ctx, s, box)
			if err != nil {
				return "", err
			}
			got, err := digestOf(ctx, s, target)
			if err != nil {
				return "", err
			}
			if got == "undone" {
				undone[round] = true
				return "old", nil
			}
			return whichOf(got, "-", want), nil
		},
		leftovers: leftIn("/workspace"),
		cleanup:   func(ctx context.Context, s *server, _ int) error { return destroy(ctx, s) },
		explain: func(ctx context.Context, s *server) string {
			src, err1 := filesOf(ctx, s, box)
			dst, err2 := filesOf(ctx, s, target)
			if err1 != nil || err2 != nil {
				return fmt.Sprintf("could not list the workspaces: %v, %v", err1, err2)
			}
			return fmt.Sprintf("only in %s: %s; only in %s: %s", box, onlyIn(src, dst), target, onlyIn(dst, src))
		},
	}

	// agent: installed whole (the next server's copy, which it checks
	// before use) or not at all, and a forward works after.
	var newA string
	agentHash := func(ctx context.Context, s *server) (string, error) {
		out, err := s.sh(ctx, "f=$(ls /tmp/.sandbox-mcp/sandbox-ctl-[0-9]* 2>/dev/null | grep -v '\\.[0-9]*$' | head -1); if [ -n \"$f\" ]; then sha256sum <\"$f\" | cut -c1-64; else echo absent; fi")
		return strings.TrimSpace(out), err
	}
	ops["agent"] = op{name: "agent",
		setup: func(ctx context.Context, s *server) error {
			_, _ = s.call(ctx, "unexpose", map[string]any{"sandbox": box, "port": 8000})
			_, err := s.sh(ctx, "pkill -9 -f 'sandbox-ctl-[0-9]* agent' 2>/dev/null; rm -f /tmp/.sandbox-mcp/sandbox-ctl-*; true")
			return err
		},
		act: func(ctx context.Context, s *server, round int) error {
			out, err := s.call(ctx, "expose", map[string]any{"sandbox": box, "port": 8000})
			if err != nil {
				return err
			}
			if hp, ok := out["host_port"].(float64); ok {
				if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", int(hp))); err == nil {
					_, _ = c.Read(make([]byte, 1))
					c.Close()
				}
			}
			if round < 0 {
				newA, err = agentHash(ctx, s)
			}
			return err
		},
		state: func(ctx context.Context, s *server, _ int) (string, error) {
			h, err := agentHash(ctx, s)
			return whichOf(h, "absent", newA), err
		},
		leftovers: leftIn("/tmp/.sandbox-mcp"),
		cleanup: func(ctx context.Context, s *server, _ int) error {
			_, _ = s.call(ctx, "unexpose", map[string]any{"sandbox": box, "port": 8000})
			return nil
		},
	}
	// boot: a new sandbox's first command, which makes, starts and
	// opens its container. Old: no sandbox of the name; new: one. Either
	// way the next server's first command on the name works, whatever
	// the kill left of the container (a container only the engine's
	// storage knows, one created or started half way).
	listed := func(ctx context.Context, s *server) (bool, error) {
		out, err := s.call(ctx, "list_all", map[string]any{})
		if err != nil {
			return false, err
		}
		return contains(names(out["sandboxes"], "name"), fresh), nil
	}
	ops["boot"] = op{name: "boot",
		setup: func(ctx context.Context, s *server) error {
			_, _ = s.call(ctx, "destroy", map[string]any{"sandbox": fresh})
			if there, err := listed(ctx, s); err != nil || there {
				return fmt.Errorf("sandbox %s still there after a destroy (%v)", fresh, err)
			}
			return nil
		},
		act: func(ctx context.Context, s *server, _ int) error {
			_, err := s.call(ctx, "exec", map[string]any{"sandbox": fresh, "command": "true"})
			return err
		},
		state: func(ctx context.Context, s *server, _ int) (string, error) {
			there, err := listed(ctx, s)
			if err != nil {
				return "", err
			}
			out, err := s.call(ctx, "exec", map[string]any{"sandbox": fresh, "command": "echo up", "timeout": 120})
			if err != nil {
				return "the next server's first command failed: " + err.Error(), nil
			}
			if stdout, _ := out["stdout"].(string); strings.TrimSpace(stdout) != "up" {
				return fmt.Sprintf("the next server's first command said %q", stdout), nil
			}
			return map[bool]string{true: "new", false: "old"}[there], nil
		},
		leftovers: func(context.Context, *server) ([]string, error) { return nil, nil },
		cleanup: func(ctx context.Context, s *server, _ int) error {
			_, err := s.call(ctx, "destroy", map[string]any{"sandbox": fresh})
			return err
		},
	}
	return ops
}
