package mcphttp

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"sync"
	"time"
)

// errNoSession is what a request naming no live session gets: unknown
// (guessed), ended, expired or evicted ids alike, so an id cannot be
// probed for whether it once existed.
var errNoSession = errors.New("no such session: start a new one (initialize)")

// sessions issues and checks the Mcp-Session-Id of clients of protocol
// revisions that have sessions (up to 2025-11-25). An id is 256 random
// bits; it lives until the client ends it (DELETE), until it has been
// idle for ttl, or until max newer sessions pushed it out (see admit).
type sessions struct {
	ttl  time.Duration
	max  int
	now  func() time.Time
	drop func(id string) // frees what the MCP server keeps for a session

	mu   sync.Mutex
	live map[string]time.Time // id → last use
}

func newSessions(max int, ttl time.Duration, drop func(string)) *sessions {
	return &sessions{ttl: ttl, max: max, now: time.Now, drop: drop, live: map[string]time.Time{}}
}

// evictIdle is how long a session must have been idle before a new
// client may push it out when the table is full.
const evictIdle = time.Minute

// admit makes room for one more session and reports whether there is
// room: expired sessions go first, then, when the table is still full,
// the least recently used one if it has been idle for evictIdle. A
// client whose session went that way is told so on its next request
// (404), which the protocol answers with a new initialize.
func (s *sessions) admit() bool {
	s.mu.Lock()
	now := s.now()
	var gone []string
	for id, last := range s.live {
		if now.Sub(last) >= s.ttl {
			delete(s.live, id)
			gone = append(gone, id)
		}
	}
	ok := len(s.live) < s.max
	if !ok {
		oldest, when := "", now
		for id, last := range s.live {
			if last.Before(when) {
				oldest, when = id, last
			}
		}
		if oldest != "" && now.Sub(when) >= evictIdle {
			delete(s.live, oldest)
			gone = append(gone, oldest)
			ok = true
		}
	}
	s.mu.Unlock()
	for _, id := range gone {
		s.drop(id)
	}
	return ok
}

// count is the number of sessions held, expired ones included until the
// next admit.
func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// Generate issues a new session id (server.SessionIdManager).
func (s *sessions) Generate() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(b[:])
	s.mu.Lock()
	s.live[id] = s.now()
	s.mu.Unlock()
	return id
}

// Validate accepts a live session id and marks it used
// (server.SessionIdManager).
func (s *sessions) Validate(id string) (bool, error) {
	s.mu.Lock()
	last, ok := s.live[id]
	now := s.now()
	expired := ok && now.Sub(last) >= s.ttl
	switch {
	case expired:
		delete(s.live, id)
	case ok:
		s.live[id] = now
	}
	s.mu.Unlock()
	if expired {
		s.drop(id)
	}
	if !ok || expired {
		return false, errNoSession
	}
	return false, nil
}

// Terminate ends a session at its client's request
// (server.SessionIdManager); the transport frees its state itself.
func (s *sessions) Terminate(id string) (bool, error) {
	s.mu.Lock()
	_, ok := s.live[id]
	delete(s.live, id)
	s.mu.Unlock()
	if !ok {
		return false, errNoSession
	}
	return false, nil
}
