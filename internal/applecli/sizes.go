package applecli

import (
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Sizes. Apple reads every size (`run -m`, `--shm-size`, `--mount
// …,size=`, `volume create -s`/`--opt size=`) with Measurement.parse
// (Measurement+Parse.swift, 0.8.0–1.2.2, unchanged): a number of bytes
// with an optional binary unit. A bare number is bytes, not MiB.

// SizeError is one of Measurement.ParseError's descriptions: "invalid
// size" or "invalid symbol: <unit>". It is not a ContainerizationError,
// so the CLI prints it plainly in every version.
type SizeError string

func (e SizeError) Error() string { return string(e) }

// ParseMeasurement is Measurement.parse: the string is trimmed of spaces
// and tabs and lowercased; the number is the run of digits and dots up to
// the first other character (read as a Double, so "1.", ".5" and "1.5"
// are numbers and "", "." and "1.2.3" are not); the rest, trimmed, is the
// unit: empty (bytes), or b, k, m, g, t or p, alone or followed by "b" or
// "ib", binary multiples all. Negative numbers have no digits first and
// are invalid sizes.
func ParseMeasurement(s string) (float64, error) {
	isSpace := func(r rune) bool { return r == '\t' || unicode.Is(unicode.Zs, r) }
	t := strings.ToLower(strings.TrimFunc(s, isSpace))
	if t == "" {
		return 0, SizeError("invalid size")
	}
	i := strings.IndexFunc(t, func(r rune) bool { return !strings.ContainsRune("01234567890.", r) })
	raw, unit := t, ""
	if i >= 0 {
		raw, unit = strings.TrimFunc(t[:i], isSpace), strings.TrimFunc(t[i:], isSpace)
	}
	v, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		return 0, SizeError("invalid size")
	}
	sym, rest := byte('b'), ""
	if unit != "" {
		sym, rest = unit[0], unit[1:]
	}
	switch rest {
	case "", "ib", "b":
	default:
		return 0, SizeError("invalid symbol: " + unit)
	}
	shift, ok := map[byte]uint{'b': 0, 'k': 10, 'm': 20, 'g': 30, 't': 40, 'p': 50}[sym]
	if !ok {
		return 0, SizeError("invalid symbol: " + unit)
	}
	return v * float64(uint64(1)<<shift), nil
}

// MemoryMiB is Parser.memoryStringAsMiB: the size in whole MiB, the
// fraction dropped (Int64(measurement.converted(to: .mebibytes).value)).
func MemoryMiB(s string) (int64, error) {
	b, err := ParseMeasurement(s)
	if err != nil {
		return 0, err
	}
	mib := b / (1 << 20)
	if mib >= math.MaxInt64 {
		return 0, SizeError("invalid size") // reconstructed: Swift traps here
	}
	return int64(mib), nil
}

// SizeBytes is Parser.memoryStringAsBytes and the volume service's size:
// whole bytes, the fraction dropped (UInt64(…converted(to: .bytes).value)).
func SizeBytes(s string) (int64, error) {
	b, err := ParseMeasurement(s)
	if err != nil {
		return 0, err
	}
	if b >= math.MaxInt64 {
		return 0, SizeError("invalid size") // reconstructed: Swift traps here
	}
	return int64(b), nil
}
