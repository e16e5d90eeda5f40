package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// bin is the engine CLI behind a docker or podman target, or the stand-in
// (which keeps its containers and images in podman).
func bin(tg enginetest.Target) string {
	if tg.Runtime == "docker" {
		return "docker"
	}
	return "podman"
}

// pruneImages removes the unused images a test's sandboxes left (a
// clone's, untagged once it booted), by their owner label. Apple's own
// CLI has no label filter on prune, and its clones keep their tags, which
// enginetest.Sweep removes.
func pruneImages(t *testing.T, tg enginetest.Target, prefix string) {
	if prefix == "" || tg.RealContainer {
		return
	}
	cmd := exec.Command(bin(tg), "image", "prune", "-f", "--filter", "label="+sandbox.LabelOwner+"="+prefix)
	cmd.Env = append(os.Environ(), tg.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("prune images: %v: %s", err, out)
	}
}

// TestSnapshots: a snapshot keeps the whole filesystem (deletions, modes,
// links), the env tool's variables and the workspace; restore gives them
// back, chains keep every change, a clone starts from the current state
// with a workspace of its own; bad names, unknown snapshots and missing
// sandboxes are refused; a restore ends a running command and the jobs.
func TestSnapshots(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		tg := tg.Small() // busybox: a snapshot on the stand-in copies the whole root filesystem
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			var prefix string
			t.Cleanup(func() { pruneImages(t, tg, prefix) }) // after the containers go
			prefix = enginetest.Prefix(t, tg.New())
			s := startServer(t, tg, prefix, "", "--toolsets", "all")
			t.Cleanup(func() { s.call(t, "delete_snapshot", map[string]any{"snapshot_name": "s1"}) })
			// gone is a file of the image that the sandbox deletes before s1.
			gone := "/etc/issue"
			if tg.Image == enginetest.SmallImage {
				gone = "/linuxrc"
			}
			state := "cat /opt/a; stat -c %a /opt/a; readlink /opt/link; test -e " + gone + " && echo issue; " +
				"test -e /opt/b && echo b; test -e /opt/c && echo c; cat /workspace/w.txt; echo \"env=$SNAPVAR\""
			r := s.call(t, "exec", map[string]any{"command": "test -e " + gone + " && mkdir -p /opt && echo one >/opt/a && chmod 640 /opt/a && " +
				"ln -s /opt/a /opt/link && rm " + gone + " && echo ws1 >/workspace/w.txt"})
			if r.isError {
				t.Fatal(r.text)
			}
			if r := s.call(t, "env", map[string]any{"action": "set", "key": "SNAPVAR", "value": "kept"}); r.isError {
				t.Fatal(r.text)
			}
			want1 := "one\n640\n/opt/a\nws1\nenv=kept\n"
			if r := s.call(t, "exec", map[string]any{"command": state}); r.str("stdout") != want1 {
				t.Fatalf("before: %q", r.str("stdout"))
			}

			r = s.call(t, "snapshot", map[string]any{"snapshot_name": "s1", "note": "first"})
			if strings.Contains(tg.Name, "0.9.0") {
				// Apple's container before 0.11 exports no tar: no snapshots, said plainly.
				if !r.isError || !strings.Contains(r.text, "0.11.0") {
					t.Fatalf("snapshot on %s: %s", tg.Name, r.text)
				}
				return
			}
			if r.isError || r.str("name") != "s1" {
				t.Fatalf("snapshot: %s", r.text)
			}
			// Where its image lives, for a server on another engine to
			// say it does not reach it.
			if kind := tg.New().Kind(); !strings.HasPrefix(r.str("engine"), kind) {
				t.Fatalf("snapshot's engine %q, want %s's", r.str("engine"), kind)
			}
			if r := s.call(t, "snapshot", map[string]any{"snapshot_name": "s1"}); !r.isError || !strings.Contains(r.text, "exists") {
				t.Fatalf("a name in use: %s", r.text)
			}
			if r := s.call(t, "images", map[string]any{}); r.isError || !strings.Contains(r.text, `snapshot "s1" of sandbox "default" (first)`) {
				t.Fatalf("images: %s", r.text)
			}

			// Change everything, then restore.
			r = s.call(t, "exec", map[string]any{"command": "echo two >/opt/a && chmod 600 /opt/a && rm /opt/link && ln -s /x /opt/link && " +
				"touch /opt/b " + gone + " && echo ws2 >/workspace/w.txt"})
			if r.isError {
				t.Fatal(r.text)
			}
			s.call(t, "env", map[string]any{"action": "unset", "key": "SNAPVAR"})
			if r := s.call(t, "bg", map[string]any{"command": "sleep 600", "name": "sleeper"}); r.isError {
				t.Fatal(r.text)
			}
			running := make(chan result, 1)
			go func() {
				running <- s.call(t, "exec", map[string]any{"command": "sleep 60; echo survived", "timeout": 120})
			}()
			// The restore must come while the command runs.
			waitProcess(t, tg.New(), sandbox.ContainerName(prefix, "default"), "sleep 60")
			r = s.call(t, "restore", map[string]any{"snapshot_name": "s1"})
			if r.isError {
				t.Fatalf("restore: %s", r.text)
			}
			cut := <-running
			if !cut.isError || !strings.Contains(cut.text, "restored") || strings.Contains(cut.text, "survived") {
				t.Fatalf("the command running during the restore: %s", cut.text)
			}
			if r := s.call(t, "exec", map[string]any{"command": state}); r.str("stdout") != want1 {
				t.Fatalf("after restore: %q (%s)", r.str("stdout"), r.str("stderr"))
			}
			if r := s.call(t, "jobs", map[string]any{}); strings.Contains(r.text, "running") {
				t.Fatalf("jobs after restore: %s", r.text)
			}

			// A chain: s2 on top of the restored s1 keeps both changes.
			if r := s.call(t, "exec", map[string]any{"command": "touch /opt/c"}); r.isError {
				t.Fatal(r.text)
			}
			r = s.call(t, "snapshot", map[string]any{"snapshot_name": "s2"})
			if r.isError || r.str("parent") != "s1" {
				t.Fatalf("s2: %s %+v", r.text, r.data)
			}
			s.call(t, "exec", map[string]any{"command": "rm /opt/c /opt/a"})
			if r := s.call(t, "restore", map[string]any{"snapshot_name": "s2"}); r.isError {
				t.Fatal(r.text)
			}
			want2 := "one\n640\n/opt/a\nc\nws1\nenv=kept\n"
			if r := s.call(t, "exec", map[string]any{"command": state}); r.str("stdout") != want2 {
				t.Fatalf("after restoring s2: %q", r.str("stdout"))
			}

			// A clone starts from the current state, with its own workspace.
			s.call(t, "exec", map[string]any{"command": "echo ws3 >/workspace/w.txt"})
			r = s.call(t, "clone", map[string]any{"source": "default", "target": "copy"})
			if r.isError {
				t.Fatalf("clone: %s", r.text)
			}
			if r := s.call(t, "exec", map[string]any{"sandbox": "copy", "command": state}); r.str("stdout") != strings.Replace(want2, "ws1", "ws3", 1) {
				t.Fatalf("clone: %q", r.str("stdout"))
			}
			s.call(t, "exec", map[string]any{"sandbox": "copy", "command": "echo mine >/workspace/w.txt"})
			if r := s.call(t, "exec", map[string]any{"command": "cat /workspace/w.txt"}); r.str("stdout") != "ws3\n" {
				t.Fatalf("the clone shares the workspace: %q", r.str("stdout"))
			}
			if r := s.call(t, "clone", map[string]any{"source": "default", "target": "copy"}); !r.isError || !strings.Contains(r.text, "exists") {
				t.Fatalf("clone onto an existing sandbox: %s", r.text)
			}
			if tg.Runtime != "container" {
				// The clone's untagged image goes with `prune` once the clone is gone.
				flags := []string{"--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", s.stateDir}
				if out, _ := runCLI(t, tg, append([]string{"prune", "--dry-run"}, flags...)...); strings.Contains(out, "image") {
					t.Fatalf("prune would remove the image of a live clone:\n%s", out)
				}
				if r := s.call(t, "destroy", map[string]any{"sandbox": "copy"}); r.isError {
					t.Fatal(r.text)
				}
				if out, ok := runCLI(t, tg, append([]string{"prune"}, flags...)...); !ok || !strings.Contains(out, "removed image") {
					t.Fatalf("prune after the clone is gone:\n%s", out)
				}
			}

			r = s.call(t, "list_snapshots", map[string]any{})
			if !strings.Contains(r.text, "s1") || !strings.Contains(r.text, "parent s1") || !strings.Contains(r.text, "note: first") {
				t.Fatalf("list: %s", r.text)
			}
			// Deleting the snapshot the sandbox runs from leaves it running.
			if r := s.call(t, "delete_snapshot", map[string]any{"snapshot_name": "s2"}); r.isError {
				t.Fatal(r.text)
			}
			if r := s.call(t, "exec", map[string]any{"command": "cat /opt/a"}); r.str("stdout") != "one\n" {
				t.Fatalf("after deleting its snapshot: %+v", r)
			}

			// Bad input.
			for _, tc := range []struct {
				tool string
				args map[string]any
				want string
			}{
				{"restore", map[string]any{"snapshot_name": "nope"}, "no such snapshot"},
				{"delete_snapshot", map[string]any{"snapshot_name": "s2"}, "no such snapshot"},
				{"snapshot", map[string]any{"snapshot_name": "-x"}, "snapshot_name"},
				{"snapshot", map[string]any{"snapshot_name": "a/b"}, "snapshot_name"},
				{"snapshot", map[string]any{"snapshot_name": "fine", "sandbox": "nosuch"}, "does not exist"},
			} {
				if r := s.call(t, tc.tool, tc.args); !r.isError || !strings.Contains(r.text, tc.want) {
					t.Errorf("%s %v: %s", tc.tool, tc.args, r.text)
				}
			}
			if r := s.call(t, "status", map[string]any{"sandbox": "nosuch"}); !r.isError {
				t.Errorf("a snapshot of a missing sandbox created it: %s", r.text)
			}
		})
	}
}

