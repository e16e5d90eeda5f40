package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/agent/ctlbin"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// TestInstallAndRunKeepsTheAgentWhole: the agent arrives whole or not at
// all: a copy cut short (the host's end of the pipe closed early) leaves
// nothing; a whole one is installed, linked, announced, and run.
func TestInstallAndRunKeepsTheAgentWhole(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := filepath.Join(t.TempDir(), "agent")
	path, link := filepath.Join(dir, "sandbox-ctl-9"), filepath.Join(t.TempDir(), "sandbox-ctl")
	data := []byte("#!/bin/sh\necho \"agent ran: $*\"; cat\n#")
	data = append(data, bytes.Repeat([]byte("0123456789"), 100_000)...)
	data = append(data, '\n')
	run := func(sent []byte) (string, error) {
		cmd := exec.Command("sh", "-c", installAndRunScript, "sh", dir, path, strconv.Itoa(len(data)), link)
		cmd.Stdin = bytes.NewReader(sent)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run(data[:len(data)/2])
	if err == nil || !strings.Contains(out, fmt.Sprintf("sandbox-ctl arrived cut short: %d of %d bytes", len(data)/2, len(data))) {
		t.Fatalf("half of it: %v %s", err, out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a copy cut short left %v", ents)
	}

	// What follows the binary on stdin is the agent's.
	out, err = run(append(append([]byte(nil), data...), "after"...))
	if err != nil || out != installedLine+"\nagent ran: agent\nafter" {
		t.Fatalf("all of it: %v %q", err, out)
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

// unameRT answers every exec with machine as `uname -m` would.
type unameRT struct {
	fakeRT
	machine string
	err     error
	execs   int
}

func (r *unameRT) Exec(_ context.Context, _ string, spec ExecSpec) (ExecOutput, error) {
	r.execs++
	return ExecOutput{Stdout: []byte(r.machine + "\n")}, r.err
}

func TestAgentStatusSaysWhySandboxIsOnTheExecFallback(t *testing.T) {
	rt := &unameRT{machine: "riscv64"}
	m := &Manager{rt: rt, slots: map[string]*slot{}}
	running := Info{Name: "s", Container: "c", State: StateRunning}

	// Not started in this process: one exec asks the machine.
	st := m.AgentStatus(context.Background(), running)
	if st.State != AgentFallback || !strings.Contains(st.String(), `agent: none (no agent for a "riscv64" machine); port forwards use one engine exec per connection; children have no control socket`) {
		t.Fatalf("riscv64: %+v %q", st, st)
	}
	// A machine this server has an agent for (here built on first use
	// from the checkout, or refused with its reason: either says so).
	rt.machine = "aarch64"
	st = m.AgentStatus(context.Background(), running)
	if st.Platform != "linux/arm64" {
		t.Fatalf("aarch64: %+v", st)
	}
	if r := ctlbin.Resolve(context.Background(), "arm64", false); r.Err() != nil {
		if st.State != AgentFallback || !strings.Contains(st.Reason, "no sandbox-ctl for linux/arm64") {
			t.Fatalf("aarch64 without an agent: %+v", st)
		}
	} else if st.State != AgentNotStarted || !strings.Contains(st.String(), "agent: not started yet (linux/arm64, ") {
		t.Fatalf("aarch64: %+v %q", st, st)
	}
	rt.err = errors.New("engine down")
	if st := m.AgentStatus(context.Background(), running); st.State != AgentUnknown || !strings.Contains(st.Reason, "engine down") {
		t.Fatalf("a failed exec: %+v", st)
	}
	if st := m.AgentStatus(context.Background(), Info{Name: "s", State: StateStopped}); st.State != AgentUnknown || !strings.Contains(st.String(), "not running") {
		t.Fatalf("stopped: %+v", st)
	}

	// What this server learned when the agent could not run.
	sb := newSandbox("s", "c", Profile{}, 0, shell.NewPool(nil, shell.Options{}, 1))
	sb.own = &owner{ctr: "c"}
	m.slots["s"] = &slot{sb: sb}
	sb.agent.arch = "arm64"
	sb.agent.unusable = &agentUnusable{err: errors.New(`sandbox "s": start its agent: no sandbox-ctl for linux/arm64: none is embedded`)}
	rt.execs = 0
	st = m.AgentStatus(context.Background(), running)
	if want := `agent: none (sandbox "s": start its agent: no sandbox-ctl for linux/arm64: none is embedded); port forwards use one engine exec per connection; children have no control socket`; st.String() != want || st.Platform != "linux/arm64" || rt.execs != 0 {
		t.Fatalf("unusable: %q (%d execs), want %q", st, rt.execs, want)
	}
	// While it starts (the lock held), status does not wait for it.
	sb.agent.mu.Lock()
	st = m.AgentStatus(context.Background(), running)
	sb.agent.mu.Unlock()
	if st.State != AgentStarting {
		t.Fatalf("starting: %+v", st)
	}
}
