package ctlbin

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// realCtl builds the real sandbox-ctl for linux/arch once per test run.
var realCtl = struct {
	mu   sync.Mutex
	dir  string
	data map[string][]byte
}{data: map[string][]byte{}}

func ctlFor(t *testing.T, arch string) []byte {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build sandbox-ctl with")
	}
	realCtl.mu.Lock()
	defer realCtl.mu.Unlock()
	if d, ok := realCtl.data[arch]; ok {
		return d
	}
	if realCtl.dir == "" {
		d, err := os.MkdirTemp("", "ctlbin-test")
		if err != nil {
			t.Fatal(err)
		}
		realCtl.dir = d
	}
	out := filepath.Join(realCtl.dir, "sandbox-ctl-"+arch)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/sandbox-ctl")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sandbox-ctl for %s: %v\n%s", arch, err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	realCtl.data[arch] = data
	return data
}

func TestMain(m *testing.M) {
	code := m.Run()
	if realCtl.dir != "" {
		os.RemoveAll(realCtl.dir)
	}
	os.Exit(code)
}

// elfHeader is a bare 64-bit little-endian ELF header for machine, with
// one program header of type ptype when ptype is not 0.
func elfHeader(machine uint16, ptype uint32) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF")
	h[4], h[5], h[6] = 2, 1, 1 // ELFCLASS64, little-endian, version 1
	le := binary.LittleEndian
	le.PutUint16(h[0x10:], 2) // ET_EXEC
	le.PutUint16(h[0x12:], machine)
	le.PutUint32(h[0x14:], 1)
	le.PutUint16(h[0x34:], 64) // ehsize
	le.PutUint16(h[0x36:], 56) // phentsize
	le.PutUint16(h[0x3a:], 64) // shentsize
	if ptype != 0 {
		le.PutUint64(h[0x20:], 64) // phoff
		le.PutUint16(h[0x38:], 1)  // phnum
		ph := make([]byte, 56)
		le.PutUint32(ph[0:], ptype)
		le.PutUint64(ph[8:], 120) // offset
		le.PutUint64(ph[32:], 8)  // filesz
		h = append(append(h, ph...), "/lib/ld\x00"...)
	}
	return h
}

