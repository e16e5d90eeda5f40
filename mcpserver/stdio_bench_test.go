package mcpserver

import (
	"context"
	"io"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkStdioCall is the server's own cost of one warm call through
// the stdio transport with the official go-sdk client, the engine left
// out (the fake answers at once): exec against ping, the MCP floor; the
// exec through the transport's direct path, as the server runs, and
// through mcp-go's HandleMessage.
func BenchmarkStdioCall(b *testing.B) {
	for _, direct := range []bool{true, false} {
		name := "direct"
		if !direct {
			name = "mcp-go"
		}
		b.Run(name, func(b *testing.B) { benchStdioCall(b, direct) })
	}
}

func benchStdioCall(b *testing.B, direct bool) {
	s, err := NewServer(&fake{}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	var call directCaller
	if direct {
		call = s.callDirect
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveStdio(context.Background(), s.ms, call, inR, outW, nil); outW.Close() }()
	ctx := context.Background()
	c := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "0"}, nil)
	cs, err := c.Connect(ctx, &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { cs.Close(); <-done }()
	b.Logf("protocol %s", cs.InitializeResult().ProtocolVersion)
	b.Run("ping", func(b *testing.B) {
		for b.Loop() {
			if err := cs.Ping(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exec", func(b *testing.B) {
		p := &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "true"}}
		for b.Loop() {
			r, err := cs.CallTool(ctx, p)
			if err != nil || r.IsError {
				b.Fatal(err, r)
			}
		}
	})
}
