package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// This file is the file tools' part of the Manager.

// WriteFile writes data to path in the sandbox, creating parent
// directories; appendTo appends.
func (m *Manager) WriteFile(ctx context.Context, name, path string, data []byte, appendTo bool) error {
	script, err := guest.WriteFileScript(path, appendTo)
	if err != nil {
		return &ArgError{Err: err}
	}
	_, err = m.runScript(ctx, name, "write_file "+path, script, data, 4096)
	return err
}

// WriteFiles writes several files in path order. It returns the paths
// written before any failure.
func (m *Manager) WriteFiles(ctx context.Context, name string, files map[string][]byte) ([]string, error) {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var done []string
	for _, p := range paths {
		if err := m.WriteFile(ctx, name, p, files[p], false); err != nil {
			return done, err
		}
		done = append(done, p)
	}
	return done, nil
}

// ReadFile reads length bytes of path from offset (length 0: to the end),
// at most MaxReadFile; more is an error wrapping ErrTooLarge. Only regular
// files are read: a device, fifo or socket is refused at once (reading one
// may never end). Kernel files (/proc, /sys) are regular files of size 0
// and are read like any other, up to the same bound.
func (m *Manager) ReadFile(ctx context.Context, name, path string, offset, length int64) ([]byte, error) {
	if length > MaxReadFile {
		return nil, &ArgError{Err: fmt.Errorf("length is at most %d", MaxReadFile)}
	}
	limit := length
	if limit == 0 {
		limit = MaxReadFile + 1 // one more tells "exactly the cap" from "over it"
	}
	script, err := guest.ReadFileScript(path, offset, limit)
	if err != nil {
		return nil, &ArgError{Err: err}
	}
	op := "read_file " + path
	data, stderr, res, err := m.runFileScript(ctx, name, op, script, nil, int(limit))
	if err != nil {
		return nil, err
	}
	failed := strings.Contains(stderr, guest.ReadFailedMark) && int64(len(data)) < limit
	if res.TimedOut || res.ExitCode != 0 || failed {
		msg := strings.TrimSpace(strings.ReplaceAll(stderr, guest.ReadFailedMark, ""))
		se := &ScriptError{Op: op, ExitCode: res.ExitCode, Stderr: shorten(msg, 300), TimedOut: res.TimedOut}
		if res.ExitCode == guest.ExitNotRegular && !res.TimedOut {
			return nil, fmt.Errorf("%w; read_file reads regular files only: for a device or fifo use exec with a bound, e.g. `head -c 64 /dev/urandom | base64`", se)
		}
		return nil, se
	}
	if length == 0 && len(data) > MaxReadFile {
		return nil, fmt.Errorf("%s: %w: more than %d bytes; read it in parts with offset and length", op, ErrTooLarge, MaxReadFile)
	}
	return data, nil
}

// runFileScript runs a file script and returns its stdout (at most limit
// bytes), its stderr (trimmed, at most 4 KiB) and its result, whatever its
// exit status; err is a failure to run it at all.
func (m *Manager) runFileScript(ctx context.Context, name, label, script string, stdin []byte, limit int) ([]byte, string, ExecResult, error) {
	var out bytes.Buffer
	errb := &shell.Capture{Limit: 4096}
	res, err := m.ExecAs(ctx, name, label, shell.Request{
		Command: script, Stdin: stdin, Timeout: scriptTimeout, Stdout: &limitWriter{w: &out, n: limit}, Stderr: errb,
	})
	if err != nil {
		return nil, "", res, err
	}
	head, _, _ := errb.Parts()
	return out.Bytes(), strings.TrimSpace(string(head)), res, nil
}

// shorten keeps the first n bytes of s (whole UTF-8 sequences), marking a
// cut with "…".
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = strings.ToValidUTF8(s[:n], "")
	return s + "…"
}
