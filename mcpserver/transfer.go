package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/transfer"
)

// Transfer is the structured result of upload and download.
type Transfer struct {
	Sandbox     string `json:"sandbox"`
	Direction   string `json:"direction"` // "upload" or "download"
	LocalPath   string `json:"local_path"`
	SandboxPath string `json:"sandbox_path"`
	transfer.Counts
	Replaced bool    `json:"replaced"`
	Seconds  float64 `json:"seconds"`
	// Method says how the bytes moved.
	Method string `json:"method"`
}

const tarMethod = "tar stream over the engine's exec"

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
	if ask := s.askRoots(ctx, req); ask != nil {
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
	fi, err := root.Lstat(rel)
	if err != nil {
		return failure(ctx, "upload", hostPathErr(local, err)), nil
	}
	base := filepath.Base(filepath.Join(root.Name(), rel))
	start := time.Now()
	var counts transfer.Counts
	land, err := s.m.Upload(ctx, name, sandbox.UploadRequest{Dest: dest, Base: base, Dir: fi.IsDir(), Pack: func(w io.Writer, top string) error {
		var perr error
		counts, perr = transfer.Pack(root, rel, top, w, transfer.PackOptions{Ignore: ignoreFunc(ignore)})
		return perr
	}})
	if err != nil {
		return failure(ctx, fmt.Sprintf("upload %s to sandbox %q", local, name), err), nil
	}
	out := Transfer{Sandbox: name, Direction: "upload", LocalPath: filepath.Join(root.Name(), rel), SandboxPath: land.Path,
		Counts: counts, Replaced: land.Replaced, Seconds: since(start), Method: tarMethod}
	return mcp.NewToolResultStructured(out, transferText(out)), nil
}

func (s *Server) handleDownload(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if ask := s.askRoots(ctx, req); ask != nil {
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
	// Into an existing directory, under the sandbox path's name; the
	// name is known only once the sandbox was asked, so it is checked then.
	intoDir := false
	if fi, err := root.Stat(rel); err == nil && fi.IsDir() {
		intoDir = true
	} else if err == nil || !errors.Is(err, fs.ErrNotExist) {
		if err := transfer.CheckTarget(root, rel, overwrite); err != nil {
			return failure(ctx, "download", err), nil
		}
	}
	start := time.Now()
	var counts transfer.Counts
	target, replaced := rel, false
	from, err := s.m.Download(ctx, name, src, func(r io.Reader, top string, cap sandbox.HostCap, finish func() error) error {
		// top comes from the sandbox: it must name one entry, or "into a
		// directory" would replace the directory itself.
		if top == "" || top == "." || top == ".." || strings.ContainsAny(top, "/\\\x00") {
			return fmt.Errorf("the sandbox named the downloaded path %q, which cannot name a host file", top)
		}
		if intoDir {
			target = filepath.Join(rel, top)
		}
		if _, err := root.Lstat(target); err == nil {
			replaced = true
		}
		var uerr error
		max, why := int64(req.GetInt("max_bytes", 0)), ""
		if max <= 0 {
			max = transfer.DefaultMaxBytes
		}
		if cap.Bytes > 0 && cap.Bytes < max {
			max, why = cap.Bytes, cap.Why
		}
		counts, uerr = transfer.Unpack(root, target, r, transfer.UnpackOptions{
			Top: top, Overwrite: overwrite, MaxBytes: max, MaxWhy: why, BeforeCommit: finish, OnStaging: s.m.TrackStaging})
		return uerr
	})
	if err != nil {
		return failure(ctx, fmt.Sprintf("download %s from sandbox %q", src, name), err), nil
	}
	out := Transfer{Sandbox: name, Direction: "download", LocalPath: filepath.Join(root.Name(), target), SandboxPath: from,
		Counts: counts, Replaced: replaced, Seconds: since(start), Method: tarMethod}
	return mcp.NewToolResultStructured(out, transferText(out)), nil
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

func hostPathErr(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("host path %s does not exist", p)
	case strings.Contains(err.Error(), "path escapes from parent"):
		return fmt.Errorf("%w: %s leads out of its root through a symlink; %s", transfer.ErrOutsideRoots, p, transfer.AllowFlagHint)
	}
	return err
}

func ignoreFunc(names []string) func(string) bool {
	if len(names) == 0 {
		return nil
	}
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return func(n string) bool { return set[n] }
}

func since(t time.Time) float64 {
	return float64(time.Since(t).Milliseconds()) / 1000
}

// transferText is the result as a sentence: counts, time, what was skipped.
func transferText(t Transfer) string {
	from, to := t.LocalPath, fmt.Sprintf("sandbox %q:%s", t.Sandbox, t.SandboxPath)
	if t.Direction == "download" {
		from, to = to, from
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%sed %s to %s: %d files, %d directories, %d symlinks, %s in %.2f s", t.Direction, from, to,
		t.Files, t.Dirs, t.Symlinks, sizeText(t.Bytes), t.Seconds)
	if t.Seconds > 0 && t.Bytes > 1<<20 {
		fmt.Fprintf(&b, " (%.0f MB/s)", float64(t.Bytes)/1e6/t.Seconds)
	}
	if t.Replaced {
		b.WriteString("; replaced what was there")
	}
	if len(t.Skipped) > 0 {
		fmt.Fprintf(&b, "\nskipped or changed (%d):", len(t.Skipped))
		for _, sk := range t.Skipped {
			fmt.Fprintf(&b, "\n  %q: %s", sk.Path, sk.Reason)
		}
	}
	return b.String()
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
