package enginetest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseRuntimes(t *testing.T) {
	for list, want := range map[string][]entry{
		"":                         nil,
		" , ":                      nil,
		"podman,docker":            {{runtime: "podman"}, {runtime: "docker"}},
		"container":                {{runtime: "container"}},
		"container@0.9.0":          {{runtime: "container", version: "0.9.0"}},
		"container@real":           {{runtime: "container", real: true}},
		" podman , container@real": {{runtime: "podman"}, {runtime: "container", real: true}},
		"container,container@0.9.0,container@real": {
			{runtime: "container"}, {runtime: "container", version: "0.9.0"}, {runtime: "container", real: true}},
	} {
		got, err := parseRuntimes(list)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseRuntimes(%q) = %+v, %v; want %+v", list, got, err, want)
		}
	}
	for _, bad := range []string{"containers", "container@", "container@Real", "container-real", "container@0.9.x", "lxc", "podman,nope"} {
		if got, err := parseRuntimes(bad); err == nil || !strings.Contains(err.Error(), EnvRuntimes) {
			t.Errorf("parseRuntimes(%q) = %+v, %v; want an error naming %s", bad, got, err, EnvRuntimes)
		}
	}
}

// fakeContainerOnPath puts an executable named container first on PATH.
func fakeContainerOnPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "container")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return bin
}

// countStandInBuilds replaces the stand-in's build for the test's length
// by one that counts its calls and builds nothing.
func countStandInBuilds(t *testing.T) *int {
	t.Helper()
	builds := new(int)
	oldState, oldBuild := standIn, buildStandInFunc
	standIn = &standInBuild{}
	buildStandInFunc = func() (string, error) {
		*builds++
		return filepath.Join(t.TempDir(), "container"), nil
	}
	t.Cleanup(func() { standIn, buildStandInFunc = oldState, oldBuild })
	return builds
}

// TestRealTargetBuildsNoStandIn: container@real is Apple's CLI on PATH,
// with no stand-in built and nothing added to a server's environment.
func TestRealTargetBuildsNoStandIn(t *testing.T) {
	builds := countStandInBuilds(t)
	bin := fakeContainerOnPath(t)
	t.Setenv(EnvRuntimes, RealContainer)
	t.Setenv("SANDBOX_MCP_TEST_IMAGE", "")

	tgs := Targets(t)
	if len(tgs) != 1 {
		t.Fatalf("targets %+v", tgs)
	}
	tg := tgs[0]
	if tg.Name != "container-real" || tg.Runtime != "container" || tg.Image != "mcp-dev" || !tg.RealContainer || tg.StandIn || len(tg.Env) != 0 {
		t.Fatalf("real target %+v", tg)
	}
	rt := tg.New()
	if rt.Kind() != "container" {
		t.Fatalf("driver kind %q", rt.Kind())
	}
	if b, ok := rt.(interface{ Binary() string }); ok && b.Binary() != bin {
		t.Fatalf("driver runs %q, want %q", b.Binary(), bin)
	}
	if got := RealContainerTarget(t); !got.RealContainer {
		t.Fatalf("RealContainerTarget: %+v", got)
	}
	if StandInListed() {
		t.Fatal("StandInListed with only container@real listed")
	}
	if *builds != 0 {
		t.Fatalf("the real target built the stand-in %d times", *builds)
	}
}

// TestStandInTargetsStayStandIns: "container" and "container@<version>"
// are still the stand-in, built once and marked so, and they are what
// StandInListed sees.
func TestStandInTargetsStayStandIns(t *testing.T) {
	builds := countStandInBuilds(t)
	fakeContainerOnPath(t)
	t.Setenv(EnvRuntimes, "container,container@0.9.0,"+RealContainer)
	if !StandInListed() {
		t.Fatal("StandInListed with container listed")
	}
	// An older release runs only the listed suites while the newest runs.
	if tgs := Targets(t); len(tgs) != 2 || tgs[0].Name != "container" || !tgs[1].RealContainer {
		t.Fatalf("a suite not listed in DialectSuites: %+v", tgs)
	}
	DialectSuites[t.Name()] = true
	t.Cleanup(func() { delete(DialectSuites, t.Name()) })
	tgs := Targets(t)
	if len(tgs) != 3 || *builds != 1 {
		t.Fatalf("%d targets, %d builds of the stand-in: %+v", len(tgs), *builds, tgs)
	}
	for i, want := range []string{"container", "container-0.9.0"} {
		tg := tgs[i]
		if tg.Name != want || !tg.StandIn || tg.RealContainer || len(tg.Env) == 0 || !strings.HasPrefix(tg.Env[0], "PATH=") {
			t.Errorf("stand-in target %d: %+v", i, tg)
		}
	}
	if tg := tgs[2]; !tg.RealContainer || tg.StandIn {
		t.Errorf("real target: %+v", tg)
	}
	// Listed alone, an older release runs every suite.
	delete(DialectSuites, t.Name())
	t.Setenv(EnvRuntimes, "container@0.9.0")
	if tgs := Targets(t); len(tgs) != 1 || tgs[0].Name != "container-0.9.0" {
		t.Errorf("an older release listed alone: %+v", tgs)
	}
	// A load suite runs on the stand-in only when no real engine is listed,
	// and always on Apple's real CLI.
	LoadSuites[t.Name()] = true
	t.Cleanup(func() { delete(LoadSuites, t.Name()) })
	t.Setenv(EnvRuntimes, "container,podman,"+RealContainer)
	if tgs := Targets(t); len(tgs) != 2 || tgs[0].Name != "podman" || !tgs[1].RealContainer {
		t.Errorf("a load suite with podman listed: %+v", tgs)
	}
	t.Setenv(EnvRuntimes, "container")
	if tgs := Targets(t); len(tgs) != 1 || tgs[0].Name != "container" {
		t.Errorf("a load suite with the stand-in listed alone: %+v", tgs)
	}
	t.Setenv(EnvRuntimes, "podman,"+RealContainer)
	if StandInListed() {
		t.Fatal("StandInListed without the stand-in listed")
	}
}

