package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// family is a host of the protocol in memory: children by name, and
// commands that print their text and exit with their length.
type family struct{ children map[string]Child }

func (f *family) Handle(ctx context.Context, caller string, req Request, out Output) (any, error) {
	switch req.Method {
	case MethodPing:
		return PingResult{OK: true, Parent: caller}, nil
	case MethodSpawn:
		var p SpawnParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, Errorf(CodeInvalidRequest, "%v", err)
		}
		if p.Image != "" && p.Image != "mcp-dev" {
			return nil, Errorf(CodePermissionDenied, "image %q is not allowed", p.Image)
		}
		name := p.Name
		if name == "" {
			name = fmt.Sprintf("%s-child-%04d", caller, len(f.children)+1)
		}
		ch := Child{Name: name, Image: "mcp-dev", CPUs: 2, MemoryMB: 512, ExpiresAt: time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC)}
		if p.Network != "" || p.Allow != nil {
			ch.Notes = []string{"network " + p.Network + " allow " + strings.Join(p.Allow, ",")}
		}
		f.children[name] = ch
		return ch, nil
	case MethodList:
		l := ListResult{Children: []Child{}}
		for _, c := range f.children {
			l.Children = append(l.Children, c)
		}
		return l, nil
	case MethodDestroy:
		var p NameParams
		_ = json.Unmarshal(req.Params, &p)
		if _, ok := f.children[p.Name]; !ok {
			return nil, Errorf(CodeNotFound, "no child %q", p.Name)
		}
		delete(f.children, p.Name)
		return struct{}{}, nil
	case MethodRun:
		var p RunParams
		_ = json.Unmarshal(req.Params, &p)
		fmt.Fprintf(out.Stdout(), "ran: %s", p.Command)
		if p.Network != "" || p.Allow != nil {
			fmt.Fprintf(out.Stdout(), " (network %s allow %s)", p.Network, strings.Join(p.Allow, ","))
		}
		fmt.Fprintln(out.Stdout())
		fmt.Fprint(out.Stderr(), "warn\n")
		return ExecResult{ExitCode: len(p.Command) % 256}, nil
	case MethodExec:
		var p ExecParams
		_ = json.Unmarshal(req.Params, &p)
		if _, ok := f.children[p.Name]; !ok && req.Method == MethodExec {
			return nil, Errorf(CodeNotFound, "no child %q", p.Name)
		}
		fmt.Fprintf(out.Stdout(), "ran: %s\n", p.Command)
		fmt.Fprint(out.Stderr(), "warn\n")
		return ExecResult{Name: p.Name, ExitCode: len(p.Command) % 256}, nil
	}
	return nil, Errorf(CodeInvalidRequest, "unknown method %q", req.Method)
}

func runCLI(t *testing.T, sock string, args ...string) (int, string, string) {
	t.Helper()
	var so, se strings.Builder
	code := run(context.Background(), args, &so, &se, func(k string) string {
		if k == EnvSocket {
			return sock
		}
		return ""
	})
	return code, so.String(), se.String()
}

func TestCLI(t *testing.T) {
	sock := listen(t, &Server{Handler: &family{children: map[string]Child{}}})
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string // substrings
	}{
		{[]string{"ping"}, 0, "the host answers for sandbox parent", ""},
		{[]string{"--json", "ping"}, 0, `{"ok":true,"parent":"parent"}`, ""},
		{[]string{"spawn", "--name", "w1", "--cpus", "1"}, 0, "w1  mcp-dev  2 cpus  512 MiB", ""},
		{[]string{"spawn", "--image", "alpine"}, 1, "", "is not allowed. Try: ask the user"},
		{[]string{"spawn", "--name", "w2", "--network", "allowlist", "--allow", "a.example", "--allow", "*.b.example:443"}, 0, "note: network allowlist allow a.example,*.b.example:443", ""},
		{[]string{"list"}, 0, "w1  mcp-dev", ""},
		{[]string{"exec", "w1", "--", "echo", "it's"}, len("'echo' 'it'\\''s'"), "ran: 'echo' 'it'\\''s'\n", "warn\n"},
		{[]string{"exec", "w1", "--", "true"}, 4, "ran: true\n", "warn"},
		{[]string{"--json", "exec", "w1", "--", "true"}, 4, `"stdout":"ran: true\n","stderr":"warn\n"`, ""},
		{[]string{"exec", "nosuch", "--", "true"}, 1, "", "no child \"nosuch\". Try: sandbox-ctl list"},
		{[]string{"run", "--", "ls -l"}, 5, "ran: ls -l", ""},
		{[]string{"run", "--network", "allowlist", "--allow", "pypi.org", "--", "pip download x"}, 14, "ran: pip download x (network allowlist allow pypi.org)", ""},
		{[]string{"destroy", "w1"}, 0, "destroyed w1", ""},
		{[]string{"destroy", "w1"}, 1, "", "Try: sandbox-ctl list"},
		{[]string{"exec", "w1"}, 2, "", "usage"},
		{[]string{"exec", "w1", "--"}, 2, "", "usage"},
		{[]string{"destroy"}, 2, "", "usage"},
		{[]string{"fly"}, 2, "", `unknown command "fly"`},
		{[]string{"spawn", "--cpus", "many"}, 2, "", "usage"},
		{[]string{}, 2, "", "usage"},
		{[]string{"--help"}, 0, "", "usage"},
	} {
		code, out, errOut := runCLI(t, sock, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.err) {
			t.Errorf("%v: exit %d (want %d)\nstdout %q\nstderr %q", tc.args, code, tc.code, out, errOut)
		}
	}
	// No host: a clear error with what to try.
	code, _, errOut := runCLI(t, filepath.Join(t.TempDir(), "none.sock"), "ping")
	if code != 1 || !strings.Contains(errOut, "Try: check that sandbox-mcp runs on the host") {
		t.Errorf("no host: %d %q", code, errOut)
	}
}
