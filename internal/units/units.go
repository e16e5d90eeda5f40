// Package units reads and writes sizes in bytes the one way the whole
// product spells them: "512M", "2G", "1GiB" or a plain number of bytes
// (K, M, G and T are powers of 1024), and "1.5 MiB" for people to read.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads a size: a whole number of bytes, or one with a K, M, G
// or T (powers of 1024), which "B" or "iB" may follow, in any case:
// "512M", "2g", "512MB", "1GiB", "1048576", "100B".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	switch l := strings.ToLower(t); {
	case strings.HasSuffix(l, "ib") && len(l) > 2 && strings.IndexByte("kmgt", l[len(l)-3]) >= 0:
		t = t[:len(t)-2]
	case strings.HasSuffix(l, "b") && len(l) > 1 && strings.IndexByte("kmgt0123456789", l[len(l)-2]) >= 0:
		t = t[:len(t)-1]
	}
	shift := uint(0)
	if n := len(t); n > 0 {
		if i := strings.IndexByte("kmgt", t[n-1]|0x20); i >= 0 {
			shift, t = uint(10*(i+1)), t[:n-1]
		}
	}
	n, err := strconv.ParseUint(t, 10, 63)
	if err != nil || t == "" || t[0] == '+' {
		return 0, fmt.Errorf("size %q: want a whole number of bytes, or one with K, M, G or T (powers of 1024), such as 512M", s)
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(n << shift), nil
}

// FormatSize writes n as ParseSize reads it, in the largest unit that
// divides it: 512M, 3G, 1536K, 1000.
func FormatSize(n int64) string {
	for _, u := range []struct {
		shift uint
		s     string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// Human writes n for people: bytes under 1 KiB, else one decimal in the
// largest binary unit under it ("512 B", "1.5 MiB", "2.0 GiB").
func Human(n int64) string {
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, unit := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= 1024
		if math.Abs(f) < 1024 || unit == "PiB" {
			return fmt.Sprintf("%.1f %s", f, unit)
		}
	}
	return "" // not reached
}

// Approx writes n for a sentence: bytes under 1 KiB, else four
// significant digits in the largest binary unit under it ("512 bytes",
// "1.5 MiB", "2.004 GiB").
func Approx(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.4g GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.4g MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.4g KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
