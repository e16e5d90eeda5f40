package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/internal/atomicfile"
)

// The channel: on docker and podman on Linux, an allowlist sandbox is
// created with a directory of the host's bind-mounted read-only at
// ChannelMount. The server listens on a unix socket there, and the agent
// hands it each proxy connection's descriptor (agent.HandConn) rather than
// carrying the bytes through the engine's exec, whose pipes the engine
// relays with a copy and a wake-up per chunk: the server then reads and
// writes the sandbox's end of the connection itself.
// The directory is mounted in that sandbox alone: a connection on its
// socket is that sandbox's by construction. The sandbox cannot write in
// it (the mount is read-only; connecting to a socket is not a write).
// Engines without it (Apple's, a remote engine) carry every connection on
// the exec, as before.

// ChannelMount is where an allowlist sandbox sees its channel directory.
const ChannelMount = "/run/sandbox-mcp-host"

// LabelChannel records, on a container created with a channel, the host
// directory mounted at ChannelMount: whichever server adopts the sandbox
// listens there, and makes it again before a start if it is gone (the
// engine refuses to start a container whose bind source is missing).
const LabelChannel = "io.sandbox-mcp.channel"

// channelDirName is the form of a channel directory's base name.
var channelDirName = regexp.MustCompile(`^[0-9a-f]{16}$`)

// channelsWork reports whether rt's containers can reach a unix socket of
// this host through a bind mount: a local docker or podman on Linux.
func channelsWork(rt Runtime) bool {
	if runtime.GOOS != "linux" {
		return false
	}
	switch rt.Kind() {
	case "docker":
		h := os.Getenv("DOCKER_HOST")
		return (h == "" || strings.HasPrefix(h, "unix://")) && os.Getenv("DOCKER_CONTEXT") == ""
	case "podman":
		return os.Getenv("CONTAINER_HOST") == "" && os.Getenv("CONTAINER_CONNECTION") == ""
	}
	return false
}

// channelDir is the host directory for container ctr's channel, or "" when
// this Manager gives none.
func (m *Manager) channelDir(ctr string) string {
	if m.cfg.ChannelRoot == "" || !channelsWork(m.rt) {
		return ""
	}
	sum := sha256.Sum256([]byte(ctr))
	return filepath.Join(m.cfg.ChannelRoot, hex.EncodeToString(sum[:8]))
}

// validChannelDir reports whether a LabelChannel value is a directory
// this server would have made.
func validChannelDir(dir string) bool {
	return filepath.IsAbs(dir) && filepath.Clean(dir) == dir && channelDirName.MatchString(filepath.Base(dir))
}

// ensureChannelDir makes dir (and its parent, private to the user) if it
// is not there. dir itself is 0755: the sandbox's user, whichever it is,
// must reach the socket in it; the parent keeps the host's other users
// out.
func ensureChannelDir(dir string) error {
	if !validChannelDir(dir) {
		return fmt.Errorf("%q is not a channel directory", dir)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("channel %s is not a directory", dir)
	}
	return os.Chmod(dir, 0o755)
}

// addChannel gives an allowlist sandbox's spec its channel, when this
// Manager gives them. A failure leaves the sandbox on the exec's path.
func (m *Manager) addChannel(spec *RunSpec) {
	dir := m.channelDir(spec.Name)
	if dir == "" || spec.Labels[LabelChannel] != "" {
		return
	}
	if err := ensureChannelDir(dir); err != nil {
		m.log.Warn("the sandbox's proxy goes through the engine's exec: its channel cannot be made", "container", spec.Name, "err", err)
		return
	}
	spec.Mounts = append(spec.Mounts, Mount{Source: dir, Target: ChannelMount, ReadOnly: true})
	spec.Labels[LabelChannel] = dir
}

// channelBeforeStart makes the channel directory of container c again if
// it is gone, so that the engine can start it.
func (m *Manager) channelBeforeStart(c Container) {
	dir := c.Labels[LabelChannel]
	if dir == "" {
		return
	}
	if err := ensureChannelDir(dir); err != nil {
		m.log.Warn("remake the sandbox's channel directory", "container", c.Name, "dir", dir, "err", err)
	}
	dropStaleCalls(dir) // agentcall_linux.go
}

// removeChannel removes dir, the channel directory of a sandbox
// destroyed.
func (m *Manager) removeChannel(dir string) {
	if !validChannelDir(dir) {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		m.log.Warn("remove the sandbox's channel directory", "dir", dir, "err", err)
	}
}

// dropOldChannel removes old, the channel directory of a sandbox's
// container that a reset replaced, once the new one booted (now, bootErr)
// without it: a sandbox that began as a spare had one named after the
// spare, which nothing else removes.
func (m *Manager) dropOldChannel(old string, now *Sandbox, bootErr error) {
	if old == "" || bootErr != nil || now == nil || now.egress.channelDir == old {
		return
	}
	m.removeChannel(old)
}

