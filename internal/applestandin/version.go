package main

import "github.com/sandbox-mcp/sandbox-mcp/internal/applecli"

// Version is an emulated Apple container CLI release.
type Version = applecli.Version

// ParseVersion reads "X.Y.Z" (a missing minor or patch counts as 0).
func ParseVersion(s string) (Version, error) { return applecli.ParseVersion(s) }

// MustVersion is ParseVersion for constants; it panics on a malformed string.
func MustVersion(s string) Version { return applecli.MustVersion(s) }

// Behaviour switches derived from the version, named after what they change.

// codeErrors: before 0.10.0 errors print as `code: "message"`.
func codeErrors(v Version) bool { return v.CodeErrors() }

// oneX: the 1.x JSON shapes (sorted keys, ISO-8601 dates, nested status).
func oneX(v Version) bool { return v.AtLeast("1.0.0") }

// escapeSlashes: Swift's JSONEncoder escaped "/" as "\/" until (at least) 1.2.x;
// the 1.4.1 and 1.5.0 captures no longer do. 0.x output escaped too (samples §1.10).
// reconstructed: the exact release that stopped escaping is unknown (1.3.x); 1.4.0 is used.
func escapeSlashes(v Version) bool { return v.Before("1.4.0") }

// nestedStatus: `system status --format json` switched to the nested shape in 1.4.x.
func nestedStatus(v Version) bool { return v.AtLeast("1.4.0") }