// TestBuildImage: build_image streams its log as progress, a sandbox boots
// from what it built, and a failing step comes back with the log's tail.
func TestBuildImage(t *testing.T) {
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			prefix := enginetest.Prefix(t, tg.New())
			tag := prefix + "-tools:1"
			s := startServer(t, tg, prefix, "", "--toolsets", "all", "--profile", "custom:image="+tag)
			// The prefix keeps the step out of the build cache.
			cf := "FROM " + tg.Image + "\nRUN sleep 3 && echo built >/built.txt && echo " + prefix + " >/prefix.txt\n"
			r := s.callWith(t, "build_image", map[string]any{"name": tag, "containerfile": cf}, "build-1")
			if r.isError {
				t.Fatalf("build: %s", r.text)
			}
			s.mu.Lock()
			progress := len(s.progress)
			s.mu.Unlock()
			if progress == 0 {
				t.Error("no progress during a build that took over 2 s")
			}
			if r := s.call(t, "exec", map[string]any{"sandbox": "custom", "command": "cat /built.txt"}); r.str("stdout") != "built\n" {
				t.Fatalf("a sandbox from the built image: %s", r.text)
			}
			r = s.call(t, "build_image", map[string]any{"name": prefix + "-broken", "containerfile": "FROM " + tg.Image + "\nRUN echo about-to-fail && false\n"})
			if !r.isError || !strings.Contains(r.text, "about-to-fail") || !strings.Contains(r.text, "log tail") {
				t.Fatalf("a failing build: %s", r.text)
			}
			if r := s.call(t, "build_image", map[string]any{"name": "-bad", "containerfile": "FROM x"}); !r.isError {
				t.Fatalf("a bad name: %s", r.text)
			}
			t.Cleanup(func() {
				if saver, ok := tg.New().(sandbox.ImageSaver); ok {
					_ = saver.RemoveImage(context.Background(), tag)
				}
			})
		})
	}
}

