package guest

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The file scripts run in a subshell, so an early exit ends the script and
// not the persistent shell, and their variables do not outlive them. Every
// tool they call goes through `command`, so a function or alias a user left
// in the shell cannot stand in for it.

// ExitNotRegular is the status of a write or read script refused
// because the path exists and is not a regular file (a device, a fifo, a
// socket): writing or reading one could block or never end.
const ExitNotRegular = 22

// ExitCutShort is the status of a replacing write whose content arrived
// cut short (the server or its pipe died part way): the file was left as
// it was.
const ExitCutShort = 24

// WriteFileScript writes stdin to path, creating parent directories; with
// appendTo it appends instead. n is the number of bytes sent on stdin; with
// hash the script also prints the file's sha256 after a clean write.
//
// A write that replaces the file is all or nothing: the content goes to
// tmpName (a base name) beside the file, which takes the file's mode and
// owner and is renamed over it only once exactly n bytes arrived, so a
// kill at any point leaves the old content or the new one. A symlink is
// written through to the file it names; a file with other hard links
// gets a new inode (its other names keep the old content). Where no file
// can be made beside it (a kernel file in /proc or /sys, a directory the
// user cannot write), the file is written in place as an append would be.
//
// After the parent directories exist, the script always ends by printing
// its status on stdout (see ParseWriteStatus) and exits with the status of
// the write itself, whose own message (`cat: write error: No space left on
// device`) is on stderr. It fails before printing a status, with the file
// untouched, when the path is a directory (21) or not a regular file (22),
// its parent directory cannot be made (20) or the file cannot be opened
// for writing (23).
func WriteFileScript(path string, appendTo bool, n int64, hash bool, tmpName string) (string, error) {
	return writeFileScript(path, appendTo, n, hash, tmpName, "")
}

// ExitInPlaceOnly is the status of HoldFileScript for a file that can only
// be written in place (a kernel file, a file with other hard links, one in
// a directory the user cannot write): nothing was written.
const ExitInPlaceOnly = 25

// BatchManifestDir holds the manifests of batches of writes under way.
const BatchManifestDir = "/tmp/.sandbox-mcp"

var batchManifestRE = regexp.MustCompile(`^` + regexp.QuoteMeta(BatchManifestDir) + `/batch-[0-9a-f]+-[0-9a-f]+$`)

// BatchManifest is the manifest of one batch of writes of the server with
// the given ID (see SweepScript); id tells the server's batches apart.
func BatchManifest(server, id string) string {
	return BatchManifestDir + "/batch-" + server + "-" + id
}

// HoldFileScript is the first half of a replacing write that lands with
// others or not at all (batch_write): it writes stdin to tmpName beside
// path, checked and given the file's mode and owner as WriteFileScript
// does, but leaves the file as it is; the pair (temporary file, file),
// absolute and NUL-terminated, is appended to the manifest first.
// CommitBatchScript moves every held file of a manifest into place,
// DropBatchScript removes them. Its status is WriteFileScript's, the sizes
// and hash being the held file's. A file that can only be written in place
// fails with ExitInPlaceOnly, untouched.
func HoldFileScript(path string, n int64, hash bool, tmpName, manifest string) (string, error) {
	if !batchManifestRE.MatchString(manifest) {
		return "", fmt.Errorf("bad batch manifest %q", manifest)
	}
	return writeFileScript(path, false, n, hash, tmpName, manifest)
}

// CommitBatchScript moves every file held under the manifest $1 into
// place, in the order held, and removes the manifest. First it checks that
// every held file is still there and no target has become a directory:
// if not (something removed a held file meanwhile), it moves nothing and
// fails, the manifest kept for DropBatchScript. Each move is one rename
// over the target (mv -T), never into a directory; a file the engine
// mounts in (/etc/hosts) is copied over from its held copy. A move that
// fails part way (rare: a rename within one directory) stops the commit
// with what it moved in place, and says which.
const CommitBatchScript = `[ -f "$1" ] || { echo "the batch's manifest is gone" >&2; exit 1; }
command xargs -0 -n 2 sh -c '[ -n "$1" ] || exit 0
if [ ! -f "$0" ] || [ -L "$0" ]; then echo "the held copy of $1 is gone: nothing was written" >&2; exit 255; fi
if [ -d "$1" ] && [ ! -L "$1" ]; then echo "$1 is a directory now: nothing was written" >&2; exit 255; fi' <"$1" || exit 1
command xargs -0 -n 2 sh -c '[ -n "$1" ] || exit 0
command mv -fT -- "$0" "$1" 2>/dev/null && exit 0
if [ -d "$1" ] && [ ! -L "$1" ]; then echo "$1 is a directory: not written" >&2; exit 255; fi
command mv -f -- "$0" "$1" 2>/dev/null && exit 0
[ -f "$0" ] && command cat -- "$0" >"$1" && command rm -f -- "$0" && exit 0
echo "could not move $0 into place at $1" >&2; exit 255' <"$1" || { echo "the batch was put in place only in part" >&2; exit 2; }
command rm -f -- "$1"`

