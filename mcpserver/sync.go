package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/copier"
	"github.com/sandbox-mcp/sandbox-mcp/syncer"
)

// Syncs is what the sync tools need (*syncer.Manager in production).
type Syncs interface {
	StartBooted(ctx context.Context, b syncer.Booter, sandbox, localDir, sandboxDir string, ignore []string) (syncer.Status, error)
	Stop(id string) (syncer.Status, error)
	List() []syncer.Status
}

// SyncJob is one sync job in the sync tools' results.
type SyncJob struct {
	ID         string   `json:"id"`
	Sandbox    string   `json:"sandbox"`
	LocalDir   string   `json:"local_dir"`
	SandboxDir string   `json:"sandbox_dir"`
	Ignore     []string `json:"ignore"`
	State      string   `json:"state"`
	Files      int64    `json:"files_synced"`
	Bytes      int64    `json:"bytes_synced"`
	Removed    int64    `json:"removed"`
	LastSync   string   `json:"last_sync,omitempty"`
	LastError  string   `json:"last_error,omitempty"`
	Polled     int      `json:"polled_dirs,omitempty"`
	// Runner is "this server" or the pid of the server that runs it.
	Runner string `json:"runner,omitempty"`
	// Mirror is the first copy, in sync_start's result.
	Mirror *syncer.MirrorResult `json:"mirror,omitempty"`
}

// SyncJobs is the structured result of sync_list.
type SyncJobs struct {
	Jobs []SyncJob `json:"jobs"`
}

func syncJob(st syncer.Status) SyncJob {
	j := SyncJob{ID: st.ID, Sandbox: st.Sandbox, LocalDir: st.LocalDir, SandboxDir: st.SandboxDir, Ignore: st.Ignore,
		State: st.State, Files: st.Files, Bytes: st.Bytes, Removed: st.Removed, LastError: st.LastError, Polled: st.Polled, Mirror: st.Mirror}
	if !st.LastSync.IsZero() {
		j.LastSync = st.LastSync.Format(time.RFC3339)
	}
	switch {
	case st.Here:
		j.Runner = "this server"
	case st.RunnerPID != 0:
		j.Runner = fmt.Sprintf("server pid %d", st.RunnerPID)
	}
	return j
}

func (s *Server) syncStartTool() tool {
	return tool{group: "transfer", handler: s.handleSyncStart, def: newTool[SyncJob]("sync_start", "Start a live sync",
		"Mirror a host directory into a sandbox and keep it in step (one way, host to sandbox): saves, deletes and renames "+
			"arrive within a fraction of a second. The first copy removes sandbox files the host lacks (ignored names are kept). "+
			"Survives sandbox restarts and server restarts until sync_stop.",
		destructive(false),
		mcp.WithString("local_dir", mcp.Required(), mcp.Description("Host directory under an allowed root.")),
		mcp.WithString("sandbox_dir", mcp.Description("Directory in the sandbox."), mcp.DefaultString("/workspace")),
		sandboxParam(),
		mcp.WithArray("ignore", mcp.Description("Names never synced, at any depth (default .git, node_modules, __pycache__, .venv, .DS_Store)."),
			mcp.WithStringItems(), mcp.MaxItems(100)),
	)}
}

func (s *Server) syncStopTool() tool {
	return tool{group: "transfer", handler: s.handleSyncStop, def: newTool[SyncJob]("sync_stop", "Stop a live sync",
		"Stop a sync job (whichever server runs it) and forget it. The sandbox keeps its copy.",
		mutating(false),
		mcp.WithString("job_id", mcp.Required(), mcp.Description("The id sync_start returned (sync_list shows them)."), mcp.MaxLength(64)),
	)}
}

func (s *Server) syncListTool() tool {
	return tool{group: "transfer", handler: s.handleSyncList, def: newTool[SyncJobs]("sync_list", "List live syncs",
		"List sync jobs with their state, files synced and last error.",
		readOnly(),
	)}
}

