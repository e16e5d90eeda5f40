package sandbox

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestInstallScriptKeepsTheAgentWhole: the script that installs the agent
// in a sandbox renames it into place only when every byte arrived; a copy
// cut short (the host's end of the pipe closed early) leaves nothing.
func TestInstallScriptKeepsTheAgentWhole(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := filepath.Join(t.TempDir(), "agent")
	path, link := filepath.Join(dir, "sandbox-ctl-9"), filepath.Join(t.TempDir(), "sandbox-ctl")
	data := bytes.Repeat([]byte("0123456789"), 100_000)
	run := func(sent []byte) (string, error) {
		cmd := exec.Command("sh", "-c", installScript, "sh", dir, path, strconv.Itoa(len(data)), link)
		cmd.Stdin = bytes.NewReader(sent)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run(data[:len(data)/2])
	if err == nil || !strings.Contains(out, "sandbox-ctl arrived cut short: 500000 of 1000000 bytes") {
		t.Fatalf("half of it: %v %s", err, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a copy cut short left %v", ents)
	}

	if out, err := run(data); err != nil {
		t.Fatalf("all of it: %v %s", err, out)
	}
	got, err := os.ReadFile(link)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("installed %d bytes through the link, %v", len(got), err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode: %v %v", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left beside it: %v", ents)
	}
}
