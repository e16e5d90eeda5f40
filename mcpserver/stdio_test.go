package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// stdioPeer is a client of serveStdio over pipes, speaking raw JSON-RPC.
type stdioPeer struct {
	t    *testing.T
	in   *io.PipeWriter
	out  *bufio.Reader
	done chan error
}

// startStdio serves ms over pipes and initializes a session with roots.
func startStdio(t *testing.T, ms *server.MCPServer) *stdioPeer {
	t.Helper()
	return startPeer(t, ms, nil, `{"roots":{}}`)
}

// startPeer serves ms over pipes, with direct as the transport's direct
// path (nil: none), and initializes a session with capabilities caps.
func startPeer(t *testing.T, ms *server.MCPServer, direct directCaller, caps string) *stdioPeer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &stdioPeer{t: t, in: inW, out: bufio.NewReader(outR), done: make(chan error, 1)}
	go func() {
		p.done <- serveStdio(context.Background(), ms, direct, inR, outW, nil)
		outW.Close()
	}()
	t.Cleanup(func() {
		inW.Close()
		go io.Copy(io.Discard, outR) // nothing may block the end on its write
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			t.Error("the transport did not end after its input did")
		}
	})
	p.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":` + caps + `,"clientInfo":{"name":"t","version":"0"}}}`)
	if m := p.read(); m["id"] != "init" || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return p
}

func (p *stdioPeer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// read returns the next message the server writes, within a minute.
func (p *stdioPeer) read() map[string]any {
	p.t.Helper()
	line := p.readLine()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		p.t.Fatalf("the server wrote %q: %v", line, err)
	}
	return m
}

// readLine returns the next line the server writes, as written, within a
// minute.
func (p *stdioPeer) readLine() string {
	p.t.Helper()
	type got struct {
		line string
		err  error
	}
	ch := make(chan got, 1)
	go func() {
		l, err := p.out.ReadString('\n')
		ch <- got{l, err}
	}()
	select {
	case g := <-ch:
		if g.err != nil {
			p.t.Fatalf("read: %v", g.err)
		}
		return g.line
	case <-time.After(time.Minute):
		p.t.Fatal("no message from the server within a minute")
		return ""
	}
}

// ask sends line and returns the next line the server writes.
func (p *stdioPeer) ask(line string) string {
	p.t.Helper()
	p.send(line)
	return p.readLine()
}

func call(id, tool string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, id, tool)
}

func resultText(t *testing.T, m map[string]any) string {
	t.Helper()
	res, _ := m["result"].(map[string]any)
	content, _ := res["content"].([]any)
	if len(content) == 0 {
		t.Fatalf("no content in %v", m)
	}
	c, _ := content[0].(map[string]any)
	s, _ := c["text"].(string)
	return s
}

