package sandbox

import (
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// HistoryEntry is one command run in a sandbox.
type HistoryEntry struct {
	Time       time.Time `json:"time"`
	Command    string    `json:"command"`
	ExitCode   int       `json:"exit_code"`
	DurationMS int64     `json:"duration_ms"`
	TimedOut   bool      `json:"timed_out,omitempty"`
	Error      string    `json:"error,omitempty"`
}

// maxHistoryCommand bounds the command text kept per entry.
const maxHistoryCommand = 2000

// History keeps the most recent commands per sandbox, with secrets
// redacted before anything is stored.
type History struct {
	limit int

	mu      sync.Mutex
	entries map[string][]HistoryEntry
	secrets map[string]struct{}
}

// NewHistory keeps at most limit entries per sandbox.
func NewHistory(limit int) *History {
	return &History{limit: limit, entries: map[string][]HistoryEntry{}, secrets: map[string]struct{}{}}
}

// AddSecret makes every later entry hide value.
func (h *History) AddSecret(value string) {
	if len(value) < 4 {
		return // too short to redact without mangling ordinary text
	}
	h.mu.Lock()
	h.secrets[value] = struct{}{}
	h.mu.Unlock()
}

// Add records a command's outcome.
func (h *History) Add(name, command string, res shell.Result, err error) {
	e := HistoryEntry{
		Time:       time.Now().UTC(),
		ExitCode:   res.ExitCode,
		DurationMS: res.Duration.Milliseconds(),
		TimedOut:   res.TimedOut,
	}
	if err != nil {
		e.Error = err.Error()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e.Command = h.redact(command)
	if len(e.Command) > maxHistoryCommand {
		e.Command = e.Command[:maxHistoryCommand] + "…"
	}
	list := append(h.entries[name], e)
	if len(list) > h.limit {
		list = append(list[:0:0], list[len(list)-h.limit:]...)
	}
	h.entries[name] = list
}

// Recent returns up to n of the newest entries for a sandbox, oldest first.
func (h *History) Recent(name string, n int) []HistoryEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	list := h.entries[name]
	if n > 0 && len(list) > n {
		list = list[len(list)-n:]
	}
	return append([]HistoryEntry(nil), list...)
}

// Forget drops a sandbox's history.
func (h *History) Forget(name string) {
	h.mu.Lock()
	delete(h.entries, name)
	h.mu.Unlock()
}

var tokenPatterns = []*regexp.Regexp{
	regexp.MustCompile(`\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|glpat-[A-Za-z0-9_-]{20,})\b`),
	regexp.MustCompile(`(?i)((?:token|passw(?:or)?d|secret|api[_-]?key|authorization)\s*[=:]\s*(?:bearer\s+)?)("[^"]*"|'[^']*'|\S+)`),
	regexp.MustCompile(`(https?://[^/\s:@]+:)[^@\s/]+@`),
}

// redact hides registered secrets and token-shaped text. Callers hold h.mu.
func (h *History) redact(s string) string {
	for v := range h.secrets {
		s = strings.ReplaceAll(s, v, "***")
	}
	s = tokenPatterns[0].ReplaceAllString(s, "***")
	s = tokenPatterns[1].ReplaceAllString(s, "${1}***")
	return tokenPatterns[2].ReplaceAllString(s, "${1}***@")
}