func (s *Server) handleSyncStart(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, ask := s.askRoots(ctx, req)
	if ask != nil {
		return ask, nil
	}
	name, err := sandboxArg(req)
	if err != nil {
		return argError("sync_start: %v", err), nil
	}
	if s.syncs == nil {
		return failure(ctx, "sync_start", errors.New("live sync is not available in this server")), nil
	}
	local := req.GetString("local_dir", "")
	dir, err := s.hostDir(ctx, local)
	if err != nil {
		return failure(ctx, "sync_start", err), nil
	}
	// Checked before the sandbox boots.
	sdir, err := syncer.SandboxDir(req.GetString("sandbox_dir", "/workspace"))
	if err != nil {
		return argError("sync_start: %v", err), nil
	}
	var ignore []string
	if _, ok := req.GetArguments()["ignore"]; ok {
		ignore = req.GetStringSlice("ignore", nil)
		if ignore == nil {
			ignore = []string{}
		}
	}
	st, err := s.syncs.StartBooted(ctx, s.m, name, dir, sdir, ignore)
	if err != nil {
		return failure(ctx, fmt.Sprintf("sync_start %s to sandbox %q", dir, name), err), nil
	}
	out := syncJob(st)
	text := fmt.Sprintf("%s: syncing %s to sandbox %q:%s (ignoring %s)", st.ID, dir, name, out.SandboxDir, strings.Join(st.Ignore, ", "))
	if mr := st.Mirror; mr != nil {
		text += fmt.Sprintf("\nfirst copy (a mirror): %d files, %s in %.2f s; removed %d paths in the sandbox that the host does not have",
			mr.Files, sizeText(mr.Bytes), mr.Seconds, mr.Removed)
	}
	if st.Polled > 0 {
		text += fmt.Sprintf("\n%d directories are polled every second (the inotify watch limit was reached)", st.Polled)
	}
	text += "\nstop it with sync_stop " + st.ID
	return mcp.NewToolResultStructured(out, text), nil
}

// hostDir resolves a host directory against the roots in force and
// returns its real path, refusing one that leads out of its root.
func (s *Server) hostDir(ctx context.Context, p string) (string, error) {
	root, rel, err := s.openHost(ctx, p)
	if err != nil {
		return "", err
	}
	defer root.Close()
	return copier.HostDir(root, rel, p)
}

func (s *Server) handleSyncStop(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if s.syncs == nil {
		return failure(ctx, "sync_stop", errors.New("live sync is not available in this server")), nil
	}
	st, err := s.syncs.Stop(req.GetString("job_id", ""))
	if err != nil {
		return failure(ctx, "sync_stop", err), nil
	}
	out := syncJob(st)
	return mcp.NewToolResultStructured(out, fmt.Sprintf("%s stopped after %d files synced; the sandbox keeps its copy of %s", st.ID, st.Files, st.SandboxDir)), nil
}

func (s *Server) handleSyncList(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	out := SyncJobs{Jobs: []SyncJob{}}
	if s.syncs == nil {
		return mcp.NewToolResultStructured(out, "no sync jobs (live sync is not available in this server)"), nil
	}
	var b strings.Builder
	for _, st := range s.syncs.List() {
		j := syncJob(st)
		out.Jobs = append(out.Jobs, j)
		fmt.Fprintf(&b, "%s  %s  %s -> %q:%s  %d files, %d removed", j.ID, j.State, j.LocalDir, j.Sandbox, j.SandboxDir, j.Files, j.Removed)
		if j.LastSync != "" {
			b.WriteString("  last " + j.LastSync)
		}
		if j.Runner != "" {
			b.WriteString("  (" + j.Runner + ")")
		}
		if j.LastError != "" {
			b.WriteString("\n  last error: " + j.LastError)
		}
		b.WriteString("\n")
	}
	if len(out.Jobs) == 0 {
		return mcp.NewToolResultStructured(out, "no sync jobs"), nil
	}
	return mcp.NewToolResultStructured(out, strings.TrimSuffix(b.String(), "\n")), nil
}
