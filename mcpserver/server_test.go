package mcpserver

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/internal/inprocess"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

var update = flag.Bool("update", false, "rewrite testdata/tools.json")

// session is an in-process MCP client on a server over f.
type session struct {
	t     *testing.T
	c     *client.Client
	tools map[string]mcp.Tool
}

func connect(t *testing.T, f Sandboxes, opts Options) *session {
	t.Helper()
	ms, err := New(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, c: inprocess.Connect(t, ms, "test")}
	s.refresh()
	return s
}

func (s *session) refresh() []mcp.Tool {
	res, err := s.c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		s.t.Fatal(err)
	}
	s.tools = map[string]mcp.Tool{}
	for _, tl := range res.Tools {
		s.tools[tl.Name] = tl
	}
	return res.Tools
}

type result struct {
	text    string
	isError bool
	data    map[string]any
	// images are the image contents' data (base64), links the resource
	// links' URIs.
	images, links []string
}

// call calls a tool and checks that its structured content matches the
// tool's output schema.
func (s *session) call(name string, args map[string]any) result {
	s.t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	res, err := s.c.CallTool(context.Background(), req)
	if err != nil {
		s.t.Fatalf("%s: protocol error %v", name, err)
	}
	var r result
	r.isError = res.IsError
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			r.text += tc.Text
		}
		if ic, ok := c.(mcp.ImageContent); ok {
			r.images = append(r.images, ic.Data)
		}
		if rl, ok := c.(mcp.ResourceLink); ok {
			r.links = append(r.links, rl.URI)
		}
	}
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &r.data)
		s.checkSchema(name, b)
	} else if !res.IsError {
		s.t.Errorf("%s: a successful result without structured content", name)
	}
	return r
}

func (s *session) checkSchema(name string, content []byte) {
	s.t.Helper()
	raw, _ := json.Marshal(s.tools[name].OutputSchema)
	var sch jsonschema.Schema
	if err := json.Unmarshal(raw, &sch); err != nil {
		s.t.Fatalf("%s: output schema: %v", name, err)
	}
	rs, err := sch.Resolve(nil)
	if err != nil {
		s.t.Fatalf("%s: output schema: %v", name, err)
	}
	var inst any
	_ = json.Unmarshal(content, &inst)
	if err := rs.Validate(inst); err != nil {
		s.t.Errorf("%s: structured content does not match the output schema: %v\n%s", name, err, content)
	}
}

func listTools(t *testing.T, toolsets ...string) []mcp.Tool {
	t.Helper()
	return connect(t, &fake{}, Options{Toolsets: toolsets}).refresh()
}

