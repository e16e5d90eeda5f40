package pysession

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
)

// MaxSessions bounds the sessions of one sandbox: each is an interpreter
// holding memory in it.
const MaxSessions = 8

// IdleTimeout is how long a session may go without a call before it is
// ended.
const IdleTimeout = 30 * time.Minute

// ErrTooMany is the cause of the error for a session past MaxSessions.
var ErrTooMany = errors.New("too many Python sessions")

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ValidateName checks a session's name: 1 to 63 letters, digits, '_',
// '.' or '-', starting with a letter or digit.
func ValidateName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("session name %q: use 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit", textcut.Shorten(name, 80))
	}
	return nil
}

// Set is the sessions of one sandbox.
type Set struct {
	mu       sync.Mutex
	sessions map[string]*Session
	starting map[string]chan struct{} // closed when that name's start is over
	// gone says why sessions that the set ended by itself (idle) are
	// gone, for the next call on their names.
	gone   map[string]string
	closed string // why, once Close ran
}

// maxGone bounds the ended sessions a set remembers.
const maxGone = 64

// NewSet returns an empty set.
func NewSet() *Set {
	return &Set{sessions: map[string]*Session{}, starting: map[string]chan struct{}{}, gone: map[string]string{}}
}

// Get returns session name, started with start if it does not run. ended
// says why the session of that name that ran before is gone, if one was
// and ended by itself (its interpreter exited, its code did not stop):
// the caller tells the user that its variables are gone.
func (s *Set) Get(ctx context.Context, name string, start Starter) (sess *Session, ended string, err error) {
	for {
		s.mu.Lock()
		if s.closed != "" {
			s.mu.Unlock()
			return nil, "", fmt.Errorf("%w: %s", ErrEnded, s.closed)
		}
		if cur, ok := s.sessions[name]; ok {
			over, why := cur.Ended()
			if !over {
				cur.touch() // not idle: a call wants it, and the reaper holds s.mu too
				s.mu.Unlock()
				return cur, "", nil
			}
			ended = why
			delete(s.sessions, name)
		} else if why, ok := s.gone[name]; ok {
			ended = why
		}
		if wait, ok := s.starting[name]; ok {
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, "", ctx.Err()
			}
		}
		if n := len(s.sessions) + len(s.starting); n >= MaxSessions {
			names := s.namesLocked()
			s.mu.Unlock()
			return nil, "", fmt.Errorf("%w: this sandbox has %d (%v), the most it may have", ErrTooMany, n, names)
		}
		wait := make(chan struct{})
		s.starting[name] = wait
		s.mu.Unlock()

		sess, err = Start(ctx, start)

		s.mu.Lock()
		delete(s.starting, name)
		close(wait)
		if err == nil {
			if s.closed != "" {
				sess.Close(s.closed)
				err = fmt.Errorf("%w: %s", ErrEnded, s.closed)
			} else {
				s.sessions[name] = sess
				delete(s.gone, name)
			}
		}
		s.mu.Unlock()
		if err != nil {
			return nil, "", err
		}
		return sess, ended, nil
	}
}

// Reset ends session name; it reports whether one ran.
// It returns once the session's processes were ended (or closeWait
// passed), so that code run next does not meet them (a port still
// bound, a file still written).
func (s *Set) Reset(name string) bool {
	s.mu.Lock()
	sess, ok := s.sessions[name]
	delete(s.sessions, name)
	s.mu.Unlock()
	if ok {
		sess.Close("it was reset")
		sess.wait(closeWait)
	}
	return ok
}

func (s *Set) namesLocked() []string {
	names := make([]string, 0, len(s.sessions))
	for n := range s.sessions {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// CloseIdle ends the sessions without a call for longer than d.
func (s *Set) CloseIdle(d time.Duration) {
	now := time.Now()
	s.mu.Lock()
	var idle []*Session
	for name, sess := range s.sessions {
		if sess.Idle(now) > d {
			idle = append(idle, sess)
			delete(s.sessions, name)
			if len(s.gone) < maxGone {
				s.gone[name] = "it was idle for more than " + d.String()
			}
		}
	}
	s.mu.Unlock()
	for _, sess := range idle {
		sess.Close("it was idle for more than " + d.String())
	}
}

// closeWait bounds how long Close waits for its sessions' processes to
// be ended (an engine exec each, and the command's exit).
const closeWait = 40 * time.Second

// Close ends every session, and any started later, telling callers why,
// and returns once their processes in the sandbox were ended (or
// closeWait passed): its caller may be a server on its way out.
func (s *Set) Close(why string) {
	s.mu.Lock()
	s.closed = why
	all := s.sessions
	s.sessions = map[string]*Session{}
	s.mu.Unlock()
	for _, sess := range all {
		sess.Close(why)
	}
	deadline := time.Now().Add(closeWait)
	for _, sess := range all {
		sess.wait(time.Until(deadline))
	}
}
