package egress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Log keeps each sandbox's network decisions, one JSON line per event, in
// a file of its own under Dir (private to the user). A file past MaxBytes
// is moved to NAME.jsonl.1 (replacing the one before), so a sandbox's log
// takes at most twice that. Several servers may append at once: each line
// is one append.
type Log struct {
	Dir      string
	MaxBytes int64
}

// DefaultLogBytes bounds one log file.
const DefaultLogBytes = 1 << 20

func (l *Log) path(sandbox string) (string, error) {
	if sandbox == "" || sandbox == "." || sandbox == ".." || strings.ContainsAny(sandbox, "/\\\x00") {
		return "", fmt.Errorf("network log: bad sandbox name %q", sandbox)
	}
	return filepath.Join(l.Dir, sandbox+".jsonl"), nil
}

// Append adds ev to sandbox's log.
func (l *Log) Append(sandbox string, ev Event) error {
	p, err := l.path(sandbox)
	if err != nil {
		return err
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return fmt.Errorf("network log: %w", err)
	}
	max := l.MaxBytes
	if max <= 0 {
		max = DefaultLogBytes
	}
	if fi, err := os.Stat(p); err == nil && fi.Size() >= max {
		_ = os.Rename(p, p+".1")
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("network log: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("network log: %w", err)
	}
	return nil
}

// maxLine bounds a line read back (a longer one is skipped).
const maxLine = 16 << 10

// Read returns the last n events of sandbox's log, oldest first (all of
// them for n <= 0). Lines that do not parse are skipped.
func (l *Log) Read(sandbox string, n int) ([]Event, error) {
	p, err := l.path(sandbox)
	if err != nil {
		return nil, err
	}
	var out []Event
	for _, f := range []string{p + ".1", p} {
		evs, err := readEvents(f)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("network log: %w", err)
		}
		out = append(out, evs...)
	}
	if n > 0 && len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

func readEvents(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	r := bufio.NewReaderSize(io.LimitReader(f, 8*DefaultLogBytes), 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			continue
		}
		if len(line) > 0 && len(line) <= maxLine {
			var ev Event
			if json.Unmarshal(bytes.TrimSpace(line), &ev) == nil && ev.Host != "" {
				out = append(out, ev)
			}
		}
		if err != nil {
			return out, nil
		}
	}
}

// Remove deletes sandbox's log.
func (l *Log) Remove(sandbox string) {
	if p, err := l.path(sandbox); err == nil {
		_ = os.Remove(p)
		_ = os.Remove(p + ".1")
	}
}

// HostBytes is what connections to one host carried.
type HostBytes struct {
	Host        string `json:"host"`
	Connections int    `json:"connections"`
	Up          int64  `json:"bytes_out"`
	Down        int64  `json:"bytes_in"`
}

// Refused is a host the policy refused, with how often and when last.
type Refused struct {
	Host   string    `json:"host"`
	Times  int       `json:"times"`
	Last   time.Time `json:"last"`
	Reason string    `json:"reason"`
}

// Summary condenses a log: bytes per host and the hosts refused, the most
// recent first.
type Summary struct {
	Bytes   []HostBytes `json:"bytes_per_host"`
	Refused []Refused   `json:"refused"`
}

// Summarize condenses evs, keeping at most top hosts of each kind.
func Summarize(evs []Event, top int) Summary {
	bytesBy := map[string]*HostBytes{}
	refBy := map[string]*Refused{}
	for _, ev := range evs {
		key := hostPort(ev.Host, ev.Port)
		switch {
		case !ev.Allowed:
			r := refBy[key]
			if r == nil {
				r = &Refused{Host: key}
				refBy[key] = r
			}
			r.Times++
			r.Last, r.Reason = ev.Time, ev.Reason
		case ev.Ended:
			b := bytesBy[key]
			if b == nil {
				b = &HostBytes{Host: key}
				bytesBy[key] = b
			}
			b.Connections++
			b.Up += ev.Up
			b.Down += ev.Down
		}
	}
	s := Summary{Bytes: []HostBytes{}, Refused: []Refused{}}
	for _, b := range bytesBy {
		s.Bytes = append(s.Bytes, *b)
	}
	sort.Slice(s.Bytes, func(i, j int) bool {
		ti, tj := s.Bytes[i].Up+s.Bytes[i].Down, s.Bytes[j].Up+s.Bytes[j].Down
		return ti > tj || ti == tj && s.Bytes[i].Host < s.Bytes[j].Host
	})
	for _, r := range refBy {
		s.Refused = append(s.Refused, *r)
	}
	slices.SortFunc(s.Refused, func(a, b Refused) int { return b.Last.Compare(a.Last) })
	if top > 0 {
		s.Bytes = s.Bytes[:min(top, len(s.Bytes))]
		s.Refused = s.Refused[:min(top, len(s.Refused))]
	}
	return s
}
