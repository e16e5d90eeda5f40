package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

func (s *Server) envTool() tool {
	return tool{group: "core", handler: s.handleEnv, def: newTool[EnvVars]("env", "Environment variables",
		"List, set or unset a sandbox's env variables for every later command.",
		mutating(true),
		mcp.WithString("action", mcp.Enum("list", "set", "unset"), mcp.DefaultString("list")),
		mcp.WithString("key", mcp.Description("Variable name (set, unset)."), mcp.Pattern(`^[A-Za-z_][A-Za-z0-9_]*$`)),
		mcp.WithString("value", mcp.Description("Value (set).")),
		mcp.WithBoolean("secret", mcp.Description("Hide the value in history and env list."), mcp.DefaultBool(false)),
		mcp.WithArray("hosts", mcp.WithStringItems(), mcp.Description("Sandbox gets a placeholder; the host swaps in the value for requests to these hosts.")),
		sandboxParam(),
	)}
}

// EnvVars is the structured result of env.
type EnvVars struct {
	Sandbox string           `json:"sandbox"`
	Action  string           `json:"action"`
	Vars    []sandbox.EnvVar `json:"vars,omitempty"`
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
		if hosts := req.GetStringSlice("hosts", nil); len(hosts) > 0 {
			placeholder, err := s.m.SetEgressSecret(ctx, name, key, req.GetString("value", ""), hosts)
			if err != nil {
				return failure(ctx, "env set", err), nil
			}
			return mcp.NewToolResultStructured(out, fmt.Sprintf("set %s in sandbox %q to a placeholder (%s); the host puts the value in place of it in requests to %s "+
				"(headers of plain HTTP, and of HTTPS where the server's intercept setting names the host), in this server's memory only: set it again after a restart",
				key, name, placeholder, strings.Join(hosts, ", "))), nil
		}
		if err := s.m.SetEnv(ctx, name, key, req.GetString("value", ""), req.GetBool("secret", false)); err != nil {
			return failure(ctx, "env set", err), nil
		}
		return mcp.NewToolResultStructured(out, fmt.Sprintf("set %s in sandbox %q for every later command", key, name)), nil
	case "unset":
		if err := s.m.UnsetEnv(ctx, name, key); err != nil {
			return failure(ctx, "env unset", err), nil
		}
		return mcp.NewToolResultStructured(out, fmt.Sprintf("unset %s in sandbox %q", key, name)), nil
	case "list":
		vars, err := s.m.Env(ctx, name)
		if err != nil {
			return failure(ctx, "env list", err), nil
		}
		out.Vars = vars
		if len(vars) == 0 {
			return mcp.NewToolResultStructured(out, "no variables set with env"), nil
		}
		swapped := s.m.EgressSecretHosts(name)
		lines := make([]string, len(vars))
		for i, v := range vars {
			lines[i] = v.Name + "=" + v.Value
			if v.Secret {
				lines[i] += " (secret)"
			}
			if hosts, ok := swapped[v.Name]; ok {
				lines[i] += " (a placeholder: the host swaps in the value for " + strings.Join(hosts, ", ") + ")"
			}
		}
		return mcp.NewToolResultStructured(out, strings.Join(lines, "\n")), nil
	}
	return argError("env: action must be list, set or unset"), nil
}

func (s *Server) installTool() tool {
	return tool{group: "core", handler: s.handleInstall, def: newTool[ExecOutput]("install", "Install packages",
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
		pkgs = strings.Fields(req.GetString("packages", ""))
		if len(pkgs) == 0 {
			return argError("install: `packages` must be a list of package names"), nil
		}
	}
	return s.runCommand(ctx, req, "install", 300, true, func(ctx context.Context, name string, r shell.Request) (sandbox.ExecResult, error) {
		return s.m.Install(ctx, name, pkgs, r)
	})
}
