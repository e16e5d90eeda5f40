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

// The workspace volume's lost+found.
//
// mkfs.ext4 and Apple's ext4 formatter (containerization's
// EXT4.Formatter) make a directory lost+found, mode 0700 and owned by
// root, in the root directory of every filesystem they make, for e2fsck.
// A workspace volume that is such a filesystem (every Apple volume; a
// sized docker/podman workspace on a loop device) thus holds a
// <workspace>/lost+found that nobody put there and that a user other than
// root can neither read nor remove.
//
// What counts as the volume's lost+found: the entry lost+found directly in
// the workspace directory (the volume's mount point), when
//   - it is a directory, not a symlink, and
//   - the workspace directory is the root directory of an ext2/3/4
//     filesystem: its inode number is 2 (every ext filesystem's root
//     inode) and statfs names its type ext2/ext3 (magic 0xEF53, which
//     ext4 shares).
//
// Any other lost+found is the user's and is treated like any other file:
// one below the top of the workspace, one in a workspace that is not an
// ext filesystem's root (a plain docker/podman volume, a tmpfs), a
// symlink, and one anywhere outside the workspace. Where stat is missing
// the test fails, and the entry is the user's.
//
// The scripts that walk the workspace as a whole leave the volume's
// lost+found out: a download of the workspace, the workspace tar of a
// snapshot or a clone, the listing a sync compares with the host. Those
// that write the workspace as a whole leave it in place: a restore or a
// clone neither empties it nor extracts a lost+found of the stream (a tar
// saved before, or from a workspace where lost+found was the user's) into
// it, and a sync neither removes it nor extracts the host's over it. Tar's
// own exclusion does it: GNU tar, or a tar that takes --exclude (busybox
// built with it); a tar without --exclude (Debian's busybox) sends and
// extracts lost+found as it always did.

// SkipLostFound, as an argument of TarScript, UntarScript, StageScript
// or SwapScript, says that the directory they walk is the workspace:
// its volume's lost+found is left alone.
const SkipLostFound = "skip-lost+found"

// lostFoundHere is an sh test, true when the working directory holds its
// volume's lost+found.
const lostFoundHere = `[ -d lost+found ] && [ ! -L lost+found ] && ` +
	`[ "$(command stat -c %i . 2>/dev/null)" = 2 ] && ` +
	`case $(command stat -f -c %T . 2>/dev/null) in ext[234]*) ;; *) false ;; esac`

// hasExclude is an sh test, true when a tar that is not GNU's takes
// --exclude (it archives /dev/null into /dev/null to find out).
const hasExclude = `command tar -c -f /dev/null --exclude=x -- /dev/null >/dev/null 2>&1`

// Exact, as the argument after SkipLostFound (which may be ""), makes
// TarScript, UntarScript and StageScript copy a tree exactly, for a
// snapshot's or a clone's workspace: owners and groups by number (a uid
// the image does not know included), ACLs and extended attributes of every
// namespace where the tar has them (GNU tar built with them), and sparse
// files as sparse. Owners are kept only where the extracting user is root;
// another user cannot give files away, and extracts them as its own.
const Exact = "exact"

// xattrsProbe is an sh test, true when GNU tar takes --xattrs and --acls.
const xattrsProbe = `command tar --xattrs --acls -c -f /dev/null -- /dev/null >/dev/null 2>&1`

// untarOptions sets the positional parameters to the options that decide
// owners and attributes on extract: -o (owners in the stream ignored),
// or with $e set the exact ones. $gnu says the tar is GNU's.
const untarOptions = `set -- -o
if [ -n "$e" ] && [ "$(command id -u)" = 0 ]; then
  if [ -n "$gnu" ]; then set -- --same-owner --numeric-owner
    ` + xattrsProbe + ` && set -- "$@" --xattrs '--xattrs-include=*' --acls
  else set --; fi
fi
`

