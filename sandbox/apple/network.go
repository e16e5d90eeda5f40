package apple

import (
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

var _ sandbox.PeerReacher = (*Dialect)(nil)

// macOSMajor is the host's macOS major version, 0 when unknown (or not
// macOS: the stand-in on Linux).
var macOSMajor = sync.OnceValue(func() int {
	if runtime.GOOS != "darwin" {
		return 0
	}
	out, err := exec.Command("sw_vers", "-productVersion").Output()
	if err != nil {
		return 0
	}
	return majorOf(string(out))
})

func majorOf(version string) int {
	v := strings.TrimSpace(version)
	if i := strings.IndexByte(v, '.'); i >= 0 {
		v = v[:i]
	}
	n, _ := strconv.Atoi(v)
	return n
}

// PeersReachable implements sandbox.PeerReacher: before macOS 26 vmnet
// isolates every container, so containers do not reach each other.
func (d *Dialect) PeersReachable() (bool, string) {
	if m := macOSMajor(); m != 0 && m < 26 {
		return false, "macOS " + strconv.Itoa(m) + " has no container-to-container network: sandboxes cannot reach each other " +
			"(macOS 26 lets containers on one network reach each other by address); the host reaches a sandbox's ports through expose"
	}
	return true, ""
}
