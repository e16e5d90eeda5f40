package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
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
	// WorkspaceOnly: the runtime keeps no root filesystem (Kubernetes);
	// a restore boots BaseImage afresh with the workspace.
	WorkspaceOnly bool `json:"workspace_only,omitempty"`
	// VolumeSnapshot names the volume snapshot the cluster's storage
	// keeps the workspace in, where it does (Kubernetes with a snapshot
	// class); else the workspace is a tar on the server's host.
	VolumeSnapshot string `json:"volume_snapshot,omitempty"`
	// Engine is where the snapshot's image or volume snapshot lives (a
	// runtime, and its namespace on Kubernetes), where the record says.
	Engine string `json:"engine,omitempty"`
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
	// FreshBase is the base image booted afresh where the runtime keeps
	// no root filesystem: only the workspace came from the source.
	FreshBase string `json:"fresh_base,omitempty"`
	// WorkspaceCopy says how a clone's workspace was copied where the
	// runtime's storage copied it (a volume snapshot); absent for a copy
	// through the server.
	WorkspaceCopy string `json:"workspace_copy,omitempty"`
}

func snapshotInfo(sn state.Snapshot) SnapshotInfo {
	return SnapshotInfo{Name: sn.Name, Sandbox: sn.Sandbox, Image: sn.Image, BaseImage: sn.BaseImage, Parent: sn.Parent,
		Created: sn.Created.Format(time.RFC3339), Note: sn.Note, Workspace: sn.Workspace, WorkspaceBytes: sn.WorkspaceBytes, Env: sn.Env,
		WorkspaceOnly: sn.WorkspaceOnly, VolumeSnapshot: sn.VolumeSnapshot, Engine: sn.Engine}
}

const snapshotNameDesc = "Snapshot name: letters, digits, '_', '.', '-'."

