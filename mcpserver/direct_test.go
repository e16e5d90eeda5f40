package mcpserver

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
)

// startLines serves s over pipes, through the direct path or mcp-go's
// alone, for a client with capabilities caps.
func startLines(t *testing.T, s *Server, direct bool, caps string) *stdioPeer {
	t.Helper()
	var call directCaller
	if direct {
		call = s.callDirect
	}
	return startPeer(t, s.ms, call, caps)
}

// directCases are tools/call messages, and whether the direct path takes
// them (the others go to mcp-go).
var directCases = []struct {
	msg    string
	direct bool
}{
	{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"exec","arguments":{"command":"echo hi"}}}`, true},
	{`{"jsonrpc":"2.0","id":"a-b","method":"tools/call","params":{"name":"exec","arguments":{"command":"echo hi"}}}`, true},
	{`{"jsonrpc":"2.0","id":"\u0041<&>","method":"tools/call","params":{"name":"exec","arguments":{"command":"echo hi"}}}`, true},
	{`{"jsonrpc":"2.0","id":-5,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x","timeout":30}}}`, true},
	{`{"jsonrpc":"2.0","id":999999999999999,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"}}}`, true},
	{`{"jsonrpc":"2.0","id":7.0,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"}}}`, false},
	{`{"jsonrpc":"2.0","id":1e3,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"}}}`, false},
	{`{"jsonrpc":"2.0","id":1234567890123456789,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"}}}`, false},
	{`{"jsonrpc":"2.0","id":-0,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"}}}`, false},
	// A tool's refusal of its arguments, a panic, an error result.
	{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"exec","arguments":{"command":5}}}`, true},
	{`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec","arguments":{"command":"panic"}}}`, true},
	{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"exec","arguments":{"command":"fail"}}}`, true},
	{`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x","bogus":1}}}`, true},
	{`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"exec","arguments":null}}`, true},
	{`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"exec"}}`, true},
	{`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"status","arguments":{}}}`, true},
	{`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"},"_meta":{"progressToken":"p"}}}`, true},
	{`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"},"_meta":{}}}`, true},
	// What the direct path leaves to mcp-go.
	{`{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`, false},
	{`{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"exec","arguments":"echo hi"}}`, false},
	{`{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"exec","arguments":[1]}}`, false},
	{`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"},"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}`, true},
	{`{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"},"_meta":null}}`, true},
	// The stateless revision, as the official Go SDK's client sends it.
	{`{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"exec","arguments":{"command":"true"}}}`, true},
	{`{"jsonrpc":"2.0","id":18,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"exec","arguments":{"command":"fail"}}}`, true},
	{`{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"_meta":{"progressToken":7,"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/logLevel":"debug"},"name":"exec","arguments":{"command":"fail"}}}`, true},
	{`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"download","arguments":{"sandbox_path":"/a","local_path":"/b"}}}`, true},
	{`{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"},"name":"exec","arguments":{"command":"x"}}}`, true},
	{`{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"exec","arguments":{"command":"x"}}}`, false},
	{`{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/protocolVersion":"2099-01-01"},"name":"exec","arguments":{"command":"x"}}}`, false},
	{`{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":"none","io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"exec","arguments":{"command":"x"}}}`, false},
	{`{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t"}},"name":"exec","arguments":{"command":"x"}}}`, false},
	{`{"jsonrpc":"2.0","id":33,"method":"tools/call","params":{"_meta":[],"name":"exec","arguments":{"command":"x"}}}`, false},
	{`{"jsonrpc":"2.0","id":24,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"},"task":{}}}`, false},
	{`{"jsonrpc":"2.0","id":25,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"},"inputResponses":{}}}`, false},
	{`{"jsonrpc":"2.0","id":26,"method":"tools/call","params":"exec"}`, false},
	{`{"jsonrpc":"2.0","id":27,"method":"tools/call"}`, false},
	{`{"jsonrpc":"1.0","id":28,"method":"tools/call","params":{"name":"exec","arguments":{"command":"x"}}}`, false},
	{`{"jsonrpc":"2.0","id":29,"method":"tools\/call","params":{"name":"exec","arguments":{"command":"x"}}}`, false},
}

// directFake is a fake whose exec answers the same every time: "panic"
// panics, "fail" fails.
func directFake() *fake {
	return &fake{exec: func(_ string, req shell.Request) (sandbox.ExecResult, error) {
		switch req.Command {
		case "panic":
			panic("boom")
		case "fail":
			return sandbox.ExecResult{}, sandbox.ErrNotFound
		}
		_, _ = io.WriteString(req.Stdout, "hi\n")
		return sandbox.ExecResult{Result: shell.Result{ExitCode: 0, Duration: 3 * time.Millisecond}}, nil
	}}
}

