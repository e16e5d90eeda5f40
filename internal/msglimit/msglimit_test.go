package msglimit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// conn is a real mcp-go stdio server behind a Limiter, over pipes.
type conn struct {
	t       *testing.T
	in      *io.PipeWriter
	replies chan map[string]any
	dropped chan struct{}
}

func serve(t *testing.T, max int64) *conn {
	t.Helper()
	ms := server.NewMCPServer("test", "0")
	ms.AddTool(mcp.NewTool("echo", mcp.WithString("text")), func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText(fmt.Sprint(len(req.GetString("text", "")))), nil
	})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &conn{t: t, in: inW, replies: make(chan map[string]any, 100), dropped: make(chan struct{}, 10)}
	lim := New(inR, outW, Options{Max: max, Hint: func() string { return "send it in parts" }, Dropped: func() { c.dropped <- struct{}{} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = server.NewStdioServer(ms).Listen(ctx, lim.Reader(), lim.Writer())
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("reply is not JSON: %q", sc.Text())
				continue
			}
			c.replies <- m
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		<-done
		outW.Close()
	})
	return c
}

func (c *conn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, s); err != nil {
		c.t.Fatal(err)
	}
}

// next returns the next reply; a hang fails the test.
func (c *conn) next() map[string]any {
	c.t.Helper()
	select {
	case m := <-c.replies:
		return m
	case <-time.After(30 * time.Second):
		c.t.Fatal("no reply")
	}
	return nil
}

func call(id, text string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + text + `"}}}` + "\n"
}

// TestOverlongMessage: an over-long message gets one error reply with its
// id and the hint, and the server answers later messages; this holds both
// when the transport saw part of the message and when it saw none.
func TestOverlongMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int64
		size int
	}{
		{"cut after the transport saw part", 100 << 10, 300 << 10},
		{"cut before the transport saw any", 1 << 10, 5 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serve(t, tc.max)
			c.send(call("7", strings.Repeat("a", tc.size)))
			r := c.next()
			e, _ := r["error"].(map[string]any)
			if r["id"] != 7.0 || e == nil || e["code"] != float64(CodeTooLarge) ||
				!strings.Contains(e["message"].(string), "message too large: over the "+sizeText(tc.max)+" limit") ||
				!strings.Contains(e["message"].(string), "send it in parts") {
				t.Fatalf("reply %v", r)
			}
			select {
			case <-c.dropped:
			case <-time.After(30 * time.Second):
				t.Fatal("Dropped not called")
			}
			c.send(call(`"next"`, "hello"))
			r = c.next()
			if r["id"] != "next" || r["error"] != nil {
				t.Fatalf("the next message got %v (a second reply to the long one?)", r)
			}
		})
	}
}

// TestMessageAtTheLimitPasses: a message of exactly Max bytes is served.
func TestMessageAtTheLimitPasses(t *testing.T) {
	msg := call("1", strings.Repeat("b", 200<<10))
	c := serve(t, int64(len(msg)-1))
	c.send(msg)
	r := c.next()
	res, _ := r["result"].(map[string]any)
	if r["id"] != 1.0 || res == nil {
		t.Fatalf("reply %v", r)
	}
	if text := res["content"].([]any)[0].(map[string]any)["text"]; text != fmt.Sprint(200<<10) {
		t.Fatalf("the tool saw %v bytes", text)
	}
	c.send(call("2", strings.Repeat("b", 200<<10)+"b"))
	if r := c.next(); r["id"] != 2.0 || r["error"] == nil {
		t.Fatalf("one byte over: %v", r)
	}
}