// TestToolSchemasSnapshot makes every change to what agents see a visible
// diff in testdata/tools.json (regenerate with -update).
func TestToolSchemasSnapshot(t *testing.T) {
	got, err := json.MarshalIndent(listTools(t, "all"), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile("testdata/tools.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/tools.json")
	if err != nil {
		t.Fatalf("%v (run go test ./mcpserver -update)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("tool schemas changed; review and run go test ./mcpserver -update")
	}
}

// TestOpenWorldTools: a tool that runs a program of the agent's, which has
// the sandbox's network, or fetches from a mirror says it reaches the open
// world; the tools that only read or move what the sandbox holds say not.
func TestOpenWorldTools(t *testing.T) {
	open := map[string]bool{"exec": true, "python": true, "bg": true, "terminal_open": true, "terminal_send": true,
		"install": true, "build_image": true, "git_clone": true}
	for _, tl := range listTools(t, "all") {
		got := tl.Annotations.OpenWorldHint != nil && *tl.Annotations.OpenWorldHint
		if want, listed := open[tl.Name]; got != want && (listed || got) {
			t.Errorf("%s: openWorldHint %v, want %v", tl.Name, got, want)
		}
	}
}

// TestToolListBudget holds each toolset's share of tools/list (output
// schemas included) to a budget, and the default sets to 24 KB: every byte
// is sent to the model on every turn.
func TestToolListBudget(t *testing.T) {
	budgets := map[string]int{"core": 12500, "jobs": 6000, "lifecycle": 7500, "transfer": 9500, "snapshots": 7500, "ports": 6500, "children": 3200, "terminals": 7000, "work": 7800}
	for _, set := range Toolsets {
		b, _ := json.Marshal(listTools(t, set.Name))
		budget, ok := budgets[set.Name]
		if !ok {
			t.Errorf("toolset %s has no budget", set.Name)
		}
		if len(b) > budget {
			t.Errorf("toolset %s: tools/list is %d bytes, budget %d", set.Name, len(b), budget)
		}
		t.Logf("toolset %-10s %6d bytes", set.Name, len(b))
	}
	b, _ := json.Marshal(listTools(t))
	if len(b) > 24<<10 {
		t.Errorf("default toolsets: tools/list is %d bytes, budget %d", len(b), 24<<10)
	}
	t.Logf("default        %6d bytes", len(b))
}

func TestToolsets(t *testing.T) {
	names := func(tools []mcp.Tool) string {
		var n []string
		for _, tl := range tools {
			n = append(n, tl.Name)
		}
		return strings.Join(n, " ")
	}
	if got := names(listTools(t, "jobs")); got != "bg jobs kill logs" {
		t.Errorf("jobs toolset: %s", got)
	}
	def := names(listTools(t))
	all := names(listTools(t, "all"))
	if !strings.Contains(def, "exec") || !strings.Contains(def, "bg") || !strings.Contains(def, "destroy") || strings.Contains(def, "upload") {
		t.Errorf("default %q", def)
	}
	if got := names(listTools(t, "transfer")); got != "download git_clone sync_list sync_start sync_stop upload" {
		t.Errorf("transfer toolset: %s", got)
	}
	if !strings.Contains(all, "upload") || !strings.Contains(all, "exec") {
		t.Errorf("all %q", all)
	}
	for _, tl := range listTools(t, "all") {
		if tl.Title == "" || tl.OutputSchema.Type != "object" {
			t.Errorf("%s: title %q, output schema %q", tl.Name, tl.Title, tl.OutputSchema.Type)
		}
		if len("sandbox_"+tl.Name) > 60 {
			t.Errorf("%s: server+tool name over 60 characters", tl.Name)
		}
	}
	_, err := New(&fake{}, Options{Toolsets: []string{"core", "bogus"}})
	if err == nil || !strings.Contains(err.Error(), `unknown toolset "bogus"`) || !strings.Contains(err.Error(), "core, jobs, lifecycle") {
		t.Fatalf("unknown toolset: %v", err)
	}
	if !strings.Contains(DescribeToolsets(), "jobs") || !strings.Contains(DescribeToolsets(), "bg, jobs, kill, logs") {
		t.Errorf("DescribeToolsets:\n%s", DescribeToolsets())
	}
}

func TestToolOutsideEnabledToolsetsIsRefused(t *testing.T) {
	f := &fake{}
	s := connect(t, f, Options{Toolsets: []string{"core"}})
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "bg", map[string]any{"command": "sleep 1"}
	_, err := s.c.CallTool(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("bg outside its toolset: %v", err)
	}
	if len(f.calls) != 0 {
		t.Fatalf("the manager was called: %v", f.calls)
	}
}

func TestDynamicToolsets(t *testing.T) {
	s := connect(t, &fake{}, Options{Toolsets: []string{"core"}, Dynamic: true})
	if _, ok := s.tools["bg"]; ok {
		t.Fatal("bg listed before its toolset was enabled")
	}
	r := s.call("toolsets", nil)
	if r.isError || !strings.Contains(r.text, "jobs [off]") || !strings.Contains(r.text, "core [on]") {
		t.Fatalf("toolsets: %+v", r)
	}
	r = s.call("enable_toolset", map[string]any{"toolset": "jobs"})
	if r.isError || !strings.Contains(r.text, "bg") {
		t.Fatalf("enable_toolset: %+v", r)
	}
	s.refresh()
	if _, ok := s.tools["bg"]; !ok {
		t.Fatal("bg not listed after enable_toolset")
	}
	if r := s.call("enable_toolset", map[string]any{"toolset": "jobs"}); r.isError || !strings.Contains(r.text, "already") {
		t.Fatalf("second enable: %+v", r)
	}
	if r := s.call("enable_toolset", map[string]any{"toolset": "nope"}); !r.isError || !strings.Contains(r.text, `one of "core", "jobs", "lifecycle"`) {
		t.Fatalf("unknown set: %+v", r)
	}
}

// TestBadInput: every tool refuses bad arguments with a tool error that
// says what is wrong, and never reaches the manager.
func TestBadInput(t *testing.T) {
	cases := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"exec", map[string]any{}, `"command" is required: a string`},
		{"exec", map[string]any{"command": "ls", "sandbox": "../etc"}, "names are 1-63"},
		{"exec", map[string]any{"command": "ls", "sandbox": strings.Repeat("a", 64)}, "names are 1-63"},
		{"exec", map[string]any{"command": "ls", "timeout": 0}, `"timeout" must be a number from 1 to 3600; got the number 0`},
		{"exec", map[string]any{"command": "ls", "timeout": "5"}, `"timeout" must be a number from 1 to 3600; got the string "5"`},
		{"exec", map[string]any{"command": "ls", "max_output": 10}, `"max_output" must be a whole number from`},
		{"exec", map[string]any{"command": "ls", "encoding": "hex"}, `"encoding" must be one of "text", "base64"`},
		{"exec", map[string]any{"command": "ls", "stdin": "a", "stdin_base64": "YQ=="}, "not both"},
		{"exec", map[string]any{"command": "ls", "stdin_base64": "%%%"}, "not valid base64"},
		{"python", map[string]any{}, `"code" is required`},
		{"install", map[string]any{}, `"packages" is required: a list of strings`},
		{"write_file", map[string]any{"content": "x"}, `"path" is required`},
		{"write_file", map[string]any{"path": "/a"}, `"content" is required`},
		{"write_file", map[string]any{"path": "/a", "content": "%%", "encoding": "base64"}, "illegal base64"},
		{"read_file", map[string]any{}, `"path" is required`},
		{"read_file", map[string]any{"path": "/a", "encoding": "rot13"}, `"encoding" must be one of`},
		{"batch_write", map[string]any{}, `"files" is required: an object whose values are strings`},
		{"batch_write", map[string]any{"files": map[string]any{"/a": 3}}, `"files[\"/a\"]" must be a string; got the number 3`},
		{"env", map[string]any{"action": "dance"}, `"action" must be one of "list", "set", "unset"; got the string "dance"`},
		{"output", map[string]any{"id": "nope"}, `output: unknown id "nope"`},
		{"output", map[string]any{"id": "0123456789ab"}, "no saved stdout"},
		{"bg", map[string]any{"command": "  "}, "command is required"},
		{"logs", map[string]any{}, `"name" is required`},
		{"logs", map[string]any{"name": "j", "tail": -1}, `"tail" must be`},
		{"kill", map[string]any{}, `"name" is required`},
		{"history", map[string]any{"limit": 1000}, `"limit" must be a whole number from 1 to 100; got the number 1000`},
		{"status", map[string]any{"sandbox": "-rm"}, "names are 1-63"},
		{"status", map[string]any{"sandbox": ""}, "names are 1-63"},
		{"status", map[string]any{"sandbox": 5}, `"sandbox" must be a name (names are 1-63`},
		{"exec", map[string]any{"command": "ls", "timout": 5}, `unknown argument "timout"; exec takes command, encoding, max_output, sandbox, stdin, stdin_base64, timeout, workdir`},
		{"list_all", map[string]any{"a": 1, "b": 2}, `unknown arguments "a", "b"; list_all takes no arguments`},
		{"destroy", map[string]any{"sandbox": "a b"}, "names are 1-63"},
		{"reset", map[string]any{"sandbox": "a/b"}, "names are 1-63"},
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

func TestExecResultShape(t *testing.T) {
	f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		fmt.Fprint(req.Stdout, "out\n")
		fmt.Fprint(req.Stderr, "oops\n")
		return sandbox.ExecResult{Result: shell.Result{ExitCode: 3}, Boot: sandbox.BootInfo{Created: true}}, nil
	}}
	s := connect(t, f, Options{})
	r := s.call("exec", map[string]any{"command": "false", "sandbox": "web", "timeout": 5})
	if !r.isError || !strings.HasPrefix(r.text, `exit 3 · `) || !strings.Contains(r.text, `sandbox "web" created`) ||
		!strings.Contains(r.text, "out\n--- stderr ---\noops") {
		t.Fatalf("%+v", r)
	}
	if r.data["exit_code"] != 3.0 || r.data["stdout"] != "out\n" || r.data["booted"] != "created" {
		t.Fatalf("structured: %v", r.data)
	}
	if f.calls[0] != `exec web "false"` {
		t.Fatalf("calls %v", f.calls)
	}
}

