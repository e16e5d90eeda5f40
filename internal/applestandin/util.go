package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func itoa(n int) string { return strconv.Itoa(n) }

func numCPU() int { return runtime.NumCPU() }

// hostMemory is the host's memory in bytes (MemTotal of /proc/meminfo;
// 16 GiB where that cannot be read).
func hostMemory() int64 {
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 16 << 30
}

// newUUID returns a random lowercase RFC 4122 version-4 UUID (Apple uses a
// lowercased UUID as the id of a container created without --name).
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// appleEpoch is 2001-01-01T00:00:00Z, the reference date of Swift's
// deferredToDate encoding used by 0.x JSON.
var appleEpoch = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

// isoDate formats t like ISO8601DateFormatter: UTC, no fractional seconds.
func isoDate(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// appleSeconds is t as seconds since 2001-01-01 (0.x JSON dates).
func appleSeconds(t time.Time) float64 {
	d := t.Sub(appleEpoch)
	// Microsecond precision, like the captured 802450114.597753.
	return float64(d.Microseconds()) / 1e6
}

// dateValue renders a date for the emulated version's JSON.
func (a *app) dateValue(t time.Time) any {
	if oneX(a.v) {
		return isoDate(t)
	}
	return appleSeconds(t)
}

// hostArch is the OCI architecture reported for containers, images and the
// host (Go and OCI share names; tests set it to a Mac's arm64).
var hostArch = runtime.GOARCH

// archName is the architecture shown in Apple's JSON and tables.
func archName() string { return hostArch }

// multi writes to every writer (errors from the first one win).
type multi []io.Writer

func (m multi) Write(p []byte) (int, error) {
	for _, w := range m {
		if _, err := w.Write(p); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// tailBuffer keeps the last 64 KiB written to it.
type tailBuffer struct {
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 64<<10; over > 0 {
		t.buf = t.buf[over:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }
