package app

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// EngineDirs are searched for an engine's CLI after PATH. Apps started
// from the macOS Dock or Finder (Claude Desktop, Cursor) get launchd's
// PATH, /usr/bin:/bin:/usr/sbin:/sbin, without the directories where the
// container CLI, Homebrew's podman or Docker Desktop's docker live.
var EngineDirs = []string{"/usr/local/bin", "/opt/homebrew/bin", "/opt/local/bin", "/Applications/Docker.app/Contents/Resources/bin"}

// engineFinder locates an engine CLI by name: an explicit path first, then
// PATH, then dirs.
type engineFinder struct {
	// path is the configured CLI (engine_path); it is used for whichever
	// engine it is, and must exist.
	path string
	dirs []string
	// lookPath is exec.LookPath; tests replace it.
	lookPath func(string) (string, error)
}

func newEngineFinder(path string) engineFinder {
	return engineFinder{path: path, dirs: EngineDirs, lookPath: exec.LookPath}
}

// find returns the path of the CLI name, or "" when there is none.
func (f engineFinder) find(name string) string {
	if f.path != "" {
		if filepath.Base(f.path) == name {
			return f.path
		}
		return ""
	}
	if p, err := f.lookPath(name); err == nil {
		return p
	}
	for _, d := range f.dirs {
		p := filepath.Join(d, name)
		if isExecutable(p) {
			return p
		}
	}
	return ""
}

// searched describes where find looked, for an error.
func (f engineFinder) searched() string {
	if f.path != "" {
		return "engine_path " + f.path
	}
	return fmt.Sprintf("PATH and %v", f.dirs)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && executable(st)
}

// executable reports whether st is a regular file someone may execute.
func executable(st os.FileInfo) bool {
	return st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// checkEnginePath checks an engine_path value: an executable file named
// container, docker or podman.
func checkEnginePath(p string) error {
	if p == "" {
		return nil
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%q is not an absolute path", p)
	}
	switch filepath.Base(p) {
	case "container", "docker", "podman":
	default:
		return fmt.Errorf("%q: the engine's CLI is named container, docker or podman", p)
	}
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !executable(st) {
		return errors.New(p + " is not an executable file")
	}
	return nil
}
