package mcpserver

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

var update = flag.Bool("update", false, "rewrite testdata/tools.json")

func listTools(t *testing.T, toolsets ...string) []mcp.Tool {
	t.Helper()
	ms, err := New(sandbox.NewManager(nil, sandbox.Config{}), Options{Toolsets: toolsets})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewInProcessClient(ms)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Tools
}

// TestToolSchemasSnapshot makes every change to what agents see a visible
// diff in testdata/tools.json (regenerate with -update).
func TestToolSchemasSnapshot(t *testing.T) {
	got, err := json.MarshalIndent(listTools(t), "", "  ")
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

func TestToolListBudget(t *testing.T) {
	b, _ := json.Marshal(listTools(t))
	const budget = 14000
	if len(b) > budget {
		t.Fatalf("tools/list is %d bytes, budget %d: every byte is sent on every turn", len(b), budget)
	}
	t.Logf("tools/list: %d bytes", len(b))
}

func TestToolsets(t *testing.T) {
	tools := listTools(t, "files")
	if len(tools) != 3 {
		t.Fatalf("files toolset has %d tools", len(tools))
	}
	if _, err := New(sandbox.NewManager(nil, sandbox.Config{}), Options{Toolsets: []string{"bogus"}}); err == nil {
		t.Fatal("unknown toolset accepted")
	}
}