// execUntar ends an sh -c script with tar extracting stdin into the
// working directory as the exec's user, modes kept (-p), owners as
// untarOptions says. GNU tar reads 1 MiB records (fewer, larger reads
// from the pipe). With $x set, the stream's lost+found is not extracted.
const execUntar = `gnu=
case $(tar --version 2>/dev/null) in *GNU*) gnu=1 ;; esac
` + untarOptions + `if [ -n "$gnu" ]; then
  [ -z "$x" ] || exec tar -x -p "$@" -b 2048 -f - --anchored --no-wildcards --exclude=./lost+found --exclude=lost+found
  exec tar -x -p "$@" -b 2048 -f -
fi
[ -z "$x" ] || ! ` + hasExclude + ` || exec tar -x -p "$@" -f - --exclude=./lost+found
exec tar -x -p "$@" -f -`

// UntarScript extracts a tar stream from stdin into the directory $1,
// creating it, as the exec's user: owners in the stream are ignored (-o),
// modes kept (-p). With $2 SkipLostFound, a lost+found of the stream is
// not extracted over the volume's; with $3 Exact, the copy is exact.
const UntarScript = `command mkdir -p -- "$1" && cd -- "$1" || exit 1
x= e=
[ "$3" != ` + Exact + ` ] || e=1
if [ "$2" = ` + SkipLostFound + ` ] && ` + lostFoundHere + `; then x=1; fi
` + execUntar

// UploadScript lands an upload whole: it extracts the tar stream on stdin
// (whose top entry is $2) into a staging directory $3 (a base name) made
// in the directory $1, owners ignored and modes kept as UntarScript does,
// and only once tar read the whole stream, its last entry the empty file
// $4 (GNU tar takes a stream cut between two entries for a whole one),
// moves it into place: a new path,
// a file or a symlink by one rename; a directory onto an existing one by
// moving each file and link over its counterpart (each whole, by rename;
// what the upload does not hold stays) and then giving the directories the
// upload's modes and times. A stream cut short (the server died part way)
// removes the staging directory and leaves the target as it was.
const UploadScript = `command mkdir -p -- "$1" && cd -- "$1" || exit 1
top=$2 st=$3 end=$4
command mkdir -- "$st" || exit 1
if ! (cd -- "$st" || exit 1
gnu= e=
case $(tar --version 2>/dev/null) in *GNU*) gnu=1 ;; esac
` + untarOptions + `if [ -n "$gnu" ]; then exec tar -x -p "$@" -b 2048 -f -; fi
exec tar -x -p "$@" -f -); then command rm -rf -- "$st"; exit 1; fi
if [ ! -f "$st/$end" ]; then echo "the upload's stream was cut short: nothing was changed" >&2; command rm -rf -- "$st"; exit 1; fi
command rm -f -- "$st/$end"
if [ ! -e "$st/$top" ] && [ ! -L "$st/$top" ]; then echo "the upload's stream held no $top" >&2; command rm -rf -- "$st"; exit 1; fi
rc=0
if [ -d "$top" ] && [ ! -L "$top" ] && [ -d "$st/$top" ] && [ ! -L "$st/$top" ]; then
  # The directories' times are kept aside first (a tree of stamps, made
  # deepest first so that making one moves no other's time): moving the
  # files out moves the staged directories' times.
  T=$PWD/$st.t
  (cd -- "$st" &&
    command find "$top" -depth -type d -exec sh -c 'for d; do command mkdir -p -- "$0/$d" && command touch -r "$d" -- "$0/$d" || exit 1; done' "$T" {} + &&
    command find "$top" -mindepth 1 -type d -exec sh -c 'for d; do [ -d "$0/$d" ] || command mkdir -p -- "$0/$d" || exit 1; done' "$1" {} + &&
    command find "$top" ! -type d -exec sh -c '` + putFiles + `' "$1" {} + &&
    T=$T command find "$top" -type d -exec sh -c 'for d; do command chmod --reference="$d" -- "$0/$d" 2>/dev/null; command touch -r "$T/$d" -- "$0/$d" 2>/dev/null; done' "$1" {} +) || rc=1
  command rm -rf -- "$T"
else
  (cd -- "$st" && sh -c '` + putFiles + `' "$1" "$top") || rc=1
fi
command rm -rf -- "$st"
exit "$rc"`

