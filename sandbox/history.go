package sandbox

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/redact"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// HistoryEntry is one command run in a sandbox.
type HistoryEntry struct {
	Time       time.Time `json:"time"`
	Command    string    `json:"command"`
	ExitCode   int       `json:"exit_code"`
	DurationMS int64     `json:"duration_ms"`
	TimedOut   bool      `json:"timed_out,omitempty"`
	Canceled   bool      `json:"canceled,omitempty"`
	// StopTookMS is set when ending a timed-out or cancelled command took
	// long enough that it ran on meanwhile (shell.Result.StoppedLate).
	StopTookMS int64  `json:"stop_took_ms,omitempty"`
	Error      string `json:"error,omitempty"`
}

// maxHistoryCommand bounds the command text kept per entry.
const maxHistoryCommand = 2000

// HistoryStore persists history across server processes (see state.Store).
type HistoryStore interface {
	AppendHistory(batch map[string][]json.RawMessage, limit int) error
	History(name string) ([]json.RawMessage, error)
	DeleteHistory(name string) error
}

// History keeps the most recent commands per sandbox, with secrets
// redacted before anything is stored. With a store, entries are written in
// batches by Flush, off the path of the command itself, and Recent reads
// what every server process wrote.
type History struct {
	limit int
	store HistoryStore

	mu      sync.Mutex
	entries map[string][]HistoryEntry // without a store
	pending map[string][]HistoryEntry // with a store: not yet flushed
	// wal, when set, gets every entry as it is added, before its call
	// returns, so that a server killed before its next Flush loses none:
	// the next server replays what it finds (see replayHistory). Flush
	// rewrites it with what is still pending.
	wal     *os.File
	walPath string
	// secrets holds each sandbox's secret values, longest first, the
	// order redact replaces them in. They are the sandbox's own: its env
	// store lives in the sandbox, so it may name any text secret, and
	// that must not rewrite other sandboxes' history.
	secrets map[string][]string
}

// maxSecrets bounds the secrets kept per sandbox; past it the oldest go.
const maxSecrets = 256

// NewHistory keeps at most limit entries per sandbox, in store if not nil.
func NewHistory(limit int, store HistoryStore) *History {
	return &History{limit: limit, store: store, entries: map[string][]HistoryEntry{},
		pending: map[string][]HistoryEntry{}, secrets: map[string][]string{}}
}

// AddSecret makes every later entry of sandbox name hide value.
func (h *History) AddSecret(name, value string) {
	if len(value) < 4 {
		return // too short to redact without mangling ordinary text
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.secrets[name]
	if slices.Contains(list, value) {
		return
	}
	if len(list) >= maxSecrets {
		list = list[1:]
	}
	// Longest first: a secret that holds a shorter one is hidden whole,
	// not cut at the shorter one with its rest left in the clear.
	i, _ := slices.BinarySearchFunc(list, value, func(a, b string) int { return len(b) - len(a) })
	h.secrets[name] = slices.Insert(slices.Clip(list), i, value)
}

// Add records a command's outcome. An empty command is the server's own
// housekeeping (health checks, job polling) and is not recorded.
func (h *History) Add(name, command string, res shell.Result, err error) {
	if command == "" {
		return
	}
	e := HistoryEntry{
		Time:       time.Now().UTC(),
		ExitCode:   res.ExitCode,
		DurationMS: res.Duration.Milliseconds(),
		TimedOut:   res.TimedOut,
		Canceled:   res.Canceled,
	}
	if res.StoppedLate() {
		e.StopTookMS = res.StopTook.Milliseconds()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		e.Error = h.redact(name, err.Error())
	}
	e.Command = h.redact(name, command)
	if len(e.Command) > maxHistoryCommand {
		e.Command = e.Command[:maxHistoryCommand] + "…"
	}
	m := h.entries
	if h.store != nil {
		m = h.pending
		h.logEntry(name, e)
	}
	list := append(m[name], e)
	if len(list) > h.limit {
		// The oldest goes by reslicing: append copies the entries kept
		// only when the array is full, not on every call past the limit.
		list = list[len(list)-h.limit:]
	}
	m[name] = list
}

// walRecord is one line of the write-ahead file.
type walRecord struct {
	Sandbox string       `json:"sandbox"`
	Entry   HistoryEntry `json:"entry"`
}

// SetWAL makes h write every entry to the file at path as it is added
// (see History.wal). Callers hold no lock; it is set once, before use.
func (h *History) SetWAL(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wal, h.walPath = f, path
	return nil
}

// CloseWAL closes and removes the write-ahead file, once everything in
// it was flushed.
func (h *History) CloseWAL() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.wal == nil {
		return
	}
	h.wal.Close()
	if len(h.pending) == 0 {
		os.Remove(h.walPath)
	}
	h.wal = nil
}

