package main

import (
	"errors"
	"strings"
	"testing"
)

func errString(t *testing.T, err error) string {
	t.Helper()
	var ee *exitError
	if !errors.As(err, &ee) {
		t.Fatalf("not an exitError: %v", err)
	}
	if ee.code != 1 {
		t.Errorf("exit code %d, want 1", ee.code)
	}
	return ee.text
}

func TestErrorFormsByVersion(t *testing.T) {
	type tc struct{ old, new string }
	cases := map[string]struct {
		mk   func(a *app) error
		want tc
	}{
		"get not found": {func(a *app) error { return a.errGetNotFound("x") }, tc{
			`Error: notFound: "get failed: container x not found"`, `Error: get failed: container x not found`}},
		"not running": {func(a *app) error { return a.errNotRunning("web") }, tc{
			`Error: invalidState: "container web is not running"`, `Error: container web is not running`}},
		"exists": {func(a *app) error { return a.errExists("dup") }, tc{
			`Error: exists: "container with id dup already exists"`, `Error: container with id dup already exists`}},
		"volume not found": {func(a *app) error { return a.errVolumeNotFound("nope") }, tc{
			// The server's VolumeError, sent as invalidArgument (XPCServer.swift@0.9.0).
			`Error: invalidArgument: "volume 'nope' not found"`, `Error: volume not found: nope`}},
	}
	for name, c := range cases {
		old := &app{v: MustVersion("0.9.0")}
		if got := errString(t, c.mk(old)); got != c.want.old {
			t.Errorf("%s 0.9.0: %q, want %q", name, got, c.want.old)
		}
		nw := &app{v: MustVersion("1.5.0")}
		if got := errString(t, c.mk(nw)); got != c.want.new {
			t.Errorf("%s 1.5.0: %q, want %q", name, got, c.want.new)
		}
	}
	// 0.10–0.12 already print the LocalizedError form.
	if got := errString(t, (&app{v: MustVersion("0.10.0")}).errGetNotFound("x")); got != "Error: get failed: container x not found" {
		t.Errorf("0.10.0: %q", got)
	}
}

func TestXPCErrors(t *testing.T) {
	got := errString(t, (&app{v: MustVersion("1.2.0")}).errXPC("failed to list containers"))
	want := "Error: internalError: \"failed to list containers\" (cause: \"interrupted: \"XPC connection error: Connection invalid\"\")\n" +
		"Ensure container system service has been started with `container system start`."
	if got != want {
		t.Errorf("1.x: %q", got)
	}
	got = errString(t, (&app{v: MustVersion("0.9.0")}).errXPC("failed to list containers"))
	want = "Error: interrupted: \"internalError: \"failed to list containers\" (cause: \"interrupted: \"XPC connection error: Connection invalid\"\")\n" +
		"Ensure container system service has been started with `container system start`.\""
	if got != want {
		t.Errorf("0.x: %q", got)
	}
}

func TestAggregate(t *testing.T) {
	got := errString(t, aggregate([]string{opNotFound("stop", "baz"), opNotFound("stop", "bar")}))
	want := "Error: internalError: \"failed to stop container\" (cause: \"notFound: \"container with ID baz not found\"\")\n" +
		"internalError: \"failed to stop container\" (cause: \"notFound: \"container with ID bar not found\"\")"
	if got != want {
		t.Errorf("got %q", got)
	}
}

