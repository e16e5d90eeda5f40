package mcphttp

import (
	"context"
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

// session is what the guard knows of one session.
type session struct {
	last   time.Time // when a request of it last began or ended
	busy   int       // its requests under way, listening stream included
	listen *stream   // its listening stream (GET), if open
}

// stream is a listening stream; end ends it.
type stream struct{ end context.CancelFunc }

// sessions issues and checks the Mcp-Session-Id of clients of protocol
// revisions that have sessions (up to 2025-11-25). An id is 256 random
// bits; it lives until the client ends it (DELETE), until it has been
// idle for ttl, or until max newer sessions pushed it out (see admit). A
// session with a request under way is never idle.
type sessions struct {
	ttl  time.Duration
	max  int
	now  func() time.Time
	drop func(id string) // frees what the MCP server keeps for a session

	mu   sync.Mutex
	live map[string]*session
}

func newSessions(max int, ttl time.Duration, drop func(string)) *sessions {
	return &sessions{ttl: ttl, max: max, now: time.Now, drop: drop, live: map[string]*session{}}
}

// evictIdle is how long a session must have been idle before a new
// client may push it out when the table is full.
const evictIdle = time.Minute

// idleFor is how long se has been idle at now (0 while busy).
func (se *session) idleFor(now time.Time) time.Duration {
	if se.busy > 0 {
		return 0
	}
	return now.Sub(se.last)
}

// remove forgets id and ends its listening stream; the caller then calls
// drop. Callers hold mu.
func (s *sessions) remove(id string) {
	if se := s.live[id]; se != nil && se.listen != nil {
		se.listen.end()
	}
	delete(s.live, id)
}

// admit makes room for one more session and reports whether there is
// room: expired sessions go first, then, when the table is still full,
// the least recently used idle one if it has been idle for evictIdle. A
// client whose session went that way is told so on its next request
// (404), which the protocol answers with a new initialize. The caller
// serializes admit and the initialize it admits.
func (s *sessions) admit() bool {
	s.mu.Lock()
	now := s.now()
	var gone []string
	for id, se := range s.live {
		if se.idleFor(now) >= s.ttl {
			s.remove(id)
			gone = append(gone, id)
		}
	}
	ok := len(s.live) < s.max
	if !ok {
		oldest, idle := "", time.Duration(0)
		for id, se := range s.live {
			if d := se.idleFor(now); d > idle {
				oldest, idle = id, d
			}
		}
		if oldest != "" && idle >= evictIdle {
			s.remove(oldest)
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

// Generate issues a new session id (server.SessionIdManager).
func (s *sessions) Generate() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(b[:])
	s.mu.Lock()
	s.live[id] = &session{last: s.now()}
	s.mu.Unlock()
	return id
}

// Validate accepts a live session id and marks it used
// (server.SessionIdManager).
func (s *sessions) Validate(id string) (bool, error) {
	s.mu.Lock()
	se := s.live[id]
	now := s.now()
	expired := se != nil && se.idleFor(now) >= s.ttl
	switch {
	case expired:
		s.remove(id)
	case se != nil:
		se.last = now
	}
	s.mu.Unlock()
	if expired {
		s.drop(id)
	}
	if se == nil || expired {
		return false, errNoSession
	}
	return false, nil
}

// Terminate ends a session (server.SessionIdManager): at its client's
// request (the guard checked the id) or the guard's own (forget, for a
// session already removed); the transport then frees its state.
func (s *sessions) Terminate(id string) (bool, error) {
	s.mu.Lock()
	s.remove(id)
	s.mu.Unlock()
	return false, nil
}

// begin marks a request of session id under way; listen, if set, makes
// it the session's listening stream, ending the one open before (its
// client reconnected: the old connection may be dead without anyone
// knowing yet). end(id, the stream returned) must follow a begin that
// succeeded.
func (s *sessions) begin(id string, listen context.CancelFunc) (*stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.live[id]
	if se == nil || se.idleFor(s.now()) >= s.ttl {
		return nil, errNoSession
	}
	var st *stream
	if listen != nil {
		if se.listen != nil {
			se.listen.end()
		}
		st = &stream{end: listen}
		se.listen = st
	}
	se.busy++
	se.last = s.now()
	return st, nil
}

// end marks a request of session id done; st is what begin returned.
func (s *sessions) end(id string, st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.live[id]
	if se == nil {
		return
	}
	se.busy--
	se.last = s.now()
	if st != nil && se.listen == st {
		se.listen = nil
	}
}

// listening reports whether session id has its listening stream open.
func (s *sessions) listening(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.live[id]
	return se != nil && se.listen != nil
}
