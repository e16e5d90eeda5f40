package ctlbin

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
)

// A server without embedded agents (a `go install`) builds them from its
// own module source with the local Go toolchain, once per version, into
// <user cache dir>/sandbox-mcp/agents/<key>/sandbox-ctl-linux-<arch>.
// The key is the module version when the source is the module cache's
// (which never changes), else a hash of the server's executable.

// buildTimeout bounds one build of sandbox-ctl.
const buildTimeout = 10 * time.Minute

// failedBuildRetry is how long a failed build is reported before the next
// use tries again.
const failedBuildRetry = 2 * time.Minute

// Test hooks.
var (
	cacheRoot = os.UserCacheDir
	lookGo    = findGo
	// sourceFile is this file's path as the compiler saw it: in the
	// module source unless the server was built with -trimpath.
	sourceFile = func() string { _, f, _, _ := runtime.Caller(0); return f }
)

// plan says where the agent for one architecture comes from when built.
type plan struct {
	src   string // the module source
	out   string // the cached binary
	goBin string // the go command; "" when none was found
	goErr error  // why there is none
}

// fromSource returns the cached agent built from the module source, or
// builds it (with build), or says how the first use will (later).
func fromSource(ctx context.Context, arch string, build bool) (b *Binary, later string, err error) {
	// A release's build is keyed by its version alone: found without
	// looking for the source or Go (gone since, or off the PATH).
	if v := ownVersion(); released(v) {
		if root, err := cacheRoot(); err == nil {
			out := cachePath(root, escapePath(v), arch)
			if data, err := os.ReadFile(out); err == nil && Check(data, arch) == nil {
				return &Binary{Arch: arch, Source: FromBuild, Path: out, Data: data}, "", nil
			}
		}
	}
	p, err := makePlan(arch)
	if err != nil {
		return nil, "", fmt.Errorf("cannot build one: %w", err)
	}
	if data, err := os.ReadFile(p.out); err == nil && Check(data, arch) == nil {
		return &Binary{Arch: arch, Source: FromBuild, Path: p.out, Data: data}, "", nil
	}
	if p.goBin == "" {
		return nil, "", fmt.Errorf("cannot build one from the module source in %s: %w", p.src, p.goErr)
	}
	if !build {
		return nil, fmt.Sprintf("built on first use from the module source in %s with %s, into %s", p.src, p.goBin, p.out), nil
	}
	b, err = buildOnce(ctx, arch, p)
	return b, "", err
}

func makePlan(arch string) (plan, error) {
	var p plan
	var looked []string
	p.goBin, looked = lookGo()
	if p.goBin == "" {
		p.goErr = fmt.Errorf("no Go toolchain found (looked on PATH and in %s)", strings.Join(looked, ", "))
	}
	src, key, err := moduleSource(p.goBin)
	if err != nil {
		return p, err
	}
	root, err := cacheRoot()
	if err != nil {
		return p, fmt.Errorf("no cache directory: %w", err)
	}
	p.src = src
	p.out = cachePath(root, key, arch)
	return p, nil
}

// cachePath is where the agent built for linux/arch under key is kept.
func cachePath(root, key, arch string) string {
	return filepath.Join(root, "sandbox-mcp", "agents", key, "sandbox-ctl-linux-"+arch)
}

// released reports whether v is a module version whose source never
// changes (not a build outside version control, nor of a modified tree).
func released(v string) bool { return known(v) && !strings.HasSuffix(v, "+dirty") }

// moduleSource finds the server's module source: the module cache's copy
// of its version (where `go install …@version` put it), else the checkout
// the server was built in. key names its builds in the cache.
func moduleSource(goBin string) (dir, key string, err error) {
	var looked []string
	version := ownVersion()
	if released(version) {
		if mc := modCache(goBin); mc != "" {
			d := filepath.Join(mc, escapePath(ModulePath)+"@"+escapePath(version))
			if isSource(d) {
				return d, escapePath(version), nil
			}
			looked = append(looked, d)
		}
	}
	if d := checkoutDir(); d != "" {
		sum, err := selfSum()
		if err != nil {
			return "", "", fmt.Errorf("hash the server's executable: %w", err)
		}
		return d, "dev-" + sum, nil
	}
	if len(looked) == 0 {
		return "", "", fmt.Errorf("the server's module source is not on this machine (it was built with -trimpath from version %q)", version)
	}
	return "", "", fmt.Errorf("the server's module source is not on this machine (looked in %s)", strings.Join(looked, ", "))
}

