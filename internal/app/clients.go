package app

import (
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
)

// engineEnv are the environment variables that change how the engine's
// CLI behaves; ClientSetup passes on those set.
var engineEnv = []string{"CONTAINERS_CONF", "DOCKER_HOST", "DOCKER_CONTEXT", "CONTAINER_HOST"}

// ClientSetup is what to give each MCP client to start this server with
// args (the serve flags in use) and env (variables to set), as text to
// paste.
func ClientSetup(self string, args []string, env map[string]string, goos string) string {
	argv := append([]string{"serve"}, args...)
	entry := map[string]any{"command": self, "args": argv}
	var envFlags []string
	if len(env) > 0 {
		entry["env"] = env
		for _, k := range slices.Sorted(maps.Keys(env)) {
			envFlags = append(envFlags, "-e", k+"="+env[k])
		}
	}
	cfg, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{"sandbox": entry}}, "  ", "  ")
	desktop := "~/.config/Claude/claude_desktop_config.json"
	if goos == "darwin" {
		desktop = "~/Library/Application Support/Claude/claude_desktop_config.json"
	}
	var b strings.Builder
	add := append(append([]string{"claude", "mcp", "add", "--scope", "user"}, envFlags...), "sandbox", "--", self)
	fmt.Fprintf(&b, "Claude Code (every project of this user):\n  %s\n\n", shellJoin(append(add, argv...)))
	fmt.Fprintf(&b, "Claude Desktop (%s) and Cursor (~/.cursor/mcp.json), merged into \"mcpServers\":\n  %s\n", desktop, cfg)
	if goos == "darwin" {
		b.WriteString("  Apps started from the Dock get launchd's PATH; the server also looks in /usr/local/bin and /opt/homebrew/bin,\n" +
			"  and --engine-path names the engine's CLI anywhere else.\n")
	}
	return b.String()
}

// HTTPClientSetup is what to give MCP clients to reach a server served
// over HTTP at url whose token is in tokenFile, as text to paste. The
// token itself stays in its file: the command line reads it when run, and
// Cursor takes it from the environment.
func HTTPClientSetup(url, tokenFile string) string {
	header := `"Authorization: Bearer $(cat ` + shellJoin([]string{tokenFile}) + `)"`
	cursor, _ := json.MarshalIndent(map[string]any{"mcpServers": map[string]any{"sandbox": map[string]any{
		"url": url, "headers": map[string]string{"Authorization": "Bearer ${env:SANDBOX_MCP_TOKEN}"}}}}, "  ", "  ")
	var b strings.Builder
	fmt.Fprintf(&b, "Claude Code (every project of this user):\n  %s --header %s\n\n",
		shellJoin([]string{"claude", "mcp", "add", "--scope", "user", "--transport", "http", "sandbox", url}), header)
	fmt.Fprintf(&b, "Cursor (~/.cursor/mcp.json), merged into \"mcpServers\", with SANDBOX_MCP_TOKEN set to the file's content in Cursor's environment:\n  %s\n", cursor)
	return b.String()
}

// shellJoin quotes words for a POSIX shell where needed.
func shellJoin(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,@+") == "" {
			out[i] = w
		} else {
			out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// hostOS is runtime.GOOS; tests pass another.
var hostOS = runtime.GOOS

// setupEnv picks the variables a client must set for the server to reach
// the engine as this process does: the engine's own (engineEnv) and every
// SANDBOX_MCP_ setting.
func setupEnv(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			continue
		}
		if slices.Contains(engineEnv, k) || strings.HasPrefix(k, "SANDBOX_MCP_") {
			env[k] = v
		}
	}
	return env
}
