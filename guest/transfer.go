package guest

import (
	"errors"
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

// ParseProbe reads ProbePathScript's line.
func ParseProbe(out string) (kind, path string, err error) {
	line := strings.TrimSuffix(out, "\n")
	kind, path, ok := strings.Cut(line, " ")
	if !ok || path == "" || (kind != "dir" && kind != "file" && kind != "none") {
		return "", "", errors.New("unexpected answer from the sandbox's path probe")
	}
	return kind, path, nil
}

// UntarScript extracts a tar stream from stdin into the directory $1,
// creating it, as the exec's user: owners in the stream are ignored
// (-o), modes kept (-p).
const UntarScript = `command mkdir -p -- "$1" && cd -- "$1" && exec tar -x -p -o -f -`

// TarScript writes the entry $2 of the directory $1 (and all under it)
// to stdout as a tar stream. Symlinks are stored as links.
const TarScript = `cd -- "$1" && exec tar -c -f - -- "$2"`
