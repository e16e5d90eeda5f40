package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// EnvBinaryDir names a directory holding sandbox-ctl-linux-<arch> (for
// tests and packagers); by default the server looks next to itself.
const EnvBinaryDir = "SANDBOX_MCP_CTL_DIR"

// FindBinary returns the static sandbox-ctl for a linux/goarch sandbox:
// sandbox-ctl-linux-<goarch> in $SANDBOX_MCP_CTL_DIR or next to the
// server's executable (where `make build` puts it), or sandbox-ctl there
// when the host is that platform itself, or linux_<goarch>/sandbox-ctl
// there (where a cross `go install` puts it).
func FindBinary(goarch string) (string, error) {
	var dirs []string
	if d := os.Getenv(EnvBinaryDir); d != "" {
		dirs = append(dirs, d)
	}
	exe, err := os.Executable()
	if err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dirs = append(dirs, filepath.Dir(exe))
	}
	names := []string{"sandbox-ctl-linux-" + goarch}
	if runtime.GOOS == "linux" && runtime.GOARCH == goarch {
		names = append(names, "sandbox-ctl")
	}
	// `GOOS=linux go install` from another platform puts it in linux_<arch>.
	names = append(names, filepath.Join("linux_"+goarch, "sandbox-ctl"))
	for _, d := range dirs {
		for _, n := range names {
			p := filepath.Join(d, n)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("no sandbox-ctl for linux/%s in %v: `make build` puts bin/sandbox-ctl-linux-%s next to bin/sandbox-mcp (or set %s)",
		goarch, dirs, goarch, EnvBinaryDir)
}

// GoArch maps `uname -m` to a Go architecture; "" for one without a
// sandbox-ctl build.
func GoArch(machine string) string {
	switch machine {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	}
	return ""
}