func TestExecLongOutputKeepsHeadAndTail(t *testing.T) {
	f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
		fmt.Fprint(req.Stdout, "HEAD"+strings.Repeat("x", 100000)+"TAIL")
		return sandbox.ExecResult{}, nil
	}}
	s := connect(t, f, Options{OutputDir: t.TempDir()})
	r := s.call("exec", map[string]any{"command": "yes", "max_output": 2048})
	if !strings.HasPrefix(r.data["stdout"].(string), "HEAD") || !strings.HasSuffix(r.data["stdout"].(string), "TAIL") ||
		!strings.Contains(r.text, "bytes of stdout omitted") || r.data["truncated"] != true {
		t.Fatalf("%.300s", r.text)
	}
	id, _ := r.data["output_id"].(string)
	o := s.call("output", map[string]any{"id": id, "offset": 0, "length": 10})
	if o.isError || o.data["data"] != "HEADxxxxxx" || o.data["total_bytes"] != 100008.0 {
		t.Fatalf("output: %+v", o)
	}
}

func TestErrorsAreToolErrors(t *testing.T) {
	f := &fake{errAll: &sandbox.CutShortError{Sandbox: "default", Why: "was reset by another server (pid 7)", Started: true}}
	s := connect(t, f, Options{})
	r := s.call("exec", map[string]any{"command": "sleep 9"})
	if !r.isError || !strings.Contains(r.text, "cut short") || !strings.Contains(r.text, "reset by another server (pid 7)") {
		t.Fatalf("%+v", r)
	}
	f.errAll = errEngine
	for _, tool := range []string{"exec", "python", "read_file", "write_file", "env", "status", "list_all", "destroy", "reset", "jobs", "stats", "history", "bg"} {
		args := map[string]any{}
		for k, v := range map[string]any{"command": "x", "code": "x", "path": "/a", "content": "x", "name": "j"} {
			if _, takes := s.tools[tool].InputSchema.Properties[k]; takes {
				args[k] = v
			}
		}
		r := s.call(tool, args)
		if !r.isError || !strings.Contains(r.text, "try: run podman info") {
			t.Errorf("%s: %+v", tool, r)
		}
	}
}

