package app

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestClientSetup: the text to paste names the binary and the flags in
// use, for claude mcp add and as JSON that parses, with the Desktop
// config path of the platform.
func TestClientSetup(t *testing.T) {
	env := setupEnv([]string{"HOME=/Users/me", "DOCKER_HOST=unix:///x.sock", "SANDBOX_MCP_PREFIX=mine", "CONTAINERS_CONF="})
	text := ClientSetup("/Users/me/go/bin/sandbox-mcp", []string{"--toolsets", "core,jobs", "--memory", "2G"}, env, "darwin")
	if !strings.Contains(text, "claude mcp add --scope user -e DOCKER_HOST=unix:///x.sock -e SANDBOX_MCP_PREFIX=mine sandbox -- /Users/me/go/bin/sandbox-mcp serve --toolsets core,jobs --memory 2G") {
		t.Errorf("claude mcp add line missing:\n%s", text)
	}
	if !strings.Contains(text, "~/Library/Application Support/Claude/claude_desktop_config.json") || !strings.Contains(text, "~/.cursor/mcp.json") {
		t.Errorf("config paths missing:\n%s", text)
	}
	start, end := strings.Index(text, "{"), strings.LastIndex(text, "}")
	var cfg struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(text[start:end+1]), &cfg); err != nil {
		t.Fatalf("the JSON does not parse: %v\n%s", err, text)
	}
	s := cfg.MCPServers["sandbox"]
	if s.Command != "/Users/me/go/bin/sandbox-mcp" || strings.Join(s.Args, " ") != "serve --toolsets core,jobs --memory 2G" ||
		len(s.Env) != 2 || s.Env["DOCKER_HOST"] != "unix:///x.sock" || s.Env["SANDBOX_MCP_PREFIX"] != "mine" {
		t.Errorf("JSON entry: %+v", s)
	}
	if linux := ClientSetup("/usr/local/bin/sandbox-mcp", nil, nil, "linux"); !strings.Contains(linux, "~/.config/Claude/claude_desktop_config.json") {
		t.Errorf("linux:\n%s", linux)
	}
	if got := shellJoin([]string{"a b", "it's", "plain"}); got != `'a b' 'it'\''s' plain` {
		t.Errorf("shellJoin: %s", got)
	}
}

// TestHTTPClientSetup: the HTTP setup registers the URL with the token
// read from its file when the command runs, never the token itself, and
// quotes a path with spaces.
func TestHTTPClientSetup(t *testing.T) {
	out := HTTPClientSetup("http://127.0.0.1:8765/mcp", "/home/a b/.local/state/sandbox-mcp/http-token")
	for _, want := range []string{
		`claude mcp add --scope user --transport http sandbox http://127.0.0.1:8765/mcp --header "Authorization: Bearer $(cat '/home/a b/.local/state/sandbox-mcp/http-token')"`,
		`"url": "http://127.0.0.1:8765/mcp"`,
		`"Authorization": "Bearer ${env:SANDBOX_MCP_TOKEN}"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %s in\n%s", want, out)
		}
	}
}
