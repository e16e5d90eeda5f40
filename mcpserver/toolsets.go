package mcpserver

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// Toolset is a group of tools a user exposes together with --toolsets.
// Every tool's schema is sent to the model on every turn, and some clients
// degrade past about 40 tools across all of a user's servers, so only the
// default sets are on unless asked.
type Toolset struct {
	Name        string
	Description string
	// Default sets are exposed when --toolsets is not given.
	Default bool
}

// Toolsets lists the sets in the order they are shown.
var Toolsets = []Toolset{
	{Name: "core", Description: "run commands and Python, read and write files, install packages, env variables, full outputs", Default: true},
	{Name: "jobs", Description: "background jobs: start, read logs, kill, list", Default: true},
	{Name: "lifecycle", Description: "status, health, stats, history, reset, destroy, list sandboxes", Default: true},
	{Name: "transfer", Description: "copy files and directories between the host and a sandbox, git clone, live sync"},
	{Name: "snapshots", Description: "snapshot, restore and clone sandboxes"},
	{Name: "ports", Description: "expose a sandbox's TCP ports on the host (port forwarding); how sandboxes reach each other"},
	{Name: "children", Description: "child sandboxes under spawn policies: spawn, list, destroy"},
	{Name: "terminals", Description: "interactive programs behind a terminal: open, type, read the screen, resize, close"},
	{Name: "work", Description: "a host git repository cloned into a sandbox, its work back as a branch: checkpoint, log, diff, merge"},
}

func toolsetByName(name string) *Toolset {
	for i := range Toolsets {
		if Toolsets[i].Name == name {
			return &Toolsets[i]
		}
	}
	return nil
}

// ToolsetNames lists the toolsets by name, in order.
func ToolsetNames() []string {
	names := make([]string, len(Toolsets))
	for i, t := range Toolsets {
		names[i] = t.Name
	}
	return names
}

// ResolveToolsets turns a --toolsets list into set names: empty means the
// default sets, "all" every set; an unknown name is an error listing the
// names there are.
func ResolveToolsets(list []string) ([]string, error) {
	want := map[string]bool{}
	for _, name := range list {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == "all":
			for _, t := range Toolsets {
				want[t.Name] = true
			}
		case name == "default":
			for _, t := range Toolsets {
				want[t.Name] = want[t.Name] || t.Default
			}
		case toolsetByName(name) == nil:
			return nil, fmt.Errorf("unknown toolset %q: the toolsets are %s (or all, or default)", name, strings.Join(ToolsetNames(), ", "))
		default:
			want[name] = true
		}
	}
	if len(want) == 0 {
		for _, t := range Toolsets {
			want[t.Name] = t.Default
		}
	}
	var out []string
	for _, t := range Toolsets {
		if want[t.Name] {
			out = append(out, t.Name)
		}
	}
	return out, nil
}

// ToolsetTools lists each toolset's tool names, for doctor and --help.
func ToolsetTools() map[string][]string {
	s := &Server{}
	out := map[string][]string{}
	for _, t := range s.tools() {
		out[t.group] = append(out[t.group], t.def.Name)
	}
	for _, names := range out {
		sort.Strings(names)
	}
	return out
}

// DescribeToolsets is the toolsets and their tools as text, one set a line.
func DescribeToolsets() string {
	tools := ToolsetTools()
	var b strings.Builder
	for _, t := range Toolsets {
		def := ""
		if t.Default {
			def = " (default)"
		}
		fmt.Fprintf(&b, "  %-10s%s %s: %s\n", t.Name, def, t.Description, strings.Join(tools[t.Name], ", "))
	}
	return b.String()
}

// ToolsetInfo is one set in the result of the toolsets tool.
type ToolsetInfo struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Enabled     bool     `json:"enabled"`
	Tools       []string `json:"tools"`
}

// ToolsetList is the structured result of the toolsets tool.
type ToolsetList struct {
	Toolsets []ToolsetInfo `json:"toolsets"`
}

// ToolsetEnabled is the structured result of enable_toolset.
type ToolsetEnabled struct {
	Toolset string   `json:"toolset"`
	Added   []string `json:"added"`
}

// dynamicTools are the tools of --dynamic-toolsets: list the sets, enable one.
func (s *Server) dynamicTools(all []tool) []tool {
	list := tool{group: "", def: newTool[ToolsetList]("toolsets", "List toolsets",
		"List the toolsets of this server, which are enabled, and their tools; enable more with enable_toolset.",
		readOnly()),
		handler: func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			tools := map[string][]string{}
			for _, t := range all {
				tools[t.group] = append(tools[t.group], t.def.Name)
			}
			s.mu.Lock()
			out := ToolsetList{}
			var lines []string
			for _, t := range Toolsets {
				out.Toolsets = append(out.Toolsets, ToolsetInfo{Name: t.Name, Description: t.Description, Enabled: s.enabled[t.Name], Tools: tools[t.Name]})
				state := "off"
				if s.enabled[t.Name] {
					state = "on"
				}
				lines = append(lines, fmt.Sprintf("%s [%s]: %s (%s)", t.Name, state, t.Description, strings.Join(tools[t.Name], ", ")))
			}
			s.mu.Unlock()
			return mcp.NewToolResultStructured(out, strings.Join(lines, "\n")), nil
		}}
	enable := tool{group: "", def: newTool[ToolsetEnabled]("enable_toolset", "Enable a toolset",
		"Enable a toolset so its tools appear (the client is told the tool list changed).",
		mutating(true),
		mcp.WithString("toolset", mcp.Required(), mcp.Enum(ToolsetNames()...), mcp.Description("Toolset name, from toolsets."))),
		handler: func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name := req.GetString("toolset", "")
			if toolsetByName(name) == nil {
				return argError("enable_toolset: unknown toolset %q: the toolsets are %s", name, strings.Join(ToolsetNames(), ", ")), nil
			}
			added := s.enable(all, []string{name})
			if added == nil {
				added = []string{}
			}
			text := fmt.Sprintf("toolset %s was already enabled", name)
			if len(added) > 0 {
				text = fmt.Sprintf("enabled toolset %s: %s", name, strings.Join(added, ", "))
			}
			return mcp.NewToolResultStructured(ToolsetEnabled{Toolset: name, Added: added}, text), nil
		}}
	return []tool{list, enable}
}
