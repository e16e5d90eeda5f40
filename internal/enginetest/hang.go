package enginetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// engineCommands are the process names that take part in an engine call.
var engineCommands = map[string]bool{
	"podman": true, "conmon": true, "runc": true, "crun": true, "catatonit": true,
	"docker": true, "dockerd": true, "containerd": true, "containerd-shim": true,
	"containerd-shim-runc-v2": true, "container": true, "netavark": true,
	"aardvark-dns": true, "iptables": true, "ip6tables": true, "iptables-legacy": true,
	"iptables-nft": true, "slirp4netns": true, "fuse-overlayfs": true,
}

// hangText is what an engine call that timed out says (sandbox/cli).
const hangText = "the engine did not answer in time"

// LogIfHung logs the host's engine processes when msg says an engine call
// timed out, so a failure report tells a hang inside the engine (a podman
// lock held by a stuck process, an iptables lock) from one in the product.
func LogIfHung(t testing.TB, msg string) {
	t.Helper()
	if Hung(msg) {
		t.Logf("an engine call timed out; engine processes now:\n%s", EngineProcesses())
	}
}

// Hung reports whether msg is the product's report of an engine call
// that timed out.
func Hung(msg string) bool { return strings.Contains(msg, hangText) }

// LogIfExpired logs the engine's processes when ctx, a test's bound on a
// call, has expired: the call may wait on an engine that hangs.
func LogIfExpired(t testing.TB, ctx context.Context) {
	t.Helper()
	if ctx.Err() != nil {
		t.Logf("the call outlived the test's bound; engine processes now:\n%s", EngineProcesses())
	}
}

// EngineProcesses describes each engine process on the host: pid, parent,
// age, state, the kernel function it waits in, and argv; then the file
// locks held or awaited. It reads /proc; without one (a Mac) it asks ps.
func EngineProcesses() string {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return psEngineProcesses()
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	uptime := procUptime()
	var b strings.Builder
	pids := map[string]bool{}
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid … with comm possibly holding spaces.
		s := string(stat)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		comm := s[open+1 : closing]
		if !engineCommands[comm] {
			continue
		}
		f := strings.Fields(s[closing+1:])
		if len(f) < 20 {
			continue
		}
		pid := filepath.Base(d)
		pids[pid] = true
		age := "?"
		if start, err := strconv.ParseFloat(f[19], 64); err == nil && uptime > 0 {
			age = fmt.Sprintf("%.0fs", uptime-start/100) // USER_HZ is 100 on Linux
		}
		wchan, _ := os.ReadFile(filepath.Join(d, "wchan"))
		argv, _ := os.ReadFile(filepath.Join(d, "cmdline"))
		args := strings.TrimSpace(strings.ReplaceAll(string(argv), "\x00", " "))
		if len(args) > 300 {
			args = args[:300] + "…"
		}
		fmt.Fprintf(&b, "  pid %s ppid %s age %s state %s wchan %s: %s\n", pid, f[1], age, f[0], wchan, args)
	}
	if b.Len() == 0 {
		b.WriteString("  (none)\n")
	}
	if locks, err := os.ReadFile("/proc/locks"); err == nil {
		var held []string
		for _, l := range strings.Split(string(locks), "\n") {
			f := strings.Fields(strings.Replace(l, "->", "-> ", 1))
			for i, w := range f {
				// The pid follows the lock's mode (READ/WRITE).
				if (w == "READ" || w == "WRITE") && i+1 < len(f) && pids[f[i+1]] {
					held = append(held, "  "+strings.TrimSpace(l))
					break
				}
			}
		}
		if len(held) > 60 {
			held = append(held[:60], fmt.Sprintf("  … %d more", len(held)-60))
		}
		if len(held) > 0 {
			b.WriteString("file locks of those processes (-> waits):\n" + strings.Join(held, "\n") + "\n")
		}
	}
	return b.String()
}

// procUptime is the host's uptime in seconds, or 0.
func procUptime() float64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[0], 64)
	return u
}

// psEngineProcesses is EngineProcesses from ps, for hosts without /proc:
// the engines' processes, Apple's container services (container-*) and
// the virtual machines they run.
func psEngineProcesses() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ps", "-axo", "pid=,ppid=,etime=,stat=,command=").Output()
	if err != nil {
		return fmt.Sprintf("  (ps: %v)\n", err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		name := filepath.Base(f[4])
		if !engineCommands[name] && !strings.HasPrefix(name, "container-") && !strings.Contains(name, "Virtualization") {
			continue
		}
		args := strings.Join(f[4:], " ")
		if len(args) > 300 {
			args = args[:300] + "…"
		}
		fmt.Fprintf(&b, "  pid %s ppid %s age %s state %s: %s\n", f[0], f[1], f[2], f[3], args)
	}
	if b.Len() == 0 {
		b.WriteString("  (none)\n")
	}
	return b.String()
}
