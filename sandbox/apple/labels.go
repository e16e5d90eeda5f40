package apple

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Apple's CLI reads a label given as "key=value" by splitting it on '=',
// and the two commands the dialect labels with split differently:
//
//   - `run -l` / `create -l` (Parser.labels, Parser.swift, 0.1.0–1.2.2):
//     at most two splits, empty pieces dropped; one piece is a key with an
//     empty value, two are key and value, three or more are refused with
//     "invalid label format <label>". So "k=a=b" is refused, and "k==v"
//     (read as k=v), "=v" (key v) and "k=v=" (k=v) are read as something
//     else than was meant.
//   - `volume create --label` (Utility.parseKeyValuePairs, 0.4.0–1.2.2): one
//     split at the first '=', empty pieces dropped; anything but two pieces
//     is a key, whole, with an empty value. So "k=a=b" is k="a=b", but "k="
//     is the key "k=" and "=v" the key "=v".
//
// Swift splits a String by Character, an extended grapheme cluster: a '='
// that a combining mark follows ("=\u0301"), or that a prepended mark
// precedes, is not a '=' to split on. The characters next to the '=' are
// therefore kept to ones that never join with it.
//
// Labels the CLI would refuse or alter are refused here, before any CLI
// runs.

// runLabelArg spells label k=v for `run -l`.
func runLabelArg(k, v string) (string, error) {
	if err := checkLabel(k, v, false); err != nil {
		return "", fmt.Errorf("label %q=%q: %w", k, v, err)
	}
	return k + "=" + v, nil
}

// volumeLabelArg spells label k=v for `volume create --label`: an empty
// value is given as the bare key ("k=" would be read as the key "k=").
func volumeLabelArg(k, v string) (string, error) {
	if err := checkLabel(k, v, true); err != nil {
		return "", fmt.Errorf("volume label %q=%q: %w", k, v, err)
	}
	if v == "" {
		return k, nil
	}
	return k + "=" + v, nil
}

// checkLabel says why Apple's CLI would not read "k=v" back as k and v.
// valueEquals allows '=' in the value (volume create splits only once).
func checkLabel(k, v string, valueEquals bool) error {
	switch {
	case k == "":
		return errors.New("the key is empty; Apple's container CLI would read the value as the key")
	case !utf8.ValidString(k) || !utf8.ValidString(v):
		return errors.New("not valid UTF-8")
	case strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0):
		return errors.New("a NUL byte cannot be passed as an argument")
	case strings.Contains(k, "="):
		return errors.New("the key holds '=', where Apple's container CLI splits a label")
	case !valueEquals && strings.Contains(v, "="):
		return errors.New("the value holds '=', which Apple's `container run -l` refuses (\"invalid label format\") or drops; encode it without '='")
	}
	last, _ := utf8.DecodeLastRuneInString(k)
	if !standsAlone(last) {
		return fmt.Errorf("the key ends in %U, which Apple's container CLI may read as one character with the '=' after it", last)
	}
	if first, _ := utf8.DecodeRuneInString(v); v != "" && !standsAlone(first) {
		return fmt.Errorf("the value starts with %U, which Apple's container CLI may read as one character with the '=' before it", first)
	}
	return nil
}

// standsAlone reports whether r can never form one grapheme cluster with
// a '=' next to it (UAX #29: only Extend, ZWJ and SpacingMark characters
// join what precedes them, only Prepend ones what follows): ASCII, and
// the letters of scripts that have none of those among their letters.
// Marks, joiners, format characters and the letters of other scripts
// (some Thai, Lao and Malayalam letters are spacing or prepended marks)
// are treated as joining, which is stricter than needed.
func standsAlone(r rune) bool {
	return r < utf8.RuneSelf || unicode.IsLetter(r) && unicode.In(r, standAloneScripts...)
}

var standAloneScripts = []*unicode.RangeTable{
	unicode.Latin, unicode.Greek, unicode.Cyrillic, unicode.Armenian, unicode.Hebrew,
	unicode.Arabic, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul,
}

// volumeNameRE is VolumeStorage.volumeNamePattern (ContainerResource,
// Volume.swift / VolumeConfiguration.swift, 0.4.0–1.2.2); names are also
// at most 255 characters.
var volumeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// ValidVolumeName checks a volume name the way Apple's CLI does before
// any CLI runs: `volume create`, `volume delete` and a `-v name:/dst`
// refuse other names ("invalid volume name …"), and a name with '/' in a
// `-v` would be taken for a host path.
func ValidVolumeName(name string) error {
	if len(name) > 255 || !volumeNameRE.MatchString(name) {
		return fmt.Errorf("volume name %q: Apple's container CLI takes only names matching %s, of at most 255 characters", name, volumeNameRE)
	}
	return nil
}
