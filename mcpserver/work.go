package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/gitwork"
	"github.com/sandbox-mcp/sandbox-mcp/work"
)

// The work tools: a sandbox tied to a repository on the host, whose work
// comes back as the branch sandbox/<name> there (package work).

var errNoWork = errors.New("the work tools are not available in this server (it keeps no state)")

const refreshDesc = "Checkpoint first: the answer holds the latest work."

func (s *Server) workspaceFromRepoTool() tool {
	return tool{group: "work", handler: s.handleWorkspaceFromRepo, def: newTool[work.Started]("workspace_from_repo", "Clone a host repository into a sandbox",
		"Clone a host git repository (at ref) into a sandbox on the branch sandbox/<name>, made in the host repository too; "+
			"its working tree, remotes and credentials stay out. The clone's work is committed onto that branch after each "+
			"burst of commands and at checkpoint, for work_log, work_diff and work_apply. One repository per sandbox.",
		mutating(false),
		mcp.WithString("local_repo", mcp.Required(), mcp.Description("A directory of the host repository (under the allowed roots).")),
		mcp.WithString("ref", mcp.Description("Branch, tag or commit to start from."), mcp.DefaultString("HEAD")),
		mcp.WithString("path", mcp.Description("Where the clone goes in the sandbox (default /workspace/<repository name>).")),
		sandboxParam(),
	)}
}

func (s *Server) checkpointTool() tool {
	return tool{group: "work", handler: s.handleCheckpoint, def: newTool[work.Checkpointed]("checkpoint", "Checkpoint a sandbox's work",
		"Commit the sandbox's clone as it is (with the commands run since the last record) "+
			"onto the branch sandbox/<name> of the host repository; the clone's own HEAD and index stay. Files over 100 MiB stay out (left_out).",
		mutating(false),
		mcp.WithString("message", mcp.Description("Commit message (default: \"Checkpoint of sandbox <name>\")."), mcp.MaxLength(10000)),
		mcp.WithArray("include", mcp.Description("Ignored paths to record too, from then on."), mcp.WithStringItems(), mcp.MaxItems(100)),
		sandboxParam(),
	)}
}

func (s *Server) workLogTool() tool {
	return tool{group: "work", handler: s.handleWorkLog, def: newTool[work.Log]("work_log", "List a sandbox's commits",
		"The commits of the branch sandbox/<name> since the ref the sandbox started from, newest first.",
		mutating(true),
		mcp.WithInteger("max_count", mcp.Description("At most this many commits."), mcp.DefaultNumber(20), mcp.Min(1), mcp.Max(1000)),
		mcp.WithBoolean("refresh", mcp.Description(refreshDesc), mcp.DefaultBool(true)),
		sandboxParam(),
	)}
}

func (s *Server) workDiffTool() tool {
	return tool{group: "work", handler: s.handleWorkDiff, def: newTool[work.Diff]("work_diff", "Diff a sandbox's work",
		"The sandbox's work as a diff in the host repository: from its base (or from) to its branch (or to).",
		mutating(true),
		mcp.WithBoolean("stat", mcp.Description("Files changed and their line counts instead of the patch."), mcp.DefaultBool(false)),
		mcp.WithArray("paths", mcp.Description("Only these paths of the repository."), mcp.WithStringItems(), mcp.MaxItems(100)),
		mcp.WithString("from", mcp.Description("A revision of the host repository (e.g. a commit of work_log).")),
		mcp.WithString("to", mcp.Description("A revision of the host repository.")),
		mcp.WithBoolean("refresh", mcp.Description(refreshDesc), mcp.DefaultBool(true)),
		sandboxParam(),
	)}
}

func (s *Server) workApplyTool() tool {
	return tool{group: "work", handler: s.handleWorkApply, def: newTool[work.Applied]("work_apply", "Merge a sandbox's work",
		"Merge the sandbox's branch (at commit: what work_diff showed as to_commit) into the branch checked out in the host repository. "+
			"Refused on uncommitted changes, on work changing .gitattributes, .gitmodules or .lfsconfig, or too large; a conflict changes nothing.",
		destructive(false),
		mcp.WithString("how", mcp.Description("merge (a merge commit), squash (one commit) or cherry-pick (its commits one by one)."),
			mcp.Enum(gitwork.Merge, gitwork.Squash, gitwork.CherryPick), mcp.DefaultString(gitwork.Merge)),
		mcp.WithString("commit", mcp.Description("The branch's commit to merge (default: its tip, records made since a review too).")),
		mcp.WithBoolean("refresh", mcp.Description("Checkpoint first: merges what changed since, unreviewed."), mcp.DefaultBool(false)),
		sandboxParam(),
	)}
}

