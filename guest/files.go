package guest

import (
	"errors"
	"strconv"
	"strings"
)

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

// ReadFileScript prints length bytes of path from offset (length 0: to the
// end), and fails with status 2 (missing) or 21 (directory) and a message.
func ReadFileScript(path string, offset, length int64) (string, error) {
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return "", errors.New("path must be a non-empty string without NUL")
	}
	if offset < 0 || length < 0 {
		return "", errors.New("offset and length must not be negative")
	}
	p := quote(path)
	read := "cat -- " + p
	if offset > 0 {
		read = "tail -c +" + strconv.FormatInt(offset+1, 10) + " -- " + p
	}
	if length > 0 {
		read += " | head -c " + strconv.FormatInt(length, 10)
	}
	return `if [ -d ` + p + ` ]; then echo "is a directory" >&2; (exit 21); elif [ ! -e ` + p + ` ]; then echo "no such file" >&2; (exit 2); elif [ ! -r ` + p + ` ]; then echo "permission denied" >&2; (exit 13); else ` + read + `; fi`, nil
}