// MergeStageScript moves what StageScript staged in the directory $2 of
// the directory $1 into $1, as an upload onto an existing directory
// lands (see UploadScript): each file and link by one rename over its
// counterpart, what the stage does not hold left as it is, then the
// directories' modes and times from the stage; the stage is removed. A
// server killed part way leaves each file old or new, never torn.
const MergeStageScript = `cd -- "$1" || exit 1
st=$2 D=$PWD
[ -d "$st" ] || exit 0
T=$D/$st.t
rc=0
(cd -- "$st" &&
  command find . -depth -type d -exec sh -c 'for d; do command mkdir -p -- "$0/$d" && command touch -r "$d" -- "$0/$d" || exit 1; done' "$T" {} + &&
  command find . -mindepth 1 -type d -exec sh -c 'for d; do [ -d "$0/$d" ] || command mkdir -p -- "$0/$d" || exit 1; done' "$D" {} + &&
  command find . ! -type d -exec sh -c '` + putFiles + `' "$D" {} + &&
  T=$T command find . -type d -exec sh -c 'for d; do command chmod --reference="$d" -- "$0/$d" 2>/dev/null; command touch -r "$T/$d" -- "$0/$d" 2>/dev/null; done' "$D" {} +) || rc=1
command rm -rf -- "$T" "$st"
exit "$rc"`

// putFiles is an sh -c script that renames each of its arguments (paths
// relative to the working directory) to the same path under $0: over a
// file or a symlink in one rename (mv -T, where mv has it), never into a
// directory that is there.
const putFiles = `for f; do
  command mv -fT -- "$f" "$0/$f" 2>/dev/null && continue
  if [ -L "$0/$f" ]; then command rm -f -- "$0/$f"; fi
  if [ -d "$0/$f" ]; then echo "$0/$f is a directory: the upload cannot replace it" >&2; exit 1; fi
  command mv -f -- "$f" "$0/$f" || exit 1
done`

// WorkspaceStagePrefix and WorkspaceOldPrefix begin the names of the
// directories, in the workspace, where a restore or a clone puts the new
// workspace while it arrives and the old one while they swap.
const (
	WorkspaceStagePrefix = ".sandbox-mcp-restore-"
	WorkspaceOldPrefix   = ".sandbox-mcp-old-"
)

// StageScript extracts a tar stream from stdin into the directory $2 (a
// base name, made fresh) in the directory $1, as UntarScript would into
// $1, and keeps it only when the stream arrived whole: its last entry the
// empty file $3 (tar takes a stream cut between two entries for a whole
// one). With $4 SkipLostFound, a lost+found of the stream is not
// extracted; with $5 Exact, the copy is exact. A stream cut short removes
// $2 and fails; $1 is not touched either way.
const StageScript = `command mkdir -p -- "$1" && cd -- "$1" || exit 1
st=$2 end=$3 x= e=
[ "$5" != ` + Exact + ` ] || e=1
if [ "$4" = ` + SkipLostFound + ` ] && ` + lostFoundHere + `; then x=1; fi
command rm -rf -- "$st" && command mkdir -- "$st" || exit 1
if ! (cd -- "$st" || exit 1
` + execUntar + `); then command rm -rf -- "$st"; exit 1; fi
if [ ! -f "$st/$end" ]; then echo "the stream was cut short: nothing was changed" >&2; command rm -rf -- "$st"; exit 1; fi
command rm -f -- "$st/$end"`

