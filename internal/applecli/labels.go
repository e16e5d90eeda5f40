package applecli

import (
	"unicode"
	"unicode/utf8"
)

// Label parsing. Apple's CLI reads a "key=value" argument with Swift's
// split(separator: "=", maxSplits:), which drops empty pieces (they do
// not count towards maxSplits) and keeps the rest after the last split
// whole; `run`/`create` and `volume create` differ in maxSplits and in
// what they make of the pieces.

// swiftSplitEquals is Swift's String.split(separator: "=", maxSplits: n)
// with omittingEmptySubsequences (Collection.split, Swift stdlib). Swift
// splits by Character (an extended grapheme cluster), so a '=' that
// joins its neighbours into one cluster is not a separator (see
// joinsEquals).
func swiftSplitEquals(s string, maxSplits int) []string {
	var out []string
	start := 0
	for end := 0; end < len(s); end++ {
		if s[end] != '=' || joinsEquals(s, end) {
			continue
		}
		appended := end > start
		if appended {
			out = append(out, s[start:end])
		}
		start = end + 1
		if appended && len(out) == maxSplits {
			break
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// joinsEquals reports whether the '=' at s[i] is part of a larger
// grapheme cluster: a prepended concatenation mark before it, or a
// combining mark, spacing mark or joiner after it (UAX #29 rules GB9,
// GB9a, GB9b). The property tables are approximated with the general
// categories Mn, Me and Mc and the listed code points, which is what the
// characters next to a '=' in a label come down to.
func joinsEquals(s string, i int) bool {
	if prev, n := utf8.DecodeLastRuneInString(s[:i]); n > 0 && isPrepend(prev) {
		return true
	}
	next, n := utf8.DecodeRuneInString(s[i+1:])
	return n > 0 && joinsPrevious(next)
}

// joinsPrevious: Grapheme_Cluster_Break Extend, ZWJ or SpacingMark.
func joinsPrevious(r rune) bool {
	switch {
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc):
		return true
	case r == 0x200C || r == 0x200D, // ZWNJ (Extend), ZWJ
		r == 0xFF9E || r == 0xFF9F,   // halfwidth katakana sound marks (Extend)
		r >= 0x1F3FB && r <= 0x1F3FF, // emoji modifiers (Extend)
		r >= 0xE0020 && r <= 0xE007F, // tags (Extend)
		r == 0x0E33 || r == 0x0EB3:   // Thai and Lao AM (SpacingMark)
		return true
	}
	return false
}

// isPrepend: Grapheme_Cluster_Break Prepend.
func isPrepend(r rune) bool {
	switch {
	case r >= 0x0600 && r <= 0x0605, r == 0x06DD, r == 0x070F, r == 0x0890, r == 0x0891, r == 0x08E2,
		r == 0x0D4E, r == 0x110BD, r == 0x110CD, r == 0x111C2, r == 0x111C3, r == 0x1193F, r == 0x11941,
		r == 0x11A3A, r >= 0x11A84 && r <= 0x11A89, r == 0x11D46, r == 0x11F02:
		return true
	}
	return false
}

// RunLabels is Parser.labels (Parser.swift, 0.1.0–1.2.2; the same
// through 1.5.0 as far as the samples show), which `run -l` and
// `create -l` go through: at most two splits; one piece is a key with an
// empty value, two are key and value, anything else (three pieces, or
// none for "=") is refused. An empty argument is refused first. Errors
// are ContainerizationError(.invalidArgument).
func RunLabels(raw []string) (map[string]string, *Failure) {
	out := map[string]string{}
	for _, l := range raw {
		if f := runLabel(l); f != nil {
			return nil, f
		}
		switch p := swiftSplitEquals(l, 2); len(p) {
		case 1:
			out[p[0]] = ""
		case 2:
			out[p[0]] = p[1]
		}
	}
	return out, nil
}

// runLabel is RunLabels' check of one label.
func runLabel(l string) *Failure {
	if l == "" {
		return &Failure{"invalidArgument", "label cannot be an empty string"}
	}
	if n := len(swiftSplitEquals(l, 2)); n != 1 && n != 2 {
		return &Failure{"invalidArgument", "invalid label format " + l}
	}
	return nil
}

// KeyValuePairs is Utility.parseKeyValuePairs (Utility.swift,
// 0.4.0–1.2.2), which `volume create --label` and `--opt` use: one split;
// two pieces are key and value, anything else is the whole argument as a
// key with an empty value ("k=" is the key "k="). It refuses nothing.
func KeyValuePairs(raw []string) map[string]string {
	out := map[string]string{}
	for _, l := range raw {
		if p := swiftSplitEquals(l, 1); len(p) == 2 {
			out[p[0]] = p[1]
		} else {
			out[l] = ""
		}
	}
	return out
}