// DropBatchScript removes every file held under the manifest $1, then the
// directories the batch made, those left empty, and the manifest.
const DropBatchScript = `[ -f "$1" ] || exit 0
command xargs -0 -n 2 sh -c '[ -z "$1" ] || command rm -f -- "$0"' <"$1"
command xargs -0 -n 2 sh -c '[ -n "$1" ] || command find "$0" -depth -type d -exec rmdir {} + 2>/dev/null; exit 0' <"$1"
command rm -f -- "$1"`

// fillTemp is the part of a replacing write (held or not) that fills the
// temporary file $__sbx_t from stdin, checks that exactly $__sbx_n bytes
// arrived (else ExitCutShort) and gives it the file's mode and owner.
var fillTemp = `  command cat >"$__sbx_t"; __sbx_rc=$?
  if [ "$__sbx_rc" = 0 ]; then
    __sbx_w=$(command wc -c <"$__sbx_t") || __sbx_w=-
    if [ "$__sbx_w" != "$__sbx_n" ]; then
      echo "the content arrived cut short ($__sbx_w of $__sbx_n bytes): the file was left as it was" >&2; __sbx_rc=` + strconv.Itoa(ExitCutShort) + `
    fi
  fi
  if [ "$__sbx_rc" = 0 ] && [ -z "$__sbx_new" ]; then
    command chmod --reference="$__sbx_p" -- "$__sbx_t" 2>/dev/null || command chmod "$(command stat -c %a -- "$__sbx_p")" -- "$__sbx_t" 2>/dev/null
    command chown --reference="$__sbx_p" -- "$__sbx_t" 2>/dev/null || command chown "$(command stat -c %u:%g -- "$__sbx_p")" -- "$__sbx_t" 2>/dev/null
  fi
`