// SwapScript makes the staged workspace $2 (see StageScript) the content
// of the directory $1: it moves every entry of $1 but $2, $3 and (with $4
// SkipLostFound) the volume's lost+found into the directory $3, marks $3
// when that is done, moves every entry of $2 into $1 and removes $2 and
// $3. Each move is a rename within one filesystem. Run again after it was
// killed at any point it carries on where it stopped: once $3 is marked,
// what is in $1 is the new workspace's; without $2, only $3 is removed.
const SwapScript = `cd -- "$1" || exit 1
st=$2 old=$3 x=
if [ "$4" = ` + SkipLostFound + ` ] && ` + lostFoundHere + `; then x=1; fi
if [ -d "$st" ] && [ ! -L "$st" ]; then
  if [ ! -f "$old/.sandbox-mcp-moved" ]; then
    command mkdir -p -- "$old" || exit 1
    if [ -n "$x" ]; then
      command find . -mindepth 1 -maxdepth 1 ! -name "$st" ! -name "$old" ! -name lost+found -exec sh -c 'command mv -f -- "$@" "$0/"' "$old" {} + || exit 1
    else
      command find . -mindepth 1 -maxdepth 1 ! -name "$st" ! -name "$old" -exec sh -c 'command mv -f -- "$@" "$0/"' "$old" {} + || exit 1
    fi
    : >"$old/.sandbox-mcp-moved" || exit 1
  fi
  command find "$st" -mindepth 1 -maxdepth 1 -exec sh -c 'command mv -f -- "$@" "$0/"' "$PWD" {} + || exit 1
  command rmdir -- "$st" || exit 1
fi
command rm -rf -- "$old"`

// TarScript writes the entry $2 of the directory $1 (and all under it)
// to stdout as a tar stream. Symlinks are stored as links. GNU tar writes
// 1 MiB records. With $3 SkipLostFound, the volume's lost+found in $2 is
// left out, and names then start with "./": the pattern "./$2/lost+found"
// can match no name deeper in the tree, in GNU's tar and busybox's alike.
// With $4 Exact, GNU tar stores owners by number, sparse files as sparse,
// and ACLs and extended attributes where it has them.
const TarScript = `cd -- "$1" || exit 1
m=$2 x= e=$4
if [ "$3" = ` + SkipLostFound + ` ] && (cd -- "$2" 2>/dev/null && ` + lostFoundHere + `); then
  case $2 in .) ;; *) m=./$2 ;; esac
  x=$m/lost+found
fi
set --
case $(tar --version 2>/dev/null) in *GNU*)
  if [ "$e" = ` + Exact + ` ]; then set -- --numeric-owner --sparse
    ` + xattrsProbe + ` && set -- "$@" --xattrs '--xattrs-include=*' --acls
  fi
  [ -z "$x" ] || exec tar -c -b 2048 "$@" -f - --anchored --no-wildcards --exclude="$x" -- "$m"
  exec tar -c -b 2048 "$@" -f - -- "$m" ;;
esac
[ -z "$x" ] || ! ` + hasExclude + ` || exec tar -c -f - --exclude="$x" -- "$m"
exec tar -c -f - -- "$m"`

// untarHere extracts stdin into the working directory from a script that
// runs in the persistent shell, and exits the subshell when it fails.
// With skip, and $__sbx_lf set, the stream's lost+found is not extracted;
// with exact, the copy is exact (see Exact).
func untarHere(b *strings.Builder, skip, exact bool) {
	if !skip && !exact {
		b.WriteString("command tar -x -p -o -f - || exit 1\n") // no process spent on asking tar
		return
	}
	b.WriteString("gnu=\ncase $(command tar --version 2>/dev/null) in *GNU*) gnu=1 ;; esac\n")
	if exact {
		b.WriteString("e=1\n")
	} else {
		b.WriteString("e=\n")
	}
	b.WriteString(untarOptions)
	const plain = `command tar -x -p "$@" -f - || exit 1` + "\n"
	if !skip {
		b.WriteString(plain)
		return
	}
	b.WriteString(`if [ -z "$__sbx_lf" ]; then ` + plain + `elif [ -n "$gnu" ]; then
  command tar -x -p "$@" -f - --anchored --no-wildcards --exclude=./lost+found --exclude=lost+found || exit 1
elif ` + hasExclude + `; then command tar -x -p "$@" -f - --exclude=./lost+found || exit 1
else ` + plain + `fi
`)
}

