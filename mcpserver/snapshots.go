package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

func snapshotRequest(req mcp.CallToolRequest) sandbox.SnapshotRequest {
	return sandbox.SnapshotRequest{Name: req.GetString("snapshot_name", ""), IncludeWorkspace: req.GetBool("include_workspace", true),
		Note: req.GetString("note", "")}
}

// SnapshotInfo is one snapshot in the snapshot tools' results.
type SnapshotInfo struct {
	Name           string   `json:"name"`
	Sandbox        string   `json:"sandbox"`
	Image          string   `json:"image"`
	BaseImage      string   `json:"base_image"`
	Parent         string   `json:"parent,omitempty"`
	Created        string   `json:"created"`
	Note           string   `json:"note,omitempty"`
	Workspace      bool     `json:"workspace"`
	WorkspaceBytes int64    `json:"workspace_bytes,omitempty"`
	Env            []string `json:"env,omitempty"`
}

// SnapshotList is the structured result of list_snapshots.
type SnapshotList struct {
	Snapshots []SnapshotInfo `json:"snapshots"`
}

// Restored is the structured result of restore and clone.
type Restored struct {
	Sandbox  string  `json:"sandbox"`
	Snapshot string  `json:"snapshot,omitempty"`
	Source   string  `json:"source,omitempty"`
	Seconds  float64 `json:"seconds"`
}

func snapshotInfo(sn state.Snapshot) SnapshotInfo {
	return SnapshotInfo{Name: sn.Name, Sandbox: sn.Sandbox, Image: sn.Image, BaseImage: sn.BaseImage, Parent: sn.Parent,
		Created: sn.Created.Format(time.RFC3339), Note: sn.Note, Workspace: sn.Workspace, WorkspaceBytes: sn.WorkspaceBytes, Env: sn.Env}
}

const snapshotNameDesc = "Snapshot name: letters, digits, '_', '.', '-'."

func (s *Server) snapshotTool() tool {
	return tool{group: "snapshots", handler: s.handleSnapshot, def: newTool[SnapshotInfo]("snapshot", "Snapshot a sandbox",
		"Save a sandbox's whole filesystem (deletions, modes, owners, links, env variables set with env) and its workspace, "+
			"to restore or clone later.",
		mutating(false),
		mcp.WithString("snapshot_name", mcp.Required(), mcp.Description(snapshotNameDesc), mcp.Pattern(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)),
		sandboxParam(),
		mcp.WithBoolean("include_workspace", mcp.Description("Save /workspace too."), mcp.DefaultBool(true)),
		mcp.WithString("note", mcp.Description("A note kept with the snapshot."), mcp.MaxLength(1000)),
	)}
}

func (s *Server) restoreTool() tool {
	return tool{group: "snapshots", handler: s.handleRestore, def: newTool[Restored]("restore", "Restore a snapshot",
		"Replace a sandbox with a snapshot: its filesystem, and its workspace when the snapshot has one. "+
			"Running commands are ended and jobs are gone.",
		destructive(true),
		mcp.WithString("snapshot_name", mcp.Required(), mcp.Description(snapshotNameDesc), mcp.Pattern(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)),
		sandboxParam(),
	)}
}

func (s *Server) listSnapshotsTool() tool {
	return tool{group: "snapshots", handler: s.handleListSnapshots, def: newTool[SnapshotList]("list_snapshots", "List snapshots",
		"List snapshots with their source sandbox, base image, parent, size of the workspace, note and creation time.",
		readOnly(),
	)}
}

func (s *Server) deleteSnapshotTool() tool {
	return tool{group: "snapshots", handler: s.handleDeleteSnapshot, def: newTool[SnapshotInfo]("delete_snapshot", "Delete a snapshot",
		"Delete a snapshot's image and saved workspace. Sandboxes restored from it keep running.",
		destructive(false),
		mcp.WithString("snapshot_name", mcp.Required(), mcp.Description(snapshotNameDesc), mcp.Pattern(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)),
	)}
}

func (s *Server) cloneTool() tool {
	return tool{group: "snapshots", handler: s.handleClone, def: newTool[Restored]("clone", "Clone a sandbox",
		"Start a new sandbox from another's current state, with a copy of its workspace and its profile (or the one named).",
		mutating(false),
		mcp.WithString("source", mcp.Required(), mcp.Description("Sandbox to copy."), mcp.Pattern(sandboxPattern)),
		mcp.WithString("target", mcp.Required(), mcp.Description("Name of the new sandbox."), mcp.Pattern(sandboxPattern)),
		mcp.WithString("profile", mcp.Description("A configured profile for the clone (default: the source's).")),
	)}
}

