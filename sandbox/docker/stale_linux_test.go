//go:build linux

package docker

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A process is killed only when its cgroup is the one named.
func TestKillInCgroup(t *testing.T) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	own := strings.TrimSpace(string(b))
	own = own[strings.LastIndex(own, ":")+1:] // the path, in the child's cgroup too
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if killInCgroup(cmd.Process.Pid, own+"-other") {
		t.Fatal("killed a process of another cgroup")
	}
	select {
	case err := <-done:
		t.Fatalf("the process of another cgroup ended: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if !killInCgroup(cmd.Process.Pid, own) {
		t.Fatal("did not kill a process of the cgroup named")
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not end")
	}
}

// The kernel escapes spaces and backslashes in mountinfo's paths; a
// mount point is found under its real name, and "/" is mounted here.
func TestMountAt(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:       "/a b",
		`/x\134y`:       `/x\y`,
		`/plain`:        "/plain",
		`/short\04`:     `/short\04`,
		`/not\0z9octal`: `/not\0z9octal`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
	if _, ok := mountAt("/"); !ok {
		t.Error(`"/" is not mounted`)
	}
	if _, ok := mountAt(t.TempDir()); ok {
		t.Error("a fresh directory is a mount point")
	}
}