func TestEnvListShowsSecretsHidden(t *testing.T) {
	f := &fake{env: []sandbox.EnvVar{{Name: "A", Value: "1"}, {Name: "TOKEN", Value: "***", Secret: true}}}
	s := connect(t, f, Options{})
	r := s.call("env", nil)
	if r.isError || r.text != "A=1\nTOKEN=*** (secret)" {
		t.Fatalf("%+v", r)
	}
	if r := s.call("env", map[string]any{"action": "set", "key": "K", "value": "v", "secret": true}); r.isError || f.calls[0] != "setenv default K true" {
		t.Fatalf("%+v %v", r, f.calls)
	}
}

func TestLifecycleTexts(t *testing.T) {
	f := &fake{}
	s := connect(t, f, Options{})
	if r := s.call("destroy", map[string]any{"sandbox": "gone"}); r.isError || !strings.Contains(r.text, "did not exist") || r.data["existed"] != false {
		t.Fatalf("%+v", r)
	}
	if r := s.call("destroy", map[string]any{"sandbox": "web"}); r.isError || r.data["existed"] != true {
		t.Fatalf("%+v", r)
	}
	if r := s.call("health", nil); r.isError || !strings.Contains(r.text, "engine: podman 4.3.1 ok") || r.data["ok"] != true {
		t.Fatalf("%+v", r)
	}
	if r := s.call("stats", nil); r.isError || !strings.Contains(r.text, "cpu 1.5% of 1 core (2 CPUs)") {
		t.Fatalf("%+v", r)
	}
	if r := s.call("logs", map[string]any{"name": "j"}); r.isError || !strings.Contains(r.text, "exited with code 0") {
		t.Fatalf("%+v", r)
	}
	if r := s.call("kill", map[string]any{"name": "j"}); r.isError || !strings.Contains(r.text, "sent SIGTERM") {
		t.Fatalf("%+v", r)
	}
	for _, tool := range []string{"jobs", "list_all", "history", "status"} {
		if r := s.call(tool, nil); r.isError {
			t.Fatalf("%s: %+v", tool, r)
		}
	}
}

