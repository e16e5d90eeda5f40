package terminal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/proc"
)

// DefaultMaxSessions bounds the sessions a server keeps.
const DefaultMaxSessions = 8

// endedKept is how long an ended session still answers reads (with its
// last screen and exit status) before it is forgotten.
const endedKept = 10 * time.Minute

// closeGrace is how long a closed program has to end after its hang-up.
const closeGrace = 2 * time.Second

// ErrNotFound means no session has that id.
var ErrNotFound = errors.New("no such terminal session")

// Sessions keeps a server's terminal sessions.
type Sessions struct {
	// Max bounds the sessions open at once (DefaultMaxSessions if 0).
	Max int

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool
}

// Open starts p (an exec with a TTY into sandbox) as a new session.
// Ended sessions make room for it, oldest first.
func (m *Sessions) Open(sandbox, command string, p proc.Process, cols, rows int) (*Session, error) {
	if err := CheckSize(cols, rows); err != nil {
		return nil, err
	}
	max := m.Max
	if max <= 0 {
		max = DefaultMaxSessions
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("the server is shutting down")
	}
	if m.sessions == nil {
		m.sessions = map[string]*Session{}
	}
	m.forgetLocked(time.Now())
	if len(m.sessions) >= max {
		var ended []*Session
		for _, s := range m.sessions {
			if s.Ended() {
				ended = append(ended, s)
			}
		}
		if len(ended) == 0 {
			return nil, fmt.Errorf("%d terminal sessions are open, the most a server keeps: close one with terminal_close (terminal_list lists them)", len(m.sessions))
		}
		sort.Slice(ended, func(i, j int) bool { return ended[i].Started.Before(ended[j].Started) })
		delete(m.sessions, ended[0].ID)
	}
	s, err := Start(newID(), sandbox, command, p, cols, rows)
	if err != nil {
		return nil, err
	}
	m.sessions[s.ID] = s
	return s, nil
}

// Commander gives the process of a terminal program in a sandbox and a
// function to call once it ended (sandbox.Manager).
type Commander interface {
	TerminalCommand(ctx context.Context, name, command string, cols, rows int) (proc.Process, func(), error)
}

// OpenIn starts command (a login shell when "") in sandbox name through
// c as a new session; what c holds for it goes when the program ends.
func (m *Sessions) OpenIn(ctx context.Context, c Commander, name, command string, cols, rows int) (*Session, error) {
	if err := CheckSize(cols, rows); err != nil {
		return nil, err
	}
	cmd, done, err := c.TerminalCommand(ctx, name, command, cols, rows)
	if err != nil {
		return nil, err
	}
	shown := command
	if shown == "" {
		shown = "(login shell)"
	}
	s, err := m.Open(name, shown, cmd, cols, rows)
	if err != nil {
		done()
		return nil, err
	}
	go func() {
		<-s.Done()
		done()
	}()
	return s, nil
}

// forgetLocked drops sessions that ended long ago.
func (m *Sessions) forgetLocked(now time.Time) {
	for id, s := range m.sessions {
		if s.Ended() {
			s.mu.Lock()
			old := now.Sub(s.ended) > endedKept
			s.mu.Unlock()
			if old {
				delete(m.sessions, id)
			}
		}
	}
}

func newID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// Get returns the session with id.
func (m *Sessions) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(time.Now())
	s, ok := m.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w %q (terminal_list lists the open ones; a session does not outlive its server)", ErrNotFound, id)
	}
	return s, nil
}

// Close ends session id's program and forgets the session.
func (m *Sessions) Close(id string) (Info, error) {
	s, err := m.Get(id)
	if err != nil {
		return Info{}, err
	}
	s.Close(closeGrace)
	m.mu.Lock()
	delete(m.sessions, id)
	m.mu.Unlock()
	return s.Info(), nil
}

// List describes the sessions, oldest first.
func (m *Sessions) List() []Info {
	m.mu.Lock()
	m.forgetLocked(time.Now())
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].Started.Before(all[j].Started) })
	out := make([]Info, 0, len(all))
	for _, s := range all {
		out = append(out, s.Info())
	}
	return out
}

// CloseSandbox ends, in the background, the sessions open in sandbox now
// (it is being destroyed, reset or restored: their programs die with its
// container anyway). Sessions opened later, in its next container, are
// not touched.
func (m *Sessions) CloseSandbox(sandbox string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sessions {
		if s.Sandbox == sandbox {
			go s.Close(closeGrace)
		}
	}
}

// CloseAll ends every session; no session opens after it.
func (m *Sessions) CloseAll() {
	m.mu.Lock()
	m.closed = true
	all := slices.Collect(maps.Values(m.sessions))
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(func() { s.Close(closeGrace) })
	}
	wg.Wait()
}
