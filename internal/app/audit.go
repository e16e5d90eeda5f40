package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sandbox-mcp/sandbox-mcp/audit"
	"github.com/sandbox-mcp/sandbox-mcp/internal/units"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox"
)

// AuditOptions choose what Audit prints.
type AuditOptions struct {
	Sandbox string        // only this sandbox's calls
	Since   time.Duration // only calls this recent (0: all)
	Follow  bool          // then wait for more, until ctx ends
	JSON    bool          // one JSON record per line, as kept
}

// Audit prints the tool calls recorded in the state directory's audit
// log, oldest first. It reads files only: no engine is needed.
func Audit(ctx context.Context, cfg Config, o AuditOptions, w io.Writer) error {
	if o.Sandbox != "" {
		if err := sandbox.ValidateName(o.Sandbox); err != nil {
			return &ExitError{Code: ExitUsage, Err: err}
		}
	}
	f := audit.Filter{Sandbox: o.Sandbox}
	if o.Since > 0 {
		f.Since = time.Now().Add(-o.Since)
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var werr error
	print := func(r audit.Record) {
		if werr != nil {
			return
		}
		defer func() {
			if werr != nil {
				stop() // the reader went (a closed pipe): --follow ends
			}
		}()
		if o.JSON {
			b, err := json.Marshal(r)
			if err == nil {
				_, err = fmt.Fprintf(w, "%s\n", b)
			}
			werr = err
			return
		}
		_, werr = io.WriteString(w, auditLine(r))
	}
	dir := filepath.Join(cfg.StateDir, "audit")
	if o.Follow {
		if err := audit.Follow(ctx, dir, f, 250*time.Millisecond, print); err != nil {
			return err
		}
		return werr
	}
	bad, err := audit.Read(dir, f, print)
	if err != nil {
		return err
	}
	if bad > 0 && !o.JSON {
		fmt.Fprintf(w, "(%d lines of the log did not read as records: cut by a full disk or a kill)\n", bad)
	}
	return werr
}

// auditLine is one record for a person: time, tool, sandbox, status,
// duration, result size, client, then the arguments.
func auditLine(r audit.Record) string {
	status := r.Status
	if r.Error != "" {
		status += ": " + r.Error
	}
	var b strings.Builder
	if r.Lost > 0 {
		fmt.Fprintf(&b, "(%d records lost before this one: the log could not be written)\n", r.Lost)
	}
	sb := r.Sandbox
	if sb == "" {
		sb = "-"
	}
	// Every field from the file goes out on one line with its control
	// characters escaped: a terminal is not told to do anything.
	fmt.Fprintf(&b, "%s  %-14s %-12s %7.1f ms %8s  %s  %s", r.Time.Local().Format("2006-01-02 15:04:05.000"), oneLine(r.Tool, 64), oneLine(sb, 64),
		r.DurationMS, units.Human(r.ResultBytes), oneLine(orDash(r.Client), 128), oneLine(status, 200))
	if len(r.Args) > 0 {
		keys := make([]string, 0, len(r.Args))
		for k := range r.Args {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var args []string
		for _, k := range keys {
			if k == "sandbox" {
				continue
			}
			var v bytes.Buffer
			enc := json.NewEncoder(&v)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(r.Args[k])
			args = append(args, oneLine(k, 64)+"="+strings.TrimSuffix(v.String(), "\n"))
		}
		fmt.Fprintf(&b, "  %s", oneLine(strings.Join(args, " "), 300))
	}
	b.WriteByte('\n')
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine puts s on one line (control characters escaped, as \n) and
// cuts it to about n bytes.
func oneLine(s string, n int) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "?") {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		} else {
			b.WriteRune(r)
		}
		if b.Len() > n {
			b.WriteString("…")
			break
		}
	}
	return b.String()
}