// TestSystemDown checks the not-started state without touching podman.
func TestSystemDown(t *testing.T) {
	for _, v := range []string{"0.9.0", "1.2.0", "1.5.0"} {
		a, out, errb := testApp(v)
		a.forced = "unregistered"
		if code := a.finish(a.dispatch([]string{"ls"})); code != 1 || !strings.Contains(errb.String(), "XPC connection error") ||
			!strings.Contains(errb.String(), "`container system start`") || out.Len() != 0 {
			t.Errorf("%s ls: %d %q", v, code, errb.String())
		}
		a, out, _ = testApp(v)
		a.forced = "unregistered"
		if code := a.finish(a.dispatch([]string{"system", "status"})); code != 1 ||
			out.String() != "apiserver is not running and not registered with launchd\n" {
			t.Errorf("%s status: %d %q", v, code, out.String())
		}
		a, out, _ = testApp(v)
		a.forced = "stopped"
		if code := a.finish(a.dispatch([]string{"--version"})); code != 0 || !strings.HasPrefix(out.String(), "container CLI version "+v) {
			t.Errorf("%s --version: %d %q", v, code, out.String())
		}
	}
	a, out, _ := testApp("1.5.0")
	a.forced = "unregistered"
	if code := a.finish(a.dispatch([]string{"system", "status", "--format", "json"})); code != 1 || out.String() != "{\"status\":\"unregistered\"}\n" {
		t.Errorf("json status: %d %q", code, out.String())
	}
	a, _, errb := testApp("0.9.0")
	if code := a.finish(a.dispatch([]string{"system", "status", "--format", "json"})); code != 64 || !strings.HasPrefix(errb.String(), "Error: Unknown option '--format'") {
		t.Errorf("0.9 --format: %d %q", code, errb.String())
	}
	a, _, errb = testApp("1.5.0")
	a.forced = "unregistered"
	if code := a.finish(a.dispatch([]string{"run", "-d", "mcp-dev"})); code != 1 || !strings.HasPrefix(errb.String(), `Error: interrupted: "XPC connection error: Connection invalid"`) {
		t.Errorf("run when down: %d %q", code, errb.String())
	}
}

// TestXPCErrorsByCommand: with the apiserver down, each command fails on
// its first request, worded by the client that sends it, with the hint
// Application.swift adds (samples §6.1).
func TestXPCErrorsByCommand(t *testing.T) {
	const hint = "\nEnsure container system service has been started with `container system start`.\n"
	conn := `(cause: "interrupted: "XPC connection error: Connection invalid"")`
	for _, tc := range []struct {
		version string
		argv    []string
		want    string
	}{
		// ContainerClient.list (ContainerClient.get goes through it).
		{"1.2.0", []string{"ls"}, `Error: internalError: "failed to list containers" ` + conn + hint},
		{"1.2.0", []string{"start", "x"}, `Error: internalError: "failed to list containers" ` + conn + hint},
		{"1.2.0", []string{"exec", "x", "ls"}, `Error: internalError: "failed to list containers" ` + conn + hint},
		// One request per id, in an AggregateError (ContainerStop.swift@0.11.0+).
		{"1.2.0", []string{"stop", "a", "b"}, `Error: internalError: "failed to stop container" ` + conn + "\n" +
			`internalError: "failed to stop container" ` + conn + hint},
		// Before 0.11.0 stop lists first.
		{"0.10.0", []string{"stop", "a"}, `Error: internalError: "failed to list containers" ` + conn + hint},
		{"1.2.0", []string{"delete", "a", "a"}, `Error: internalError: "failed to delete container" ` + conn + hint},
		{"0.10.0", []string{"kill", "a"}, `Error: internalError: "failed to kill container" ` + conn + hint},
		{"1.2.0", []string{"logs", "x"}, `Error: internalError: "failed to get logs for container x" ` + conn + hint},
		// ClientImage.list, ClientVolume and the health check do not wrap it.
		{"1.2.0", []string{"image", "list"}, `Error: interrupted: "XPC connection error: Connection invalid"` + hint},
		{"1.2.0", []string{"volume", "list"}, `Error: interrupted: "XPC connection error: Connection invalid"` + hint},
		{"1.2.0", []string{"run", "-d", "alpine"}, `Error: interrupted: "XPC connection error: Connection invalid"` + hint},
		// 0.x: the whole text is wrapped in interrupted: "…" (issue #829).
		{"0.9.0", []string{"image", "list"}, `Error: interrupted: "interrupted: "XPC connection error: Connection invalid"` +
			"\nEnsure container system service has been started with `container system start`.\"\n"},
	} {
		a, out, errb := testApp(tc.version)
		a.forced = "unregistered"
		if code := a.finish(a.dispatch(tc.argv)); code != 1 || errb.String() != tc.want || out.Len() != 0 {
			t.Errorf("%s %v: %d %q\nwant %q", tc.version, tc.argv, code, errb.String(), tc.want)
		}
	}
}