// TestSnapshotsUnderPressure: a snapshot whose workspace does not fit in
// the state directory fails plainly and leaves nothing behind; two servers
// taking the same snapshot name at once make exactly one snapshot whose
// image survives the loser; two snapshots of one sandbox from two servers
// at once both succeed.
func TestSnapshotsUnderPressure(t *testing.T) {
	tg := enginetest.Targets(t)[0]
	tg.SkipOnReal(t, "it mounts a Linux tmpfs as the snapshot directory and stops and removes through podman's CLI")
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs as the snapshot directory needs root")
	}
	var prefix string
	t.Cleanup(func() { pruneImages(t, tg, prefix) })
	prefix = enginetest.Prefix(t, tg.New())
	stateDir := t.TempDir()
	snapDir := filepath.Join(stateDir, "snapshots")
	if err := os.Mkdir(snapDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", snapDir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", snapDir).Run() })
	args := []string{"serve", "--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix,
		"--state-dir", stateDir, "--no-boot-default", "--toolsets", "all"}
	a := connectRaw(t, tg.Env, args...)
	b := connectRaw(t, tg.Env, args...)
	box := map[string]any{"sandbox": "snapc"}
	with := func(kv ...any) map[string]any {
		m := map[string]any{"sandbox": "snapc"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	t.Cleanup(func() {
		for _, n := range []string{"full", "dup", "c1", "c2"} {
			callText(t, a, "delete_snapshot", map[string]any{"snapshot_name": n})
		}
		callText(t, a, "destroy", box)
	})

	// 8 MB of noise in the workspace, 3 MiB of room for its tar: a disk
	// under the floor host writes keep free (the larger of 5 % and 2 GB)
	// takes no workspace tar at all, and says so.
	if text, isErr := callText(t, a, "exec", with("command", "head -c 8000000 /dev/urandom >/workspace/big && echo /opt/x >/opt/x")); isErr {
		t.Fatal(text)
	}
	text, isErr := callText(t, a, "snapshot", with("snapshot_name", "full"))
	if !isErr || !strings.Contains(text, "must stay free for the host") {
		t.Fatalf("a workspace that does not fit: %s", text)
	}
	if left, _ := os.ReadDir(snapDir); len(left) != 0 {
		t.Errorf("a failed snapshot left files: %v", left)
	}
	if text, _ := callText(t, b, "list_snapshots", map[string]any{}); strings.Contains(text, "full") {
		t.Errorf("a failed snapshot is listed: %s", text)
	}
	if text, _ := callText(t, b, "images", map[string]any{}); strings.Contains(text, strings.ToLower(prefix)+"-snapshot:full") {
		t.Errorf("a failed snapshot left its image: %s", text)
	}
	if text, isErr := callText(t, a, "exec", with("command", "cat /opt/x")); isErr || !strings.Contains(text, "/opt/x") {
		t.Fatalf("the sandbox after a failed snapshot: %s", text)
	}
	if text, isErr := callText(t, a, "snapshot", with("snapshot_name", "full", "include_workspace", false)); isErr {
		t.Fatalf("without the workspace it fits: %s", text)
	}

	// A restore whose boot fails puts the sandbox back as it was, where
	// the engine can move the old container aside (Apple's cannot: there
	// the old one is gone before the new one boots).
	if _, canRename := tg.New().(sandbox.Renamer); !canRename {
		t.Logf("%s cannot rename containers: no check that a restore that cannot boot is undone", tg.Name)
	} else {
		if text, isErr := callText(t, a, "exec", with("command", "echo mark >/opt/mark && mv /bin/sh /bin/sh.moved && echo moved")); isErr || !strings.Contains(text, "moved") {
			t.Fatalf("move sh away: %s", text)
		}
		text, isErr = callText(t, a, "snapshot", with("snapshot_name", "nosh", "include_workspace", false))
		callText(t, a, "exec", with("command", "mv /bin/sh.moved /bin/sh"))
		if isErr {
			t.Fatalf("snapshot without sh: %s", text)
		}
		t.Cleanup(func() { callText(t, a, "delete_snapshot", map[string]any{"snapshot_name": "nosh"}) })
		if text, isErr := callText(t, b, "restore", with("snapshot_name", "nosh")); !isErr || !strings.Contains(text, "put back as it was") {
			t.Fatalf("a restore that cannot boot: %s", text)
		}
		if text, isErr := callText(t, a, "exec", with("command", "cat /opt/mark; test -e /bin/sh && echo sh")); isErr || !strings.Contains(text, "mark\nsh\n") {
			t.Fatalf("the sandbox after a failed restore: %s", text)
		}
	}

	// One name, two servers, at once: one snapshot, and its image is whole.
	callText(t, a, "exec", with("command", "rm /workspace/big; echo dup >/opt/dup"))
	texts := make(chan string, 2)
	errs := make(chan bool, 2)
	for _, cs := range []*mcp.ClientSession{a, b} {
		go func() {
			text, isErr := callText(t, cs, "snapshot", with("snapshot_name", "dup", "include_workspace", false))
			texts <- text
			errs <- isErr
		}()
	}
	var failed []string
	for range 2 {
		if text := <-texts; <-errs {
			failed = append(failed, text)
		}
	}
	if len(failed) != 1 || !(strings.Contains(failed[0], "exists") || strings.Contains(failed[0], "being made")) {
		t.Fatalf("one name twice at once: %d failed: %q", len(failed), failed)
	}
	if text, _ := callText(t, b, "list_snapshots", map[string]any{}); strings.Count(text, "dup") != 1 {
		t.Fatalf("list after the race: %s", text)
	}
	callText(t, a, "exec", with("command", "rm /opt/dup"))
	if text, isErr := callText(t, b, "restore", with("snapshot_name", "dup")); isErr {
		t.Fatalf("restore the race's snapshot: %s", text)
	}
	if text, isErr := callText(t, a, "exec", with("command", "cat /opt/dup")); isErr || !strings.Contains(text, "dup") {
		t.Fatalf("after restoring the race's snapshot: %s", text)
	}

	// Two names, one sandbox, two servers, at once: both made.
	for i, cs := range []*mcp.ClientSession{a, b} {
		go func() {
			text, isErr := callText(t, cs, "snapshot", with("snapshot_name", fmt.Sprintf("c%d", i+1), "include_workspace", false))
			texts <- text
			errs <- isErr
		}()
	}
	for range 2 {
		if text := <-texts; <-errs {
			t.Errorf("two snapshots at once: %s", text)
		}
	}
	if text, _ := callText(t, a, "list_snapshots", map[string]any{}); !strings.Contains(text, "c1") || !strings.Contains(text, "c2") {
		t.Fatalf("list: %s", text)
	}

	// A stopped sandbox is started for its snapshot.
	stop := exec.Command(bin(tg), "stop", "-t", "0", sandbox.ContainerName(prefix, "snapc"))
	stop.Env = append(os.Environ(), tg.Env...)
	if out, err := stop.CombinedOutput(); err != nil {
		t.Fatalf("stop: %v: %s", err, out)
	}
	if text, isErr := callText(t, b, "snapshot", with("snapshot_name", "stopped", "include_workspace", false)); isErr {
		ls, _ := exec.Command("ls", "-la", snapDir).CombinedOutput()
		du, _ := callText(t, a, "exec", with("command", "du -a /workspace | tail; df -h /workspace"))
		t.Fatalf("snapshot of a stopped sandbox: %s\n%s\n%s", text, ls, du)
	}
	t.Cleanup(func() { callText(t, a, "delete_snapshot", map[string]any{"snapshot_name": "stopped"}) })
	if text, isErr := callText(t, a, "exec", with("command", "cat /opt/dup")); isErr || !strings.Contains(text, "dup") {
		t.Fatalf("after a snapshot of the stopped sandbox: %s", text)
	}

	// A snapshot whose image was removed behind the server's back is
	// refused before anything in the sandbox is touched: its job lives on.
	if text, isErr := callText(t, a, "bg", with("command", "sleep 600", "name", "keeper")); isErr {
		t.Fatal(text)
	}
	rmi := exec.Command(bin(tg), "rmi", strings.ToLower(prefix)+"-snapshot:c2")
	rmi.Env = append(os.Environ(), tg.Env...)
	if out, err := rmi.CombinedOutput(); err != nil {
		t.Fatalf("rmi: %v: %s", err, out)
	}
	if text, isErr := callText(t, b, "restore", with("snapshot_name", "c2")); !isErr || !strings.Contains(text, "gone from the engine") {
		t.Fatalf("restore of a snapshot whose image is gone: %s", text)
	}
	if text, _ := callText(t, a, "jobs", box); !strings.Contains(text, "keeper") || !strings.Contains(text, "running") {
		t.Fatalf("the job after a refused restore: %s", text)
	}
}