// TestStdioFramingAndErrors: a line that is not JSON gets the parse error
// (id null) the message limiter expects, a notification gets no answer,
// an unknown method gets an error under its own id, and blank lines are
// skipped; the session goes on.
func TestStdioFramingAndErrors(t *testing.T) {
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("hi"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("hello"), nil
	})
	p := startStdio(t, ms)

	p.send(`{"jsonrpc":"2.0","id":1,"method":`)
	m := p.read()
	if e, _ := m["error"].(map[string]any); e == nil || e["code"] != float64(mcp.PARSE_ERROR) || m["id"] != nil {
		t.Fatalf("a line that is not JSON: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`)
	p.send("")
	p.send("   ")
	p.send(`{"jsonrpc":"2.0","id":7,"method":"no/such/method"}`)
	if m = p.read(); m["id"] != float64(7) || m["error"] == nil {
		t.Fatalf("an unknown method: %v (a notification or blank line must get no answer)", m)
	}
	p.send(call(`"s"`, "hi"))
	if m = p.read(); m["id"] != "s" || resultText(t, m) != "hello" {
		t.Fatalf("a call after all that: %v", m)
	}
	// An answer to nothing the server asked is dropped, not answered.
	p.send(`{"jsonrpc":"2.0","id":99,"result":{}}`)
	p.send(call("8", "hi"))
	if m = p.read(); m["id"] != float64(8) {
		t.Fatalf("after a stray answer: %v", m)
	}
}

// TestStdioSlowCallDoesNotHoldOthers: a call that waits does not hold
// back the calls after it, and each answer carries its own id.
func TestStdioSlowCallDoesNotHoldOthers(t *testing.T) {
	release := make(chan struct{})
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("slow"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-release:
			return mcp.NewToolResultText("slow done"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	ms.AddTool(mcp.NewTool("fast"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("fast done"), nil
	})
	p := startStdio(t, ms)
	p.send(call("1", "slow"))
	for i := 2; i <= 50; i++ {
		p.send(call(fmt.Sprint(i), "fast"))
	}
	seen := map[float64]bool{}
	for range 49 {
		m := p.read()
		if m["id"] == float64(1) {
			t.Fatalf("the slow call answered before it was released: %v", m)
		}
		if resultText(t, m) != "fast done" {
			t.Fatalf("%v", m)
		}
		seen[m["id"].(float64)] = true
	}
	if len(seen) != 49 {
		t.Fatalf("answers to %d distinct calls, want 49", len(seen))
	}
	close(release)
	if m := p.read(); m["id"] != float64(1) || resultText(t, m) != "slow done" {
		t.Fatalf("the slow call: %v", m)
	}
}

// TestStdioRoots: a handler asks the client for its roots; the request
// goes out with empty params (some clients cannot decode one without),
// the answer reaches that handler, and a client's error answer is an
// error there.
func TestStdioRoots(t *testing.T) {
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false), server.WithRoots())
	ms.AddTool(mcp.NewTool("roots"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := server.ServerFromContext(ctx).RequestRoots(ctx, mcp.ListRootsRequest{})
		if err != nil {
			return mcp.NewToolResultText("error: " + err.Error()), nil
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return mcp.NewToolResultText(strings.Join(uris, ",")), nil
	})
	p := startStdio(t, ms)
	for _, tc := range []struct{ answer, want string }{
		{`"result":{"roots":[{"uri":"file:///a"},{"uri":"file:///b"}]}`, "file:///a,file:///b"},
		{`"error":{"code":-32601,"message":"no roots here"}`, "error: list roots: the client answered -32601: no roots here"},
	} {
		p.send(call("1", "roots"))
		req := p.read()
		params, ok := req["params"].(map[string]any)
		if req["method"] != "roots/list" || !ok || len(params) != 0 {
			t.Fatalf("the roots request: %v", req)
		}
		id, _ := json.Marshal(req["id"])
		p.send(`{"jsonrpc":"2.0","id":` + string(id) + `,` + tc.answer + `}`)
		if m := p.read(); m["id"] != float64(1) || resultText(t, m) != tc.want {
			t.Fatalf("with the answer %s: %v, want %q", tc.answer, m, tc.want)
		}
	}
}

// TestStdioPanicIsAnswered: a handler that panics (with no recovery of
// its own) gets its request an internal error under its id, and the
// session goes on.
func TestStdioPanicIsAnswered(t *testing.T) {
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("boom"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		panic("boom")
	})
	ms.AddTool(mcp.NewTool("hi"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("hello"), nil
	})
	p := startStdio(t, ms)
	p.send(call(`"b"`, "boom"))
	m := p.read()
	if e, _ := m["error"].(map[string]any); m["id"] != "b" || e == nil || e["code"] != float64(mcp.INTERNAL_ERROR) {
		t.Fatalf("a panicking handler: %v", m)
	}
	p.send(call("2", "hi"))
	if m = p.read(); resultText(t, m) != "hello" {
		t.Fatalf("after the panic: %v", m)
	}
}

// TestStdioEndCancelsCalls: when the input ends, a call still running is
// cancelled and waited for before the transport returns.
func TestStdioEndCancelsCalls(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("wait"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		close(started)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // an orderly end takes a moment
		ended <- ctx.Err()
		return nil, ctx.Err()
	})
	inR, inW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveStdio(context.Background(), ms, nil, inR, io.Discard, nil) }()
	io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`+"\n")
	io.WriteString(inW, call("2", "wait")+"\n")
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the call did not start")
	}
	inW.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve after EOF: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the transport did not end after its input did")
	}
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the call ended with %v, want context.Canceled", err)
		}
	default:
		t.Fatal("the transport returned before the call it cancelled ended")
	}
}

// TestStdioWorkersAreReused: calls one after another are served by the
// same worker, whose stack has grown to what a call needs, rather than a
// new goroutine each.
func TestStdioWorkersAreReused(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{}
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("hi"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		buf := make([]byte, 64)
		g, _, _ := strings.Cut(string(buf[:runtime.Stack(buf, false)]), " [") // "goroutine 42"
		mu.Lock()
		served[g]++
		mu.Unlock()
		return mcp.NewToolResultText("hello"), nil
	})
	p := startStdio(t, ms)
	for i := range 200 {
		p.send(call(fmt.Sprint(i+10), "hi"))
		if m := p.read(); resultText(t, m) != "hello" {
			t.Fatalf("%v", m)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// A call can come while the worker that served the last one is still
	// writing its answer: a second worker then starts, and the two (or a
	// few) take turns.
	if len(served) > 4 {
		t.Fatalf("200 calls in turn were served by %d goroutines, want a few", len(served))
	}
}

// TestStdioCancelRightBehindItsCall: a notifications/cancelled that comes
// in the same write as its call (read before mcp-go has seen the call)
// still cancels it.
func TestStdioCancelRightBehindItsCall(t *testing.T) {
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("wait"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-ctx.Done():
			return mcp.NewToolResultText("cancelled"), nil
		case <-time.After(5 * time.Second):
			return mcp.NewToolResultText("ran to its end"), nil
		}
	})
	p := startStdio(t, ms)
	const n = 50
	var batch strings.Builder
	for i := range n {
		fmt.Fprintf(&batch, "%s\n", call(fmt.Sprint(100+i), "wait"))
		fmt.Fprintf(&batch, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`+"\n", 100+i)
	}
	p.send(strings.TrimSuffix(batch.String(), "\n"))
	// mcp-go answers a cancelled call too (the spec lets a server drop
	// it): each answer must say it was cancelled.
	for range n {
		m := p.read()
		if text := resultText(t, m); text != "cancelled" {
			t.Fatalf("call %v: %q", m["id"], text)
		}
	}
}

