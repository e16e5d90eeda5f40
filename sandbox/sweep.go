package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// After a server is killed.
//
// A server that exits normally ends the commands it runs (Shutdown). One
// killed with SIGKILL cannot: its shells in the sandboxes run their
// commands on to the end, and nobody records them. So a later server does.
//
// Every server has an ID (16 hex digits) and, while it runs, holds the
// lock file <LockDir>/<prefix>-server-<ID>.lock; the shells it opens start
// with guest.ShellVar=<ID> in their environment (not inherited by the
// commands: the shell's init unsets it). The kernel frees the lock of a
// killed server, so a free lock file names a server that is gone.
// Reconcile, when a server starts, takes those locks and, if there are
// any, runs guest.SweepScript in every running sandbox of the prefix: it
// ends the gone servers' shells and the commands in them (every process,
// those that left the shell's tree included, through the command's run
// ID) and records each such command in the history, "ended: the server
// that ran it was killed". Then it removes the lock files. A sandbox it
// could not sweep keeps the files for the next server to try again.
//
// Processes that a command left behind after it finished are not ended:
// only commands still in flight are (the shells of a killed server that
// had nothing running have exited by themselves when their input closed).

const serverIDLen = 16

// serverKey is the lock key of the server with the given ID.
func (m *Manager) serverKey(id string) string { return m.cfg.Prefix + "-server-" + id }

func (m *Manager) serverLockPath(id string) string {
	return filepath.Join(m.cfg.LockDir, m.serverKey(id)+".lock")
}

// claimServerID gives the Manager its server ID and takes its lock.
func (m *Manager) claimServerID() {
	var b [serverIDLen / 2]byte
	_, _ = rand.Read(b[:])
	m.serverID = hex.EncodeToString(b[:])
	if m.cfg.LockDir == "" {
		return
	}
	h, err := m.locks.TryLock(m.serverKey(m.serverID), "server")
	if err == nil && m.cfg.History != nil {
		if werr := m.history.SetWAL(m.historyWAL(m.serverID)); werr != nil {
			m.log.Warn("open the history's write-ahead file (a kill may lose the last second of history)", "err", werr)
		}
	}
	if err != nil {
		m.log.Warn("hold the server's lock file (a later server cannot tell if this one was killed)", "err", err)
		return
	}
	m.server = h
}

// releaseServerID removes the server's lock file and drops the lock.
func (m *Manager) releaseServerID() {
	if m.server == nil {
		return
	}
	_ = os.Remove(m.serverLockPath(m.serverID))
	_ = os.Remove(m.stagingFile(m.serverID))
	_ = os.Remove(m.runsFile(m.serverID))
	m.history.CloseWAL()
	m.server.Release()
	m.server = nil
}

// goneServer is a server whose lock file is free: it was killed.
type goneServer struct {
	id   string
	pid  int // as its lock file says; 0 if unknown
	held *locks.Held
}

// goneServers takes the lock of every server of this prefix whose lock
// file is free.
func (m *Manager) goneServers() []goneServer {
	if m.cfg.LockDir == "" {
		return nil
	}
	pattern := filepath.Join(m.cfg.LockDir, m.serverKey(strings.Repeat("?", serverIDLen))+".lock")
	paths, _ := filepath.Glob(pattern)
	var out []goneServer
	for _, p := range paths {
		key := strings.TrimSuffix(filepath.Base(p), ".lock")
		id, ok := strings.CutPrefix(key, m.serverKey(""))
		if !ok || id == m.serverID || !isHex(id) {
			continue
		}
		holder := m.locks.Holder(key)
		h, err := m.locks.TryLock(key, "sweep after server pid "+fmt.Sprint(holder.PID))
		if err != nil {
			continue // that server runs
		}
		out = append(out, goneServer{id: id, pid: holder.PID, held: h})
	}
	return out
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}

// sweepGoneServers ends, in the running sandboxes among cs, the commands
// that killed servers left running, and records them in the history.
func (m *Manager) sweepGoneServers(ctx context.Context, cs []Container) {
	gone := m.goneServers()
	if len(gone) == 0 {
		return
	}
	staged := map[string]bool{} // the gone servers whose staging list is done with
	for _, g := range gone {
		n, done := m.removeStaging(g.id)
		if n > 0 {
			m.log.Info("removed the host files a killed server left half written", "server", g.id, "count", n)
		}
		staged[g.id] = done
		m.replayHistory(g.id)
	}
	args := []string{"sh", "-c", guest.SweepScript, "sh"}
	pids := map[string]int{}
	for _, g := range gone {
		args = append(args, g.id)
		pids[g.id] = g.pid
	}
	swept := true
	running := map[string]Container{}
	for _, c := range cs {
		name := c.Labels[LabelName]
		if !c.Running() || c.Name != m.ContainerFor(name) {
			continue
		}
		running[name] = c
		if err := m.sweep(ctx, name, c, args, pids); err != nil {
			m.log.Warn("end the commands of a killed server", "sandbox", name, "err", err)
			swept = false
		}
	}
	for _, g := range gone {
		swept = m.endRuns(ctx, g.id, running) && swept // staging.go: its terminal sessions
	}
	for _, g := range gone {
		if swept && staged[g.id] { // a lock file kept has the next sweep look again
			_ = os.Remove(m.serverLockPath(g.id))
		}
		g.held.Release()
	}
}

