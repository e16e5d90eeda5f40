// Package textcut shortens text for messages: logs, errors and results
// that quote what a sandbox or a user gave.
package textcut

import "strings"

// Shorten keeps the first n bytes of s (whole UTF-8 sequences), marking a
// cut with "…".
func Shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
