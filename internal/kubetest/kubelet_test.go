package kubetest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestStandInSweepsWhatDeadTestsLeft: a stand-in's start removes the
// volumes (and containers) that stand-ins of a test process that is gone
// left, and leaves those of a live one.
func TestStandInSweepsWhatDeadTestsLeft(t *testing.T) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI may not skip this: no podman")
		}
		t.Skip("no podman")
	}
	c, stop, why, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	if c == nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI may not skip this:", why)
		}
		t.Skip(why)
	}
	defer stop()
	// A process that has ended: its number is free.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	suffix := strconv.Itoa(os.Getpid())
	vols := map[string]int{"ktsweep-dead-" + suffix: gone.Process.Pid, "ktsweep-live-" + suffix: os.Getpid()}
	for v, pid := range vols {
		if out, err := exec.Command(podman, "volume", "create", "--label", "kubetest.kubelet=old", "--label", "kubetest.pid="+strconv.Itoa(pid), v).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		defer exec.Command(podman, "volume", "rm", "-f", v).Run()
	}
	_, stopKubelet, err := c.StartKubelet(c.Admin(t), "default", "kts"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	defer stopKubelet()
	out, err := exec.Command(podman, "volume", "ls", "-q", "--filter", "label=kubetest.kubelet=old").Output()
	if err != nil {
		t.Fatal(err)
	}
	left := strings.Fields(string(out))
	if strings.Contains(string(out), "ktsweep-dead-"+suffix) || !strings.Contains(string(out), "ktsweep-live-"+suffix) {
		t.Fatalf("volumes left after the sweep: %v", left)
	}
}
