package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/enginetest"
)

// standin is the built stand-in binary used by the integration tests.
type standin struct {
	bin string
	env []string
}

// newStandin builds the binary, or skips unless SANDBOX_MCP_TEST_RUNTIMES
// lists the stand-in ("container" or "container@<version>"; container@real
// is Apple's own CLI, with no podman behind it).
func newStandin(t *testing.T) *standin {
	t.Helper()
	if !enginetest.StandInListed() {
		t.Skipf("integration test skipped: %s does not list the stand-in (container)", enginetest.EnvRuntimes)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "container")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return &standin{bin: bin}
}

// cliResult is one finished invocation.
type cliResult struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// run invokes the stand-in with extra environment (KEY=VALUE) and stdin.
func (s *standin) run(t *testing.T, env []string, stdin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(append(os.Environ(), s.env...), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := cliResult{out.String(), errb.String(), 0, time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return r
}

// must runs and fails the test on a non-zero exit.
func (s *standin) must(t *testing.T, env []string, args ...string) string {
	t.Helper()
	r := s.run(t, env, "", args...)
	if r.code != 0 {
		t.Fatalf("%v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func uniqueName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "smtstandin-" + hex.EncodeToString(b[:])
}

// podman runs the backend directly (cleanup and cross-checks).
func podman(args ...string) ([]byte, error) {
	return exec.Command("podman", args...).CombinedOutput()
}

func v(ver string) []string { return []string{envVersion + "=" + ver} }

func TestIntegration(t *testing.T) {
	s := newStandin(t)
	logFile := filepath.Join(t.TempDir(), "argv.log")
	s.env = []string{envLog + "=" + logFile}
	name := uniqueName(t)
	stopped := name + "-stopped"
	vol := name + "-vol"
	t.Cleanup(func() {
		_, _ = podman("rm", "-f", "-t", "0", name, stopped)
		_, _ = podman("volume", "rm", "-f", vol)
	})

	r := s.run(t, v("1.5.0"), "", "run", "-d", "--name", name, "--init", "-l", "smt.test=yes", "-v", vol+":/data",
		"-m", "512M", "mcp-dev", "sleep", "600")
	if r.code != 0 || r.stdout != name+"\n" {
		t.Fatalf("run -d: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, vol) {
		t.Errorf("no auto-create warning for %s: %q", vol, r.stderr)
	}
	if out, err := podman("container", "inspect", "--format", "{{.ImageName}}", name); err != nil || strings.TrimSpace(string(out)) != "localhost/mcp-dev:latest" {
		t.Errorf("podman image: %s %v", out, err)
	}
	s.must(t, nil, "create", "--name", stopped, "mcp-dev:latest", "true")

	t.Run("dup name", func(t *testing.T) {
		r := s.run(t, v("1.5.0"), "", "run", "-d", "--name", name, "nosuchimage")
		if r.code != 1 || r.stderr != "Error: container with id "+name+" already exists\n" {
			t.Errorf("%d %q", r.code, r.stderr)
		}
		r = s.run(t, v("0.9.0"), "", "run", "-d", "--name", name, "mcp-dev")
		if r.code != 1 || r.stderr != "Error: exists: \"container with id "+name+" already exists\"\n" {
			t.Errorf("%d %q", r.code, r.stderr)
		}
	})

	t.Run("list and inspect 1.5.0", func(t *testing.T) {
		var list []struct {
			ID            string `json:"id"`
			Configuration struct {
				ID     string            `json:"id"`
				Labels map[string]string `json:"labels"`
				Image  struct {
					Reference string `json:"reference"`
				} `json:"image"`
				InitProcess struct {
					Executable string   `json:"executable"`
					Arguments  []string `json:"arguments"`
				} `json:"initProcess"`
				Resources struct {
					CPUs          int   `json:"cpus"`
					MemoryInBytes int64 `json:"memoryInBytes"`
					CPUOverhead   int   `json:"cpuOverhead"`
				} `json:"resources"`
				Mounts []struct {
					Destination string `json:"destination"`
					Type        struct {
						Volume *struct {
							Name string `json:"name"`
						} `json:"volume"`
					} `json:"type"`
				} `json:"mounts"`
				UseInit bool `json:"useInit"`
			} `json:"configuration"`
			Status struct {
				State    string `json:"state"`
				Networks []struct {
					IPv4Address string `json:"ipv4Address"`
					IPv4Gateway string `json:"ipv4Gateway"`
				} `json:"networks"`
				StartedDate string `json:"startedDate"`
			} `json:"status"`
		}
		out := s.must(t, v("1.5.0"), "ls", "--all", "--format", "json")
		if strings.Count(out, "\n") != 1 || strings.Contains(out, `\/`) {
			t.Errorf("1.5.0 list must be one unescaped line: %q", out)
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range list {
			seen[c.ID] = true
			if c.ID != name {
				continue
			}
			cfg := c.Configuration
			if cfg.ID != name || cfg.Labels["smt.test"] != "yes" || len(cfg.Labels) != 1 ||
				cfg.Image.Reference != "docker.io/library/mcp-dev:latest" ||
				cfg.InitProcess.Executable != "sleep" || strings.Join(cfg.InitProcess.Arguments, " ") != "600" ||
				cfg.Resources.CPUs != 4 || cfg.Resources.MemoryInBytes != 512<<20 || cfg.Resources.CPUOverhead != 1 || !cfg.UseInit {
				t.Errorf("configuration: %+v", cfg)
			}
			if len(cfg.Mounts) != 1 || cfg.Mounts[0].Destination != "/data" || cfg.Mounts[0].Type.Volume == nil || cfg.Mounts[0].Type.Volume.Name != vol {
				t.Errorf("mounts: %+v", cfg.Mounts)
			}
			st := c.Status
			if st.State != "running" || len(st.Networks) != 1 || !strings.Contains(st.Networks[0].IPv4Address, "/") ||
				st.Networks[0].IPv4Gateway == "" || !strings.HasSuffix(st.StartedDate, "Z") {
				t.Errorf("status: %+v", st)
			}
		}
		if !seen[name] || !seen[stopped] {
			t.Fatalf("list misses %s or %s: %v", name, stopped, seen)
		}
		for _, c := range list {
			if c.ID == stopped && (c.Status.State != "stopped" || len(c.Status.Networks) != 0 || c.Status.StartedDate != "") {
				t.Errorf("stopped entry: %+v", c.Status)
			}
		}
		ins := s.must(t, v("1.5.0"), "inspect", name)
		if !strings.HasPrefix(ins, "[\n  {\n    \"configuration\" : {\n      \"capAdd\" : [\n\n      ],") {
			t.Errorf("inspect is not Apple pretty JSON:\n%.200s", ins)
		}
		var one []map[string]any
		if err := json.Unmarshal([]byte(ins), &one); err != nil || len(one) != 1 || one[0]["id"] != name {
			t.Errorf("inspect: %v %v", err, one)
		}
		q := s.must(t, v("1.5.0"), "ls", "-q")
		if !strings.Contains(q, name+"\n") || strings.Contains(q, stopped) {
			t.Errorf("ls -q: %q", q)
		}
	})

	t.Run("list and inspect 0.9.0", func(t *testing.T) {
		var list []struct {
			Status        string `json:"status"`
			StartedDate   float64
			Configuration struct {
				ID     string            `json:"id"`
				Labels map[string]string `json:"labels"`
				Image  struct {
					Reference string `json:"reference"`
				} `json:"image"`
			} `json:"configuration"`
			Networks []struct {
				IPv4Address string `json:"ipv4Address"`
			} `json:"networks"`
		}
		out := s.must(t, v("0.9.0"), "ls", "--all", "--format", "json")
		if !strings.HasPrefix(out, `[{"networks":`) || !strings.Contains(out, `docker.io\/library\/mcp-dev:latest`) {
			t.Errorf("0.9.0 list shape: %.200s", out)
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range list {
			if c.Configuration.ID != name {
				continue
			}
			found = true
			unix := c.StartedDate + 978307200
			if c.Status != "running" || c.Configuration.Labels["smt.test"] != "yes" || len(c.Networks) != 1 ||
				c.Configuration.Image.Reference != "docker.io/library/mcp-dev:latest" ||
				unix < float64(time.Now().Add(-time.Hour).Unix()) || unix > float64(time.Now().Unix()+5) {
				t.Errorf("0.9.0 entry: %+v", c)
			}
		}
		if !found {
			t.Errorf("%s not listed", name)
		}
		ins := s.must(t, v("0.9.0"), "inspect", name)
		if strings.Count(ins, "\n") != 1 || !strings.HasPrefix(ins, `[{"networks":`) {
			t.Errorf("0.9.0 inspect must be compact: %.200s", ins)
		}
	})

	t.Run("inspect missing", func(t *testing.T) {
		r := s.run(t, v("1.5.0"), "", "inspect", name, "nosuch-"+name)
		if r.code != 1 || r.stdout != "" || r.stderr != "Error: container not found: nosuch-"+name+"\n" {
			t.Errorf("1.5.0: %d %q %q", r.code, r.stdout, r.stderr)
		}
		r = s.run(t, v("0.9.0"), "", "inspect", "nosuch-"+name)
		if r.code != 0 || r.stdout != "[]\n" || r.stderr != "" {
			t.Errorf("0.9.0: %d %q %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("exec stdin and exit code", func(t *testing.T) {
		r := s.run(t, nil, "hello\nworld\n", "exec", "-i", name, "sh", "-c", "cat; echo err >&2; exit 7")
		if r.code != 7 || r.stdout != "hello\nworld\n" || r.stderr != "err\n" {
			t.Errorf("%d %q %q", r.code, r.stdout, r.stderr)
		}
		r = s.run(t, nil, "ignored", "exec", name, "sh", "-c", "cat; echo done")
		if r.code != 0 || r.stdout != "done\n" {
			t.Errorf("stdin must not be connected without -i: %d %q", r.code, r.stdout)
		}
		r = s.run(t, nil, "", "exec", "-e", "A=1", "-w", "/tmp", name, "sh", "-c", `echo "$A $(pwd)"`)
		if r.stdout != "1 /tmp\n" {
			t.Errorf("env/workdir: %q %q", r.stdout, r.stderr)
		}
		r = s.run(t, nil, "", "exec", name, "--", "ls")
		if r.code != 1 || r.stderr != "Error: failed to find target executable --\n" {
			t.Errorf("--: %d %q", r.code, r.stderr)
		}
		r = s.run(t, nil, "", "exec", "-d", name, "sleep", "1")
		if r.code != 0 || r.stdout != name+"\n" {
			t.Errorf("exec -d: %d %q %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("exec concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				want := strings.Repeat("x", 100000+i)
				r := s.run(t, nil, want, "exec", "-i", name, "sh", "-c", "cat; exit 3")
				if r.code != 3 || r.stdout != want {
					t.Errorf("concurrent exec %d: code %d, %d bytes, %q", i, r.code, len(r.stdout), r.stderr)
				}
			}()
		}
		wg.Wait()
	})

	t.Run("drain rule", func(t *testing.T) {
		r := s.run(t, nil, "", "exec", name, "sh", "-c", "sleep 5 & echo hi")
		if r.code != 1 || r.stdout != "hi\n" || r.stderr != "Error: failed to exec process CancellationError()\n" {
			t.Errorf("held pipes: %d %q %q", r.code, r.stdout, r.stderr)
		}
		// At least the 3 s drain; past the hang guard, hung.
		if r.took < 2900*time.Millisecond || r.took > enginetest.HangGuard {
			t.Errorf("held pipes took %v, want about 3 s", r.took)
		}
		r = s.run(t, nil, "", "exec", name, "sh", "-c", "sleep 5 >/dev/null 2>&1 & echo hi")
		if r.code != 0 || r.stdout != "hi\n" || r.stderr != "" {
			t.Errorf("redirected child: %d %q %q", r.code, r.stdout, r.stderr)
		}
		r = s.run(t, nil, "", "exec", name, "sh", "-c", "(sleep 1; echo late) & echo hi; exit 5")
		if r.code != 5 || r.stdout != "hi\nlate\n" {
			t.Errorf("child releasing within 3 s: %d %q %q", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("exec errors", func(t *testing.T) {
		for ver, want := range map[string]string{
			"1.5.0": "Error: container " + stopped + " is not running\n",
			"0.9.0": "Error: invalidState: \"container " + stopped + " is not running\"\n",
		} {
			if r := s.run(t, v(ver), "", "exec", stopped, "ls"); r.code != 1 || r.stderr != want {
				t.Errorf("%s stopped: %d %q", ver, r.code, r.stderr)
			}
		}
		for ver, want := range map[string]string{
			"1.5.0": "Error: get failed: container nosuch-" + name + " not found\n",
			"0.9.0": "Error: notFound: \"get failed: container nosuch-" + name + " not found\"\n",
		} {
			if r := s.run(t, v(ver), "", "exec", "nosuch-"+name, "ls"); r.code != 1 || r.stderr != want {
				t.Errorf("%s missing: %d %q", ver, r.code, r.stderr)
			}
		}
	})

	t.Run("system stopped", func(t *testing.T) {
		env := []string{envHome + "=" + t.TempDir()}
		s.must(t, env, "system", "stop")
		r := s.run(t, env, "", "ls")
		want := "Error: internalError: \"failed to list containers\" (cause: \"interrupted: \"XPC connection error: Connection invalid\"\")\n" +
			"Ensure container system service has been started with `container system start`.\n"
		if r.code != 1 || r.stderr != want || r.stdout != "" {
			t.Errorf("ls when stopped: %d %q", r.code, r.stderr)
		}
		r = s.run(t, env, "", "system", "status")
		if r.code != 1 || r.stdout != "apiserver is not running and not registered with launchd\n" {
			t.Errorf("status: %d %q", r.code, r.stdout)
		}
		if r := s.run(t, env, "", "--version"); r.code != 0 {
			t.Errorf("--version when stopped: %d", r.code)
		}
		s.must(t, env, "system", "start", "--enable-kernel-install")
		if r := s.run(t, env, "", "system", "status", "--format", "json"); r.code != 0 || !strings.Contains(r.stdout, `"status":"running"`) {
			t.Errorf("status after start: %d %q", r.code, r.stdout)
		}
	})

	t.Run("delete", func(t *testing.T) {
		r := s.run(t, v("1.5.0"), "", "delete", name)
		want := "Error: internalError: \"failed to delete container\" (cause: \"invalidState: \"container " + name + " is running and can not be deleted\"\")\n"
		if r.code != 1 || r.stderr != want {
			t.Errorf("delete running: %d %q", r.code, r.stderr)
		}
		start := time.Now()
		if out := s.must(t, nil, "delete", "-f", name, stopped); out != name+"\n"+stopped+"\n" {
			t.Errorf("delete -f printed %q", out)
		}
		if d := time.Since(start); d > enginetest.HangGuard { // a hang; no speed check
			t.Errorf("delete -f took %v", d)
		}
		if err := exec.Command("podman", "container", "exists", name).Run(); err == nil {
			t.Errorf("%s still exists", name)
		}
		r = s.run(t, v("1.5.0"), "", "delete", name)
		want = "Error: internalError: \"failed to delete container\" (cause: \"notFound: \"container with ID " + name + " not found\"\")\n"
		if r.code != 1 || r.stderr != want {
			t.Errorf("delete missing: %d %q", r.code, r.stderr)
		}
		s.must(t, nil, "volume", "rm", vol)
	})

	t.Run("argv log", func(t *testing.T) {
		data, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		type entry struct {
			Version string   `json:"version"`
			Argv    []string `json:"argv"`
		}
		var first entry
		if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Version != "1.5.0" || first.Argv[0] != "run" || first.Argv[3] != name {
			t.Errorf("first log line %q: %v", lines[0], err)
		}
		for _, l := range lines {
			var e entry
			if err := json.Unmarshal([]byte(l), &e); err != nil || e.Version == "" || len(e.Argv) == 0 {
				t.Errorf("bad log line %q", l)
			}
		}
	})
}

// TestBuildLeavesNoIntermediateImages: a build through the stand-in
// leaves its final image only, as Apple's builder does (its cache stays in
// the builder VM): no untagged image of a step is left in podman's store.
func TestBuildLeavesNoIntermediateImages(t *testing.T) {
	s := newStandin(t)
	mark := uniqueName(t)
	dir := t.TempDir()
	cf := "FROM localhost/sandbox-mcp-minimal:latest\nLABEL io.sandbox-mcp.test=" + mark + "\nRUN echo one >/one\nRUN echo two >/two\n"
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(cf), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := podman("image", "exists", "localhost/sandbox-mcp-minimal:latest"); err != nil {
		t.Skipf("no sandbox-mcp-minimal image to build from (scripts/build-images.sh builds it): %s", out)
	}
	t.Cleanup(func() {
		ids, _ := podman("images", "-a", "-q", "--filter", "label=io.sandbox-mcp.test="+mark)
		for _, id := range strings.Fields(string(ids)) {
			_, _ = podman("rmi", "-f", id)
		}
	})
	s.must(t, nil, "build", "-t", mark+":latest", "-f", filepath.Join(dir, "Containerfile"), dir)
	// Stdout alone: podman logs on stderr about images other tests
	// remove while it reads its storage.
	var stderr strings.Builder
	cmd := exec.Command("podman", "images", "-a", "--format", "{{.ID}} {{.Repository}}", "--filter", "label=io.sandbox-mcp.test="+mark)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("podman images: %v: %s", err, stderr.String())
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || strings.Contains(lines[0], "<none>") {
		t.Fatalf("images the build left: %q; want its final image only", out)
	}
}