// dropRetiredChannel removes the channel directory of c, a replaced
// container now removed, unless it is the one its sandbox's containers
// are made with: a sandbox that began as a spare had one named after the
// spare, which a reset a killed server began and the next one finished
// would leave.
func (m *Manager) dropRetiredChannel(c Container) {
	dir, name := c.Labels[LabelChannel], c.Labels[LabelName]
	if !validChannelDir(dir) || filepath.Dir(dir) != m.cfg.ChannelRoot {
		return
	}
	switch {
	case ValidateName(name) == nil:
		if dir == m.channelDir(m.ContainerFor(name)) {
			return // the one its sandbox's containers are made with
		}
	case name != "" || !m.validSpareVolume(c.Labels[LabelVolume]):
		return // not a sandbox's (a claimed spare carries no name)
	}
	m.removeChannel(dir)
}

// dropSpareChannel removes the channel directory of the spare whose
// workspace is vol, a spare-born sandbox's being removed: the container
// whose label named it may be gone already (a destroy a killed server
// began).
func (m *Manager) dropSpareChannel(vol string) {
	if m.validSpareVolume(vol) {
		m.removeChannel(m.channelDir(m.spareName(strings.TrimPrefix(vol, m.spareVolume("")))))
	}
}

// channelListener is one server's socket in a sandbox's channel.
type channelListener struct {
	ln    *net.UnixListener
	dirfd int
	name  string
	conns atomic.Int64 // connections accepted
}

// channelOf is the path, as sandbox sb sees it, of this server's socket
// in sb's channel, listened on at its first call and closed when sb ends;
// "" when sb has no channel or it cannot be listened on (the proxy's
// connections then come through the exec).
func (m *Manager) channelOf(sb *Sandbox, serve func(net.Conn)) string {
	sb.egress.mu.Lock()
	defer sb.egress.mu.Unlock()
	if sb.egress.channelDir == "" {
		return ""
	}
	if cl := sb.egress.channel; cl != nil {
		return ChannelMount + "/" + cl.name
	}
	cl, path, err := listenChannel(sb.egress.channelDir, serve)
	if err != nil {
		m.log.Warn("the sandbox's proxy goes through the engine's exec", "sandbox", sb.Name, "err", err)
		return ""
	}
	if !sb.Go(func(ctx context.Context) {
		<-ctx.Done()
		cl.Close()
	}) {
		cl.Close()
		return ""
	}
	sb.egress.channel = cl
	return path
}

// channelConns is how many connections sb's channel has carried to this
// server; -1 when it has none here.
func (sb *Sandbox) channelConns() int64 {
	sb.egress.mu.Lock()
	defer sb.egress.mu.Unlock()
	if sb.egress.channel == nil {
		return -1
	}
	return sb.egress.channel.conns.Load()
}

// agentInChannel places the agent binary bin in sb's channel directory,
// where the sandbox sees it read-only and can run it without a copy
// through the engine's exec, and returns its path as the sandbox sees
// it; "" when sb has no channel or the file cannot be placed (the agent
// is then copied in). The file is named after its content and written
// whole under a temporary name first: a file of that name is bin.
func (m *Manager) agentInChannel(sb *Sandbox, bin []byte) string {
	sb.egress.mu.Lock()
	dir := sb.egress.channelDir
	sb.egress.mu.Unlock()
	path, err := placeAgent(dir, bin)
	if err != nil {
		m.log.Debug("the agent is copied in: its channel takes no file", "sandbox", sb.Name, "err", err)
	}
	return path
}

// placeAgent is agentInChannel for channel directory dir: the path, as
// the sandbox sees it, of bin placed there.
func placeAgent(dir string, bin []byte) (string, error) {
	if dir == "" || !validChannelDir(dir) {
		return "", fmt.Errorf("%q is not a channel directory", dir)
	}
	sum := sha256.Sum256(bin)
	name := agentFilePrefix + hex.EncodeToString(sum[:8])
	at := ChannelMount + "/" + name
	p := filepath.Join(dir, name)
	if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(len(bin)) {
		return at, nil
	}
	// A file of that name is whole, even after a crash (its temporary
	// name, ".sandbox-ctl-…", is one sweepAgents removes once old).
	if err := atomicfile.Write(p, bin, 0o755); err != nil {
		return "", err
	}
	sweepAgents(dir, name)
	return at, nil
}

// sweepAgents removes from channel directory dir the agent binaries other
// than keep (an older server's: that one places its own again at its
// next agent start) and the temporary files of a write a killed server
// left.
func sweepAgents(dir, keep string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		switch {
		case n == keep:
		case strings.HasPrefix(n, "sandbox-ctl-"):
			_ = os.Remove(filepath.Join(dir, n))
		case strings.HasPrefix(n, ".sandbox-ctl-"):
			// A copy whose write a killed server left (atomicfile's).
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > atomicfile.StaleAfter {
				_ = os.Remove(filepath.Join(dir, n))
			}
		}
	}
}

// agentFilePrefix begins the name of an agent binary in a channel
// directory; the protocol version and the content's hash follow.
const agentFilePrefix = "sandbox-ctl-" + agent.Version + "-"