func (s *Server) snapshotTool() tool {
	return tool{group: "snapshots", handler: s.handleSnapshot, def: newTool[SnapshotInfo]("snapshot", "Snapshot a sandbox",
		"Save a sandbox's whole filesystem (deletions, modes, owners, links, env variables set with env) and its workspace, "+
			"to restore or clone later. On Kubernetes only the workspace is kept.",
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
	if refused := s.childGuard(name, "snapshot"); refused != nil {
		return refused, nil
	}
	start := time.Now()
	sn, err := s.m.Snapshot(ctx, name, snapshotRequest(req))
	if err != nil {
		return failure(ctx, fmt.Sprintf("snapshot of sandbox %q", name), err), nil
	}
	out := snapshotInfo(sn)
	text := fmt.Sprintf("snapshot %q of sandbox %q saved in %.1f s as image %s", sn.Name, name, time.Since(start).Seconds(), sn.Image)
	if sn.WorkspaceOnly {
		kept := sizeText(sn.WorkspaceBytes)
		if sn.VolumeSnapshot != "" {
			kept = "kept as a volume snapshot by the cluster's storage, of a volume of " + kept
		}
		text = fmt.Sprintf("snapshot %q of sandbox %q saved in %.1f s: the workspace only (%s); this runtime cannot save the root filesystem "+
			"(installed packages, files outside /workspace, env variables), so a restore boots the base image %s afresh",
			sn.Name, name, time.Since(start).Seconds(), kept, sn.BaseImage)
	} else if sn.Workspace {
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
	if refused := s.childGuard(name, "restore"); refused != nil {
		return refused, nil
	}
	snap := req.GetString("snapshot_name", "")
	start := time.Now()
	info, sn, err := s.m.Restore(ctx, snap, name)
	if err != nil {
		return failure(ctx, fmt.Sprintf("restore %q into sandbox %q", snap, name), err), nil
	}
	text := fmt.Sprintf("sandbox %q restored from snapshot %q in %.1f s", name, snap, time.Since(start).Seconds())
	if info.FreshBase != "" {
		text += " (its workspace, on the base image " + info.FreshBase + " booted afresh: the snapshot kept no root filesystem)"
	} else if sn.Workspace {
		text += " (filesystem and workspace)"
	} else {
		text += " (filesystem; the workspace was kept)"
	}
	text += "; running commands were ended and background jobs are gone"
	return mcp.NewToolResultStructured(Restored{Sandbox: name, Snapshot: snap, Seconds: time.Since(start).Seconds(), FreshBase: info.FreshBase}, text), nil
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
		switch {
		case sn.VolumeSnapshot != "":
			fmt.Fprintf(&b, "  workspace as a volume snapshot (of a %s volume)", sizeText(sn.WorkspaceBytes))
		case sn.Workspace:
			fmt.Fprintf(&b, "  workspace %s", sizeText(sn.WorkspaceBytes))
		}
		if sn.WorkspaceOnly {
			b.WriteString(" (no root filesystem)")
		}
		if sn.Parent != "" {
			b.WriteString("  parent " + sn.Parent)
		}
		if where := s.m.SnapshotElsewhere(sn); where != "" {
			b.WriteString("  (made on " + where + ": restore or delete it from a server there)")
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
	what := "image " + sn.Image
	switch {
	case sn.VolumeSnapshot != "":
		what = "its workspace's volume snapshot"
	case sn.WorkspaceOnly:
		what = "its workspace tar"
	}
	return mcp.NewToolResultStructured(snapshotInfo(sn), fmt.Sprintf("snapshot %q deleted (%s); sandboxes restored from it keep running", snap, what)), nil
}

func (s *Server) handleClone(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	source, target := req.GetString("source", ""), req.GetString("target", "")
	if refused := s.childGuard(source, "clone"); refused != nil {
		return refused, nil
	}
	var prof *sandbox.Profile
	if name := req.GetString("profile", ""); name != "" {
		p, names, ok := s.m.NamedProfile(name)
		if !ok {
			return argError("clone: no profile %q is configured (profiles: %s)", name, strings.Join(names, ", ")), nil
		}
		prof = &p
	}
	start := time.Now()
	info, err := s.m.CloneSandbox(ctx, source, target, prof)
	if err != nil {
		return failure(ctx, fmt.Sprintf("clone %q to %q", source, target), err), nil
	}
	took := time.Since(start).Seconds()
	what := "filesystem and a copy of its workspace"
	if info.FreshBase != "" {
		what = "a copy of its workspace, on the base image " + info.FreshBase + " booted afresh: this runtime keeps no root filesystem"
	}
	if info.WorkspaceCopy != "" {
		what += "; the workspace copied as " + info.WorkspaceCopy
	}
	return mcp.NewToolResultStructured(Restored{Sandbox: target, Source: source, Seconds: took, FreshBase: info.FreshBase, WorkspaceCopy: info.WorkspaceCopy},
		fmt.Sprintf("sandbox %q cloned from %q's current state (%s) in %.1f s", target, source, what, took)), nil
}

// ImageItem is one image in the images tool's result.
type ImageItem struct {
	Ref      string        `json:"ref"`
	ID       string        `json:"id"`
	Size     string        `json:"size,omitempty"`
	Created  string        `json:"created,omitempty"`
	Snapshot *SnapshotInfo `json:"snapshot,omitempty"`
}

// ImageList is the structured result of images.
type ImageList struct {
	Images []ImageItem `json:"images"`
}

// Built is the structured result of build_image.
type Built struct {
	Image   string  `json:"image"`
	Seconds float64 `json:"seconds"`
	LogTail string  `json:"log_tail"`
}

func (s *Server) imagesTool() tool {
	return tool{group: "snapshots", handler: s.handleImages, def: newTool[ImageList]("images", "List images",
		"List the engine's images; snapshots are marked with their source sandbox and note.",
		readOnly(),
	)}
}

func (s *Server) buildImageTool() tool {
	return tool{group: "snapshots", handler: s.handleBuildImage, def: newTool[Built]("build_image", "Build an image",
		"Build an image from a Containerfile's text, for sandboxes to boot from (a profile's image). "+
			"Streams the build log as progress; a failure returns the log's tail.",
		openWorld(mutating(true)),
		mcp.WithString("name", mcp.Required(), mcp.Description("Image name, e.g. my-tools:1.0."), mcp.MaxLength(200)),
		mcp.WithString("containerfile", mcp.Required(), mcp.Description("The Containerfile's text.")),
		mcp.WithString("context_dir", mcp.Description("Host directory for COPY/ADD, under an allowed root (default: an empty context).")),
	)}
}

func (s *Server) handleImages(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	imgs, err := s.m.Images(ctx)
	if err != nil {
		return failure(ctx, "images", err), nil
	}
	out := ImageList{Images: []ImageItem{}}
	var b strings.Builder
	for _, img := range imgs {
		it := ImageItem{Ref: img.Ref, ID: img.ID, Size: img.Size, Created: img.Created}
		ref := img.Ref
		if ref == "" {
			ref = "<untagged>"
		}
		fmt.Fprintf(&b, "%s  %s", ref, img.ID)
		if img.Size != "" {
			b.WriteString("  " + img.Size)
		}
		if img.Created != "" {
			b.WriteString("  " + img.Created)
		}
		if img.Snapshot != nil {
			info := snapshotInfo(*img.Snapshot)
			it.Snapshot = &info
			fmt.Fprintf(&b, "  snapshot %q of sandbox %q", info.Name, info.Sandbox)
			if info.Note != "" {
				b.WriteString(" (" + info.Note + ")")
			}
		}
		b.WriteString("\n")
		out.Images = append(out.Images, it)
	}
	if len(imgs) == 0 {
		return mcp.NewToolResultStructured(out, "no images"), nil
	}
	return mcp.NewToolResultStructured(out, strings.TrimSuffix(b.String(), "\n")), nil
}

func (s *Server) handleBuildImage(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, ask := s.askRoots(ctx, req)
	if ask != nil {
		return ask, nil
	}
	name := req.GetString("name", "")
	contextDir := ""
	if d := req.GetString("context_dir", ""); d != "" {
		dir, err := s.hostDir(ctx, d)
		if err != nil {
			return failure(ctx, "build_image", err), nil
		}
		contextDir = dir
	}
	log := &shell.Capture{Limit: 64 << 10}
	stop := s.startProgress(ctx, req, log, &shell.Capture{})
	start := time.Now()
	err := s.m.BuildImage(ctx, name, req.GetString("containerfile", ""), contextDir, log)
	stop()
	head, tail, _ := log.Parts()
	logTail := string(tail)
	if logTail == "" {
		logTail = string(head)
	}
	logTail = lastBytes(strings.ToValidUTF8(logTail, "\uFFFD"), 3000)
	if err != nil {
		return failure(ctx, fmt.Sprintf("build_image %q", name), fmt.Errorf("%w\nlog tail:\n%s", err, logTail)), nil
	}
	out := Built{Image: name, Seconds: time.Since(start).Seconds(), LogTail: logTail}
	return mcp.NewToolResultStructured(out, fmt.Sprintf("built image %s in %.1f s; a profile can boot from it (image=%s)\n%s", name, out.Seconds, name, lastBytes(logTail, 600))), nil
}

// lastBytes keeps the end of s, at most n bytes, from a line start when it can.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
		s = s[i+1:]
	}
	return strings.ToValidUTF8(s, "")
}