// TestOverlongWithoutID: an over-long notification, or a message whose id
// comes after a long value, is answered with id null.
func TestOverlongWithoutID(t *testing.T) {
	c := serve(t, 100<<10)
	big := strings.Repeat("c", 200<<10)
	c.send(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + big + `"}}` + "\n")
	if r := c.next(); r["id"] != nil || r["error"] == nil {
		t.Fatalf("reply %v", r)
	}
	c.send(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo","arguments":{"text":"` + big + `"}},"id":9}` + "\n")
	if r := c.next(); r["id"] != nil || r["error"] == nil {
		t.Fatalf("reply %v", r)
	}
	c.send(call("3", "x"))
	if r := c.next(); r["id"] != 3.0 || r["error"] != nil {
		t.Fatalf("reply %v", r)
	}
}

// TestParseErrorsStillReported: a malformed short line still gets the
// transport's parse error; only the one for a cut message is held back.
func TestParseErrorsStillReported(t *testing.T) {
	c := serve(t, 100<<10)
	c.send("{not json\n")
	r := c.next()
	if e, _ := r["error"].(map[string]any); e == nil || e["code"] != -32700.0 {
		t.Fatalf("reply %v", r)
	}
	c.send(call("4", strings.Repeat("d", 300<<10)))
	if r := c.next(); r["id"] != 4.0 {
		t.Fatalf("reply %v", r)
	}
	c.send("{still not json\n")
	if r := c.next(); r["error"].(map[string]any)["code"] != -32700.0 {
		t.Fatalf("reply %v", r)
	}
}

func TestFindID(t *testing.T) {
	for in, want := range map[string]string{
		`{"jsonrpc":"2.0","id":12,"method":"x","params":{"a":"`: "12",
		`{"id":"abc","params":`:                                 `"abc"`,
		`{"params":{"a":[1,2,{"id":5}]},"id":-3}`:               "-3",
		`{"params":{"a":"unterminated`:                          "",
		`{"id":null}`:                                           "",
		`{"id":{"x":1}}`:                                        "",
		`[1,2]`:                                                 "",
		`garbage`:                                               "",
	} {
		if got := string(findID([]byte(in))); got != want {
			t.Errorf("findID(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestIsParseError(t *testing.T) {
	for in, want := range map[string]bool{
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}` + "\n": true,
		`{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}`:                  true,
		`{"jsonrpc":"2.0","id":3,"error":{"code":-32700,"message":"Parse error"}}`:           false,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"-32700"}}`:             false,
		`{"jsonrpc":"2.0","id":1,"result":{"text":"-32700"}}`:                                false,
	} {
		if got := isParseError([]byte(in)); got != want {
			t.Errorf("isParseError(%s) = %v", in, got)
		}
	}
}

// TestInvalidUTF8IsAParseError: a message with bytes that are not UTF-8 is
// answered with a parse error carrying its id (and only that: the
// transport's own reply is held back), in a short message and past the
// first piece of a long one; text whose characters straddle the pieces
// the limiter reads passes unchanged.
func TestInvalidUTF8IsAParseError(t *testing.T) {
	c := serve(t, DefaultMax)
	for i, text := range []string{"a\xffb", strings.Repeat("a", 200<<10) + "\xc3(" + "z", "ok\xe2\x82"} {
		id := fmt.Sprint(10 + i)
		c.send(call(id, text))
		r := c.next()
		e, _ := r["error"].(map[string]any)
		if fmt.Sprint(r["id"]) != id || e == nil || e["code"] != float64(CodeParseError) || !strings.Contains(e["message"].(string), "not valid UTF-8") {
			t.Fatalf("message %d: reply %v", i, r)
		}
	}
	// é (2 bytes) and € (3 bytes) at every offset around the 64 KiB piece
	// boundary: the tool sees every byte as sent.
	head := len(call("1", "")) - len("\"}}}\n")
	for shift := -3; shift <= 3; shift++ {
		for _, ch := range []string{"é", "€", "😀"} {
			text := strings.Repeat("a", readSize-head+shift) + ch + "z"
			c.send(call("20", text))
			r := c.next()
			res, _ := r["result"].(map[string]any)
			if res == nil {
				t.Fatalf("shift %d %q: %v", shift, ch, r)
			}
			if got := res["content"].([]any)[0].(map[string]any)["text"]; got != fmt.Sprint(len(text)) {
				t.Fatalf("shift %d %q: the tool saw %v bytes, want %d", shift, ch, got, len(text))
			}
		}
	}
}