func TestSkipOnReal(t *testing.T) {
	ran := false
	t.Run("real", func(t *testing.T) {
		Target{RealContainer: true}.SkipOnReal(t, "reads podman's storage")
		ran = true
	})
	if ran {
		t.Fatal("SkipOnReal did not skip the real target")
	}
	t.Run("stand-in", func(t *testing.T) {
		Target{StandIn: true}.SkipOnReal(t, "reads podman's storage")
		ran = true
	})
	if !ran {
		t.Fatal("SkipOnReal skipped the stand-in")
	}
}

// TestStandInReleases: one release stands for each set of features the
// listed targets do not run, the first release that has it.
func TestStandInReleases(t *testing.T) {
	countStandInBuilds(t)
	for list, want := range map[string][]string{
		"podman,container,container@0.9.0": {"container-0.8.0", "container-0.10.0", "container-0.11.0", "container-1.0.0", "container-1.1.0"},
		"container":                        {"container-0.8.0", "container-0.9.0", "container-0.10.0", "container-0.11.0", "container-1.0.0", "container-1.1.0"},
		"container@1.2":                    {"container-0.8.0", "container-0.9.0", "container-0.10.0", "container-0.11.0", "container-1.0.0", "container-1.2.1"}, // 1.2.0 runs as 1.1.0 would
	} {
		t.Setenv(EnvRuntimes, list)
		var got []string
		for _, tg := range StandInReleases(t) {
			got = append(got, tg.Name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %q, want %q", list, got, want)
		}
	}
}

// TestDockerBesidePodmanRunsTheDialectSuites: with podman listed, docker
// and the stand-in run only the suites in DialectSuites (unless
// SANDBOX_MCP_TEST_ALL_SUITES is set); listed alone they run every suite,
// and podman always does.
func TestDockerBesidePodmanRunsTheDialectSuites(t *testing.T) {
	names := func() []string {
		var out []string
		for _, tg := range Targets(t) {
			out = append(out, tg.Name)
		}
		return out
	}
	t.Setenv(EnvAllSuites, "")
	t.Setenv(EnvRuntimes, "podman,docker")
	if got := names(); !reflect.DeepEqual(got, []string{"podman"}) {
		t.Errorf("a suite not in DialectSuites, podman and docker listed: %v, want podman alone", got)
	}
	t.Setenv(EnvAllSuites, "1")
	if got := names(); !reflect.DeepEqual(got, []string{"podman", "docker"}) {
		t.Errorf("with %s set: %v, want both", EnvAllSuites, got)
	}
	t.Setenv(EnvAllSuites, "")
	t.Setenv(EnvRuntimes, "docker")
	if got := names(); !reflect.DeepEqual(got, []string{"docker"}) {
		t.Errorf("docker listed alone: %v", got)
	}
	// The stand-in's newest release likewise; a test about it alone
	// (TargetsOf) has it whatever podman runs.
	t.Setenv(EnvRuntimes, "podman,container")
	if got := names(); !reflect.DeepEqual(got, []string{"podman"}) {
		t.Errorf("a suite not in DialectSuites, podman and the stand-in listed: %v, want podman alone", got)
	}
	if tgs := TargetsOf(t, "container"); len(tgs) != 1 || !tgs[0].StandIn {
		t.Errorf("TargetsOf(container): %+v", tgs)
	}
	DialectSuites[t.Name()] = true
	t.Cleanup(func() { delete(DialectSuites, t.Name()) })
	if got := names(); !reflect.DeepEqual(got, []string{"podman", "container"}) {
		t.Errorf("a suite in DialectSuites, podman and the stand-in listed: %v", got)
	}
	t.Setenv(EnvRuntimes, "docker,podman")
	if got := names(); !reflect.DeepEqual(got, []string{"docker", "podman"}) {
		t.Errorf("a suite in DialectSuites: %v, want both", got)
	}
	// An older release beside the newest runs a dialect suite, but leaves
	// those of NewestReleaseSuites to the newest.
	countStandInBuilds(t)
	t.Setenv(EnvRuntimes, "podman,container,container@0.9.0")
	if got := names(); !reflect.DeepEqual(got, []string{"podman", "container", "container-0.9.0"}) {
		t.Errorf("a suite in DialectSuites, two releases listed: %v, want both releases", got)
	}
	NewestReleaseSuites[t.Name()] = true
	t.Cleanup(func() { delete(NewestReleaseSuites, t.Name()) })
	if got := names(); !reflect.DeepEqual(got, []string{"podman", "container"}) {
		t.Errorf("a suite in NewestReleaseSuites, two releases listed: %v, want the newest alone", got)
	}
}
