package mcpserver

import (
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

func BenchmarkArgCheck(b *testing.B) {
	s := &Server{planned: map[string]bool{}}
	var defs []mcp.Tool
	for _, t := range s.tools() {
		defs = append(defs, t.def)
	}
	c, err := newArgChecker(defs)
	if err != nil {
		b.Fatal(err)
	}
	args := map[string]any{"command": "true", "timeout": 30.0, "sandbox": "default"}
	b.ReportAllocs()
	for b.Loop() {
		if msg := c.check("exec", args); msg != "" {
			b.Fatal(msg)
		}
	}
}