func TestCheckRefusesWhatCannotRun(t *testing.T) {
	amd64, arm64 := ctlFor(t, "amd64"), ctlFor(t, "arm64")
	if err := Check(amd64, "amd64"); err != nil {
		t.Fatalf("the real sandbox-ctl for amd64: %v", err)
	}
	if err := Check(arm64, "arm64"); err != nil {
		t.Fatalf("the real sandbox-ctl for arm64: %v", err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		arch string
		want string
	}{
		{"the other machine's build", amd64, "arm64", "an executable for x86-64 (linux/amd64), not for aarch64 (linux/arm64)"},
		{"the other machine's build, reversed", arm64, "amd64", "an executable for aarch64 (linux/arm64), not for x86-64 (linux/amd64)"},
		{"an ELF header for the other machine", elfHeader(183, 0), "amd64", "not for x86-64"},
		{"an ELF header for riscv", elfHeader(243, 0), "arm64", "an executable for riscv, not for aarch64"},
		{"truncated to half", amd64[:len(amd64)/2], "amd64", "truncated"},
		{"truncated to its header", amd64[:200], "amd64", "truncated"},
		{"cut inside the ELF header", amd64[:30], "amd64", "truncated: 30 bytes"},
		{"the other machine's build, truncated", amd64[:len(amd64)/2], "arm64", "an executable for x86-64"},
		{"not ELF", []byte("not a program\n"), "amd64", `not a linux executable (not ELF: it starts with "not a program\n`},
		{"a script", []byte("#!/bin/sh\necho hi\n"), "arm64", "not a linux executable"},
		{"empty", nil, "amd64", "empty"},
		{"dynamically linked", elfHeader(62, 3), "amd64", "dynamically linked"},
		{"a bare header, not a Go program", elfHeader(62, 0), "amd64", "not sandbox-ctl"},
		{"an architecture without a build", amd64, "riscv64", "linux/amd64 and linux/arm64 only"},
	} {
		err := Check(tc.data, tc.arch)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// hooks points the package's sources at a test's own: the executable in
// a fresh directory, the given embedded agents, no Go and no source
// unless the test sets them, and a fresh cache.
func hooks(t *testing.T, emb map[string][]byte) (besideDir, cacheDir string) {
	t.Helper()
	besideDir, cacheDir = t.TempDir(), t.TempDir()
	exe := filepath.Join(besideDir, "sandbox-mcp")
	if err := os.WriteFile(exe, []byte("server"), 0o755); err != nil {
		t.Fatal(err)
	}
	saved := []func(){}
	save := func(restore func()) { saved = append(saved, restore) }
	e, x, v, ov, c, g, s := embedded, executable, versionOf, ownVersion, cacheRoot, lookGo, sourceFile
	save(func() {
		embedded, executable, versionOf, ownVersion, cacheRoot, lookGo, sourceFile = e, x, v, ov, c, g, s
	})
	embedded = func(arch string) []byte { return emb[arch] }
	executable = func() (string, error) { return exe, nil }
	ownVersion = func() string { return "(devel)" }
	cacheRoot = func() (string, error) { return cacheDir, nil }
	lookGo = func() (string, []string) { return "", []string{"/nowhere"} }
	sourceFile = func() string { return "github.com/sandbox-mcp/sandbox-mcp/agent/ctlbin/build.go" }
	selfHash.once, selfHash.sum, selfHash.err = sync.Once{}, "", nil
	t.Setenv(EnvDir, "")
	t.Cleanup(func() {
		for _, f := range saved {
			f()
		}
		selfHash.once, selfHash.sum, selfHash.err = sync.Once{}, "", nil
	})
	return besideDir, cacheDir
}

func TestOverridesAreCheckedAndRefusedOnesFallThrough(t *testing.T) {
	amd64, arm64 := ctlFor(t, "amd64"), ctlFor(t, "arm64")
	beside, _ := hooks(t, map[string][]byte{"arm64": arm64})
	env := t.TempDir()
	t.Setenv(EnvDir, env)
	// The override for arm64 is the amd64 build; the one beside the
	// server is cut short: both are refused, and the embedded one used.
	os.WriteFile(filepath.Join(env, "sandbox-ctl-linux-arm64"), amd64, 0o755)
	os.WriteFile(filepath.Join(beside, "sandbox-ctl-linux-arm64"), arm64[:len(arm64)/3], 0o755)
	r := Resolve(context.Background(), "arm64", false)
	if r.Binary == nil || r.Binary.Source != FromEmbedded || r.Binary.String() != "embedded in the server" {
		t.Fatalf("arm64: %+v", r)
	}
	if len(r.Refused) != 2 || !strings.Contains(r.Refused[0].String(), filepath.Join(env, "sandbox-ctl-linux-arm64")+" refused: an executable for x86-64") ||
		!strings.Contains(r.Refused[1].String(), "truncated") {
		t.Fatalf("arm64 refusals: %v", r.Refused)
	}

	// A good override wins over the embedded one.
	os.WriteFile(filepath.Join(beside, "sandbox-ctl-linux-arm64"), arm64, 0o755)
	if r := Resolve(context.Background(), "arm64", false); r.Binary == nil || r.Binary.Source != FromBeside ||
		r.Binary.Path != filepath.Join(beside, "sandbox-ctl-linux-arm64") || len(r.Refused) != 1 {
		t.Fatalf("arm64 with a good one beside: %+v", r)
	}

	// amd64: nothing embedded, a non-ELF in linux_amd64/, no Go: none,
	// and the error says why for each source and what to do.
	os.MkdirAll(filepath.Join(env, "linux_amd64"), 0o755)
	os.WriteFile(filepath.Join(env, "linux_amd64", "sandbox-ctl"), []byte("not a program\n"), 0o755)
	b, err := Find(context.Background(), "amd64")
	if b != nil || err == nil {
		t.Fatalf("amd64: %v, %v", b, err)
	}
	for _, want := range []string{"no sandbox-ctl for linux/amd64", "linux_amd64/sandbox-ctl refused: not a linux executable",
		"none is embedded", "module source is not on this machine", "make build", "go install"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("amd64 error lacks %q: %v", want, err)
		}
	}
	if b, err := Find(context.Background(), "riscv64"); b != nil || err == nil || !strings.Contains(err.Error(), "linux/amd64 and linux/arm64 only") {
		t.Fatalf("riscv64: %v, %v", b, err)
	}
}

func TestOverrideOfAnotherVersionIsRefused(t *testing.T) {
	arm64 := ctlFor(t, "arm64")
	beside, _ := hooks(t, map[string][]byte{"arm64": arm64})
	ownVersion = func() string { return "v1.3.0" }
	versionOf = func([]byte) string { return "v1.2.0" }
	os.WriteFile(filepath.Join(beside, "sandbox-ctl-linux-arm64"), arm64, 0o755)
	r := Resolve(context.Background(), "arm64", false)
	if r.Binary == nil || r.Binary.Source != FromEmbedded || len(r.Refused) != 1 ||
		!strings.Contains(r.Refused[0].Why, "built from sandbox-mcp v1.2.0, but this server is v1.3.0") {
		t.Fatalf("%+v", r)
	}
	versionOf = func([]byte) string { return "(devel)" }
	if r := Resolve(context.Background(), "arm64", false); r.Binary == nil || r.Binary.Source != FromBeside {
		t.Fatalf("an override without a version: %+v", r)
	}
}

func TestModuleCacheSourceIsFoundByVersion(t *testing.T) {
	hooks(t, nil)
	mc := t.TempDir()
	t.Setenv("GOMODCACHE", mc)
	ownVersion = func() string { return "v1.2.3" }
	// Upper case is escaped in the module cache.
	src := filepath.Join(mc, "github.com", "sandbox-mcp", "sandbox-mcp@v1.2.3")
	os.MkdirAll(filepath.Join(src, "cmd", "sandbox-ctl"), 0o755)
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module "+ModulePath+"\n\ngo 1.26\n"), 0o644)
	os.WriteFile(filepath.Join(src, "cmd", "sandbox-ctl", "main.go"), []byte("package main\n"), 0o644)
	dir, key, err := moduleSource("")
	if err != nil || dir != src || key != "v1.2.3" {
		t.Fatalf("moduleSource = %q, %q, %v", dir, key, err)
	}
	// With no Go, Resolve says that it cannot build it, and where the
	// source is.
	r := Resolve(context.Background(), "amd64", false)
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "cannot build one from the module source in "+src+": no Go toolchain found (looked on PATH and in /nowhere)") {
		t.Fatalf("%v", err)
	}
	// Once built, the agent of a release is found in the cache without
	// its source or Go.
	arm64 := ctlFor(t, "arm64")
	_, cache := hooks(t, nil)
	ownVersion = func() string { return "v1.2.3" }
	t.Setenv("GOMODCACHE", t.TempDir())
	out := filepath.Join(cache, "sandbox-mcp", "agents", "v1.2.3", "sandbox-ctl-linux-arm64")
	os.MkdirAll(filepath.Dir(out), 0o755)
	os.WriteFile(out, arm64, 0o755)
	if r := Resolve(context.Background(), "arm64", false); r.Binary == nil || r.Binary.Source != FromBuild || r.Binary.Path != out {
		t.Fatalf("a release's cached agent: %+v", r)
	}
	if got := escapePath("github.com/BurntSushi/toml"); got != "github.com/!burnt!sushi/toml" {
		t.Fatalf("escapePath: %q", got)
	}
}

func TestAGoInstallBuildsItsAgentOnceIntoTheCache(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	_, cache := hooks(t, nil)
	lookGo = func() (string, []string) { return goBin, nil }
	_, file, _, _ := runtime.Caller(0)
	if !filepath.IsAbs(file) {
		t.Skip("built with -trimpath: no checkout to build from")
	}
	sourceFile = func() string { return file }

	r := Resolve(context.Background(), "arm64", false)
	if r.Binary != nil || !strings.Contains(r.Later, "built on first use from the module source in ") || r.Err() != nil {
		t.Fatalf("before the build: %+v", r)
	}
	b, err := Find(context.Background(), "arm64")
	if err != nil {
		t.Fatal(err)
	}
	if b.Source != FromBuild || !strings.HasPrefix(b.Path, filepath.Join(cache, "sandbox-mcp", "agents", "dev-")) || Check(b.Data, "arm64") != nil {
		t.Fatalf("built: %s (%d bytes)", b, len(b.Data))
	}
	if ents, _ := os.ReadDir(filepath.Dir(b.Path)); len(ents) != 1 {
		t.Fatalf("the cache holds %v, want the binary only", ents)
	}
	// The next server process finds it in the cache, without Go.
	lookGo = func() (string, []string) { return "", nil }
	if r := Resolve(context.Background(), "arm64", false); r.Binary == nil || r.Binary.Path != b.Path {
		t.Fatalf("from the cache: %+v", r)
	}
	// A damaged cache file is not used.
	os.WriteFile(b.Path, b.Data[:1000], 0o755)
	if r := Resolve(context.Background(), "arm64", false); r.Binary != nil || r.Err() == nil {
		t.Fatalf("a damaged cache: %+v", r)
	}
}

func TestAFailedBuildSaysWhy(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("a shell script stands in for go")
	}
	hooks(t, nil)
	fake := filepath.Join(t.TempDir(), "go")
	os.WriteFile(fake, []byte("#!/bin/sh\n[ \"$1\" = env ] && exit 1\necho 'cmd/sandbox-ctl/main.go:1: boom' >&2\nexit 1\n"), 0o755)
	lookGo = func() (string, []string) { return fake, nil }
	_, file, _, _ := runtime.Caller(0)
	if !filepath.IsAbs(file) {
		t.Skip("built with -trimpath")
	}
	sourceFile = func() string { return file }
	_, err := Find(context.Background(), "amd64")
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("%v", err)
	}
}
