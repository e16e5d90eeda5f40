package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/gitwork"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/work"
)

// WorkOptions shape the work commands (the work tools' twins).
type WorkOptions struct {
	Ref, Path string // start: the revision and the clone's place
	Message   string // checkpoint
	Max       int    // log
	Diff      work.DiffRequest
	How       string   // apply
	At        string   // apply: the commit of the branch to apply
	Include   []string // checkpoint: ignored paths to record too
	Refresh   bool     // log, diff, apply: checkpoint first
	JSON      bool
}

// WorkStart clones the repository holding dir into sandbox name, its work
// to come back on the branch sandbox/<name>. A person's directory is not
// confined to roots (the person is the user).
func WorkStart(ctx context.Context, cfg Config, name, dir string, o WorkOptions, w io.Writer) error {
	return withWork(ctx, cfg, name, o.JSON, w, func(env *Env) (any, string, error) {
		if dir == "" {
			dir, _ = os.Getwd()
		}
		out, err := env.Work.Start(ctx, name, dir, o.Ref, o.Path)
		return out, fmt.Sprintf("cloned %s at %s (%.12s) into sandbox %s at %s; its work comes back on %s", out.Repo, out.Ref, out.Base, name, out.Path, out.Branch), err
	})
}

// Checkpoint commits sandbox name's changes and takes them onto its branch.
func Checkpoint(ctx context.Context, cfg Config, name string, o WorkOptions, w io.Writer) error {
	return withWork(ctx, cfg, name, o.JSON, w, func(env *Env) (any, string, error) {
		out, err := env.Work.CheckpointWith(ctx, name, work.CheckpointRequest{Message: o.Message, Include: o.Include})
		if !out.New {
			return out, fmt.Sprintf("nothing new: %s is at %.12s", out.Branch, out.Commit), err
		}
		return out, fmt.Sprintf("%s is at %.12s (%s changed)", out.Branch, out.Commit, work.FilesCount(out.Files)), err
	})
}

// WorkLog prints sandbox name's commits since its base.
func WorkLog(ctx context.Context, cfg Config, name string, o WorkOptions, w io.Writer) error {
	return withWork(ctx, cfg, name, o.JSON, w, func(env *Env) (any, string, error) {
		out, err := env.Work.Log(ctx, name, o.Max, o.Refresh)
		var b strings.Builder
		for _, c := range out.Commits {
			fmt.Fprintf(&b, "%.12s %s %s\n", c.Hash, c.Date.Format("2006-01-02 15:04"), c.Subject)
		}
		return out, strings.TrimSuffix(b.String(), "\n"), err
	})
}

// WorkDiff prints sandbox name's work as a diff.
func WorkDiff(ctx context.Context, cfg Config, name string, o WorkOptions, w io.Writer) error {
	return withWork(ctx, cfg, name, o.JSON, w, func(env *Env) (any, string, error) {
		req := o.Diff
		req.Refresh = o.Refresh
		out, err := env.Work.Diff(ctx, name, req)
		return out, strings.TrimSuffix(out.Text, "\n"), err
	})
}

// WorkApply brings sandbox name's work into the user's checked out branch.
func WorkApply(ctx context.Context, cfg Config, name string, o WorkOptions, w io.Writer) error {
	return withWork(ctx, cfg, name, o.JSON, w, func(env *Env) (any, string, error) {
		how := o.How
		if how == "" {
			how = gitwork.Merge
		}
		out, err := env.Work.Apply(ctx, name, work.ApplyRequest{How: how, At: o.At, Refresh: o.Refresh})
		return out, fmt.Sprintf("%s applied to %s by %s: %.12s → %.12s", out.Branch, out.Into, out.How, out.Before, out.After), err
	})
}

// withWork runs fn on an Env for name and prints its result.
func withWork(ctx context.Context, cfg Config, name string, asJSON bool, w io.Writer, fn func(*Env) (any, string, error)) error {
	if err := sandbox.ValidateName(name); err != nil {
		return &ExitError{Code: ExitUsage, Err: err}
	}
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	out, text, err := fn(env)
	if err != nil {
		return exitFor(err)
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if text != "" {
		fmt.Fprintln(w, text)
	}
	return nil
}
