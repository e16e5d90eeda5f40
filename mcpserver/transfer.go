package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/copier"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// Transfer is the structured result of upload and download.
type Transfer = copier.Result

func (s *Server) uploadTool() tool {
	return tool{group: "transfer", handler: s.handleUpload, def: newTool[Transfer]("upload", "Upload to a sandbox",
		"Copy a host file or directory into a sandbox, streamed, keeping modes, mtimes and symlinks (as links). "+
			"Into sandbox_path when it is a directory, else as sandbox_path. Host paths must lie under the allowed roots "+
			"(the client's roots, or the directory the server started in, or --allow-dir).",
		mutating(true),
		mcp.WithString("local_path", mcp.Required(), mcp.Description("Host file or directory (absolute, or relative to the first allowed root).")),
		mcp.WithString("sandbox_path", mcp.Description("Where it lands in the sandbox."), mcp.DefaultString("/workspace")),
		sandboxParam(),
		mcp.WithArray("ignore", mcp.Description("Names to leave out, at any depth (e.g. .git, node_modules)."),
			mcp.WithStringItems(), mcp.MaxItems(100)),
	)}
}

func (s *Server) downloadTool() tool {
	return tool{group: "transfer", handler: s.handleDownload, def: newTool[Transfer]("download", "Download from a sandbox",
		"Copy a sandbox file or directory to the host, streamed, keeping modes, mtimes and symlinks (as links). "+
			"Into local_path when it is an existing directory, else as local_path. Lands whole or not at all; "+
			"an existing host file or directory is replaced only with overwrite=true. Hard links, devices and set-id bits are never created.",
		destructive(true),
		mcp.WithString("sandbox_path", mcp.Required(), mcp.Description("File or directory in the sandbox.")),
		mcp.WithString("local_path", mcp.Required(), mcp.Description("Host path under an allowed root.")),
		sandboxParam(),
		mcp.WithBoolean("overwrite", mcp.Description("Replace an existing host file or directory."), mcp.DefaultBool(false)),
		mcp.WithInteger("max_bytes", mcp.Description("Refuse downloads larger than this (default 8 GiB)."), mcp.Min(1)),
	)}
}

func (s *Server) handleUpload(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, ask := s.askRoots(ctx, req)
	if ask != nil {
		return ask, nil
	}
	name, err := sandboxArg(req)
	if err != nil {
		return argError("upload: %v", err), nil
	}
	local := req.GetString("local_path", "")
	dest := req.GetString("sandbox_path", "/workspace")
	ignore := req.GetStringSlice("ignore", nil)
	root, rel, err := s.openHost(ctx, local)
	if err != nil {
		return failure(ctx, "upload", err), nil
	}
	defer root.Close()
	out, err := copier.Upload(ctx, s.m, name, root, rel, local, dest, ignore)
	if err != nil {
		if he := (*copier.HostError)(nil); errors.As(err, &he) {
			return failure(ctx, "upload", he.Err), nil
		}
		return failure(ctx, fmt.Sprintf("upload %s to sandbox %q", local, name), err), nil
	}
	return mcp.NewToolResultStructured(out, out.Text()), nil
}

func (s *Server) handleDownload(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, ask := s.askRoots(ctx, req)
	if ask != nil {
		return ask, nil
	}
	name, err := sandboxArg(req)
	if err != nil {
		return argError("download: %v", err), nil
	}
	src := req.GetString("sandbox_path", "")
	local := req.GetString("local_path", "")
	overwrite := req.GetBool("overwrite", false)
	root, rel, err := s.openHost(ctx, local)
	if err != nil {
		return failure(ctx, "download", err), nil
	}
	defer root.Close()
	out, err := copier.Download(ctx, s.m, name, src, root, rel, copier.DownloadOptions{Overwrite: overwrite, MaxBytes: int64(req.GetInt("max_bytes", 0))})
	if err != nil {
		if he := (*copier.HostError)(nil); errors.As(err, &he) {
			return failure(ctx, "download", he.Err), nil
		}
		return failure(ctx, fmt.Sprintf("download %s from sandbox %q", src, name), err), nil
	}
	return mcp.NewToolResultStructured(out, out.Text()), nil
}

// openHost resolves a host path against the roots in force and opens the
// root that holds it.
func (s *Server) openHost(ctx context.Context, p string) (*os.Root, string, error) {
	dir, rel, err := s.roots(ctx).Resolve(p)
	if err != nil {
		return nil, "", err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", fmt.Errorf("open allowed root %s: %w", dir, err)
	}
	return root, rel, nil
}

// Cloned is the structured result of git_clone.
type Cloned struct {
	Sandbox string  `json:"sandbox"`
	Repo    string  `json:"repo"`
	Path    string  `json:"path"`
	Commit  string  `json:"commit"`
	Seconds float64 `json:"seconds"`
}

func (s *Server) gitCloneTool() tool {
	return tool{group: "transfer", handler: s.handleGitClone, def: newTool[Cloned]("git_clone", "Clone a git repository",
		"Clone a git repository inside a sandbox (its network and disk). Into path/<repo name> when path is an existing directory. "+
			"A token authenticates over HTTPS without ever appearing in history, process lists, the clone's config or any output.",
		openWorld(mutating(false)),
		mcp.WithString("repo", mcp.Required(), mcp.Description("Repository URL.")),
		mcp.WithString("branch", mcp.Description("Branch or tag (default: the remote's default).")),
		mcp.WithString("token", mcp.Description("Access token for HTTPS (sent as the password).")),
		mcp.WithString("username", mcp.Description("User name sent with the token (default x-access-token).")),
		mcp.WithString("path", mcp.Description("Where to clone."), mcp.DefaultString("/workspace")),
		mcp.WithBoolean("shallow", mcp.Description("Clone only the newest commit (--depth 1)."), mcp.DefaultBool(true)),
		sandboxParam(),
		timeoutParam(),
	)}
}

func (s *Server) handleGitClone(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("git_clone: %v", err), nil
	}
	cr := sandbox.CloneRequest{Repo: req.GetString("repo", ""), Branch: req.GetString("branch", ""), Token: req.GetString("token", ""),
		User: req.GetString("username", ""), Path: req.GetString("path", "/workspace")}
	if req.GetBool("shallow", true) {
		cr.Depth = 1
	}
	if t := req.GetFloat("timeout", 0); t > 0 {
		cr.Timeout = time.Duration(t * float64(time.Second))
	}
	progress := &shell.Capture{Limit: 64 << 10}
	cr.Progress = progress
	stop := s.startProgress(ctx, req, progress, &shell.Capture{})
	c, err := s.m.GitClone(ctx, name, cr)
	stop()
	if err != nil {
		return failure(ctx, fmt.Sprintf("git_clone in sandbox %q", name), err), nil
	}
	out := Cloned{Sandbox: name, Repo: c.Repo, Path: c.Path, Commit: c.Commit, Seconds: c.Took.Seconds()}
	text := fmt.Sprintf("cloned %s into %s (commit %s) in %.1f s", c.Repo, c.Path, c.Commit, c.Took.Seconds())
	if c.Output != "" {
		text += "\n" + c.Output
	}
	return mcp.NewToolResultStructured(out, text), nil
}
