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

// A process named like an engine shows up in the report with its argv.
func TestEngineProcessesListsAnEngineProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
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
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	report := EngineProcesses()
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
