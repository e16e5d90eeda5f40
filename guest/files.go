package guest

import (
	"errors"
	"strconv"
	"strings"
)

// The file scripts run in a subshell, so an early exit ends the script and
// not the persistent shell, and their variables do not outlive them. Every
// tool they call goes through `command`, so a function or alias a user left
// in the shell cannot stand in for it.

// WriteFileScript writes stdin to path, creating parent directories;
// with appendTo it appends instead.
func WriteFileScript(path string, appendTo bool) (string, error) {
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return "", errors.New("path must be a non-empty string without NUL")
	}
	op := ">"
	if appendTo {
		op = ">>"
	}
	p := quote(path)
	return `if [ -d ` + p + ` ]; then echo "is a directory" >&2; (exit 21); else __sbx_d=$(dirname -- ` + p + `) && mkdir -p -- "$__sbx_d" && cat ` + op + p + `; fi`, nil
}

// ExitNotRegular is the status of a read script refused because the path
// exists and is not a regular file (a device, a fifo, a socket): reading
// one could block or never end.
const ExitNotRegular = 22

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
	b.WriteString("(__sbx_p=" + quote(path) + "\n")
	b.WriteString(`if [ -d "$__sbx_p" ]; then echo 'is a directory' >&2; exit 21; fi` + "\n")
	b.WriteString(`if [ ! -e "$__sbx_p" ]; then echo 'no such file' >&2; exit 2; fi` + "\n")
	b.WriteString(`if [ ! -f "$__sbx_p" ]; then __sbx_k='not a regular file'` + "\n" +
		`if [ -c "$__sbx_p" ]; then __sbx_k='a character device'; elif [ -b "$__sbx_p" ]; then __sbx_k='a block device'; ` +
		`elif [ -p "$__sbx_p" ]; then __sbx_k='a fifo'; elif [ -S "$__sbx_p" ]; then __sbx_k='a socket'; fi` + "\n" +
		`echo "not a regular file ($__sbx_k)" >&2; exit ` + strconv.Itoa(ExitNotRegular) + "; fi\n")
	b.WriteString(`if [ ! -r "$__sbx_p" ]; then echo 'permission denied' >&2; exit 13; fi` + "\n")
	n := strconv.FormatInt(limit, 10)
	if offset == 0 {
		b.WriteString(`command head -c ` + n + ` -- "$__sbx_p")`)
	} else {
		b.WriteString(`{ command tail -c +` + strconv.FormatInt(offset+1, 10) + ` -- "$__sbx_p" || echo '` + ReadFailedMark +
			`' >&2; } | command head -c ` + n + `)`)
	}
	return b.String(), nil
}
