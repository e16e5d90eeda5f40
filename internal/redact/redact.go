// Package redact hides credentials in text before it reaches a tool
// result, a history entry, a log line or a state file.
//
// One function, Text, serves every caller, so a URL form that is hidden in
// one place is hidden in all of them. It hides the secret values a caller
// knows (in the forms a URL or a program may print them: as given,
// percent-encoded and percent-decoded) and text shaped like a credential:
// the password of a URL of any scheme, parsable or not; a lone user name in
// an http(s) or ftp(s) URL, which services such as GitHub take as a token;
// scp-like user:password@host:path; well-known token prefixes; secret-named
// assignments and flags; and curl's -u user:password.
package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces what is hidden.
const Mask = "***"

// patterns are the shapes of credentials, each with what replaces a match,
// in the order they apply.
var patterns = []struct {
	re   *regexp.Regexp
	with string
	// may reports whether the pattern can match ASCII text s (lower is s
	// in lower case): a check of the literals every match holds, so that
	// the usual command, which holds none, costs no regexp.
	may func(s, lower string) bool
}{
	// A quoted scheme://user:password@host, whose password may hold
	// spaces: hidden up to the last @ before the closing quote.
	{regexp.MustCompile(`(?i)(['"])([a-z][a-z0-9+.\-]*://)([^\s/:@<>'"]*):[^'"\n]*@`), "${1}${2}${3}:" + Mask + "@", func(s, _ string) bool { return strings.Contains(s, "://") && strings.Contains(s, "@") }},
	// scheme://user:password@host: the user is kept, everything from the
	// first colon to the last @ before a space is hidden, so a password
	// holding a raw @, / or quote (a URL no parser accepts) is hidden
	// whole. (A URL inside another's query loses more than its password:
	// "http://h:1/r?u=https://a:b@c" shows as "http://h:***@c".)
	{regexp.MustCompile(`(?i)([a-z][a-z0-9+.\-]*://)([^\s/:@<>]*):\S*@`), "${1}${2}:" + Mask + "@", func(s, _ string) bool { return strings.Contains(s, "://") && strings.Contains(s, "@") }},
	// http(s)://user@host and ftp(s)://user@host: a lone user name there
	// is often a token.
	{regexp.MustCompile(`(?i)((?:https?|ftps?)://)[^\s/:@'"<>]+@`), "${1}" + Mask + "@", func(s, _ string) bool { return strings.Contains(s, "://") && strings.Contains(s, "@") }},
	// scp-like user:password@host:path (a password starting with / would
	// be a path to git, and scheme:// is the rule above's).
	{regexp.MustCompile(`(^|[\s'"=(,;])([^\s:@/'"=(,;]+):(?:[^/\s]\S*)?@([A-Za-z0-9_][A-Za-z0-9_.\-]*|\[[0-9A-Fa-f:.]+\]):`), "${1}${2}:" + Mask + "@${3}:", func(s, _ string) bool { return strings.Contains(s, "@") && strings.Contains(s, ":") }},
	{regexp.MustCompile(`\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|glpat-[A-Za-z0-9_-]{20,})\b`), Mask, func(s, _ string) bool { return containsAnyOf(s, "gh", "github_pat_", "sk-", "xox", "AKIA", "glpat-") }},
	{regexp.MustCompile(`(?i)((?:token|passw(?:or)?d|secret|api[_-]?key|authorization)\s*[=:]\s*(?:(?:bearer|token|basic)\s+)?)("[^"]*"|'[^']*'|[^\s'"]+)`), "${1}" + Mask, func(s, lower string) bool {
		return strings.ContainsAny(s, "=:") && containsAnyOf(lower, "token", "passw", "secret", "api", "authorization")
	}},
	// Flags whose next word is a secret: --password S, --token S.
	{regexp.MustCompile(`(?i)((?:^|\s)--?(?:token|passw(?:or)?d|secret|api[_-]?key|auth[_-]?token)\s+)("[^"]*"|'[^']*'|[^\s-]\S*)`), "${1}" + Mask, func(s, lower string) bool {
		return strings.Contains(s, "-") && containsAnyOf(lower, "token", "passw", "secret", "api", "auth")
	}},
	// The user:password of curl's -u/--user. All digits is a gid, as in
	// docker's -u 1000:1000, and is kept.
	{regexp.MustCompile(`((?:^|\s)(?:-u|--user)\s+[^\s:]+:)("[^"]*"|'[^']*'|\S*[^\d\s]\S*)`), "${1}" + Mask, func(s, _ string) bool { return strings.Contains(s, "-u") }},
}

// Text returns s with secrets and credential-shaped text replaced by
// Mask. Secrets are hidden longest first whatever their order; an empty
// secret, or one made only of '*', is ignored.
func Text(s string, secrets ...string) string {
	fs := forms(secrets)
	s = hide(s, fs)
	ascii := isASCII(s)
	lower := ""
	if ascii {
		lower = strings.ToLower(s)
	}
	for _, p := range patterns {
		// Past ASCII, (?i) folds more than strings.ToLower does (the
		// Kelvin sign matches k): every pattern runs.
		if !ascii || p.may(s, lower) {
			s = p.re.ReplaceAllString(s, p.with)
			if ascii {
				lower = strings.ToLower(s)
			}
		}
	}
	// Once more: a pattern's own replacement may have made a secret of
	// the text around it.
	return hide(s, fs)
}

// hide replaces every occurrence of each of secrets in s.
func hide(s string, secrets []string) string {
	for _, v := range secrets {
		// A replacement can join the text around it into the secret
		// again ("a*" in "aa*"); each round removes a character that is
		// not '*', so the loop ends.
		for strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Mask)
		}
	}
	return s
}

// forms lists each secret as given and as it appears in a URL, longest
// first, so a secret holding a shorter one is hidden whole.
func forms(secrets []string) []string {
	var out []string
	add := func(v string) {
		if strings.Trim(v, "*") == "" {
			return
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	for _, v := range secrets {
		add(v)
		add(url.PathEscape(v))
		add(url.QueryEscape(v))
		if d, err := url.PathUnescape(v); err == nil {
			add(d)
		}
		if d, err := url.QueryUnescape(v); err == nil {
			add(d)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

func containsAnyOf(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