// logEntry appends e to the write-ahead file. Callers hold h.mu. One write
// of one line: a kill leaves it whole or not there, and a line cut short
// (a full disk) is skipped when read.
func (h *History) logEntry(name string, e HistoryEntry) {
	if h.wal == nil {
		return
	}
	b, err := json.Marshal(walRecord{Sandbox: name, Entry: e})
	if err == nil {
		_, _ = h.wal.Write(append(b, '\n'))
	}
}

// Flush writes pending entries to the store. Entries a failed write could
// not store stay pending, to be written by the next Flush.
func (h *History) Flush() error {
	if h.store == nil {
		return nil
	}
	h.mu.Lock()
	pending := h.pending
	h.pending = map[string][]HistoryEntry{}
	h.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	batch := map[string][]json.RawMessage{}
	for name, list := range pending {
		for _, e := range list {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			batch[name] = append(batch[name], b)
		}
	}
	err := h.store.AppendHistory(batch, h.limit)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		// Back in front of what came meanwhile, within the bound.
		for name, list := range pending {
			list = append(list, h.pending[name]...)
			if len(list) > h.limit {
				list = list[len(list)-h.limit:]
			}
			h.pending[name] = list
		}
		return err
	}
	h.rewriteWAL()
	return nil
}

// rewriteWAL replaces the write-ahead file with the entries still
// pending (written beside it, then renamed over it). Callers hold h.mu.
func (h *History) rewriteWAL() {
	if h.wal == nil {
		return
	}
	tmp := h.walPath + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return // the old file stays: a replay may repeat entries, never lose one
	}
	for name, list := range h.pending {
		for _, e := range list {
			if b, err := json.Marshal(walRecord{Sandbox: name, Entry: e}); err == nil {
				_, _ = f.Write(append(b, '\n'))
			}
		}
	}
	if err := os.Rename(tmp, h.walPath); err != nil {
		f.Close()
		os.Remove(tmp)
		return
	}
	h.wal.Close()
	h.wal = f
}

// ReadWAL reads a write-ahead file's entries by sandbox, in order; lines
// that do not parse (one cut short) are skipped.
func ReadWAL(path string) (map[string][]HistoryEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string][]HistoryEntry{}
	for _, line := range bytes.Split(data, []byte("\n")) {
		var r walRecord
		if len(line) == 0 || json.Unmarshal(line, &r) != nil || r.Sandbox == "" {
			continue
		}
		out[r.Sandbox] = append(out[r.Sandbox], r.Entry)
	}
	return out, nil
}

// Recent returns up to n of the newest entries for a sandbox, oldest first.
func (h *History) Recent(name string, n int) ([]HistoryEntry, error) {
	var list []HistoryEntry
	if h.store != nil {
		raw, err := h.store.History(name)
		if err != nil {
			return nil, err
		}
		for _, r := range raw {
			var e HistoryEntry
			if json.Unmarshal(r, &e) == nil {
				list = append(list, e)
			}
		}
	}
	h.mu.Lock()
	list = append(list, h.entries[name]...)
	list = append(list, h.pending[name]...)
	h.mu.Unlock()
	if n > 0 && len(list) > n {
		list = list[len(list)-n:]
	}
	return list, nil
}

// Forget drops a sandbox's history.
func (h *History) Forget(name string) error {
	h.mu.Lock()
	delete(h.entries, name)
	delete(h.pending, name)
	delete(h.secrets, name)
	h.mu.Unlock()
	if h.store != nil {
		return h.store.DeleteHistory(name)
	}
	return nil
}

// Redact hides sandbox name's secrets and token-shaped text in s.
func (m *Manager) Redact(name, s string) string { return m.history.Redact(name, s) }

// Redact hides sandbox name's secrets and token-shaped text in s.
func (h *History) Redact(name, s string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.redact(name, s)
}

// redact hides sandbox name's secrets and token-shaped text. Callers hold
// h.mu.
func (h *History) redact(name, s string) string {
	return redact.Text(s, h.secrets[name]...)
}