func (s *Server) handleSnapshot(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("snapshot: %v", err), nil
	}
	start := time.Now()
	sn, err := s.m.Snapshot(ctx, name, snapshotRequest(req))
	if err != nil {
		return failure(ctx, fmt.Sprintf("snapshot of sandbox %q", name), err), nil
	}
	out := snapshotInfo(sn)
	text := fmt.Sprintf("snapshot %q of sandbox %q saved in %.1f s as image %s", sn.Name, name, time.Since(start).Seconds(), sn.Image)
	if sn.Workspace {
		text += fmt.Sprintf(", with the workspace (%s)", sizeText(sn.WorkspaceBytes))
	} else {
		text += ", without the workspace"
	}
	if sn.Parent != "" {
		text += "; parent snapshot " + sn.Parent
	}
	return mcp.NewToolResultStructured(out, text), nil
}

func (s *Server) handleRestore(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("restore: %v", err), nil
	}
	snap := req.GetString("snapshot_name", "")
	start := time.Now()
	_, sn, err := s.m.Restore(ctx, snap, name)
	if err != nil {
		return failure(ctx, fmt.Sprintf("restore %q into sandbox %q", snap, name), err), nil
	}
	text := fmt.Sprintf("sandbox %q restored from snapshot %q in %.1f s", name, snap, time.Since(start).Seconds())
	if sn.Workspace {
		text += " (filesystem and workspace)"
	} else {
		text += " (filesystem; the workspace was kept)"
	}
	text += "; running commands were ended and background jobs are gone"
	return mcp.NewToolResultStructured(Restored{Sandbox: name, Snapshot: snap, Seconds: time.Since(start).Seconds()}, text), nil
}

func (s *Server) handleListSnapshots(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	all, err := s.m.Snapshots()
	if err != nil {
		return failure(ctx, "list_snapshots", err), nil
	}
	out := SnapshotList{Snapshots: []SnapshotInfo{}}
	var b strings.Builder
	for _, sn := range all {
		out.Snapshots = append(out.Snapshots, snapshotInfo(sn))
		fmt.Fprintf(&b, "%s  from %q  %s  base %s", sn.Name, sn.Sandbox, sn.Created.Format(time.RFC3339), sn.BaseImage)
		if sn.Workspace {
			fmt.Fprintf(&b, "  workspace %s", sizeText(sn.WorkspaceBytes))
		}
		if sn.Parent != "" {
			b.WriteString("  parent " + sn.Parent)
		}
		if sn.Note != "" {
			b.WriteString("  note: " + sn.Note)
		}
		b.WriteString("\n")
	}
	if len(all) == 0 {
		return mcp.NewToolResultStructured(out, "no snapshots"), nil
	}
	return mcp.NewToolResultStructured(out, strings.TrimSuffix(b.String(), "\n")), nil
}

func (s *Server) handleDeleteSnapshot(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	snap := req.GetString("snapshot_name", "")
	sn, err := s.m.DeleteSnapshot(ctx, snap)
	if err != nil {
		return failure(ctx, fmt.Sprintf("delete_snapshot %q", snap), err), nil
	}
	return mcp.NewToolResultStructured(snapshotInfo(sn), fmt.Sprintf("snapshot %q deleted (image %s); sandboxes restored from it keep running", snap, sn.Image)), nil
}

func (s *Server) handleClone(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	source, target := req.GetString("source", ""), req.GetString("target", "")
	var prof *sandbox.Profile
	if name := req.GetString("profile", ""); name != "" {
		p, names, ok := s.m.NamedProfile(name)
		if !ok {
			return argError("clone: no profile %q is configured (profiles: %s)", name, strings.Join(names, ", ")), nil
		}
		prof = &p
	}
	start := time.Now()
	if _, err := s.m.CloneSandbox(ctx, source, target, prof); err != nil {
		return failure(ctx, fmt.Sprintf("clone %q to %q", source, target), err), nil
	}
	took := time.Since(start).Seconds()
	return mcp.NewToolResultStructured(Restored{Sandbox: target, Source: source, Seconds: took},
		fmt.Sprintf("sandbox %q cloned from %q's current state (filesystem and a copy of its workspace) in %.1f s", target, source, took)), nil
}
