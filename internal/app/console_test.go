package app

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestConsoleLogLinesStartLinesOfTheirOwn: a log line or a message that
// follows a command's unfinished line starts a new one, on the stream it
// is written to; after a finished line, nothing is added, and the
// command's own output passes unchanged.
func TestConsoleLogLinesStartLinesOfTheirOwn(t *testing.T) {
	var term bytes.Buffer // stdout and stderr on one terminal
	c := new(Console)
	stdout, stderr := c.Output(&term), c.Output(&term)
	logger := newLogger("warn", c.Lines(&term))

	fmt.Fprint(stderr, "part")
	logger.Warn("ending the commands")
	fmt.Fprint(stdout, "whole\n")
	logger.Warn("again")
	fmt.Fprint(stdout, "")
	fmt.Fprint(stdout, "more")
	fmt.Fprintln(c.Lines(&term), "sandbox-mcp: timed out after 2s")

	var want []string
	for _, l := range strings.SplitAfter(term.String(), "\n") {
		if !strings.HasPrefix(l, "time=") {
			want = append(want, l)
		}
	}
	if got := strings.Join(want, ""); got != "part\nwhole\nmore\nsandbox-mcp: timed out after 2s\n" {
		t.Fatalf("without the log lines: %q (all: %q)", got, term.String())
	}
	if n := strings.Count(term.String(), "time="); n != 2 || strings.Count(term.String(), "\ntime=") != 2 {
		t.Fatalf("log lines not each at a line's start: %q", term.String())
	}
}
