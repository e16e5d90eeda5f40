package guest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestJobSweepOnHost runs the sweep on this machine's own /proc against
// processes marked with a fresh job id: one in its own session that
// ignores TERM, with a child that cleared its environment; one in its own
// process group; and decoys (another job's marker, none) that must live.
func TestJobSweepOnHost(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc here")
	}
	id, other := randomJobID(t), randomJobID(t)
	start := func(env []string, attr *syscall.SysProcAttr, script string) *exec.Cmd {
		c := exec.Command("sh", "-c", script)
		c.Env, c.SysProcAttr = append(os.Environ(), env...), attr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	mark := []string{JobMarker(id)}
	start(mark, &syscall.SysProcAttr{Setsid: true}, `env -i sleep 1002 & trap "" TERM; exec sleep 1000`)
	start(mark, &syscall.SysProcAttr{Setpgid: true}, `exec sleep 1001`)
	decoys := []*exec.Cmd{
		start([]string{JobMarker(other)}, nil, `exec sleep 1003`),
		start(nil, nil, `exec sleep 1004`),
	}

	sweep := func(sig string) JobSweep {
		t.Helper()
		script, err := JobSignalScript(id, sig)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("sh", "-c", script).Output()
		if err != nil {
			t.Fatalf("sweep %q: %v", sig, err)
		}
		sw, err := ParseJobSweep(out)
		if err != nil {
			t.Fatal(err)
		}
		return sw
	}
	// until polls a counting sweep until it finds want processes.
	until := func(want int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			sw := sweep("")
			if sw.Processes == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sweep finds %d processes, want %d", sw.Processes, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Cleanup(func() { // whatever a failure left behind
		if script, err := JobSignalScript(id, "KILL"); err == nil {
			_ = exec.Command("sh", "-c", script).Run()
		}
	})
	until(3)
	if sw := sweep("TERM"); sw.Processes != 3 || !sw.Gone || sw.Exited || sw.Leader {
		t.Fatalf("TERM: %+v", sw)
	}
	until(1) // sleep 1000 ignores TERM
	if sw := sweep("KILL"); sw.Processes != 1 {
		t.Fatalf("KILL: %+v", sw)
	}
	until(0)
	for _, d := range decoys {
		if err := d.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("decoy %v was hit: %v", d.Args, err)
		}
	}
}

func randomJobID(t *testing.T) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(b[:])
	if !strings.HasPrefix(JobMarker(id), JobMarkerVar+"=") {
		t.Fatal(id)
	}
	return id
}
