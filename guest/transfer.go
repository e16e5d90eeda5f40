package guest

import (
	"errors"
	"path"
	"strings"
)

// The transfer scripts run through the engine's own exec (`sh -c SCRIPT sh
// ARGS…`), with paths as positional arguments: no path is ever part of the
// script text.

// ProbePathScript resolves path against the shell's working directory
// and prints one line: "dir PATH" for a directory, "file PATH" for
// anything else that exists (a symlink included), "none PATH" when nothing
// is there. It runs in the persistent shell, in a subshell.
func ProbePathScript(path string) (string, error) {
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return "", errors.New("sandbox path must be non-empty, without NUL")
	}
	return "(p=" + quote(path) + `
case $p in /*) ;; *) p=$(command pwd)/$p ;; esac
if [ -d "$p" ] && [ ! -L "$p" ]; then k=dir; elif [ -e "$p" ] || [ -L "$p" ]; then k=file; else k=none; fi
command printf '%s %s\n' "$k" "$p")`, nil
}

// ParseProbe reads ProbePathScript's line. The answer comes from the
// sandbox, so it is checked: the path must be absolute, and is returned
// cleaned, so its base name is never "." or ".." (a download names what
// it writes on the host after it).
func ParseProbe(out string) (kind, p string, err error) {
	line := strings.TrimSuffix(out, "\n")
	kind, p, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(p, "/") || strings.IndexByte(p, 0) >= 0 || (kind != "dir" && kind != "file" && kind != "none") {
		return "", "", errors.New("unexpected answer from the sandbox's path probe")
	}
	return kind, path.Clean(p), nil
}

// UntarScript extracts a tar stream from stdin into the directory $1,
// creating it, as the exec's user: owners in the stream are ignored
// (-o), modes kept (-p). GNU tar reads 1 MiB records (fewer, larger reads
// from the pipe).
const UntarScript = `command mkdir -p -- "$1" && cd -- "$1" || exit 1
case $(tar --version 2>/dev/null) in *GNU*) exec tar -x -p -o -b 2048 -f - ;; esac
exec tar -x -p -o -f -`

// ReplaceDirScript empties the directory $1 and extracts a tar stream
// from stdin into it, like UntarScript.
const ReplaceDirScript = `command mkdir -p -- "$1" && cd -- "$1" || exit 1
command find . -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + || exit 1
case $(tar --version 2>/dev/null) in *GNU*) exec tar -x -p -o -b 2048 -f - ;; esac
exec tar -x -p -o -f -`

// TarScript writes the entry $2 of the directory $1 (and all under it)
// to stdout as a tar stream. Symlinks are stored as links. GNU tar writes
// 1 MiB records.
const TarScript = `cd -- "$1" || exit 1
case $(tar --version 2>/dev/null) in *GNU*) exec tar -c -b 2048 -f - -- "$2" ;; esac
exec tar -c -f - -- "$2"`

// SyncListScript prints every path under dir (as "./rel", NUL-separated),
// leaving out entries named in ignore and all under them; nothing when
// dir does not exist. It runs in the persistent shell, in a subshell.
func SyncListScript(dir string, ignore []string) (string, error) {
	if dir == "" || strings.IndexByte(dir, 0) >= 0 {
		return "", errors.New("sandbox directory must be non-empty, without NUL")
	}
	var b strings.Builder
	b.WriteString("(cd -- " + quote(dir) + " 2>/dev/null || exit 0\ncommand find . -mindepth 1")
	if len(ignore) > 0 {
		b.WriteString(` \(`)
		for i, n := range ignore {
			if strings.ContainsAny(n, "/\x00") || n == "" {
				return "", errors.New("ignore names are base names without / or NUL")
			}
			if i > 0 {
				b.WriteString(" -o")
			}
			b.WriteString(" -name " + quote(n))
		}
		b.WriteString(` \) -prune -o`)
	}
	b.WriteString(" -print0)")
	return b.String(), nil
}

// SyncApplyScript makes dir, removes the given paths under it (each
// "./rel") and, with untar, extracts a tar stream from stdin into it as
// the shell's user (owners ignored, modes kept). It runs in the persistent
// shell, in a subshell, and fails at the first step that fails.
func SyncApplyScript(dir string, remove []string, untar bool) (string, error) {
	if dir == "" || strings.IndexByte(dir, 0) >= 0 {
		return "", errors.New("sandbox directory must be non-empty, without NUL")
	}
	var b strings.Builder
	b.WriteString("(command mkdir -p -- " + quote(dir) + " && cd -- " + quote(dir) + " || exit 1\n")
	if len(remove) > 0 {
		b.WriteString("command rm -rf --")
		for _, p := range remove {
			if !strings.HasPrefix(p, "./") || strings.IndexByte(p, 0) >= 0 {
				return "", errors.New("paths to remove are ./relative, without NUL")
			}
			b.WriteString(" " + quote(p))
		}
		b.WriteString(" || exit 1\n")
	}
	if untar {
		b.WriteString("command tar -x -p -o -f - || exit 1\n")
	}
	b.WriteString(")")
	return b.String(), nil
}

// WorkspaceLoadScript extracts a tar stream from stdin into dir (emptied
// first with replace) through the persistent shell, in a subshell.
func WorkspaceLoadScript(dir string, replace bool) (string, error) {
	if dir == "" || strings.IndexByte(dir, 0) >= 0 {
		return "", errors.New("directory must be non-empty, without NUL")
	}
	s := "(command mkdir -p -- " + quote(dir) + " && cd -- " + quote(dir) + " || exit 1\n"
	if replace {
		s += "command find . -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + || exit 1\n"
	}
	return s + "command tar -x -p -o -f - || exit 1\n)", nil
}
