package mcpserver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// TestArgumentChecks: a wrong type, an empty sandbox name and a number out
// of its stated range are tool errors that name what is accepted; none
// reaches the manager.
func TestArgumentChecks(t *testing.T) {
	cases := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"exec", map[string]any{"command": "ls", "sandbox": ""}, `"sandbox" must be a name (names are 1-63`},
		{"exec", map[string]any{"command": "ls", "sandbox": 5}, `"sandbox" must be a name (names are 1-63 letters, digits, '_', '.', '-', starting with a letter or digit); got the number 5`},
		{"exec", map[string]any{"command": "ls", "sandbox": true}, `"sandbox" must be a name (names are 1-63`},
		{"status", map[string]any{"sandbox": ""}, `"sandbox" must be a name (names are 1-63`},
		{"write_file", map[string]any{"path": "/a", "content": "x", "sandbox": []any{"a"}}, "got a list of 1 item(s)"},
		{"exec", map[string]any{"command": "ls", "timeout": 0.001}, `"timeout" must be a number from 1 to 3600; got the number 0.001`},
		{"exec", map[string]any{"command": "ls", "timeout": 3600.5}, `"timeout" must be a number from 1 to 3600`},
		{"exec", map[string]any{"command": "ls", "timeout": "10"}, `"timeout" must be a number from 1 to 3600; got the string "10"`},
		{"python", map[string]any{"code": "1", "timeout": -1}, `"timeout" must be a number from 1 to 3600; got the number -1`},
		{"install", map[string]any{"packages": []any{"jq"}, "timeout": 0.5}, `"timeout" must be a number from 1 to 3600`},
		{"exec", map[string]any{"command": "ls", "max_output": 2048.5}, `"max_output" must be a whole number from 1024 to 262144; got the number 2048.5`},
		{"exec", map[string]any{"command": "ls", "max_output": "big"}, `"max_output" must be a whole number from 1024 to 262144; got the string "big"`},
		{"logs", map[string]any{"name": "j", "since": -1}, `"since" must be a whole number from 0 to 9007199254740992; got the number -1`},
	}
	f := &fake{}
	s := connect(t, f, Options{Toolsets: []string{"all"}, OutputDir: t.TempDir()})
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s %v", c.tool, c.args), func(t *testing.T) {
			f.calls = nil
			r := s.call(c.tool, c.args)
			if !r.isError || !strings.Contains(r.text, c.want) {
				t.Fatalf("want a tool error containing %q, got %+v", c.want, r)
			}
			if len(f.calls) != 0 {
				t.Fatalf("the manager was called: %v", f.calls)
			}
		})
	}
}

// TestArgumentDefaults: an omitted or null sandbox is "default", and the
// ends of the timeout range are accepted.
func TestArgumentDefaults(t *testing.T) {
	f := &fake{}
	s := connect(t, f, Options{})
	for _, args := range []map[string]any{
		{"command": "ls"},
		{"command": "ls", "sandbox": nil},
		{"command": "ls", "timeout": 1},
		{"command": "ls", "timeout": 3600},
	} {
		f.calls = nil
		if r := s.call("exec", args); r.isError {
			t.Fatalf("%v: %+v", args, r)
		}
		if len(f.calls) != 1 || f.calls[0] != `exec default "ls"` {
			t.Fatalf("%v: calls %v", args, f.calls)
		}
	}
}

func TestOffsetArg(t *testing.T) {
	cases := []struct {
		args    map[string]any
		want    int64
		given   bool
		wantErr string
	}{
		{map[string]any{}, 0, false, ""},
		{map[string]any{"since": nil}, 0, false, ""},
		{map[string]any{"since": 0.0}, 0, true, ""},
		{map[string]any{"since": 1e12}, 1e12, true, ""},
		{map[string]any{"since": -1.0}, 0, false, "since must be between 0 and"},
		{map[string]any{"since": 1.5}, 0, false, "whole number"},
		{map[string]any{"since": 1e300}, 0, false, "since must be between 0 and"},
		{map[string]any{"since": "10"}, 0, false, "not a string"},
	}
	for _, c := range cases {
		req := mcp.CallToolRequest{}
		req.Params.Arguments = c.args
		got, given, err := offsetArg(req, "since")
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: err %v, want %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want || given != c.given {
			t.Errorf("%v: got %d %v %v, want %d %v", c.args, got, given, err, c.want, c.given)
		}
	}
}

// TestEveryToolRefusesBadArguments: every tool of every set refuses an
// unknown argument, and a value of the wrong type for each of its
// arguments, naming the argument, before anything runs.
func TestEveryToolRefusesBadArguments(t *testing.T) {
	f := &fake{}
	s := connect(t, f, Options{Toolsets: []string{"all"}, Dynamic: true, OutputDir: t.TempDir()})
	if len(s.tools) < 19 {
		t.Fatalf("only %d tools listed", len(s.tools))
	}
	wrong := map[string]any{"string": 12345, "number": "12", "integer": "12", "boolean": "yes", "array": "x", "object": "x"}
	for name, def := range s.tools {
		f.calls = nil
		r := s.call(name, map[string]any{"no_such_arg": 1})
		if !r.isError || !strings.HasPrefix(r.text, name+": invalid arguments: ") || !strings.Contains(r.text, `unknown argument "no_such_arg"; `+name+" takes") {
			t.Errorf("%s with an unknown argument: %+v", name, r)
		}
		for prop, schema := range def.InputSchema.Properties {
			typ, _ := schema.(map[string]any)["type"].(string)
			bad, ok := wrong[typ]
			if !ok {
				t.Errorf("%s.%s: no type in the schema", name, prop)
				continue
			}
			r := s.call(name, map[string]any{prop: bad})
			if !r.isError || !strings.Contains(r.text, fmt.Sprintf("%q must be ", prop)) || !strings.Contains(r.text, "; got ") {
				t.Errorf("%s with %s=%v: %+v", name, prop, bad, r)
			}
		}
		if len(f.calls) != 0 {
			t.Errorf("%s: the manager was called: %v", name, f.calls)
		}
	}
}

// TestJobLinesBounded: the text of jobs names every running job and only
// the most recent ended ones, and says how many it left out.
func TestJobLinesBounded(t *testing.T) {
	var list []sandbox.JobStatus
	code := 0
	for i := range 100 {
		st := sandbox.JobStatus{Name: fmt.Sprintf("j%03d", i), State: "exited", ExitCode: &code, Command: "true"}
		if i%25 == 0 {
			st.State, st.ExitCode = "running", nil
		}
		list = append(list, st)
	}
	text := jobLines(list)
	lines := strings.Split(text, "\n")
	if len(lines) != 4+jobListShown+1 {
		t.Fatalf("%d lines:\n%s", len(lines), text)
	}
	for _, want := range []string{"j000: running", "j025: running", "j050: running", "j075: running", "j099: exited", "(and 76 older ended jobs"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "j001:") {
		t.Errorf("an old ended job is named:\n%s", text)
	}
}

// TestNoticesReachTheNextCall: a server notice (a repaired state file) is
// added to the next tool result, whatever the tool, and only once.
func TestNoticesReachTheNextCall(t *testing.T) {
	n := &Notices{}
	s := connect(t, &fake{}, Options{Notices: n})
	n.Add("the state file was damaged")
	if r := s.call("jobs", map[string]any{}); !strings.Contains(r.text, "[sandbox-mcp: the state file was damaged]") {
		t.Fatalf("first call: %q", r.text)
	}
	if r := s.call("jobs", map[string]any{}); strings.Contains(r.text, "state file") {
		t.Fatalf("told twice: %q", r.text)
	}
}
