package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
)

func (s *Server) envTool() tool {
	return tool{group: "core", handler: s.handleEnv, def: newTool("env",
		"List, set or unset environment variables of a sandbox; they apply to every later command and survive shell restarts. "+
			"Mark tokens secret to keep them out of history and listings.",
		mutating(true),
		mcp.WithString("action", mcp.Enum("list", "set", "unset"), mcp.DefaultString("list")),
		mcp.WithString("key", mcp.Description("Variable name (set, unset)."), mcp.Pattern(`^[A-Za-z_][A-Za-z0-9_]*$`)),
		mcp.WithString("value", mcp.Description("Value (set).")),
		mcp.WithBoolean("secret", mcp.Description("Hide the value in history and env list."), mcp.DefaultBool(false)),
		sandboxParam(),
	)}
}

// EnvVars is the structured result of env.
type EnvVars struct {
	Sandbox string            `json:"sandbox"`
	Action  string            `json:"action"`
	Vars    map[string]string `json:"vars,omitempty"`
}

func (s *Server) handleEnv(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("env: %v", err), nil
	}
	action := req.GetString("action", "list")
	key := req.GetString("key", "")
	out := EnvVars{Sandbox: name, Action: action}
	switch action {
	case "set":
		value := req.GetString("value", "")
		secret := req.GetBool("secret", false)
		script, err := guest.EnvSetScript(key, value)
		if err != nil {
			return argError("env set: %v", err), nil
		}
		if secret {
			s.m.History().AddSecret(value)
			s.m.MarkSecret(name, key)
		}
		if _, _, errRes := s.runInternal(ctx, name, "env set "+key, script, nil, 4096); errRes != nil {
			return errRes, nil
		}
		return mcp.NewToolResultStructured(out, fmt.Sprintf("set %s in sandbox %q", key, name)), nil
	case "unset":
		script, err := guest.EnvUnsetScript(key)
		if err != nil {
			return argError("env unset: %v", err), nil
		}
		if _, _, errRes := s.runInternal(ctx, name, "env unset "+key, script, nil, 4096); errRes != nil {
			return errRes, nil
		}
		return mcp.NewToolResultStructured(out, fmt.Sprintf("unset %s in sandbox %q", key, name)), nil
	case "list":
		data, _, errRes := s.runInternal(ctx, name, "env list", guest.EnvListScript, nil, 1<<20)
		if errRes != nil {
			return errRes, nil
		}
		out.Vars = map[string]string{}
		var lines []string
		for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			if s.m.IsSecret(name, k) {
				v = "***"
			}
			out.Vars[k] = v
			lines = append(lines, k+"="+v)
		}
		if len(lines) == 0 {
			return mcp.NewToolResultStructured(out, "no variables set with env"), nil
		}
		return mcp.NewToolResultStructured(out, strings.Join(lines, "\n")), nil
	}
	return argError("env: action must be list, set or unset"), nil
}

func (s *Server) installTool() tool {
	return tool{group: "core", handler: s.handleInstall, def: newTool("install",
		"Install packages with the sandbox image's package manager (apk, apt-get or dnf). They last until reset; default timeout 300 s.",
		openWorld(mutating(true)),
		mcp.WithArray("packages", mcp.Required(), mcp.WithStringItems(), mcp.MinItems(1), mcp.Description("Package names.")),
		sandboxParam(),
		mcp.WithNumber("timeout", mcp.Description("Seconds before the install is stopped."), mcp.DefaultNumber(300), mcp.Min(1), mcp.Max(maxTimeout)),
	)}
}

func (s *Server) handleInstall(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	pkgs, err := req.RequireStringSlice("packages")
	if err != nil {
		// Accept a single space-separated string too, as the original did.
		one := req.GetString("packages", "")
		pkgs = strings.Fields(one)
		if len(pkgs) == 0 {
			return argError("install: `packages` must be a list of package names"), nil
		}
	}
	script, err := guest.InstallScript(pkgs)
	if err != nil {
		return argError("install: %v", err), nil
	}
	return s.runCommand(ctx, req, runSpec{what: "install", label: "install " + strings.Join(pkgs, " "), command: script, timeout: 300})
}
