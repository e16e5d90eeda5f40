// Package audit keeps a record of every tool call the server answers: one
// JSON line per call, appended to audit.jsonl in a directory of the state
// directory, and moved aside to a file named by the time once it is full,
// so the whole record stays under a cap. Several servers may append to one
// directory at once: each line is one append, and one of them moves a
// full file aside under a lock while the others reopen. A line is written
// whole or not at all; a line that could not be written (a full disk,
// say) is counted, and the next line that is written says how many were
// lost before it.
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Record is one tool call.
type Record struct {
	Time time.Time `json:"time"`
	// Client is the client's name and version from its initialize, and
	// Session the MCP session the call came on.
	Client  string `json:"client,omitempty"`
	Session string `json:"session,omitempty"`
	Tool    string `json:"tool"`
	// Sandbox is the sandbox the call names (the default one for a tool
	// that takes a sandbox and was given none).
	Sandbox string `json:"sandbox,omitempty"`
	// Args are the call's arguments with secrets hidden and long values
	// cut (see mcpserver).
	Args map[string]any `json:"args,omitempty"`
	// Status is ok, or error when the tool answered with an error.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// ResultBytes counts the text and data of the result's content.
	ResultBytes int64   `json:"result_bytes"`
	DurationMS  float64 `json:"duration_ms"`
	// Lost counts the records this server could not write just before
	// this one.
	Lost int64 `json:"lost,omitempty"`
}

// File is the name of the file being appended to; files moved aside are
// named audit-<UTC time>.jsonl and sort in the order they were written.
const File = "audit.jsonl"

// maxLine bounds one record's line: a record past it is written without
// its arguments.
const maxLine = 64 << 10

// Log appends records to the directory it was opened on.
type Log struct {
	dir     string
	maxFile int64 // a file past this is moved aside
	keep    int   // files moved aside that are kept

	mu   sync.Mutex
	f    *os.File
	lost int64 // records not written since the last one that was
	// partial: the last write left part of a line, which the next one
	// ends first.
	partial bool
	size    int64     // of the file, as last seen plus this server's lines
	checked time.Time // when the file was last looked at
	// onLoss is told of the first record lost after one was written.
	onLoss func(error)
}

// DefaultCap is what the records take at most by default.
const DefaultCap = 64 << 20

// Open returns a Log in dir that keeps at most about capBytes of records
// (the file being written and those moved aside together). onLoss, if
// not nil, is told when a record cannot be written after the last one
// could.
func Open(dir string, capBytes int64, onLoss func(error)) (*Log, error) {
	if capBytes <= 0 {
		return nil, errors.New("audit: the cap must be positive")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	const files = 4
	return &Log{dir: dir, maxFile: max(capBytes/files, 4<<10), keep: files - 1, onLoss: onLoss}, nil
}

// Append writes r. It never blocks on another server for long and never
// fails the call it records: the error is for the caller to log, and the
// loss is counted in the next record written.
func (l *Log) Append(r Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Lost = l.lost
	line, err := json.Marshal(r)
	if err == nil && len(line) >= maxLine {
		r.Args = map[string]any{"cut": fmt.Sprintf("%d bytes of arguments left out", len(line))}
		line, err = json.Marshal(r)
	}
	if err == nil {
		err = l.write(append(line, '\n'))
	}
	if err != nil {
		if l.lost == 0 && l.onLoss != nil {
			l.onLoss(err)
		}
		l.lost++
		return fmt.Errorf("audit: %w", err)
	}
	l.lost = 0
	return nil
}

// write appends line to the current file, first moving a full one aside
// and reopening when another server has.
func (l *Log) write(line []byte) error {
	// Whether another server moved the file aside, and how big it is with
	// their lines, is looked at every recheck; in between, this server's
	// own lines are counted.
	if l.f == nil || time.Since(l.checked) > recheck || l.size+int64(len(line)) > l.maxFile {
		if err := l.current(); err != nil {
			return err
		}
		fi, err := l.f.Stat()
		if err != nil {
			return err
		}
		l.size, l.checked = fi.Size(), time.Now()
		if l.size+int64(len(line)) > l.maxFile && l.size > 0 {
			if err := l.rotate(); err != nil {
				return err
			}
			l.size = 0
		}
	}
	if l.partial {
		line = append([]byte{'\n'}, line...)
	}
	n, err := writeFile(l.f, line)
	if err != nil {
		// Part of a line may have gone down (the disk filled under it):
		// the next record starts a line of its own, and the part reads as
		// one bad line.
		l.partial = l.partial || n > 0
		return err
	}
	l.partial = false
	l.size += int64(len(line))
	return nil
}

// recheck is how often a Log looks at its file for other servers' work.
const recheck = 200 * time.Millisecond

// writeFile is where a line is written (tests make the disk fill).
var writeFile = func(f *os.File, b []byte) (int, error) { return f.Write(b) }

// current makes l.f the file named File, opening it when l.f is not open
// or another server moved it aside.
func (l *Log) current() error {
	path := filepath.Join(l.dir, File)
	if l.f != nil {
		if l.holdsCurrent() {
			return nil
		}
		l.f.Close()
		l.f = nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	l.f = f
	return nil
}

// holdsCurrent reports whether l.f is still the file named File (no
// server moved it aside).
func (l *Log) holdsCurrent() bool {
	a, err1 := l.f.Stat()
	b, err2 := os.Stat(filepath.Join(l.dir, File))
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// rotate moves the full file aside under the directory's lock (unless
// another server did meanwhile), drops the oldest files past keep, and
// opens a new one.
func (l *Log) rotate() error {
	lock, err := os.OpenFile(filepath.Join(l.dir, "audit.lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	// Another server moving the file aside holds the lock for a rename:
	// this one does not wait on it (a stopped server would stop every
	// call here), and writes on to the file it has this time.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil
		}
		return err
	}
	path := filepath.Join(l.dir, File)
	if l.holdsCurrent() {
		aside := filepath.Join(l.dir, "audit-"+time.Now().UTC().Format("20060102T150405.000000000Z")+".jsonl")
		if err := os.Rename(path, aside); err != nil {
			return err
		}
		l.prune()
	}
	l.f.Close()
	l.f = nil
	return l.current()
}

// prune removes the oldest files moved aside past keep.
func (l *Log) prune() {
	old, err := Aside(l.dir)
	if err != nil || len(old) <= l.keep {
		return
	}
	for _, p := range old[:len(old)-l.keep] {
		_ = os.Remove(p)
	}
}

// Aside lists the files moved aside in dir, oldest first.
func Aside(dir string) ([]string, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		if n := e.Name(); strings.HasPrefix(n, "audit-") && strings.HasSuffix(n, ".jsonl") && e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, n))
		}
	}
	slices.Sort(out)
	return out, nil
}

// Close closes the file being written.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
