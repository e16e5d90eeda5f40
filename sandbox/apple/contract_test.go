package apple

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/internal/applecli"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestArgvContract: every command line the dialect builds, through each
// of its methods, on every release the argument tables cover, is one the
// release's CLI takes (internal/applecli.Check). The fake CLI behind it
// answers everything with success and an empty list; what it is given
// is what is checked.
func TestArgvContract(t *testing.T) {
	host := t.TempDir()
	for _, rel := range applecli.Releases {
		t.Run(rel.String(), func(t *testing.T) {
			d, argvs := recordingCLI(t, rel.String())
			ctx := tctx(t)
			run := sandbox.RunSpec{
				Name: "smt1234-web", Image: "mcp-dev",
				Labels: map[string]string{sandbox.LabelOwner: "smt1234", sandbox.LabelName: "web", sandbox.LabelRole: "primary", "empty": ""},
				CPUs:   1.5, Memory: "1536M", Workdir: "/workspace", Init: true, Network: "default",
				Mounts: []sandbox.Mount{{Volume: "smt1234-ws-web", Target: "/workspace"}, {Source: host, Target: "/host", ReadOnly: true}},
				Env:    map[string]string{"A": "1", "B": "x=y", "C": ""}, Command: []string{"sleep", "infinity"},
			}
			_, _ = d.Run(ctx, run)
			run.Init, run.Virtualization, run.Network, run.Mounts, run.Memory, run.CPUs = false, true, "none", nil, "", 0
			_, _ = d.Run(ctx, run)
			_ = d.Start(ctx, "smt1234-web")
			_ = d.Stop(ctx, "smt1234-web", 5e9)
			_ = d.Remove(ctx, "smt1234-web")
			_, _ = d.Inspect(ctx, "smt1234-web")
			_, _ = d.List(ctx, map[string]string{sandbox.LabelOwner: "smt1234"})
			for _, spec := range []sandbox.ExecSpec{
				{Argv: []string{"sh", "-c", "echo hi"}},
				{Argv: []string{"true"}, Stdin: strings.NewReader("")},
				{Argv: []string{"sh"}, Interactive: true, TTY: true, Workdir: "/tmp", User: "1000:1000", Env: map[string]string{"TERM": "xterm"}},
			} {
				_, _ = d.Exec(ctx, "smt1234-web", spec)
			}
			_ = d.VolumeCreate(ctx, "smt1234-ws-web", map[string]string{sandbox.LabelOwner: "smt1234", "empty": "", sandbox.LabelLimits: "disk=1G"})
			_, _ = d.VolumeCreateSized(ctx, "smt1234-ws-web", map[string]string{sandbox.LabelOwner: "smt1234"}, 3<<30+1, false)
			_ = d.VolumeRemove(ctx, "smt1234-ws-web")
			_, _ = d.Volumes(ctx)
			_, _ = d.ListImages(ctx)
			_, _ = d.ImageExists(ctx, "mcp-dev")
			_, _ = d.Stats(ctx, "smt1234-web")
			_ = d.CopyTo(ctx, "smt1234-web", host, "/tmp/in")
			_ = d.CopyFrom(ctx, "smt1234-web", "/tmp/out", host)
			_ = d.SaveImage(ctx, "smt1234-web", "sandbox-mcp-snap/web:first", map[string]string{sandbox.LabelSnapshot: "first"}, []string{"PATH=/usr/bin"}, false)
			_ = d.RemoveImage(ctx, "sandbox-mcp-snap/web:first")
			_ = d.BuildImage(ctx, sandbox.BuildSpec{Tag: "mcp-dev", ContextDir: host}, &bytes.Buffer{})
			_, _ = d.SystemStatus(ctx)
			got := argvs()
			if len(got) < 20 {
				t.Fatalf("only %d command lines recorded", len(got))
			}
			if testing.Verbose() {
				for _, argv := range got {
					t.Logf("%q", argv)
				}
			}
			for _, argv := range got {
				if err := applecli.Check(rel, argv); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// recordingCLI is a dialect on a fake `container` of version v that
// answers every command line with success ("[]" on stdout) and records
// each, argument by argument.
func recordingCLI(t *testing.T, v string) (*Dialect, func() [][]string) {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	script := fmt.Sprintf(`#!/bin/sh
for a in "$@"; do printf '%%s\037' "$a" >> '%[1]s'; done
printf '\036' >> '%[1]s'
case "$1" in
--version) echo 'container CLI version %[2]s (build: release, commit: 0000000)';;
*) echo '[]';;
esac
`, log, v)
	bin := filepath.Join(dir, "container")
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return New(Options{Binary: bin}), func() [][]string {
		b, _ := os.ReadFile(log)
		var out [][]string
		for _, rec := range strings.Split(string(b), "\036") {
			if rec == "" {
				continue
			}
			out = append(out, strings.Split(strings.TrimSuffix(rec, "\037"), "\037"))
		}
		return out
	}
}
