package mcphttp

import (
	"context"
	"net/http"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func BenchmarkTmpHTTPCall(b *testing.B) {
	s, err := Listen("127.0.0.1:0", echoServer(), Options{Token: testToken})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, 0); close(done) }()
	defer func() { cancel(); <-done }()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		c := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil)
		cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: s.URL(), HTTPClient: &http.Client{Transport: TokenTransport(http.DefaultTransport.(*http.Transport).Clone(), testToken)}}, nil)
		if err != nil {
			b.Error(err)
			return
		}
		defer cs.Close()
		p := &sdk.CallToolParams{Name: "progress", Arguments: map[string]any{"tag": "x", "n": 0}}
		for pb.Next() {
			if _, err := cs.CallTool(ctx, p); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
