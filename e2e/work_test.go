package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// gitOn runs git in dir on the host, failing the test when it fails.
func gitOn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestWork: through a real client, a host repository is cloned into a
// sandbox; what commands change there comes back as commits on the
// branch sandbox/<name>, which work_log and work_diff show and work_apply
// merges into the user's branch. A directory outside the allowed roots,
// one that is not a repository, a repository that starts above the
// allowed root, a sandbox tied to none and a user's tree with uncommitted
// changes are refused, each with an answer that says why.
func TestWork(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed on this host")
	}
	for _, tg := range enginetest.Targets(t) {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			rt := tg.New()
			prefix := enginetest.Prefix(t, rt)
			host := t.TempDir()
			repo := filepath.Join(host, "project")
			if err := os.MkdirAll(filepath.Join(repo, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			gitOn(t, repo, "init", "--quiet", "--initial-branch=main")
			gitOn(t, repo, "config", "user.name", "User")
			gitOn(t, repo, "config", "user.email", "user@example.com")
			if err := os.WriteFile(filepath.Join(repo, "sub", "a.txt"), []byte("one\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			gitOn(t, repo, "add", ".")
			gitOn(t, repo, "commit", "--quiet", "-m", "first")
			// Records at checkpoints and refreshes only: the records made
			// on their own are the second server's, below.
			s := startServer(t, tg, prefix, "", "--toolsets", "all", "--allow-dir", host, "--work-record", "off")

			for _, bad := range []struct{ dir, want string }{
				{t.TempDir(), "allowed roots"},
				{host, "not in a git repository"},
			} {
				if r := s.call(t, "workspace_from_repo", map[string]any{"local_repo": bad.dir}); !r.isError || !strings.Contains(r.text, bad.want) {
					t.Errorf("workspace_from_repo %s: %s", bad.dir, r.text)
				}
			}
			if r := s.call(t, "work_log", map[string]any{}); !r.isError || !strings.Contains(r.text, "workspace_from_repo") {
				t.Errorf("work_log of a sandbox tied to no repository: %s", r.text)
			}

			r := s.call(t, "workspace_from_repo", map[string]any{"local_repo": filepath.Join(repo, "sub")})
			if r.isError || r.str("path") != "/workspace/project" || r.str("branch") != "sandbox/default" {
				t.Fatalf("workspace_from_repo: %s", r.text)
			}
			if r := s.call(t, "exec", map[string]any{"command": "cd /workspace/project && echo two >> sub/a.txt && echo new > b.txt"}); r.isError {
				t.Fatal(r.text)
			}
			if r := s.call(t, "checkpoint", map[string]any{"include": []string{"../outside"}}); !r.isError || !strings.Contains(r.text, "inside the clone") {
				t.Fatalf("checkpoint including a path outside the clone: %s", r.text)
			}
			r = s.call(t, "checkpoint", map[string]any{"message": "two and new"})
			if r.isError || r.data["new"] != true || r.num("files") != 2 {
				t.Fatalf("checkpoint: %s", r.text)
			}
			if got := gitOn(t, repo, "log", "-1", "--format=%s", "sandbox/default"); got != "two and new" {
				t.Fatalf("the host branch's last commit: %q", got)
			}
			if r := s.call(t, "exec", map[string]any{"command": "cd /workspace/project && echo three > c.txt"}); r.isError {
				t.Fatal(r.text)
			}
			r = s.call(t, "work_log", map[string]any{})
			if commits, _ := r.data["commits"].([]any); r.isError || len(commits) != 2 {
				t.Fatalf("work_log (with its checkpoint): %s", r.text)
			}
			r = s.call(t, "work_diff", map[string]any{"stat": true, "refresh": false})
			if r.isError || !strings.Contains(r.text, "3 files changed") {
				t.Fatalf("work_diff: %s", r.text)
			}
			r = s.call(t, "work_diff", map[string]any{"paths": []string{"sub/a.txt"}, "refresh": false})
			if r.isError || !strings.Contains(r.text, "+two") || strings.Contains(r.text, "c.txt") {
				t.Fatalf("work_diff of one path: %s", r.text)
			}

			// The CLI's twins read the same branch.
			cli := func(args ...string) (string, int) {
				t.Helper()
				flags := []string{"--runtime", tg.Runtime, "--image", tg.Image, "--prefix", prefix, "--state-dir", s.stateDir}
				return runExit(t, tg, append(append([]string{args[0]}, flags...), args[1:]...)...)
			}
			if out, code := cli("log", "default", "--refresh=false"); code != 0 || !strings.Contains(out, "two and new") {
				t.Fatalf("sandbox-mcp log: %d %q", code, out)
			}
			if out, code := cli("diff", "default", "--stat", "--refresh=false", "sub/a.txt"); code != 0 || !strings.Contains(out, "1 file changed") {
				t.Fatalf("sandbox-mcp diff: %d %q", code, out)
			}
			if out, code := cli("log", "nosuch", "--refresh=false"); code == 0 || !strings.Contains(out, "workspace_from_repo") {
				t.Fatalf("sandbox-mcp log of a sandbox tied to nothing: %d %q", code, out)
			}

			if err := os.WriteFile(filepath.Join(repo, "sub", "a.txt"), []byte("mine\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if r := s.call(t, "work_apply", map[string]any{}); !r.isError || !strings.Contains(r.text, "uncommitted changes") {
				t.Fatalf("work_apply on a dirty tree: %s", r.text)
			}
			if b, _ := os.ReadFile(filepath.Join(repo, "sub", "a.txt")); string(b) != "mine\n" {
				t.Fatalf("the user's uncommitted change is now %q", b)
			}
			gitOn(t, repo, "checkout", "--quiet", "--", "sub/a.txt")
			// The commit a review read is what is merged, not a record
			// made after it.
			r = s.call(t, "work_diff", map[string]any{"refresh": false})
			reviewed := r.str("to_commit")
			if r.isError || len(reviewed) != 40 {
				t.Fatalf("work_diff's to_commit: %s", r.text)
			}
			if r := s.call(t, "exec", map[string]any{"command": "cd /workspace/project && echo four > d.txt"}); r.isError {
				t.Fatal(r.text)
			}
			if r := s.call(t, "checkpoint", map[string]any{}); r.isError || r.data["new"] != true {
				t.Fatalf("checkpoint after the review: %s", r.text)
			}
			r = s.call(t, "work_apply", map[string]any{"how": "squash", "commit": reviewed})
			if r.isError || r.str("into") != "main" || r.str("at") != reviewed {
				t.Fatalf("work_apply: %s", r.text)
			}
			if b, _ := os.ReadFile(filepath.Join(repo, "c.txt")); string(b) != "three\n" {
				t.Fatalf("after work_apply, c.txt is %q", b)
			}
			if _, err := os.Stat(filepath.Join(repo, "d.txt")); !os.IsNotExist(err) {
				t.Fatalf("work_apply merged a record made after the review: %v", err)
			}

			// A second sandbox of the same repository, on a server that
			// records its work on its own: its command's work lands on its
			// own branch with no checkpoint, the command in the message.
			t.Cleanup(func() { enginetest.Sweep(rt, prefix+"f") })
			follow := startServer(t, tg, prefix+"f", "", "--toolsets", "all", "--allow-dir", host, "--work-record", "200ms")
			if r := follow.call(t, "workspace_from_repo", map[string]any{"local_repo": repo, "sandbox": "follow"}); r.isError || r.str("branch") != "sandbox/follow" {
				t.Fatalf("workspace_from_repo of a second sandbox: %s", r.text)
			}
			defaultAt := gitOn(t, repo, "rev-parse", "sandbox/default")
			if r := follow.call(t, "exec", map[string]any{"sandbox": "follow", "command": "cd /workspace/project && echo followed > f.txt"}); r.isError {
				t.Fatal(r.text)
			}
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) { // a hang, not a speed
				if out, err := exec.Command("git", "-C", repo, "show", "sandbox/follow:f.txt").Output(); err == nil && string(out) == "followed\n" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the second sandbox's work never reached its branch")
				}
			}
			if msg := gitOn(t, repo, "log", "-1", "--format=%B", "sandbox/follow"); !strings.Contains(msg, "echo followed > f.txt") {
				t.Fatalf("the record's message: %q", msg)
			}
			if gitOn(t, repo, "rev-parse", "sandbox/default") != defaultAt {
				t.Fatal("the second sandbox moved the first one's branch")
			}

			// A server whose allowed root is inside the repository may not
			// tie a sandbox to it: a merge writes all over its tree.
			inner := startServer(t, tg, prefix+"i", "", "--toolsets", "all", "--allow-dir", filepath.Join(repo, "sub"))
			if r := inner.call(t, "workspace_from_repo", map[string]any{"local_repo": filepath.Join(repo, "sub"), "sandbox": "inner"}); !r.isError || !strings.Contains(r.text, "outside the allowed roots") {
				t.Errorf("a repository that starts above the allowed root: %s", r.text)
			}
		})
	}
}
