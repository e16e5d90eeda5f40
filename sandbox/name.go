package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// MaxNameLen is the longest sandbox name accepted, in bytes. It is Apple's
// limit for container IDs, applied everywhere so a name means the same on
// every engine.
const MaxNameLen = 63

// DefaultName is the sandbox used when a tool call names none.
const DefaultName = "default"

// ValidateName reports whether name may be used as a sandbox name: ASCII
// letters, digits, '_', '.', '-', starting with a letter or digit, 1 to 63
// bytes. It runs before any name reaches a CLI, so "--rm", "../x" and the
// like never become arguments.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidName, len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i > 0 {
			ok = ok || c == '_' || c == '.' || c == '-'
		}
		if !ok {
			if i == 0 {
				return fmt.Errorf("%w: %q must start with a letter or digit", ErrInvalidName, name)
			}
			return fmt.Errorf("%w: %q may contain only letters, digits, '_', '.' and '-'", ErrInvalidName, name)
		}
	}
	return nil
}

// ContainerName maps a sandbox name to its engine container name under the
// given prefix. The result is deterministic, so every server process finds
// the same container, and never longer than MaxNameLen: long names keep a
// readable head and a hash of the whole name.
func ContainerName(prefix, name string) string {
	full := prefix + "-" + name
	if len(full) <= MaxNameLen {
		return full
	}
	sum := sha256.Sum256([]byte(name))
	tag := hex.EncodeToString(sum[:])[:10]
	keep := MaxNameLen - len(prefix) - 2 - len(tag)
	if keep < 1 {
		keep = 1
	}
	return prefix + "-" + name[:keep] + "-" + tag
}
