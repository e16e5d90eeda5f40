package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/copier"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/transfer"
)

// CopyOptions shape Copy.
type CopyOptions struct {
	Overwrite bool     // a download may replace what is at its target
	Ignore    []string // names an upload leaves out, at any depth
	JSON      bool     // print the result as JSON
}

// Copy copies between the host and a sandbox, in docker cp's form: one of
// src and dst is NAME:PATH (a path in the sandbox; a relative one is
// under /workspace), the other a host path. A host directory as dst, or a
// sandbox directory, receives the copy under its source's name. It goes
// through the same code as the upload and download tools; a person's host
// paths are not confined to roots (the person is the user).
func Copy(ctx context.Context, cfg Config, src, dst string, o CopyOptions, w io.Writer) error {
	sname, spath, sIn := splitSandboxPath(src)
	dname, dpath, dIn := splitSandboxPath(dst)
	switch {
	case sIn == dIn:
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("cp: exactly one of %q and %q names a sandbox path (NAME:PATH)", src, dst)}
	case sIn && sandbox.ValidateName(sname) != nil:
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("cp: %w", sandbox.ValidateName(sname))}
	case dIn && sandbox.ValidateName(dname) != nil:
		return &ExitError{Code: ExitUsage, Err: fmt.Errorf("cp: %w", sandbox.ValidateName(dname))}
	}
	env, err := openCLI(ctx, cfg)
	if err != nil {
		return err
	}
	defer env.Close()
	var res copier.Result
	if dIn {
		if err := mustExist(ctx, env.Manager, dname); err != nil {
			return err
		}
		root, rel, err := openHostParent(src)
		if err != nil {
			return &ExitError{Code: ExitFailed, Err: fmt.Errorf("cp: %w", err)}
		}
		defer root.Close()
		res, err = copier.Upload(ctx, env.Manager, dname, root, rel, src, sandboxPath(dpath), o.Ignore)
		if err != nil {
			return exitFor(fmt.Errorf("cp %s to sandbox %q: %w", src, dname, err))
		}
	} else {
		if err := mustExist(ctx, env.Manager, sname); err != nil {
			return err
		}
		// Into an existing directory; else as the named path, in its
		// directory.
		var root *os.Root
		rel := "."
		// A symlink as the destination is replaced (with --overwrite), not
		// followed: it may be one a sandbox made on an earlier copy.
		if fi, err := os.Lstat(dst); err == nil && fi.IsDir() {
			root, err = os.OpenRoot(dst)
			if err != nil {
				return &ExitError{Code: ExitFailed, Err: fmt.Errorf("cp: %w", err)}
			}
		} else if root, rel, err = openHostParent(dst); err != nil {
			return &ExitError{Code: ExitFailed, Err: fmt.Errorf("cp: %w", err)}
		}
		defer root.Close()
		res, err = copier.Download(ctx, env.Manager, sname, sandboxPath(spath), root, rel, copier.DownloadOptions{Overwrite: o.Overwrite})
		if errors.Is(err, transfer.ErrExists) {
			// The tools' text names their argument; a person types the flag.
			return &ExitError{Code: ExitFailed, Err: errors.New("cp: " + strings.Replace(err.Error(), "pass overwrite=true", "pass --overwrite", 1))}
		}
		if err != nil {
			return exitFor(fmt.Errorf("cp from sandbox %q:%s: %w", sname, spath, err))
		}
	}
	if o.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	// Paths in the text come from the sandbox: no control character of
	// theirs reaches the terminal.
	_, err = fmt.Fprintln(w, printable(res.Text()))
	return err
}

// splitSandboxPath splits NAME:PATH. A path with no colon before its
// first slash (./a:b, /tmp/x:y) is a host path, as in docker cp.
func splitSandboxPath(s string) (name, p string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.ContainsRune(s[:i], '/') {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// sandboxPath is p in the sandbox: under /workspace when relative, the
// workspace itself when empty.
func sandboxPath(p string) string {
	if p == "" {
		return "/workspace"
	}
	if !path.IsAbs(p) {
		return path.Join("/workspace", p)
	}
	return p
}

// openHostParent opens the directory holding host path p as a root, and
// returns p's name in it.
func openHostParent(p string) (*os.Root, string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, "", err
	}
	dir, base := filepath.Split(abs)
	if base == "" { // "/"
		return nil, "", errors.New("cannot copy the host's root directory")
	}
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("host directory %s does not exist", dir)
	}
	return root, base, err
}

// printable escapes the control characters of s but its newlines.
func printable(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = oneLine(l, len(l)+1)
	}
	return strings.Join(lines, "\n")
}