// TestStatusSaysWhenASandboxIsOnTheExecFallback: status tells the
// sandbox's agent, and for one that cannot run, that port forwards use an
// exec each and children have no control socket, and why.
func TestStatusSaysWhenASandboxIsOnTheExecFallback(t *testing.T) {
	f := &fake{}
	s := connect(t, f, Options{})
	if r := s.call("status", nil); r.isError || !strings.HasSuffix(r.text, "; agent: running (linux/arm64, embedded in the server)") {
		t.Fatalf("running: %+v", r)
	}
	f.agent = sandbox.AgentState{State: sandbox.AgentFallback, Platform: "linux/arm64",
		Reason: "no sandbox-ctl for linux/arm64: none is embedded (this server was built without `make build`)"}
	r := s.call("status", nil)
	want := "; agent: none (no sandbox-ctl for linux/arm64: none is embedded (this server was built without `make build`)); " +
		"port forwards use one engine exec per connection; children have no control socket"
	if r.isError || !strings.HasSuffix(r.text, want) {
		t.Fatalf("fallback: %s\nwant the suffix %s", r.text, want)
	}
}

// TestTextsNameOnlyExposedTools: with the core set alone, no description
// or result recommends bg or logs, which the client does not have; with
// the jobs set they do.
func TestTextsNameOnlyExposedTools(t *testing.T) {
	bgWord := regexp.MustCompile(`\bbg\b|\blogs\(|with logs`)
	timedOut := func(name string, req shell.Request) (sandbox.ExecResult, error) {
		return sandbox.ExecResult{Result: shell.Result{ExitCode: 124, TimedOut: true, LeftBehind: true}}, nil
	}
	for _, tc := range []struct {
		sets []string
		want bool
	}{{[]string{"core"}, false}, {[]string{"core", "lifecycle"}, false}, {nil, true}} {
		s := connect(t, &fake{exec: timedOut}, Options{Toolsets: tc.sets})
		var texts []string
		for _, def := range s.tools {
			b, _ := json.Marshal(def)
			texts = append(texts, def.Name+": "+string(b))
		}
		r := s.call("exec", map[string]any{"command": "sleep 9", "timeout": 1})
		texts = append(texts, "exec result: "+r.text)
		found := false
		for _, text := range texts {
			if bgWord.MatchString(text) {
				found = true
				if !tc.want {
					t.Errorf("toolsets %v: %.300s", tc.sets, text)
				}
			}
		}
		if tc.want && !found {
			t.Errorf("toolsets %v: nothing recommends bg", tc.sets)
		}
	}
}

// TestSlowStopIsReported: when ending a timed-out command took long (a
// loaded host), the result does not claim that nothing after the timeout
// ran: it says how long the command ran on.
func TestSlowStopIsReported(t *testing.T) {
	for _, took := range []time.Duration{10 * time.Millisecond, 2300 * time.Millisecond} {
		f := &fake{exec: func(name string, req shell.Request) (sandbox.ExecResult, error) {
			return sandbox.ExecResult{Result: shell.Result{ExitCode: 124, TimedOut: true, StopTook: took}}, nil
		}}
		s := connect(t, f, Options{})
		r := s.call("exec", map[string]any{"command": "sleep 9", "timeout": 1})
		slow := took > time.Second
		if strings.Contains(r.text, "nothing after that point ran") == slow || strings.Contains(r.text, "stopping the command took 2300ms more") != slow {
			t.Errorf("stop took %s: %q", took, r.text)
		}
		if ms, _ := r.data["stop_took_ms"].(float64); slow && ms != 2300 || !slow && ms != 0 {
			t.Errorf("stop took %s: stop_took_ms %v", took, r.data["stop_took_ms"])
		}
	}
}
