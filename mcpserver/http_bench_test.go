package mcpserver

import (
	"context"
	"net/http"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/mcphttp"
)

// BenchmarkHTTPCall is BenchmarkStdioCall's exec through the streamable
// HTTP face (the newest protocol revision, whose every tools/call mcp-go
// checks against the tool's input schema), one client, then eight at
// once on the two processors these machines have. There is no ping: the
// go-sdk client (v1.8.0) sends its ping without the per-request _meta
// that revision requires over HTTP, and mcp-go refuses it.
func BenchmarkHTTPCall(b *testing.B) {
	ms, err := New(&fake{}, Options{Transport: "tcp"})
	if err != nil {
		b.Fatal(err)
	}
	const token = "bench-token-bench-token-bench-token"
	hs, err := mcphttp.Listen("127.0.0.1:0", ms, mcphttp.Options{Token: token})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = hs.Serve(ctx, 0); close(done) }()
	defer func() { cancel(); <-done }()
	connect := func(b *testing.B) *sdk.ClientSession {
		c := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "0"}, nil)
		cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL(),
			HTTPClient: &http.Client{Transport: mcphttp.TokenTransport(http.DefaultTransport.(*http.Transport).Clone(), token)}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return cs
	}
	p := &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "true"}}
	b.Run("exec", func(b *testing.B) {
		cs := connect(b)
		defer cs.Close()
		for b.Loop() {
			if r, err := cs.CallTool(ctx, p); err != nil || r.IsError {
				b.Fatal(err, r)
			}
		}
	})
	b.Run("exec-8", func(b *testing.B) {
		b.SetParallelism(4) // 8 clients on 2 processors
		b.RunParallel(func(pb *testing.PB) {
			cs := connect(b)
			defer cs.Close()
			for pb.Next() {
				if r, err := cs.CallTool(ctx, p); err != nil || r.IsError {
					b.Error(err, r)
					return
				}
			}
		})
	})
}