// checkoutDir is the module source this file was compiled from, when its
// path was recorded and the source is still there.
func checkoutDir() string {
	f := sourceFile()
	if !filepath.IsAbs(f) {
		return "" // -trimpath
	}
	for d := filepath.Dir(f); ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if isSource(d) {
				return d
			}
			return ""
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// isSource reports whether dir holds ModulePath's source with sandbox-ctl.
func isSource(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
			if strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "module ")), `"`) != ModulePath {
				return false
			}
			_, err := os.Stat(filepath.Join(dir, "cmd", "sandbox-ctl", "main.go"))
			return err == nil
		}
	}
	return false
}

// modCache is the module cache directory: `go env GOMODCACHE` when there
// is a go command, else what it defaults to.
func modCache(goBin string) string {
	if goBin != "" {
		cmd := exec.Command(goBin, "env", "GOMODCACHE")
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.Output(); err == nil {
			if d := strings.TrimSpace(string(out)); d != "" {
				return d
			}
		}
	}
	if d := os.Getenv("GOMODCACHE"); d != "" {
		return d
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		return filepath.Join(filepath.SplitList(gp)[0], "pkg", "mod")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, "go", "pkg", "mod")
	}
	return ""
}

// escapePath is the module cache's case encoding: an upper-case letter
// becomes '!' and its lower case.
func escapePath(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// findGo returns the go command: on PATH, else where this server's Go
// was, else where installers put it (an MCP client often starts the server
// with a short PATH). looked lists where it looked, when it found none.
func findGo() (path string, looked []string) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	var cands []string
	if r := runtime.GOROOT(); r != "" {
		cands = append(cands, filepath.Join(r, "bin", "go"))
	}
	cands = append(cands, "/usr/local/go/bin/go", "/opt/homebrew/bin/go", "/usr/local/bin/go",
		"/home/linuxbrew/.linuxbrew/bin/go", "/usr/lib/go/bin/go", "/snap/bin/go")
	if home, err := os.UserHomeDir(); err == nil {
		sdks, _ := filepath.Glob(filepath.Join(home, "sdk", "go*", "bin", "go"))
		sort.Sort(sort.Reverse(sort.StringSlice(sdks)))
		cands = append(cands, sdks...)
	}
	for _, c := range cands {
		if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return c, nil
		}
		looked = append(looked, filepath.Dir(c))
	}
	return "", looked
}

// buildRun is one build of the agent for one output path; callers of the
// same build wait for it.
type buildRun struct {
	done  chan struct{}
	bin   *Binary
	err   error
	ended time.Time
}

var builds struct {
	mu   sync.Mutex
	runs map[string]*buildRun
}

// buildOnce builds p.out, one build at a time per output: a caller whose
// context ends stops waiting, not the build. A failed build is reported
// for failedBuildRetry before it is tried again.
func buildOnce(ctx context.Context, arch string, p plan) (*Binary, error) {
	builds.mu.Lock()
	if builds.runs == nil {
		builds.runs = map[string]*buildRun{}
	}
	run := builds.runs[p.out]
	if run != nil {
		select {
		case <-run.done:
			if run.err != nil && time.Since(run.ended) > failedBuildRetry {
				run = nil
			}
		default:
		}
	}
	if run == nil {
		run = &buildRun{done: make(chan struct{})}
		builds.runs[p.out] = run
		go func() {
			bctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
			defer cancel()
			run.bin, run.err = build(bctx, arch, p)
			run.ended = time.Now()
			close(run.done)
		}()
	}
	builds.mu.Unlock()
	select {
	case <-run.done:
		return run.bin, run.err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for sandbox-ctl for linux/%s to build: %w", arch, ctx.Err())
	}
}

// build runs `go build` of sandbox-ctl in the module source into a
// temporary directory beside p.out, checks what it made and renames it
// into place, so that p.out is whole or absent.
func build(ctx context.Context, arch string, p plan) (*Binary, error) {
	dir := filepath.Dir(p.out)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot build one: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return nil, fmt.Errorf("cannot build one: %w", err)
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "sandbox-ctl")
	cmd := exec.CommandContext(ctx, p.goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/sandbox-ctl")
	cmd.Dir = p.src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOWORK=off",
		"GOFLAGS=-mod=readonly -buildvcs=false")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(log.String())
		if len(msg) > 1500 {
			msg = "…" + msg[len(msg)-1500:]
		}
		return nil, fmt.Errorf("`go build ./cmd/sandbox-ctl` for linux/%s in %s failed (%v): %s", arch, p.src, err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	if err := Check(data, arch); err != nil {
		return nil, fmt.Errorf("the build of sandbox-ctl for linux/%s in %s made an unusable binary: %w", arch, p.src, err)
	}
	if err := os.Rename(out, p.out); err != nil {
		return nil, fmt.Errorf("cannot build one: %w", err)
	}
	return &Binary{Arch: arch, Source: FromBuild, Path: p.out, Data: data}, nil
}