func writeFileScript(path string, appendTo bool, n int64, hash bool, tmpName, manifest string) (string, error) {
	hold := manifest != ""
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return "", errors.New("path must be a non-empty string without NUL")
	}
	if n < 0 {
		return "", errors.New("size must not be negative")
	}
	if !appendTo && (tmpName == "" || strings.ContainsAny(tmpName, "/\x00") || tmpName == "." || tmpName == "..") {
		return "", errors.New("the temporary name must be a base name")
	}
	var b strings.Builder
	b.WriteString("(__sbx_p=" + quote(path) + "; __sbx_n=" + strconv.FormatInt(n, 10) + "\n")
	b.WriteString(`if [ -d "$__sbx_p" ]; then echo 'is a directory' >&2; exit 21; fi` + "\n")
	b.WriteString(`if [ -e "$__sbx_p" ] && [ ! -f "$__sbx_p" ]; then echo 'not a regular file' >&2; exit ` +
		strconv.Itoa(ExitNotRegular) + "; fi\n")
	if hold {
		// The directories the batch makes go with it: the topmost one it
		// makes is recorded (an entry with no target) before it is made.
		b.WriteString(`__sbx_d=$(command dirname -- "$__sbx_p") || exit 20
__sbx_m=$__sbx_d; __sbx_top=
while [ ! -e "$__sbx_m" ] && [ ! -L "$__sbx_m" ]; do __sbx_top=$__sbx_m; __sbx_m=$(command dirname -- "$__sbx_m") || break; done
if [ -n "$__sbx_top" ]; then
  case $__sbx_top in /*) ;; *) __sbx_top=$PWD/$__sbx_top ;; esac
  { command mkdir -p -- ` + quote(BatchManifestDir) + ` && command printf '%s\0\0' "$__sbx_top" >>` + quote(manifest) + `; } || { echo "cannot record the batch in its manifest" >&2; exit 1; }
fi
`)
	}
	b.WriteString(`__sbx_d=$(command dirname -- "$__sbx_p") && command mkdir -p -- "$__sbx_d" || exit 20` + "\n")
	// Opening the file is a step of its own, so a file that cannot be
	// opened (read-only, permission) is known to be untouched.
	if appendTo {
		b.WriteString(`command : >>"$__sbx_p" || exit 23` + "\n")
		b.WriteString(`__sbx_b=$(command wc -c <"$__sbx_p") || exit 1` + "\n")
		b.WriteString(`command cat >>"$__sbx_p"; __sbx_rc=$?` + "\n")
	} else {
		b.WriteString(`__sbx_new=; [ -e "$__sbx_p" ] || __sbx_new=1` + "\n")
		// Opened to append, so nothing is cut. Where that fails, its own
		// message may hide the cause that matters (for an append the
		// kernel checks the permission before a read-only filesystem):
		// the mount table says "read-only" where that is so; else the
		// append's own message stands.
		b.WriteString(`if ! command : 2>/dev/null >>"$__sbx_p"; then
  if command awk -v p="$__sbx_p" 'BEGIN { b = -1 } (index(p, $5 "/") == 1 || $5 == "/") && length($5) > b { b = length($5); ro = ($6 ~ /(^|,)ro(,|$)/) } END { exit !ro }' /proc/self/mountinfo 2>/dev/null
  then echo "cannot write $__sbx_p: Read-only file system" >&2
  else command : >>"$__sbx_p"; fi
  exit 23
fi
`)
		b.WriteString(`if [ -L "$__sbx_p" ]; then __sbx_p=$(command readlink -f -- "$__sbx_p") || exit 23; __sbx_d=$(command dirname -- "$__sbx_p"); fi` + "\n")
		if hold {
			// A held file is not there until the batch is committed; the
			// paths in the manifest are absolute, for a shell in another
			// directory to commit.
			b.WriteString(`[ -z "$__sbx_new" ] || command rm -f -- "$__sbx_p"` + "\n")
			b.WriteString(`case $__sbx_p in /*) ;; *) __sbx_p=$PWD/$__sbx_p; __sbx_d=$(command dirname -- "$__sbx_p") ;; esac` + "\n")
		}
		b.WriteString("__sbx_b=0; __sbx_k=; __sbx_t=$__sbx_d/" + quote(tmpName) + "\n")
		// A file with other hard links is written in place: a rename would
		// leave its other names with the old content.
		b.WriteString(`__sbx_l=1; [ -n "$__sbx_new" ] || __sbx_l=$(command stat -c %h -- "$__sbx_p" 2>/dev/null) || __sbx_l=1` + "\n")
		if hold {
			// Recorded before it is made, so that no held file is ever
			// missing from the manifest a later server cleans up by.
			b.WriteString(`if [ "$__sbx_l" = 1 ] && ! { command mkdir -p -- ` + quote(BatchManifestDir) + ` && command printf '%s\0%s\0' "$__sbx_t" "$__sbx_p" >>` + quote(manifest) + `; }; then
  echo "cannot record the batch in its manifest" >&2; exit 1
fi
if [ "$__sbx_l" = 1 ] && (set -C; : >"$__sbx_t") 2>/dev/null; then
` + fillTemp + `  if [ "$__sbx_rc" != 0 ]; then command rm -f -- "$__sbx_t"; [ -n "$__sbx_new" ] || __sbx_k=1; fi
  __sbx_p=$__sbx_t
else
  echo "this file can only be written in place (a kernel file, a file with other hard links, or a directory the user cannot write in): write it with write_file" >&2; exit ` + strconv.Itoa(ExitInPlaceOnly) + `
fi
`)
		} else {
			b.WriteString(`if [ "$__sbx_l" = 1 ] && (set -C; : >"$__sbx_t") 2>/dev/null; then
` + fillTemp + `  # A file the engine mounts in (/etc/hosts) cannot be renamed over: it
  # is written in place from the whole temporary copy.
  if [ "$__sbx_rc" = 0 ]; then command mv -f -- "$__sbx_t" "$__sbx_p" 2>/dev/null || { command cat -- "$__sbx_t" >"$__sbx_p" && command rm -f -- "$__sbx_t"; } || __sbx_rc=1; fi
  if [ "$__sbx_rc" != 0 ]; then
    command rm -f -- "$__sbx_t"
    if [ -n "$__sbx_new" ]; then command rm -f -- "$__sbx_p"; else __sbx_k=1; fi
    __sbx_b=$(command wc -c <"$__sbx_p" 2>/dev/null) || __sbx_b=0
  fi
else
  command : >"$__sbx_p" || exit 23
  command cat >>"$__sbx_p"; __sbx_rc=$?
fi
`)
		}
	}
	b.WriteString(`__sbx_a=-; __sbx_t=-; __sbx_h=-` + "\n")
	b.WriteString(`if [ -e "$__sbx_p" ]; then __sbx_a=$(command wc -c <"$__sbx_p") || __sbx_a=-; fi` + "\n")
	// A size that does not add up may be a kernel file's (/proc, /sys):
	// name the filesystem so the reader can tell.
	b.WriteString(`if [ "$__sbx_a" != - ] && [ "$((__sbx_a - __sbx_b))" != "$__sbx_n" ]; then ` +
		`__sbx_t=$(command stat -f -c %T -- "$__sbx_p" 2>/dev/null) || __sbx_t=-; fi` + "\n")
	if hash {
		b.WriteString(`if [ "$__sbx_rc" = 0 ]; then __sbx_h=$(command sha256sum <"$__sbx_p") || __sbx_h=-; fi` + "\n")
	}
	b.WriteString(`command printf 'rc=%s\nbefore=%s\nafter=%s\nfstype=%s\nsha256=%s\n' "$__sbx_rc" "$__sbx_b" "$__sbx_a" "${__sbx_t:--}" "${__sbx_h%% *}"` + "\n")
	if !appendTo {
		b.WriteString(`[ -z "$__sbx_k" ] || command printf 'kept=1\n'` + "\n")
	}
	b.WriteString(`exit "$__sbx_rc")`)
	return b.String(), nil
}

