package enginetest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/applecli"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/apple"
)

// Environment variables read by the stand-in `container` executable.
const (
	EnvStandInVersion = "CONTAINER_STANDIN_VERSION"
	EnvStandInHome    = "CONTAINER_STANDIN_HOME"
	EnvStandInSystem  = "CONTAINER_STANDIN_SYSTEM"
	EnvStandInLog     = "CONTAINER_STANDIN_LOG"
	// EnvStandInGraphRoot gives the stand-in podman's storage root, asked
	// once per test process instead of once per volume.
	EnvStandInGraphRoot = "CONTAINER_STANDIN_GRAPHROOT"
)

// podmanGraphRoot is the storage root of the podman beneath the stand-in
// (CONTAINER_STANDIN_ENGINE, else podman), asked once per test process;
// "" when it does not say.
var podmanGraphRoot = sync.OnceValue(func() string {
	bin := os.Getenv("CONTAINER_STANDIN_ENGINE")
	if bin == "" {
		bin = "podman"
	}
	out, err := exec.Command(bin, "info", "--format", "{{.Store.GraphRoot}}").Output()
	if root := strings.TrimSpace(string(out)); err == nil && filepath.IsAbs(root) {
		return root
	}
	return ""
})

// standInTarget is Apple's container CLI as the stand-in emulates it, at
// version ("" for the stand-in's default, the newest release it knows).
func standInTarget(t testing.TB, version string) Target {
	t.Helper()
	bin := StandIn(t)
	var env []string
	name := "container"
	if version != "" {
		env = append(env, EnvStandInVersion+"="+version)
		name += "-" + version
	}
	if argvRecord != "" {
		env = append(env, EnvStandInLog+"="+argvRecord)
	}
	if root := podmanGraphRoot(); root != "" {
		env = append(env, EnvStandInGraphRoot+"="+root)
	}
	// Servers find the stand-in as `container` on PATH.
	serverEnv := append([]string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}, env...)
	return Target{Name: name, Runtime: "container", Image: image(), Env: serverEnv, StandIn: true, New: func() sandbox.Runtime {
		return apple.New(apple.Options{Binary: bin, Env: env})
	}}
}

// argvRecord is the file to which every stand-in target of this test
// process has each invocation logged (RecordArgv); "" for none.
var argvRecord string

// RecordArgv has every stand-in target of this test process log each
// invocation, by the server under test or by the test itself, to path
// (CONTAINER_STANDIN_LOG), for CheckArgvRecord. Call it before the
// targets are made (in TestMain).
func RecordArgv(path string) { argvRecord = path }

// WithArgvLog returns env with path added to the stand-in's log files:
// a test that reads its own argv log keeps the process's record going.
func WithArgvLog(env []string, path string) []string {
	out := append([]string(nil), env...)
	for i := len(out) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(out[i], EnvStandInLog+"="); ok {
			out[i] = EnvStandInLog + "=" + v + string(os.PathListSeparator) + path
			return out
		}
	}
	return append(out, EnvStandInLog+"="+path)
}

// standInBuild is the build of the stand-in, done once per test binary.
type standInBuild struct {
	once sync.Once
	path string
	err  error
}

var (
	standIn = &standInBuild{}
	// buildStandInFunc builds the stand-in; a test replaces it to see
	// whether a target built it.
	buildStandInFunc = buildStandIn
)

// StandIn returns the path of the stand-in `container` executable, built
// once per source version into the user's cache directory (a file named
// container in a directory of its own, so it can go first on PATH).
func StandIn(t testing.TB) string {
	t.Helper()
	standIn.once.Do(func() { standIn.path, standIn.err = buildStandInFunc() })
	if standIn.err != nil {
		t.Fatalf("build the stand-in container CLI: %v", standIn.err)
	}
	return standIn.path
}

func buildStandIn() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	// The stand-in, the argument tables it parses with and the volume
	// images it makes.
	h := sha256.New()
	for _, pkg := range []string{"applestandin", "applecli", "loopdisk"} {
		src := filepath.Join(root, "internal", pkg)
		files, err := filepath.Glob(filepath.Join(src, "*.go"))
		if err != nil || len(files) == 0 {
			return "", fmt.Errorf("no stand-in sources in %s", src)
		}
		sort.Strings(files)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "%s/%s %d\n", pkg, filepath.Base(f), len(b))
			h.Write(b)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "sandbox-mcp-test", "standin-"+hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(dir, "container")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Build beside the target and rename: test packages build concurrently.
	tmp := filepath.Join(dir, fmt.Sprintf(".container-%d", os.Getpid()))
	cmd := exec.Command("go", "build", "-o", tmp, "./internal/applestandin")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// StandInReleases returns a stand-in target for each way the Apple
// dialect talks to the CLI that SANDBOX_MCP_TEST_RUNTIMES does not already
// list: the dialect chooses its calls by apple.Features, so the first
// release (of applecli.Releases) of each set of features not listed
// stands for the releases that share it. Those releases' argument tables
// are checked call by call over the e2e run (CheckArgvRecord). It skips t
// unless the stand-in is listed.
func StandInReleases(t testing.TB) []Target {
	t.Helper()
	if !StandInListed() {
		t.Skipf("needs the stand-in container CLI: set %s to include container (`make test` does)", EnvRuntimes)
	}
	entries, err := parseRuntimes(os.Getenv(EnvRuntimes))
	if err != nil {
		t.Fatal(err)
	}
	// A release's features, without what is no choice of calls.
	way := func(v applecli.Version) apple.Features {
		f := apple.FeaturesOf(apple.Version{Major: v.Major, Minor: v.Minor, Patch: v.Patch})
		f.Version = apple.Version{}
		return f
	}
	covered := map[apple.Features]bool{}
	for _, e := range entries {
		if e.runtime == "container" && !e.real {
			v := applecli.Releases[len(applecli.Releases)-1] // the stand-in's default
			if e.version != "" {
				if v, err = applecli.ParseVersion(e.version); err != nil {
					t.Fatal(err)
				}
			}
			covered[way(v)] = true
		}
	}
	var out []Target
	for _, v := range applecli.Releases {
		if f := way(v); !covered[f] {
			covered[f] = true
			out = append(out, standInTarget(t, v.String()))
		}
	}
	return out
}