// SyncListScript prints every path under dir (as "./rel", NUL-separated),
// leaving out entries named in ignore and all under them; nothing when
// dir does not exist. With workspace (dir is the workspace), the volume's
// lost+found is left out too. It runs in the persistent shell, in a
// subshell.
func SyncListScript(dir string, ignore []string, workspace bool) (string, error) {
	if dir == "" || strings.IndexByte(dir, 0) >= 0 {
		return "", errors.New("sandbox directory must be non-empty, without NUL")
	}
	var prune strings.Builder
	for i, n := range ignore {
		if strings.ContainsAny(n, "/\x00") || n == "" {
			return "", errors.New("ignore names are base names without / or NUL")
		}
		if i > 0 {
			prune.WriteString(" -o")
		}
		prune.WriteString(" -name " + quote(n))
	}
	find := func(prune string) string {
		if prune == "" {
			return "command find . -mindepth 1 -print0"
		}
		return `command find . -mindepth 1 \(` + prune + ` \) -prune -o -print0`
	}
	var b strings.Builder
	b.WriteString("(cd -- " + quote(dir) + " 2>/dev/null || exit 0\n")
	if workspace {
		lf := " -path ./lost+found"
		if prune.Len() > 0 {
			lf += " -o"
		}
		b.WriteString("if " + lostFoundHere + "; then " + find(lf+prune.String()) + "\nelse ")
		b.WriteString(find(prune.String()) + "; fi)")
		return b.String(), nil
	}
	b.WriteString(find(prune.String()) + ")")
	return b.String(), nil
}

// SyncApplyScript makes dir, removes the given paths under it (each
// "./rel") and, with untar, extracts a tar stream from stdin into it as
// the shell's user (owners ignored, modes kept). With workspace (dir is
// the workspace), the volume's lost+found is neither removed nor
// extracted over. It runs in the persistent shell, in a subshell, and
// fails at the first step that fails.
func SyncApplyScript(dir string, remove []string, untar, workspace bool) (string, error) {
	if dir == "" || strings.IndexByte(dir, 0) >= 0 {
		return "", errors.New("sandbox directory must be non-empty, without NUL")
	}
	var b strings.Builder
	b.WriteString("(command mkdir -p -- " + quote(dir) + " && cd -- " + quote(dir) + " || exit 1\n")
	// The host's lost+found is never extracted over the volume's, so
	// nothing under that is the host's to remove either.
	var rm, guarded []string
	for _, p := range remove {
		if !strings.HasPrefix(p, "./") || strings.IndexByte(p, 0) >= 0 {
			return "", errors.New("paths to remove are ./relative, without NUL")
		}
		if workspace && (p == "./lost+found" || strings.HasPrefix(p, "./lost+found/")) {
			guarded = append(guarded, quote(p))
			continue
		}
		rm = append(rm, quote(p))
	}
	skip := workspace && (len(guarded) > 0 || untar)
	if skip {
		b.WriteString("__sbx_lf=\nif " + lostFoundHere + "; then __sbx_lf=1; fi\n")
	}
	if len(rm) > 0 {
		b.WriteString("command rm -rf -- " + strings.Join(rm, " ") + " || exit 1\n")
	}
	if len(guarded) > 0 {
		b.WriteString(`if [ -z "$__sbx_lf" ]; then command rm -rf -- ` + strings.Join(guarded, " ") + " || exit 1; fi\n")
	}
	if untar {
		untarHere(&b, skip, false)
	}
	b.WriteString(")")
	return b.String(), nil
}

// SyncStageScript lands a sync's tar stream (its last entry the empty
// file $3) in the directory $1: staged in $2 by StageScript, then merged
// by MergeStageScript. Arguments: $1 dir, $2 stage, $3 end mark, $4
// SkipLostFound or "".
const SyncStageScript = "(set -- \"$1\" \"$2\" \"$3\" \"$4\" \"\"\n" + StageScript + "\n) && (" + MergeStageScript + "\n)"

// SyncStageCommand is SyncStageScript as one command line for the
// persistent shell, its stream on the command's stdin.
func SyncStageCommand(dir, stage, end string, workspace bool) (string, error) {
	if dir == "" || strings.IndexByte(dir, 0) >= 0 {
		return "", errors.New("sandbox directory must be non-empty, without NUL")
	}
	skip := ""
	if workspace {
		skip = SkipLostFound
	}
	return ShellLine(SyncStageScript, dir, stage, end, skip), nil
}
