package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/ctl"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// Children is what the children tools need (*children.Keeper).
type Children interface {
	Spawn(ctx context.Context, parent string, p ctl.SpawnParams) (ctl.Child, error)
	List(parent string) ([]ctl.Child, error)
	Destroy(ctx context.Context, caller, name string) error
	// Allowed says whether op (destroy, reset, restore, snapshot, clone)
	// may be done to sandbox name through the ordinary tools: nil for a
	// sandbox that is not a child, or a child whose policy allows it.
	Allowed(name, op string) error
}

// ChildList is the structured result of children.
type ChildList struct {
	Parent   string      `json:"parent"`
	Children []ctl.Child `json:"children"`
}

var errNoChildren = errors.New("child sandboxes are not available in this server")

func (s *Server) spawnTool() tool {
	return tool{group: "children", handler: s.handleSpawn, def: newTool[ctl.Child]("spawn", "Spawn a child sandbox",
		"Start a child sandbox of parent under parent's policy (limits on count, cpus, memory, images, lifetime); "+
			"code inside the parent can do the same with sandbox-ctl.",
		mutating(false),
		mcp.WithString("parent", mcp.Description(`Parent sandbox (default "default").`), mcp.Pattern(sandboxPattern), mcp.MaxLength(sandbox.MaxNameLen)),
		mcp.WithString("image", mcp.Description("Image (default: the first the policy allows).")),
		mcp.WithString("name", mcp.Description("Name (default: PARENT-child-NNNN)."), mcp.Pattern(sandboxPattern), mcp.MaxLength(sandbox.MaxNameLen)),
		mcp.WithNumber("cpus", mcp.Description("CPUs (0: the most allowed)."), mcp.Min(0)),
		mcp.WithString("memory", mcp.Description(`Memory such as "256M" (default: the most allowed).`)),
		mcp.WithString("network", mcp.Description("Less network than the parent's."), mcp.Enum("none", "allowlist")),
		mcp.WithArray("allow", mcp.WithStringItems(), mcp.Description(`The only hosts it may reach, e.g. "pypi.org".`)),
	)}
}

func (s *Server) childrenTool() tool {
	return tool{group: "children", handler: s.handleChildren, def: newTool[ChildList]("children", "List child sandboxes",
		"List the children (and grandchildren) of a sandbox with their image, resources and end of life.",
		readOnly(),
		mcp.WithString("parent", mcp.Description(`Parent sandbox (default "default").`), mcp.Pattern(sandboxPattern), mcp.MaxLength(sandbox.MaxNameLen)),
	)}
}

func (s *Server) destroyChildTool() tool {
	return tool{group: "children", handler: s.handleDestroyChild, def: newTool[Destroyed]("destroy_child", "Destroy a child sandbox",
		"Destroy a child sandbox and its own children.",
		destructive(true),
		mcp.WithString("name", mcp.Required(), mcp.Description("The child's name."), mcp.Pattern(sandboxPattern), mcp.MaxLength(sandbox.MaxNameLen)),
	)}
}

// parentArg is the parent argument, default "default".
func parentArg(req mcp.CallToolRequest) (string, error) {
	v, ok := req.GetArguments()["parent"]
	if !ok || v == nil {
		return sandbox.DefaultName, nil
	}
	name, ok := v.(string)
	if !ok || sandbox.ValidateName(name) != nil {
		return "", fmt.Errorf("parent must be a sandbox name")
	}
	return name, nil
}

func (s *Server) handleSpawn(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	parent, err := parentArg(req)
	if err != nil {
		return argError("spawn: %v", err), nil
	}
	if s.children == nil {
		return failure(ctx, "spawn", errNoChildren), nil
	}
	// The parent boots first, as for any command in it.
	if _, err := s.m.Boot(ctx, parent); err != nil {
		return failure(ctx, fmt.Sprintf("spawn: boot the parent %q", parent), err), nil
	}
	ch, err := s.children.Spawn(ctx, parent, ctl.SpawnParams{Image: req.GetString("image", ""), Name: req.GetString("name", ""),
		CPUs: req.GetFloat("cpus", 0), Memory: req.GetString("memory", ""),
		Network: req.GetString("network", ""), Allow: req.GetStringSlice("allow", nil)})
	if err != nil {
		return failure(ctx, "spawn", err), nil
	}
	text := fmt.Sprintf("spawned %s (child of %s): %s, %g cpus, %d MiB, ip %s, destroyed at %s",
		ch.Name, parent, ch.Image, ch.CPUs, ch.MemoryMB, orDash(ch.IP), ch.ExpiresAt.Format(time.RFC3339))
	for _, n := range ch.Notes {
		text += "\nnote: " + n
	}
	return mcp.NewToolResultStructured(ch, text+"\nrun commands in it with exec(sandbox=\""+ch.Name+"\")"), nil
}

func (s *Server) handleChildren(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	parent, err := parentArg(req)
	if err != nil {
		return argError("children: %v", err), nil
	}
	out := ChildList{Parent: parent, Children: []ctl.Child{}}
	if s.children == nil {
		return mcp.NewToolResultStructured(out, "no children (child sandboxes are not available in this server)"), nil
	}
	if out.Children, err = s.children.List(parent); err != nil {
		return failure(ctx, "children", err), nil
	}
	if len(out.Children) == 0 {
		return mcp.NewToolResultStructured(out, fmt.Sprintf("sandbox %q has no children", parent)), nil
	}
	var b strings.Builder
	for _, c := range out.Children {
		fmt.Fprintf(&b, "%s  %s  %g cpus  %d MiB  until %s\n", c.Name, c.Image, c.CPUs, c.MemoryMB, c.ExpiresAt.Format(time.RFC3339))
	}
	return mcp.NewToolResultStructured(out, strings.TrimSuffix(b.String(), "\n")), nil
}

func (s *Server) handleDestroyChild(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := req.RequireString("name")
	if err != nil || sandbox.ValidateName(name) != nil {
		return argError("destroy_child: `name` must be a child's name"), nil
	}
	if s.children == nil {
		return failure(ctx, "destroy_child", errNoChildren), nil
	}
	if err := s.children.Destroy(ctx, "", name); err != nil {
		return failure(ctx, "destroy_child", err), nil
	}
	return mcp.NewToolResultStructured(Destroyed{Sandbox: name, Existed: true}, fmt.Sprintf("destroyed child %q and its own children", name)), nil
}

// childGuard refuses op on a child whose policy does not allow it.
func (s *Server) childGuard(name, op string) *mcp.CallToolResult {
	if s.children == nil {
		return nil
	}
	if err := s.children.Allowed(name, op); err != nil {
		return argError("%s: %v", op, err)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