// WriteStatus is what a write script reports after writing.
type WriteStatus struct {
	// Code is the write's exit status (0: every byte read was written).
	Code int
	// Before and After are the file's sizes around the write; After is -1
	// when the file could not be measured (it was never created).
	Before, After int64
	// FSType names the file's filesystem ("proc", "sysfs"…) when the
	// sizes do not add up to the bytes sent; "" otherwise.
	FSType string
	// SHA256 is the file's hash after a clean write, when it was asked for
	// and could be computed; lower-case hex.
	SHA256 string
	// Kept says a replacing write failed and left the file as it was.
	Kept bool
}

// ParseWriteStatus parses a write script's stdout. The text comes from the
// sandbox: anything that does not parse is rejected.
func ParseWriteStatus(out []byte) (WriteStatus, bool) {
	st := WriteStatus{After: -1}
	seen := 0
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return WriteStatus{}, false
		}
		v = strings.TrimSpace(v)
		var err error
		switch k {
		case "rc":
			st.Code, err = strconv.Atoi(v)
		case "before":
			st.Before, err = strconv.ParseInt(v, 10, 64)
		case "after":
			if v != "-" {
				st.After, err = strconv.ParseInt(v, 10, 64)
			}
		case "fstype":
			if v != "-" && v != "" {
				st.FSType = v
			}
		case "sha256":
			if isHexSHA256(v) {
				st.SHA256 = strings.ToLower(v)
			}
		case "kept":
			st.Kept = v == "1"
			continue // optional: not counted
		default:
			return WriteStatus{}, false
		}
		if err != nil || st.Before < 0 || st.After < -1 {
			return WriteStatus{}, false
		}
		seen++
	}
	return st, seen == 5
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// PseudoFS reports whether fstype (as `stat -f -c %T` names it) is a
// kernel filesystem whose file sizes say nothing about what was written.
func PseudoFS(fstype string) bool {
	switch fstype {
	case "proc", "sysfs", "cgroupfs", "cgroup2fs", "debugfs", "securityfs", "configfs", "tracefs":
		return true
	}
	return false
}

// Causes of a failed file operation, as named to the agent.
const (
	CauseNoSpace    = "no space left on device"
	CauseQuota      = "disk quota exceeded"
	CauseReadOnly   = "read-only file system"
	CausePermission = "permission denied"
	CauseNotDir     = "not a directory"
	CauseIsDir      = "is a directory"
	CauseTooLarge   = "file too large"
	CauseNotRegular = "not a regular file"
	CauseNoDir      = "no such directory"
	CauseIO         = "input/output error"
)

