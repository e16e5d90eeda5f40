package apple

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Containerfile text for snapshots. `container build` hands the file to
// BuildKit's Dockerfile frontend, which reads ENV and LABEL values as
// follows (moby/buildkit frontend/dockerfile parser and shell lexer):
//
//   - The file is read line by line (a "\n" ends a line; a "\r" before it
//     is dropped). A line that ends in the escape character "\" (then
//     optional spaces and tabs) goes on on the next line, which is joined
//     to it with nothing between; a continuation line that is empty or
//     blank, or whose first non-blank character is "#", is skipped.
//   - The arguments are split into words at blanks outside quotes; inside
//     double quotes "\" keeps the next character in the word whatever it
//     is.
//   - Each word is split at its first "=" into key and value, and each of
//     them is then unquoted: inside double quotes "\" escapes only '"',
//     '$' and "\" (any other "\" stays as it is) and "$" starts a variable
//     reference; any other character stands for itself, spaces, quotes
//     and non-ASCII included.
//
// So a value is written in double quotes with '"', '$' and "\" escaped,
// and long ones are split with continuations before a character that is
// neither blank nor '#'. What cannot be written: a newline (the line
// would end; no escape stands for one), a carriage return, a NUL, bytes
// that are not UTF-8 (read as U+FFFD), and a key holding '=' or empty.

// maxContainerfileLine bounds the lines written; BuildKit refuses lines
// of 64 KiB and more.
const maxContainerfileLine = 4096

// snapshotContainerfile is the Containerfile that rebuilds a snapshot
// from its exported root filesystem: env is the container's PID 1
// environment ("KEY=value" entries) and labels the image's labels.
func snapshotContainerfile(env []string, labels map[string]string) (string, error) {
	var cf strings.Builder
	cf.WriteString("FROM scratch\nADD rootfs.tar /\n")
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", fmt.Errorf("environment entry %q has no '=': a Containerfile ENV cannot hold it", kv)
		}
		key := k
		if !validEnvName(k) {
			var err error
			if key, err = containerfileKey(k); err != nil {
				return "", fmt.Errorf("environment variable %q: %w", k, err)
			}
		}
		val, err := containerfileQuote(v)
		if err != nil {
			return "", fmt.Errorf("environment variable %s: %w", k, err)
		}
		if err := writeInstruction(&cf, "ENV", key, val); err != nil {
			return "", fmt.Errorf("environment variable %s: %w", k, err)
		}
	}
	for _, k := range sortedKeys(labels) {
		key, err := containerfileKey(k)
		if err != nil {
			return "", fmt.Errorf("label %q: %w", k, err)
		}
		val, err := containerfileQuote(labels[k])
		if err != nil {
			return "", fmt.Errorf("label %s: %w", k, err)
		}
		if err := writeInstruction(&cf, "LABEL", key, val); err != nil {
			return "", fmt.Errorf("label %s: %w", k, err)
		}
	}
	return cf.String(), nil
}

// containerfileKey quotes an ENV or LABEL key: as a value, but it may be
// neither empty nor hold '=' (the word is split at its first '=' before
// it is unquoted).
func containerfileKey(k string) (string, error) {
	switch {
	case k == "":
		return "", errors.New("an empty key cannot be written in a Containerfile")
	case strings.Contains(k, "="):
		return "", errors.New("a Containerfile key cannot hold '='")
	}
	return containerfileQuote(k)
}

// containerfileQuote writes s as one double-quoted Containerfile word
// whose value is s.
func containerfileQuote(s string) (string, error) {
	switch {
	case !utf8.ValidString(s):
		return "", errors.New("it is not valid UTF-8, which a Containerfile cannot hold")
	case strings.ContainsRune(s, '\n'):
		return "", errors.New("it holds a newline, which a Containerfile ENV or LABEL cannot hold")
	case strings.ContainsRune(s, '\r'):
		return "", errors.New("it holds a carriage return, which a Containerfile ENV or LABEL cannot hold")
	case strings.ContainsRune(s, 0):
		return "", errors.New("it holds a NUL byte, which a Containerfile cannot hold")
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		if r == '"' || r == '$' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String(), nil
}

// writeInstruction writes `INSTR key=value` (value already quoted),
// breaking it into continuation lines of about maxContainerfileLine
// bytes. A break goes before a character that is neither blank nor '#'
// and never inside an escape pair, so that no continuation line is read
// as blank or as a comment. A line that would still reach BuildKit's
// limit (a very long run of blanks or '#') is an error.
func writeInstruction(b *strings.Builder, instr, key, val string) error {
	var lines []string
	line := instr + " " + key + "="
	rest := val
	for len(line)+len(rest) > maxContainerfileLine {
		cut := breakPoint(rest, maxContainerfileLine-len(line)-1)
		if cut <= 0 {
			break
		}
		lines = append(lines, line+rest[:cut]+"\\")
		line, rest = "", rest[cut:]
	}
	lines = append(lines, line+rest)
	for _, l := range lines {
		if len(l) >= buildKitMaxLine {
			return errors.New("it is too long a run of blanks or '#' to break across Containerfile lines")
		}
	}
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return nil
}

// buildKitMaxLine is the length from which BuildKit refuses a line
// ("dockerfile line greater than max allowed size"): bufio's
// MaxScanTokenSize.
const buildKitMaxLine = 64 * 1024

// breakPoint returns the largest index i <= max (or the smallest one
// past it, if none) at which quoted text q can be broken: a character
// boundary, not after an escaping "\", and before a character that is
// neither blank nor '#'. It returns 0 when there is none.
func breakPoint(q string, max int) int {
	best := 0
	escaped := false
	for i, r := range q {
		if i > 0 && !escaped && !unicode.IsSpace(r) && r != '#' {
			if i > max && best > 0 {
				return best
			}
			best = i
			if i > max {
				return best
			}
		}
		escaped = !escaped && r == '\\'
	}
	return best
}