func (s *Server) handleWorkspaceFromRepo(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, ask := s.askRoots(ctx, req)
	if ask != nil {
		return ask, nil
	}
	name, err := sandboxArg(req)
	if err != nil {
		return argError("workspace_from_repo: %v", err), nil
	}
	if s.work == nil {
		return failure(ctx, "workspace_from_repo", errNoWork), nil
	}
	dir, err := s.hostDir(ctx, req.GetString("local_repo", ""))
	if err != nil {
		return failure(ctx, "workspace_from_repo", err), nil
	}
	// The whole repository must be the client's: a merge writes anywhere
	// in its work tree, which may start above the directory named.
	r, err := gitwork.Open(ctx, dir)
	if err != nil {
		return failure(ctx, "workspace_from_repo", err), nil
	}
	if _, _, err := s.roots(ctx).Resolve(r.Dir); err != nil {
		return failure(ctx, "workspace_from_repo", fmt.Errorf("the repository of %s starts at %s, outside the allowed roots: %w", dir, r.Dir, err)), nil
	}
	out, err := s.work.Start(ctx, name, r.Dir, req.GetString("ref", "HEAD"), req.GetString("path", ""))
	if err != nil {
		return failure(ctx, fmt.Sprintf("workspace_from_repo into sandbox %q", name), err), nil
	}
	return mcp.NewToolResultStructured(out, fmt.Sprintf("%s at %s (%.12s) is cloned in sandbox %q at %s, on branch %s; checkpoint brings its commits back onto %s in %s",
		out.Repo, out.Ref, out.Base, name, out.Path, out.Branch, out.Branch, out.Repo)), nil
}

func (s *Server) handleCheckpoint(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("checkpoint: %v", err), nil
	}
	if s.work == nil {
		return failure(ctx, "checkpoint", errNoWork), nil
	}
	out, err := s.work.CheckpointWith(ctx, name, work.CheckpointRequest{Message: req.GetString("message", ""), Include: req.GetStringSlice("include", nil)})
	if err != nil {
		return failure(ctx, fmt.Sprintf("checkpoint of sandbox %q", name), err), nil
	}
	return mcp.NewToolResultStructured(out, checkpointText(out)), nil
}

func checkpointText(c work.Checkpointed) string {
	if !c.New {
		return fmt.Sprintf("nothing new in sandbox %q: %s is at %.12s", c.Sandbox, c.Branch, c.Commit)
	}
	text := fmt.Sprintf("%s in %s is now at %.12s (%s changed since the last record)", c.Branch, c.Repo, c.Commit, work.FilesCount(c.Files))
	if c.Rewritten {
		text += "; it moved to a record that does not descend from where it was (a restore, or the sandbox wrote its record): the earlier commits are in its reflog"
	}
	if len(c.LeftOut) > 0 {
		text += "; left out, over the size a record takes: " + strings.Join(c.LeftOut, ", ")
	}
	return text
}

func (s *Server) handleWorkLog(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("work_log: %v", err), nil
	}
	if s.work == nil {
		return failure(ctx, "work_log", errNoWork), nil
	}
	out, err := s.work.Log(ctx, name, req.GetInt("max_count", 20), req.GetBool("refresh", true))
	if err != nil {
		return failure(ctx, fmt.Sprintf("work_log of sandbox %q", name), err), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s in %s: %d commits since %.12s", out.Branch, out.Repo, len(out.Commits), out.Base)
	for _, c := range out.Commits {
		fmt.Fprintf(&b, "\n%.12s %s %s", c.Hash, c.Date.Format("2006-01-02 15:04"), c.Subject)
	}
	return mcp.NewToolResultStructured(out, b.String()), nil
}

func (s *Server) handleWorkDiff(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("work_diff: %v", err), nil
	}
	if s.work == nil {
		return failure(ctx, "work_diff", errNoWork), nil
	}
	dr := work.DiffRequest{From: req.GetString("from", ""), To: req.GetString("to", ""), Refresh: req.GetBool("refresh", true),
		DiffOptions: gitwork.DiffOptions{Stat: req.GetBool("stat", false), Paths: req.GetStringSlice("paths", nil), MaxBytes: 256 << 10}}
	out, err := s.work.Diff(ctx, name, dr)
	if err != nil {
		return failure(ctx, fmt.Sprintf("work_diff of sandbox %q", name), err), nil
	}
	text := out.Text
	if text == "" {
		text = fmt.Sprintf("no difference between %s and %s", out.From, out.To)
	}
	if out.Cut {
		text += "\n… (cut at 256 KiB: ask for stat=true, or for paths)"
	}
	return mcp.NewToolResultStructured(out, text), nil
}

func (s *Server) handleWorkApply(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	name, err := sandboxArg(req)
	if err != nil {
		return argError("work_apply: %v", err), nil
	}
	if s.work == nil {
		return failure(ctx, "work_apply", errNoWork), nil
	}
	out, err := s.work.Apply(ctx, name, work.ApplyRequest{How: req.GetString("how", gitwork.Merge), At: req.GetString("commit", ""), Refresh: req.GetBool("refresh", false)})
	if err != nil {
		return failure(ctx, fmt.Sprintf("work_apply of sandbox %q", name), err), nil
	}
	return mcp.NewToolResultStructured(out, fmt.Sprintf("%s applied to %s in %s by %s: %.12s → %.12s", out.Branch, out.Into, out.Repo, out.How, out.Before, out.After)), nil
}
