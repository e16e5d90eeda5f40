package units

import (
	"math"
	"testing"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "512M": 512 << 20, "2g": 2 << 30, "512MB": 512 << 20, "1GiB": 1 << 30,
		" 3k ": 3 << 10, "1T": 1 << 40, "8kib": 8 << 10, "7b": 7, "7ib": -1, "B": -1, "": -1, "-1": -1, "+1": -1, "1.5G": -1,
		"1X": -1, "G": -1, "iB": -1, "8388608T": -1, "8388607T": 8388607 << 40, "9223372036854775807": math.MaxInt64,
	} {
		got, err := ParseSize(in)
		switch {
		case want < 0 && err == nil:
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		case want >= 0 && (err != nil || got != want):
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

func TestFormatSizeReadsBack(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1536 << 10: "1536K", 512 << 20: "512M", 3 << 30: "3G", 2 << 40: "2T"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestHuman(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536 << 10: "1.5 MiB", 2 << 30: "2.0 GiB", 5 << 50: "5.0 PiB", -2048: "-2.0 KiB"} {
		if got := Human(n); got != want {
			t.Errorf("Human(%d) = %q, want %q", n, got, want)
		}
	}
}
