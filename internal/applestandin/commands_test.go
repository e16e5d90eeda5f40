package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ctrPodman is a fake podman holding containers as files c_<name> (their
// inspect JSON) and logs as log_<name> beside it: inspect, ps, kill,
// stop, rm and logs act on them.
const ctrPodman = `#!/bin/sh
d=$(dirname "$0")
state() { sed -n 's/.*"Status":"\([a-z]*\)".*/\1/p' "$d/c_$1"; }
case "$1" in
container) shift 2
  out=""; rc=0
  for id in "$@"; do
    if [ -e "$d/c_$id" ]; then out="$out${out:+,}$(cat "$d/c_$id")"; else echo "Error: no such container $id" >&2; rc=125; fi
  done
  [ -n "$out" ] && echo "[$out]"
  exit $rc;;
ps) all=0; for a in "$@"; do [ "$a" = -a ] && all=1; done
  for f in "$d"/c_*; do [ -e "$f" ] || continue; n=${f##*/c_}
    if [ $all = 1 ] || [ "$(state $n)" = running ]; then echo "$n"; fi; done;;
kill) echo "kill $3 $4" >>"$d/calls";;
stop) sed -i 's/"Status":"running","Running":true/"Status":"exited","Running":false/' "$d/c_$4";;
rm) for a in "$@"; do [ -e "$d/c_$a" ] && rm "$d/c_$a"; done; exit 0;;
logs) cat "$d/log_$2";;
cp|export) exit 0;;
*) echo "unexpected: $*" >&2; exit 1;;
esac
`

// ctrApp is the stand-in of version v on ctrPodman with a running
// container "web" (created first) and a stopped "old" that once ran.
func ctrApp(t *testing.T, v string) (*app, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	a := fakeApp(t, ctrPodman)
	a.v = MustVersion(v)
	d := filepath.Dir(a.eng.bin)
	for name, js := range map[string]string{
		"web": `{"Id":"1","Name":"web","Created":"2026-01-01T00:00:00Z","State":{"Status":"running","Running":true,"StartedAt":"2026-01-01T00:00:01Z"}}`,
		"old": `{"Id":"2","Name":"old","Created":"2026-01-02T00:00:00Z","State":{"Status":"exited","Running":false,"StartedAt":"2026-01-02T00:00:01Z"}}`,
	} {
		if err := os.WriteFile(filepath.Join(d, "c_"+name), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return a, a.stdout.(*bytes.Buffer), a.stderr.(*bytes.Buffer)
}

// TestContainerCommandTexts: what stop, kill, delete, start, inspect and
// list print per release, on stdout and stderr, with the exit code
// (sources cited per case; samples §6 where captured).
func TestContainerCommandTexts(t *testing.T) {
	notFound := func(verb, id string) string {
		return `internalError: "failed to ` + verb + ` container" (cause: "notFound: "container with ID ` + id + ` not found"")`
	}
	for _, tc := range []struct {
		version  string
		argv     []string
		code     int
		out, err string
	}{
		// ContainerStop.swift@0.9.0/0.10.0: missing ids are left out silently.
		{"0.9.0", []string{"stop", "web", "nosuch"}, 0, "web\n", ""},
		{"0.10.0", []string{"stop", "nosuch"}, 0, "", ""},
		// From 0.11.0 every id is sent (samples §6: 1.3.1 capture).
		{"1.2.0", []string{"stop", "nosuch"}, 1, "", "Error: " + notFound("stop", "nosuch") + "\n"},
		// Stopping a stopped container succeeds (ContainersService.stop is idempotent).
		{"1.2.0", []string{"stop", "old"}, 0, "old\n", ""},
		// --all takes every container, running or not.
		{"1.2.0", []string{"stop", "--all"}, 0, "old\nweb\n", ""},
		// ContainerKill.swift@0.9.0: only running ones, missing and stopped left out.
		{"0.9.0", []string{"kill", "nosuch", "old", "web"}, 0, "web\n", ""},
		// From 0.10.0 each id in order; a stopped one fails in getClient.
		{"0.10.0", []string{"kill", "nosuch", "old", "web"}, 1, "web\n", "Error: " + notFound("kill", "nosuch") + "\n" +
			`internalError: "failed to kill container" (cause: "invalidState: "no sandbox client exists: container is stopped"")` + "\n"},
		{"1.2.0", []string{"kill", "old"}, 1, "", `Error: internalError: "failed to kill container" (cause: "invalidState: "no runtime client exists: container is stopped"")` + "\n"},
		// ContainerDelete.swift@0.9.0: a running one without --force is logged, then one error.
		{"0.9.0", []string{"delete", "web"}, 1, "", "failed to delete container web: invalidState: \"container is running\"\n" +
			`Error: internalError: "delete failed for one or more containers: ["web"]"` + "\n"},
		{"0.10.0", []string{"delete", "web"}, 1, "", `Error: invalidState: "container is running"` + "\n"},
		// samples §6: 1.2.0 capture.
		{"1.2.0", []string{"delete", "web"}, 1, "", `Error: internalError: "failed to delete container" (cause: "invalidState: "container web is running and can not be deleted"")` + "\n"},
		{"1.2.0", []string{"delete", "old", "old"}, 0, "old\n", ""},
		// ContainerStart.swift: a running container is printed; attaching to it is refused.
		{"1.2.0", []string{"start", "web"}, 0, "web\n", ""},
		{"1.2.0", []string{"start", "-a", "web"}, 1, "", "Error: attach is currently unsupported on already running containers\n"},
		{"0.9.0", []string{"start", "-a", "web"}, 1, "", `Error: invalidArgument: "attach is currently unsupported on already running containers"` + "\n"},
		// ContainerInspect.swift@1.0.0: missing ids sorted, joined by ", ".
		{"1.2.0", []string{"inspect", "zz", "web", "aa", "zz"}, 1, "", "Error: container not found: aa, zz\n"},
		// ContainerList.swift@0.9.0: JSON lists every container, --all or not.
		{"0.9.0", []string{"ls", "-q"}, 0, "web\n", ""},
		// ContainerLogs.swift@0.9.0: the CLI's own get fails, wrapped as invalidArgument.
		{"0.9.0", []string{"logs", "nosuch"}, 1, "", `Error: invalidArgument: "failed to fetch container logs for nosuch: notFound: "get failed: container nosuch not found""` + "\n"},
		// samples §6.2: 1.2.0 capture.
		{"1.2.0", []string{"logs", "nosuch"}, 1, "", sample(t, "stderr-logs-missing-1.2.0.txt")},
	} {
		a, out, errb := ctrApp(t, tc.version)
		code := a.finish(a.dispatch(tc.argv))
		if code != tc.code || out.String() != tc.out || errb.String() != tc.err {
			t.Errorf("%s %v: %d\nstdout %q\nstderr %q\nwant %d %q %q", tc.version, tc.argv, code, out.String(), errb.String(), tc.code, tc.out, tc.err)
		}
	}
	a, out, _ := ctrApp(t, "0.9.0")
	if code := a.finish(a.dispatch([]string{"ls", "--format", "json"})); code != 0 || !strings.Contains(out.String(), `"status":"stopped"`) {
		t.Errorf("0.9.0 ls --format json must list stopped containers too: %q", out.String())
	}
}

// TestLogText follows ContainerLogs.tail (0.8.0–1.2.2): the whole log
// trimmed of newlines plus one, or the last n non-empty lines.
func TestLogText(t *testing.T) {
	for _, tc := range []struct {
		log  string
		n    int
		want string
	}{
		{"", -1, ""},
		{"\n\na\n\nb\n\n", -1, "a\n\nb\n"},
		{"a\r\nb\n\nc\n", 2, "b\nc\n"},
		{"a\nb\n", 5, "a\nb\n"},
		{"\n\n", 1, ""},
	} {
		if got := logText(tc.log, tc.n); got != tc.want {
			t.Errorf("logText(%q, %d) = %q, want %q", tc.log, tc.n, got, tc.want)
		}
	}
	var b bytes.Buffer
	w := &nonEmptyLines{w: &b, skip: 4}
	_, _ = w.Write([]byte("old\nx\n\n"))
	_, _ = w.Write([]byte("y\r\nz"))
	if b.String() != "x\ny\n" {
		t.Errorf("follow: %q", b.String())
	}
}

// TestFileCommandTexts: cp (Container/ContainerCopy.swift, 1.0.0–1.2.2),
// export (ContainerExport.swift, ContainersService.exportRootfs) and
// exec -it without a terminal (ContainerExec.swift, ProcessIO.create).
func TestFileCommandTexts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version  string
		argv     []string
		code     int
		out, err string
	}{
		{"1.2.0", []string{"cp", file, "web:/tmp/"}, 0, "web:/tmp/f.txt\n", ""},
		{"1.2.0", []string{"cp", file, "web:/tmp/g"}, 0, "web:/tmp/g\n", ""},
		// 1.0.0 prints nothing.
		{"1.0.0", []string{"cp", file, "web:/tmp/"}, 0, "", ""},
		{"1.2.0", []string{"cp", "web:/etc/hosts", dir}, 0, filepath.Join(dir, "hosts") + "\n", ""},
		{"1.2.0", []string{"cp", file, dir}, 1, "", "Error: one of source or destination must be a container reference (container_id:path)\n"},
		{"1.2.0", []string{"cp", "web:/a", "old:/b"}, 1, "", "Error: copying between containers is not supported\n"},
		{"1.2.0", []string{"cp", "web:rel", dir}, 1, "", "Error: invalid path given: web:rel\n"},
		{"1.2.0", []string{"cp", "/nonexistent/x", "web:/x"}, 1, "", "Error: source path does not exist: /nonexistent/x\n"},
		{"1.2.0", []string{"cp", file, "old:/x"}, 1, "", `Error: failed to copy into container old (cause: "invalidState: "container old is not running"")` + "\n"},
		{"1.2.0", []string{"cp", "nosuch:/x", dir}, 1, "", `Error: failed to copy from container nosuch (cause: "notFound: "container with ID nosuch not found"")` + "\n"},
		{"1.2.0", []string{"export", "nosuch"}, 1, "", `Error: failed to export container (cause: "notFound: "container with ID nosuch not found"")` + "\n"},
		// Before 1.2.1 only a stopped container exports (samples §6 quotes the cause).
		{"1.2.0", []string{"export", "-o", file, "web"}, 1, "", `Error: failed to export container (cause: "invalidState: "container is not stopped"")` + "\n"},
		{"1.2.1", []string{"export", "-o", file, "web"}, 0, "", ""},
		{"0.12.3", []string{"exec", "-it", "nosuch", "sh"}, 1, "", "Error: get failed: container nosuch not found\n"},
		{"1.2.0", []string{"exec", "-it", "web", "sh"}, 1, "", `Error: failed to exec process POSIXError(_nsError: Error Domain=NSPOSIXErrorDomain Code=25 "Inappropriate ioctl for device")` + "\n"},
	} {
		a, out, errb := ctrApp(t, tc.version)
		code := a.finish(a.dispatch(tc.argv))
		if code != tc.code || out.String() != tc.out || errb.String() != tc.err {
			t.Errorf("%s %v: %d\nstdout %q\nstderr %q\nwant %d %q %q", tc.version, tc.argv, code, out.String(), errb.String(), tc.code, tc.out, tc.err)
		}
	}
}