// FileErrorCause names the cause of a failed file operation from the
// messages the sandbox's tools printed (strerror texts of coreutils,
// busybox and dash), or "" when none is recognised.
func FileErrorCause(stderr string) string {
	s := strings.ToLower(stderr)
	if strings.Contains(s, "cannot create directory") && strings.Contains(s, "file exists") {
		return CauseNotDir // mkdir -p met a file where the path needs a directory
	}
	for _, c := range []struct{ text, cause string }{
		{"no space left on device", CauseNoSpace},
		{"quota exceeded", CauseQuota},
		{"read-only file system", CauseReadOnly},
		{"permission denied", CausePermission},
		{"operation not permitted", CausePermission},
		{"not a directory", CauseNotDir},
		{"is a directory", CauseIsDir},
		{"file too large", CauseTooLarge},
		{"not a regular file", CauseNotRegular},
		{"directory nonexistent", CauseNoDir},
		{"no such file or directory", CauseNoDir},
		{"input/output error", CauseIO},
		{"i/o error", CauseIO},
	} {
		if strings.Contains(s, c.text) {
			return c.cause
		}
	}
	return ""
}

// ReadFailedMark is printed on stderr by a read script whose reader failed
// before the end of its range (see ReadFileScript).
const ReadFailedMark = "sandbox-mcp: read failed"

// ReadFileScript prints at most limit bytes of path from offset. It fails
// with status 2 (missing), 21 (directory), 22 (not a regular file: devices,
// fifos and sockets are refused, since reading one may never end) or 13
// (not readable) and a message. Kernel files (/proc, /sys) are regular
// files and are read up to limit like any other.
//
// From an offset the reader is `tail | head`, whose status is head's: a
// tail that fails prints ReadFailedMark on stderr, which matters when fewer
// than limit bytes came (with limit bytes, head ended the read itself).
func ReadFileScript(path string, offset, limit int64) (string, error) {
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return "", errors.New("path must be a non-empty string without NUL")
	}
	if offset < 0 || limit <= 0 {
		return "", errors.New("offset must not be negative and limit must be positive")
	}
	var b strings.Builder
	readChecks(&b, path)
	n := strconv.FormatInt(limit, 10)
	if offset == 0 {
		b.WriteString(`command head -c ` + n + ` -- "$__sbx_p")`)
	} else {
		b.WriteString(`{ command tail -c +` + strconv.FormatInt(offset+1, 10) + ` -- "$__sbx_p" || echo '` + ReadFailedMark +
			`' >&2; } | command head -c ` + n + `)`)
	}
	return b.String(), nil
}

// ReadLinesScript prints count lines of path from line first (1-based;
// count 0: to the end), at most limit bytes. It refuses what
// ReadFileScript refuses, with the same statuses and ReadFailedMark.
func ReadLinesScript(path string, first, count, limit int64) (string, error) {
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return "", errors.New("path must be a non-empty string without NUL")
	}
	if first < 1 || count < 0 || limit <= 0 {
		return "", errors.New("the first line is 1 or more, the count not negative, the limit positive")
	}
	var b strings.Builder
	readChecks(&b, path)
	// tail ended by SIGPIPE (141) is head having read enough.
	b.WriteString(`{ command tail -n +` + strconv.FormatInt(first, 10) + ` -- "$__sbx_p"; __sbx_r=$?; ` +
		`[ "$__sbx_r" = 0 ] || [ "$__sbx_r" = 141 ] || echo '` + ReadFailedMark + `' >&2; }`)
	if count > 0 {
		b.WriteString(` | command head -n ` + strconv.FormatInt(count, 10))
	}
	b.WriteString(` | command head -c ` + strconv.FormatInt(limit, 10) + `)`)
	return b.String(), nil
}

// readChecks opens a read script's subshell with path in __sbx_p and
// refuses what is not a readable regular file.
func readChecks(b *strings.Builder, path string) {
	b.WriteString("(__sbx_p=" + quote(path) + "\n")
	b.WriteString(`if [ -d "$__sbx_p" ]; then echo 'is a directory' >&2; exit 21; fi` + "\n")
	b.WriteString(`if [ ! -e "$__sbx_p" ]; then echo 'no such file' >&2; exit 2; fi` + "\n")
	b.WriteString(`if [ ! -f "$__sbx_p" ]; then __sbx_k='not a regular file'` + "\n" +
		`if [ -c "$__sbx_p" ]; then __sbx_k='a character device'; elif [ -b "$__sbx_p" ]; then __sbx_k='a block device'; ` +
		`elif [ -p "$__sbx_p" ]; then __sbx_k='a fifo'; elif [ -S "$__sbx_p" ]; then __sbx_k='a socket'; fi` + "\n" +
		`echo "not a regular file ($__sbx_k)" >&2; exit ` + strconv.Itoa(ExitNotRegular) + "; fi\n")
	b.WriteString(`if [ ! -r "$__sbx_p" ]; then echo 'permission denied' >&2; exit 13; fi` + "\n")
}
