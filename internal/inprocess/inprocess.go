// Package inprocess connects tests to an MCP server in the same process
// through mcp-go's in-process client: one session per client, so tests
// run in parallel without sharing the stdio transport's session.
package inprocess

import (
	"context"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Connect starts a client of ms, initialized as clientName, and closes it
// when the test ends.
func Connect(t testing.TB, ms *server.MCPServer, clientName string) *client.Client {
	t.Helper()
	c, err := client.NewInProcessClient(ms)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: clientName, Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}