// TestStdioClientAnswersOfOddShapes: a roots answer whose id the client
// echoes as a string still reaches its request; an error answer with a
// code of another type is an error there, not a parse error.
func TestStdioClientAnswersOfOddShapes(t *testing.T) {
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false), server.WithRoots())
	ms.AddTool(mcp.NewTool("roots"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := server.ServerFromContext(ctx).RequestRoots(ctx, mcp.ListRootsRequest{})
		if err != nil {
			return mcp.NewToolResultText("error: " + err.Error()), nil
		}
		return mcp.NewToolResultText(fmt.Sprint(len(res.Roots), " roots")), nil
	})
	p := startStdio(t, ms)
	for _, tc := range []struct{ answer, want string }{
		{`"result":{"roots":[{"uri":"file:///a"}]}`, "1 roots"},
		{`"error":{"code":"odd","message":"no"}`, "error: list roots: the client answered odd: no"},
	} {
		p.send(call("1", "roots"))
		req := p.read()
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"%v",%s}`, req["id"], tc.answer))
		if m := p.read(); resultText(t, m) != tc.want {
			t.Fatalf("answer %s: %v, want %q", tc.answer, m, tc.want)
		}
	}
}

// TestStdioProgressComesBeforeItsResult: a progress notification a call
// sends before it returns is written before its result.
func TestStdioProgressComesBeforeItsResult(t *testing.T) {
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("step"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_ = server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
			map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": 1})
		return mcp.NewToolResultText("done"), nil
	})
	p := startStdio(t, ms)
	for i := range 100 {
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"step","arguments":{},"_meta":{"progressToken":%d}}}`, i+10, i))
		if m := p.read(); m["method"] != "notifications/progress" {
			t.Fatalf("call %d: the result came before its progress: %v", i, m)
		}
		if m := p.read(); resultText(t, m) != "done" {
			t.Fatalf("call %d: %v", i, m)
		}
	}
}