// TestDirectCallsAnswerAsMCPGo: every tools/call gets the same answer,
// byte for byte, whether the transport's direct path serves it or mcp-go
// does: results, a tool's refusal, a handler's error and panic, ids of
// every form.
func TestDirectCallsAnswerAsMCPGo(t *testing.T) {
	newServer := func() *Server {
		s, err := NewServer(directFake(), Options{Toolsets: []string{"all"}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	direct, viaMCPGo := startLines(t, newServer(), true, "{}"), startLines(t, newServer(), false, "{}")
	for _, c := range directCases {
		got, want := direct.ask(c.msg), viaMCPGo.ask(c.msg)
		if got != want {
			t.Errorf("%s\ndirect: %s\nmcp-go: %s", c.msg, got, want)
		}
	}
}

// TestDirectTakesTheCommonCalls: the direct path serves the calls it
// should (a warm exec above all) and leaves the rest to mcp-go.
func TestDirectTakesTheCommonCalls(t *testing.T) {
	s, err := NewServer(directFake(), Options{Toolsets: []string{"all"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range directCases {
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  json.RawMessage `json:"method"`
			Params  json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal([]byte(c.msg), &m); err != nil {
			t.Fatal(err)
		}
		// As the transport routes: only a tools/call of JSON-RPC 2.0.
		took := false
		if string(m.Method) == `"tools/call"` && m.JSONRPC == "2.0" {
			_, took = s.callDirect(context.Background(), m.ID, m.Params)
		}
		if took != c.direct {
			t.Errorf("%s: direct path took it: %v, want %v", c.msg, took, c.direct)
		}
	}
}

// TestDirectAsksForRoots: a transfer tool that needs the client's roots
// asks for them over the direct path as mcp-go does (roots/list, for a
// client of the 2025 revisions), and answers the same once it has them.
func TestDirectAsksForRoots(t *testing.T) {
	dir := t.TempDir()
	msg := `{"jsonrpc":"2.0","id":"d","method":"tools/call","params":{"name":"download","arguments":{"sandbox_path":"/workspace/a","local_path":"/elsewhere/a"}}}`
	var answers []string
	for _, direct := range []bool{true, false} {
		s, err := NewServer(&fake{}, Options{Toolsets: []string{"all"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, took := s.callDirect(context.Background(), json.RawMessage(`"d"`), json.RawMessage(`{"name":"download","arguments":{}}`)); !took {
			t.Fatal("the direct path does not take a download")
		}
		p := startLines(t, s, direct, `{"roots":{}}`)
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal([]byte(p.ask(msg)), &req); err != nil || req.Method != "roots/list" {
			t.Fatalf("direct %v: the server's first message after a download call is not roots/list: %+v %v", direct, req, err)
		}
		answers = append(answers, p.ask(`{"jsonrpc":"2.0","id":`+string(req.ID)+`,"result":{"roots":[{"uri":"file://`+dir+`"}]}}`))
	}
	if answers[0] != answers[1] {
		t.Fatalf("direct: %s\nmcp-go: %s", answers[0], answers[1])
	}
	if !strings.Contains(answers[0], dir) {
		t.Fatalf("the answer does not name the client's root %s: %s", dir, answers[0])
	}
}

// TestDirectSkipsNoHook: the direct path runs no mcp-go hook, so the
// server may register none that acts on a tool call (its telemetry and
// audit are middleware, which both paths run); the one it has drops the
// raw copy of large arguments, which the direct path never makes. A hook
// added here has to be run by callDirect too.
func TestDirectSkipsNoHook(t *testing.T) {
	s, err := NewServer(&fake{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := s.hooks(Options{Telemetry: telemetry.New(telemetry.NewMetrics(), nil)})
	if len(h.OnAfterCallTool) != 0 || len(h.OnRequestInitialization) != 0 || len(h.OnBeforeCallTool) != 1 {
		t.Fatalf("hooks on a tool call: %d after, %d at a request's start, %d before (want 0, 0, 1: dropRawArguments)",
			len(h.OnAfterCallTool), len(h.OnRequestInitialization), len(h.OnBeforeCallTool))
	}
}

// FuzzDirectMatchesMCPGo: whatever a client sends as a tools/call, the
// direct path answers it as mcp-go would, or leaves it to mcp-go. Each
// input runs on a session of its own on each path.
func FuzzDirectMatchesMCPGo(f *testing.F) {
	for _, c := range directCases {
		f.Add(c.msg)
	}
	s, err := NewServer(directFake(), Options{Toolsets: []string{"all"}})
	if err != nil {
		f.Fatal(err)
	}
	session := func() context.Context {
		sess := &stdioSession{notifications: make(chan mcp.JSONRPCNotification, notificationQueue), pending: map[int64]chan reply{}}
		return s.ms.WithContext(context.Background(), sess)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		var l line
		if len(msg) > 4096 || json.Unmarshal([]byte(msg), &l) != nil || !l.hasID() {
			t.Skip("not a request")
		}
		var p struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(l.Params, &p) == nil && p.Name != "exec" && s.ms.GetTool(p.Name) != nil {
			t.Skip("a tool other than exec: its answers may name times and ids")
		}
		want, _ := json.Marshal(s.ms.HandleMessage(session(), json.RawMessage(msg)))
		if !l.directCall() {
			return
		}
		resp, took := s.callDirect(session(), l.ID, l.Params)
		if !took {
			return
		}
		got, _ := json.Marshal(resp)
		if string(got) != string(want) {
			t.Fatalf("%s\ndirect: %s\nmcp-go: %s", msg, got, want)
		}
	})
}
