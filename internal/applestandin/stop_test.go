package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stoppingPodman is a fake podman whose container "box" runs until a stop,
// whose stop returns at once, and whose inspect after the stop reports
// the container "stopping" (as podman does while another stop or the
// cleanup is under way) for the given number of looks, then "exited"; it
// leaves said-exited beside itself once it has reported that.
func stoppingPodman(looks string) string {
	return `#!/bin/sh
d=$(dirname "$0")
case "$1 $2" in
"container inspect")
  state=running
  if [ -e "$d/stop-called" ]; then
    n=$(($(cat "$d/looks" 2>/dev/null || echo 0) + 1)); echo $n >"$d/looks"
    state=stopping
    if [ $n -gt ` + looks + ` ]; then state=exited; touch "$d/said-exited"; fi
  fi
  running=false; [ $state = running ] && running=true
  echo "[{\"Id\":\"abc\",\"Name\":\"box\",\"State\":{\"Status\":\"$state\",\"Running\":$running}}]";;
"stop -t") touch "$d/stop-called";;
*) exit 1;;
esac
`
}

// TestStopReturnsOnceStopped: Apple's stop returns once the container is
// stopped, so the stand-in's waits past a podman stop that returned while
// the container was still stopping.
func TestStopReturnsOnceStopped(t *testing.T) {
	a := fakeApp(t, stoppingPodman("3"))
	if err := a.dispatch([]string{"stop", "-t", "0", "box"}); err != nil {
		t.Fatal(err)
	}
	if out := a.stdout.(*bytes.Buffer).String(); out != "box\n" {
		t.Fatalf("stdout %q", out)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(a.eng.bin), "said-exited")); err != nil {
		t.Fatal("the stop returned while podman still reported the container stopping")
	}
}

// TestStopFailsWhenNeverStopped: a container podman never reports stopped
// fails the stop, past its bound, with an internal error that says so.
func TestStopFailsWhenNeverStopped(t *testing.T) {
	defer func(d time.Duration) { stopSettle = d }(stopSettle)
	stopSettle = 300 * time.Millisecond
	a := fakeApp(t, stoppingPodman("1000000"))
	err := a.dispatch([]string{"stop", "-t", "0", "box"})
	if err == nil || !strings.Contains(err.Error(), `internalError: "failed to stop container" (cause: "internalError: "container box did not stop within 300ms: it is still stopping"")`) {
		t.Fatalf("err = %v", err)
	}
	if out := a.stdout.(*bytes.Buffer).String(); out != "" {
		t.Fatalf("stdout %q", out)
	}
}
