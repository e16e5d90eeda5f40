package enginetest

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startFakeEngine starts a copy of sleep named podman, for an hour.
func startFakeEngine(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep executable")
	}
	fake := filepath.Join(t.TempDir(), "podman")
	src, err := os.Open(sleep)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(fake, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()
	cmd := exec.Command(fake, "3600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, fake
}

// A process named like an engine shows up in the report with its argv.
func TestEngineProcessesListsAnEngineProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	cmd, fake := startFakeEngine(t)
	report := EngineProcesses()
	want := "pid " + strconv.Itoa(cmd.Process.Pid) + " "
	if !strings.Contains(report, want) || !strings.Contains(report, fake+" 3600") {
		t.Fatalf("pid %d (%s 3600) missing from:\n%s", cmd.Process.Pid, fake, report)
	}
}

// Without /proc (a Mac), the report comes from ps, with the same facts
// but the kernel's wait channel.
func TestPsEngineProcessesListsAnEngineProcess(t *testing.T) {
	if _, err := exec.LookPath("ps"); err != nil {
		t.Skip("no ps")
	}
	cmd, fake := startFakeEngine(t)
	report := psEngineProcesses()
	want := "pid " + strconv.Itoa(cmd.Process.Pid) + " "
	if !strings.Contains(report, want) || !strings.Contains(report, fake+" 3600") {
		t.Fatalf("pid %d (%s 3600) missing from:\n%s", cmd.Process.Pid, fake, report)
	}
}

// Poll returns as soon as the condition holds, and with the condition's
// last error once its guard has passed.
func TestPollEndsOnTheConditionOrTheGuard(t *testing.T) {
	n := 0
	if err := Poll(context.Background(), time.Minute, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d looks, want nil after 3", err, n)
	}
	err := Poll(context.Background(), 200*time.Millisecond, func() error { return errors.New("the file is missing") })
	if err == nil || !strings.Contains(err.Error(), "the file is missing") {
		t.Fatalf("Poll past its guard = %v, want the condition's last error", err)
	}
}