// TestStdioBusyAnswersRatherThanWaits: past maxInFlight calls under way,
// one more is answered at once with a busy error, and the reader goes on:
// a cancellation still reaches a call under way.
func TestStdioBusyAnswersRatherThanWaits(t *testing.T) {
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("wait"), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-ctx.Done():
			return mcp.NewToolResultText("cancelled"), nil
		case <-time.After(time.Minute):
			return mcp.NewToolResultText("ran to its end"), nil
		}
	})
	p := startStdio(t, ms)
	for i := range maxInFlight {
		p.send(call(fmt.Sprint(i+10), "wait"))
	}
	p.send(call(`"one more"`, "wait"))
	m := p.read()
	if e, _ := m["error"].(map[string]any); m["id"] != "one more" || e == nil || !strings.Contains(fmt.Sprint(e["message"]), "server busy") {
		t.Fatalf("one call past the limit: %v", m)
	}
	p.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":10}}`)
	if m = p.read(); m["id"] != float64(10) || resultText(t, m) != "cancelled" {
		t.Fatalf("a cancellation with every worker busy: %v", m)
	}
}

// TestStdioEndDoesNotWaitForeverOnAWrite: a client that stops reading
// does not keep the transport from ending.
func TestStdioEndDoesNotWaitForeverOnAWrite(t *testing.T) {
	defer func(d time.Duration) { endWait = d }(endWait)
	endWait = 200 * time.Millisecond
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	ms.AddTool(mcp.NewTool("hi"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("hello"), nil
	})
	inR, inW := io.Pipe()
	_, outW := io.Pipe() // never read
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveStdio(ctx, ms, nil, inR, outW, nil) }()
	io.WriteString(inW, call("1", "hi")+"\n")
	time.Sleep(100 * time.Millisecond) // the worker blocks on its write
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the transport's end waits for a write no one reads")
	}
	outW.Close()
}

// TestStdioAnswersWhatCameBeforeTheEnd: requests read just before the
// input ends are answered before the transport returns, whether or not
// the last line ends with a newline (a client that writes its requests
// and closes its end: `printf … | sandbox-mcp`).
func TestStdioAnswersWhatCameBeforeTheEnd(t *testing.T) {
	ms := server.NewMCPServer("t", "0", server.WithToolCapabilities(false))
	var in strings.Builder
	for i := range 10 {
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", i)
	}
	for round := range 300 {
		input := in.String()
		if round%2 == 1 {
			input = strings.TrimSuffix(input, "\n")
		}
		var out bytes.Buffer
		w := &lockedWriter{w: &out}
		if err := serveStdio(context.Background(), ms, nil, strings.NewReader(input), w, nil); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		got := strings.Count(out.String(), `"result"`)
		w.mu.Unlock()
		if got != 10 {
			t.Fatalf("round %d: %d of 10 pings answered when the transport returned:\n%s", round, got, out.String())
		}
	}
}

// lockedWriter serializes writes to w, for a reader that reads it after.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// An id's key is the one the general reading gives, for every form of
// id, and 7 and "7" differ.
func TestIDKeyMatchesTheGeneralReading(t *testing.T) {
	slow := func(raw json.RawMessage) string {
		v := requestID(raw).Value()
		return fmt.Sprintf("%T:%v", v, v)
	}
	for _, raw := range []string{`7`, `-7`, `0`, `-0`, `7.0`, `7e0`, `1e3`, `007`, `999999999999999`, `9999999999999999`,
		`12345678901234567890`, `"a"`, `""`, `"a\u0041"`, `"7"`, `"\ud83d\ude00"`, `null`, `true`, `{"a":1}`, `[1]`} {
		if got, want := idKey(json.RawMessage(raw)), slow(json.RawMessage(raw)); got != want {
			t.Errorf("idKey(%s) = %q, want %q", raw, got, want)
		}
	}
	if idKey(json.RawMessage(`7`)) == idKey(json.RawMessage(`"7"`)) || idKey(json.RawMessage(`"aA"`)) != idKey(json.RawMessage(`"a\u0041"`)) {
		t.Error(`7 and "7" must have keys of their own, "aA" and "a\u0041" one`)
	}
}
