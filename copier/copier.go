// Package copier copies files and directories between the host and a
// sandbox: the host side of an upload or a download (a host directory
// opened as an os.Root, tar packing, confined unpacking) that the MCP
// tools and `sandbox-mcp cp` share. What the sandbox sends back (names,
// tar entries, sizes) is untrusted: it is unpacked under the root only,
// by transfer.Unpack.
package copier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
	"github.com/sandbox-mcp/sandbox-mcp/transfer"
)

// Sandboxes is what a copy needs of the Manager.
type Sandboxes interface {
	Upload(ctx context.Context, name string, req sandbox.UploadRequest) (sandbox.Landing, error)
	Download(ctx context.Context, name, src string, unpack func(r io.Reader, top string, cap sandbox.HostCap, finish func() error) error) (string, error)
	TrackStaging(path string) error
}

// Result is what a copy did.
type Result struct {
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

// Method is how the bytes of a copy move.
const Method = "tar stream over the engine's exec"

// Upload copies rel, under root, into sandbox name at dest (into dest
// when it is a directory there); shown is the host path as the caller
// named it, for errors. Entries whose name ignore matches are left out.
func Upload(ctx context.Context, m Sandboxes, name string, root *os.Root, rel, shown, dest string, ignore []string) (Result, error) {
	fi, err := root.Lstat(rel)
	if err != nil {
		return Result{}, &HostError{HostPathErr(shown, err)}
	}
	base := filepath.Base(filepath.Join(root.Name(), rel))
	start := time.Now()
	var counts transfer.Counts
	land, err := m.Upload(ctx, name, sandbox.UploadRequest{Dest: dest, Base: base, Dir: fi.IsDir(), Pack: func(w io.Writer, top string) error {
		var perr error
		counts, perr = transfer.Pack(root, rel, top, w, transfer.PackOptions{Ignore: ignoreFunc(ignore)})
		return perr
	}})
	if err != nil {
		return Result{}, err
	}
	return Result{Sandbox: name, Direction: "upload", LocalPath: filepath.Join(root.Name(), rel), SandboxPath: land.Path,
		Counts: counts, Replaced: land.Replaced, Seconds: since(start), Method: Method}, nil
}

// DownloadOptions shape a download.
type DownloadOptions struct {
	// Overwrite lets the copy replace what is at the target.
	Overwrite bool
	// MaxBytes refuses a copy larger than this (transfer.DefaultMaxBytes
	// when 0); the host's free space may bound it lower.
	MaxBytes int64
}

// Download copies src from sandbox name to rel under root: into rel
// under src's name when rel is an existing directory, else as rel.
func Download(ctx context.Context, m Sandboxes, name, src string, root *os.Root, rel string, o DownloadOptions) (Result, error) {
	// Into an existing directory, under the sandbox path's name; the
	// name is known only once the sandbox was asked, so it is checked then.
	intoDir := false
	if fi, err := root.Stat(rel); err == nil && fi.IsDir() {
		intoDir = true
	} else if err == nil || !errors.Is(err, fs.ErrNotExist) {
		if err := transfer.CheckTarget(root, rel, o.Overwrite); err != nil {
			return Result{}, &HostError{err}
		}
	}
	want := path.Base(path.Clean(src))
	if want == "." || want == ".." || want == "/" || strings.ContainsAny(want, "\\\x00") {
		want = ""
	}
	start := time.Now()
	var counts transfer.Counts
	target, replaced := rel, false
	from, err := m.Download(ctx, name, src, func(r io.Reader, top string, cap sandbox.HostCap, finish func() error) error {
		// top comes from the sandbox: it must name one entry, or "into a
		// directory" would replace the directory itself.
		if top == "" || top == "." || top == ".." || strings.ContainsAny(top, "/\\\x00") {
			return fmt.Errorf("the sandbox named the downloaded path %q, which cannot name a host file", top)
		}
		if intoDir {
			// The name on the host is the one the caller asked for, not
			// the one the sandbox says (it could say .ssh). Only where
			// the caller's path names nothing (".") does the sandbox's
			// name serve, and then not a hidden one.
			base := want
			if base == "" {
				if strings.HasPrefix(top, ".") {
					return fmt.Errorf("the sandbox named the downloaded path %q; name the sandbox path itself (not \".\") to download a hidden file into a directory", top)
				}
				base = top
			}
			target = filepath.Join(rel, base)
		}
		if _, err := root.Lstat(target); err == nil {
			replaced = true
		}
		max, why := o.MaxBytes, ""
		if max <= 0 {
			max = transfer.DefaultMaxBytes
		}
		if cap.Bytes > 0 && cap.Bytes < max {
			max, why = cap.Bytes, cap.Why
		}
		var uerr error
		counts, uerr = transfer.Unpack(root, target, r, transfer.UnpackOptions{
			Top: top, Overwrite: o.Overwrite, MaxBytes: max, MaxWhy: why, BeforeCommit: finish, OnStaging: m.TrackStaging})
		return uerr
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Sandbox: name, Direction: "download", LocalPath: filepath.Join(root.Name(), target), SandboxPath: from,
		Counts: counts, Replaced: replaced, Seconds: since(start), Method: Method}, nil
}

// HostError is an error about the host's side of a copy, found before
// the sandbox was asked (a missing source, a target it may not replace).
type HostError struct{ Err error }

func (e *HostError) Error() string { return e.Err.Error() }
func (e *HostError) Unwrap() error { return e.Err }

// HostPathErr says what is wrong with host path p.
func HostPathErr(p string, err error) error {
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

// Text is r as a sentence: what went where, counts, time, what was
// skipped.
func (r Result) Text() string {
	from, to := r.LocalPath, fmt.Sprintf("sandbox %q:%s", r.Sandbox, r.SandboxPath)
	if r.Direction == "download" {
		from, to = to, from
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%sed %s to %s: %d files, %d directories, %d symlinks, %s in %.2f s", r.Direction, from, to,
		r.Files, r.Dirs, r.Symlinks, units.Approx(r.Bytes), r.Seconds)
	if r.Seconds > 0 && r.Bytes > 1<<20 {
		fmt.Fprintf(&b, " (%.0f MB/s)", float64(r.Bytes)/1e6/r.Seconds)
	}
	if r.Replaced {
		b.WriteString("; replaced what was there")
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(&b, "\nskipped or changed (%d):", len(r.Skipped))
		for _, sk := range r.Skipped {
			fmt.Fprintf(&b, "\n  %q: %s", sk.Path, sk.Reason)
		}
	}
	return b.String()
}

// HostDir returns the real path of directory rel under root (asked is
// the path as the user gave it, for errors), refusing one that is not a
// directory or whose real path leads out of root through a symlink.
func HostDir(root *os.Root, rel, asked string) (string, error) {
	fi, err := root.Stat(rel)
	if err != nil {
		return "", HostPathErr(asked, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("host path %s is not a directory", asked)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root.Name(), rel))
	if err != nil {
		return "", HostPathErr(asked, err)
	}
	if !transfer.Within(root.Name(), real) {
		return "", fmt.Errorf("%w: %s leads out of %s; %s", transfer.ErrOutsideRoots, asked, root.Name(), transfer.AllowFlagHint)
	}
	return real, nil
}
