package sandbox

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
)

// TestWriteErrorSaysWhatLanded: every failed write names its cause, what
// is in the file now, and what to do.
func TestWriteErrorSaysWhatLanded(t *testing.T) {
	cases := []struct {
		e    WriteError
		want []string
	}{
		{WriteError{Path: "/d/f", Cause: guest.CauseNoSpace, Sent: 1000000, Landed: 0, Size: 0, Detail: "cat: write error: No space left on device"},
			[]string{"/d/f: no space left on device: 0 of 1000000 bytes landed: the file is empty", "sandbox said: cat: write error", "df -h"}},
		{WriteError{Path: "/d/f", Cause: guest.CauseNoSpace, Sent: 1000000, Landed: 102400, Size: 102400},
			[]string{"102400 of 1000000 bytes landed and the file is incomplete"}},
		{WriteError{Path: "/d/f", Cause: guest.CauseNoSpace, Append: true, Sent: 100, Landed: 40, Size: 50},
			[]string{"the file grew by 40 of 100 bytes (now 50) and is incomplete"}},
		{WriteError{Path: "/ro/f", Cause: guest.CauseReadOnly, Sent: 1, Landed: -1, Size: -1},
			[]string{"/ro/f: read-only file system: nothing was written", "write under the workspace"}},
		{WriteError{Path: "/w", Cause: guest.CauseIsDir, Sent: 1, Landed: -1, Size: -1, Detail: "is a directory"},
			[]string{"/w: is a directory: nothing was written; the path"}},
		{WriteError{Path: "/proc/1/x", Cause: guest.CausePermission, Sent: 5, Landed: -1, Size: -1, Kernel: true},
			[]string{"permission denied: a kernel file"}},
		{WriteError{Path: "/w/f", Cause: CauseShortInput, Sent: 1000000, Landed: 0, Size: 0},
			[]string{"input cut short", "0 of 1000000 bytes landed"}},
		{WriteError{Path: "/w/f", Cause: CauseSizeMismatch, Sent: 5, Landed: 9, Size: 9},
			[]string{"size mismatch: the file grew by 9 bytes, not the 5 written"}},
		{WriteError{Path: "/w/f", Cause: CauseHashMismatch, Sent: 5, Landed: 5, Size: 5, WantSHA: "aa", GotSHA: "bb"},
			[]string{"sha256 mismatch: the file's sha256 is bb, not aa; all 5 bytes landed"}},
		{WriteError{Path: "/w/f", Cause: CauseHashUnavailable, Sent: 5, Landed: 5, Size: 5, Detail: "sh: sha256sum: not found"},
			[]string{"sha256 not computed: all 5 bytes landed (size checked)", "sha256sum: not found"}},
		{WriteError{Path: "/w/f", ExitCode: 3, Sent: 5, Landed: -1, Size: -1, Detail: "weird"},
			[]string{"/w/f: failed (exit 3): nothing was written (sandbox said: weird)"}},
	}
	for _, c := range cases {
		got := c.e.Error()
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%q\n  lacks %q", got, w)
			}
		}
	}
}

func TestShorten(t *testing.T) {
	if got := textcut.Shorten("héllo", 2); got != "h…" {
		t.Errorf("%q", got)
	}
	if got := textcut.Shorten("abc", 3); got != "abc" {
		t.Errorf("%q", got)
	}
}
