// Package transfer moves files between the host and a sandbox as tar
// streams, confined on the host to allowed roots.
//
// Everything that comes out of a sandbox is untrusted. Host writes go
// through os.Root (which refuses "..", absolute names and symlinks that
// leave the root at every step) into a fresh staging directory that is
// renamed into place only when the whole stream was good; hard links,
// devices and set-id bits are never created, and no symlink that the
// stream itself created is ever followed.
package transfer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrOutsideRoots marks a host path that no allowed root holds.
var ErrOutsideRoots = errors.New("host path outside the allowed roots")

// AllowFlagHint tells how to allow another host directory.
const AllowFlagHint = "allow another directory with --allow-dir DIR (or SANDBOX_MCP_ALLOW_DIRS, or allow_dirs in the config file)"

// Roots are the host directories transfers may read and write.
type Roots []string

// CleanRoots makes each directory absolute, resolves its symlinks and
// drops duplicates and the unusable (missing, not a directory, or the
// filesystem root). It returns what it dropped and why.
func CleanRoots(dirs []string) (Roots, []string) {
	var out Roots
	var dropped []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		abs, err := filepath.Abs(d)
		if err == nil {
			abs, err = filepath.EvalSymlinks(abs)
		}
		if err != nil {
			dropped = append(dropped, fmt.Sprintf("%s: %v", d, err))
			continue
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			dropped = append(dropped, d+": not a directory")
			continue
		}
		if abs == string(filepath.Separator) {
			dropped = append(dropped, d+": the filesystem root is never allowed")
			continue
		}
		if !slices.Contains(out, abs) {
			out = append(out, abs)
		}
	}
	return out, dropped
}

// StartDirRoot is the root a server started in dir gets when the client
// names none: dir itself, unless it is the filesystem root or the home
// directory (Claude Desktop starts servers in /, some apps in $HOME), which
// are too wide to allow implicitly.
func StartDirRoot(dir, home string) (string, bool) {
	clean := filepath.Clean(dir)
	if dir == "" || clean == string(filepath.Separator) {
		return "", false
	}
	if home != "" && clean == filepath.Clean(home) {
		return "", false
	}
	return clean, true
}

// Describe names the roots for an error message.
func (r Roots) Describe() string {
	if len(r) == 0 {
		return "no host directory is allowed yet"
	}
	return "allowed roots: " + strings.Join(r, ", ")
}

// Resolve finds the root that holds path. path must be absolute (a
// relative one is taken from the first root) and must not hold "..". It
// returns the root and path relative to it ("." for the root itself).
// Symlinks inside are not resolved here: opening rel through os.Root
// refuses any that lead out of the root.
func (r Roots) Resolve(path string) (root, rel string, err error) {
	if path == "" {
		return "", "", errors.New("host path is empty")
	}
	if len(r) == 0 {
		return "", "", fmt.Errorf("%w: %s; %s", ErrOutsideRoots, r.Describe(), AllowFlagHint)
	}
	if slices.Contains(strings.Split(filepath.ToSlash(path), "/"), "..") {
		return "", "", fmt.Errorf("host path %q holds \"..\": name it without", path)
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(r[0], path)
	}
	path = filepath.Clean(path)
	// The longest root that holds path wins.
	best := -1
	for i, d := range r {
		if Within(d, path) && (best < 0 || len(d) > len(r[best])) {
			best = i
		}
	}
	if best < 0 {
		// The path may name a root through a symlink (/tmp on macOS).
		if real, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
			alt := filepath.Join(real, filepath.Base(path))
			if alt != path {
				return r.Resolve(alt)
			}
		}
		return "", "", fmt.Errorf("%w: %q; %s; %s", ErrOutsideRoots, path, r.Describe(), AllowFlagHint)
	}
	rel, err = filepath.Rel(r[best], path)
	if err != nil {
		return "", "", err
	}
	return r[best], rel, nil
}

// Within reports whether path is dir or lies under it (both clean).
func Within(dir, path string) bool {
	if path == dir {
		return true
	}
	return strings.HasPrefix(path, strings.TrimSuffix(dir, string(filepath.Separator))+string(filepath.Separator))
}