// historyWAL is the history write-ahead file of the server with id.
func (m *Manager) historyWAL(id string) string {
	return filepath.Join(m.cfg.LockDir, m.serverKey(id)+".history")
}

// replayHistory stores the history entries the gone server id wrote
// ahead and had not flushed, then removes its file. An entry the server
// did flush (it was killed before rewriting the file) is not stored twice.
func (m *Manager) replayHistory(id string) {
	if m.cfg.History == nil {
		return
	}
	path := m.historyWAL(id)
	byName, err := ReadWAL(path)
	if err != nil {
		return
	}
	batch := map[string][]json.RawMessage{}
	for name, list := range byName {
		have := map[string]bool{}
		if raw, err := m.cfg.History.History(name); err == nil {
			for _, r := range raw {
				var e HistoryEntry
				if json.Unmarshal(r, &e) == nil {
					have[e.Time.String()+"\x00"+e.Command] = true
				}
			}
		}
		for _, e := range list {
			if have[e.Time.String()+"\x00"+e.Command] {
				continue
			}
			if b, err := json.Marshal(e); err == nil {
				batch[name] = append(batch[name], b)
			}
		}
	}
	if len(batch) > 0 {
		if err := m.cfg.History.AppendHistory(batch, historyLimit); err != nil {
			m.log.Warn("store the history a killed server wrote ahead", "server", id, "err", err)
			return // the file stays for the next try
		}
		m.log.Info("stored the history a killed server had not saved", "server", id, "sandboxes", len(batch))
	}
	_ = os.Remove(path)
}

// sweep runs the sweep script in one sandbox's container c and records
// what it ended.
func (m *Manager) sweep(ctx context.Context, name string, c Container, args []string, pids map[string]int) error {
	target := c.ID
	if target == "" {
		target = c.Name
	}
	out, err := m.rt.Exec(ctx, target, ExecSpec{Argv: args})
	if err == nil && out.ExitCode != 0 {
		err = fmt.Errorf("sweep script: exit %d: %s", out.ExitCode, strings.TrimSpace(string(out.Stderr)))
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotRunning) {
		return nil // gone or stopped since: nothing runs in it
	}
	if err != nil {
		return err
	}
	shells, batches := guest.ParseSweepAll(out.Stdout)
	for server, n := range batches {
		who := "the server that ran it"
		if pid := pids[server]; pid > 0 {
			who += fmt.Sprintf(" (pid %d)", pid)
		}
		for range n {
			m.history.Add(name, "batch_write", shell.Result{ExitCode: 128 + 9},
				fmt.Errorf("interrupted: %s was killed before the files were put in place; none was written, and a later server removed what it had written beside them", who))
		}
	}
	for _, s := range shells {
		if s.Procs == 0 {
			continue // an idle shell: nothing was running in it
		}
		who := "the server that ran it"
		if pid := pids[s.Server]; pid > 0 {
			who += fmt.Sprintf(" (pid %d)", pid)
		}
		why := fmt.Errorf("ended: %s was killed; a later server found it still running and ended it", who)
		cmd := sweptCommand(s)
		m.log.Info("ended a command a killed server left running", "sandbox", name, "command", cmd, "server", s.Server)
		m.history.Add(name, cmd, shell.Result{ExitCode: 128 + 9, Duration: time.Duration(s.Age) * time.Second}, why)
	}
	return nil
}

// sweptCommand describes what a killed server's shell was running, from
// the command lines of its processes: the first that is not a copy of
// the shell itself (a subshell), and how many more there were.
func sweptCommand(s guest.SweptShell) string {
	cmd, copies := "", 0
	for _, c := range s.Commands {
		switch {
		case c == "sh":
			copies++
		case cmd == "":
			cmd = c
		}
	}
	more := s.Procs - copies - 1
	if cmd == "" {
		cmd, more = "(a command running in the shell itself)", 0
	}
	switch {
	case more == 1:
		cmd += " (and 1 more process)"
	case more > 1:
		cmd += fmt.Sprintf(" (and %d more processes)", more)
	}
	return cmd
}
