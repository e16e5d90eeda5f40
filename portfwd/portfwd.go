// Package portfwd forwards TCP ports on the host to ports inside
// sandboxes. Each forward is a listener on the host (127.0.0.1 unless
// configured otherwise); each connection it accepts is one stream to
// 127.0.0.1:<port> inside the sandbox, opened by a Dialer (the in-sandbox
// agent in production), so no process starts per connection.
//
// Forwards are recorded in the state and outlive the server that made
// them: every server looks for recorded forwards that no server serves and
// takes one over under its lease (a lock file, released by the kernel when
// its holder dies), so exactly one process listens on a forward's port.
package portfwd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/agent"
	"github.com/sandbox-mcp/sandbox-mcp/locks"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// Dialer connects to port inside sandbox.
type Dialer func(ctx context.Context, sandbox string, port int) (net.Conn, error)

// Store keeps the forward records (*state.Store in production).
type Store interface {
	PutForward(f state.Forward) error
	DeleteForward(sandbox string, port int) (bool, error)
	Forwards() ([]state.Forward, error)
}

// Options configure a Set.
type Options struct {
	Dial Dialer
	// Bind is the address listeners bind to; "127.0.0.1" when empty.
	Bind string
	// AllowPrivileged lets a forward listen on a host port below 1024.
	// Without it such a port is refused when asked for, and not taken
	// for a sandbox port of the same number.
	AllowPrivileged bool
	Log             *slog.Logger
	// Store and Locks make forwards outlive this process (both or none).
	Store Store
	Locks locks.Dir
	// Every is how often a server looks for forwards that no server
	// serves, and checks that the ones it serves are still recorded;
	// 1 s when zero.
	Every time.Duration
	// NoTakeOver keeps the Set to the forwards it makes (a command line's
	// Set): the servers take the others over.
	NoTakeOver bool
}

// Info describes one forward.
type Info struct {
	Sandbox  string `json:"sandbox"`
	Port     int    `json:"port"`
	HostPort int    `json:"host_port"`
	URL      string `json:"url"`
	// Connections counts the connections accepted; Active those open now
	// (known for forwards this server serves).
	Connections int64 `json:"connections"`
	Active      int64 `json:"active"`
	// Via says how connections reach the sandbox: "agent" (a stream of the
	// sandbox's agent) or "exec" (an exec each, where the agent cannot
	// run); "" before this server carried a connection.
	Via string `json:"via,omitempty"`
	// Server says which server process listens: "this server", "server
	// pid N", or "waiting" (no server has taken it over yet).
	Server string `json:"server"`
}

// ErrNotForwarded marks an unexpose of a port that has no forward.
var ErrNotForwarded = errors.New("no such forward")

// dialTimeout bounds reaching the port inside the sandbox for one
// connection (booting a stopped sandbox included).
const dialTimeout = 2 * time.Minute

type key struct {
	sandbox string
	port    int
}

func (k key) lockKey() string { return "fwd@" + k.sandbox + "@" + strconv.Itoa(k.port) }

// tryLock takes k's lock if no server holds it.
func (s *Set) tryLock(k key) (*locks.Held, error) {
	return s.opt.Locks.TryLock(k.lockKey(), "forward "+k.sandbox+":"+strconv.Itoa(k.port))
}

// listen listens on host port p of the Set's address.
func (s *Set) listen(p int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort(s.opt.Bind, strconv.Itoa(p)))
}

// newForward is k served from ln under lock, not started yet.
func newForward(k key, ln net.Listener, lock *locks.Held) *forward {
	return &forward{key: k, ln: ln, hostPort: ln.Addr().(*net.TCPAddr).Port, lock: lock,
		done: make(chan struct{}), served: make(chan struct{})}
}

type forward struct {
	key
	ln          net.Listener
	hostPort    int
	lock        *locks.Held // nil without a lock directory
	connections atomic.Int64
	active      atomic.Int64
	via         atomic.Pointer[string] // the path of the last connection
	started     time.Time
	done        chan struct{}
	served      chan struct{} // closed when the accept loop has returned
	stopOnce    sync.Once
	conns       sync.WaitGroup
}

// Set is the forwards this server serves, and its part in serving the
// recorded ones.
type Set struct {
	opt  Options
	life context.Context
	end  context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	fw      map[key]*forward
	leasing map[key]bool // take-overs in flight
	leased  *sync.Cond   // on mu: a take-over ended
	// blocked holds forwards whose take-over could not listen, told once
	// at Warn, then at Debug until one succeeds.
	blocked map[key]bool
}

// New returns a Set. With a Store, it serves recorded forwards that no
// server serves, and follows unexposes made through other servers.
func New(opt Options) *Set {
	if opt.Bind == "" {
		opt.Bind = "127.0.0.1"
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Every <= 0 {
		opt.Every = time.Second
	}
	life, end := context.WithCancel(context.Background())
	s := &Set{opt: opt, life: life, end: end, fw: map[key]*forward{}, leasing: map[key]bool{}, blocked: map[key]bool{}}
	s.leased = sync.NewCond(&s.mu)
	if opt.Store != nil {
		s.wg.Add(1)
		go s.watch()
	}
	return s
}

// awaitTakeOvers waits, with mu held, until no take-over of a forward
// that match selects is in flight: one decides whether the forward is
// served here, and while it tries, its lock says a server holds it.
func (s *Set) awaitTakeOvers(match func(key) bool) {
	for {
		busy := false
		for k := range s.leasing {
			busy = busy || match(k)
		}
		if !busy {
			return
		}
		s.leased.Wait()
	}
}

func checkPort(what string, p int, zeroOK bool) error {
	if (p == 0 && zeroOK) || (p >= 1 && p <= 65535) {
		return nil
	}
	return fmt.Errorf("%s %d is not a TCP port (1-65535)", what, p)
}

// ErrPrivilegedPort marks a host port below 1024 asked for without
// Options.AllowPrivileged.
var ErrPrivilegedPort = errors.New("host ports below 1024 are not used without --allow-privileged-ports")

// AllowsPrivileged reports whether forwards may listen on host ports
// below 1024.
func (s *Set) AllowsPrivileged() bool { return s.opt.AllowPrivileged }

// Privileged reports whether host port p is one only root may normally
// listen on.
func Privileged(p int) bool { return p > 0 && p < 1024 }

// Expose forwards hostPort on the host to port in sandbox; hostPort 0
// means the same number as port when it is free on the host (and not
// below 1024 unless allowed), else any free port. Exposing a port again
// returns its forward when hostPort is 0 or the same, whichever server
// serves it; existing says so.
func (s *Set) Expose(sandbox string, port, hostPort int) (info Info, existing bool, err error) {
	if err := checkPort("port", port, false); err != nil {
		return Info{}, false, err
	}
	if err := checkPort("host_port", hostPort, true); err != nil {
		return Info{}, false, err
	}
	if Privileged(hostPort) && !s.opt.AllowPrivileged {
		return Info{}, false, fmt.Errorf("host port %d: %w (they belong to the host's own services); give one from 1024 up, or 0 for a free one", hostPort, ErrPrivilegedPort)
	}
	info, err = s.expose(sandbox, port, hostPort, &existing)
	return info, existing, err
}

// expose is Expose once the ports are checked; it sets *existing when it
// returns a forward that was there before.
func (s *Set) expose(sandbox string, port, hostPort int, existing *bool) (Info, error) {
	k := key{sandbox, port}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaitTakeOvers(func(l key) bool { return l == k })
	same := func(have int, bind string) (Info, error) {
		if hostPort == 0 || hostPort == have {
			*existing = true
			return s.infoOf(k, have, bind), nil
		}
		return Info{}, fmt.Errorf("port %d of sandbox %q is already forwarded from host port %d: unexpose it first", port, sandbox, have)
	}
	if f, ok := s.fw[k]; ok {
		if hostPort == 0 || hostPort == f.hostPort {
			*existing = true
			return s.info(f), nil
		}
		return same(f.hostPort, s.opt.Bind)
	}
	if rec, ok := s.record(k); ok {
		if rec.BindAddr() == s.opt.Bind {
			// Recorded, but served by no server now (its server ended):
			// serve it here at once, or say why it cannot be, rather
			// than hand out a URL whose port another process may hold.
			if lock, err := s.tryLock(k); err == nil {
				ln, err := s.listen(rec.HostPort)
				if err != nil {
					lock.Release()
					return Info{}, fmt.Errorf("port %d of sandbox %q is forwarded from host port %d, which this server cannot listen on now (%w); another program may hold it: unexpose the port and expose it again", port, sandbox, rec.HostPort, err)
				}
				f := newForward(k, ln, lock)
				s.start(f)
				if hostPort == 0 || hostPort == rec.HostPort {
					*existing = true
					return s.info(f), nil
				}
			}
		}
		return same(rec.HostPort, rec.BindAddr())
	}
	lock, err := s.tryLock(k)
	if err != nil {
		return Info{}, fmt.Errorf("port %d of sandbox %q is being exposed by another server: %w", port, sandbox, err)
	}
	var ln net.Listener
	if hostPort == 0 && (!Privileged(port) || s.opt.AllowPrivileged) {
		// The same number as in the sandbox when it is free here.
		ln, err = s.listen(port)
	}
	if ln == nil {
		ln, err = s.listen(hostPort)
	}
	if err != nil {
		lock.Release()
		return Info{}, fmt.Errorf("listen on %s:%d: %w", s.opt.Bind, hostPort, err)
	}
	f := newForward(k, ln, lock)
	if s.opt.Store != nil {
		if err := s.opt.Store.PutForward(state.Forward{Sandbox: sandbox, Port: port, HostPort: f.hostPort, Bind: s.opt.Bind, Created: time.Now().UTC()}); err != nil {
			ln.Close()
			lock.Release()
			return Info{}, fmt.Errorf("record the forward: %w", err)
		}
	}
	s.start(f)
	return s.info(f), nil
}

// record returns k's record, if the Set keeps records and has one.
func (s *Set) record(k key) (state.Forward, bool) {
	if s.opt.Store == nil {
		return state.Forward{}, false
	}
	recs, err := s.opt.Store.Forwards()
	if err != nil {
		return state.Forward{}, false
	}
	for _, r := range recs {
		if r.Sandbox == k.sandbox && r.Port == k.port {
			return r, true
		}
	}
	return state.Forward{}, false
}

// start serves f here; s.mu is held.
func (s *Set) start(f *forward) {
	f.started = time.Now()
	s.fw[f.key] = f
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		failed := s.serve(f)
		close(f.served)
		if failed {
			s.forget(f.key)
		}
	}()
}

// infoOf describes k, forwarded from hostPort on the address bind.
func (s *Set) infoOf(k key, hostPort int, bind string) Info {
	host := bind
	if host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	in := Info{Sandbox: k.sandbox, Port: k.port, HostPort: hostPort,
		URL: "http://" + net.JoinHostPort(host, strconv.Itoa(hostPort)), Server: "waiting"}
	if h, held := s.opt.Locks.HeldBy(k.lockKey()); held && h.PID != 0 {
		in.Server = "server pid " + strconv.Itoa(h.PID)
	}
	return in
}

func (s *Set) info(f *forward) Info {
	in := s.infoOf(f.key, f.hostPort, s.opt.Bind)
	in.Connections, in.Active, in.Server = f.connections.Load(), f.active.Load(), "this server"
	if v := f.via.Load(); v != nil {
		in.Via = *v
	}
	return in
}

// serve accepts connections until the forward is stopped; it reports
// whether it ended on its own (the listener failed).
func (s *Set) serve(f *forward) bool {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			select {
			case <-f.done:
				return false
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.opt.Log.Warn("port forward: accept", "sandbox", f.sandbox, "port", f.port, "err", err)
			return true
		}
		f.connections.Add(1)
		f.active.Add(1)
		f.conns.Add(1)
		go func() {
			defer f.conns.Done()
			defer f.active.Add(-1)
			s.carry(f, c)
		}()
	}
}

// carry joins one host connection to a stream into the sandbox.
func (s *Set) carry(f *forward, c net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	go func() {
		select {
		case <-f.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	sc, err := s.opt.Dial(ctx, f.sandbox, f.port)
	cancel()
	if err != nil {
		s.opt.Log.Info("port forward: reach the sandbox", "sandbox", f.sandbox, "port", f.port, "err", err)
		c.Close()
		return
	}
	if v, ok := sc.(interface{ Via() string }); ok {
		via := v.Via()
		f.via.Store(&via)
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-f.done: // unexposed: end open connections too
			c.Close()
			sc.Close()
		case <-stop:
		}
	}()
	agent.Splice(c, sc)
	close(stop)
}

// Unexpose ends the forward of port in sandbox, whichever server serves
// it, and its open connections.
func (s *Set) Unexpose(sandbox string, port int) (Info, error) {
	k := key{sandbox, port}
	s.mu.Lock()
	f := s.fw[k]
	var info Info
	if f != nil {
		info = s.info(f)
	}
	rec, recorded := s.record(k)
	if f == nil && recorded {
		info = s.infoOf(k, rec.HostPort, rec.BindAddr())
	}
	s.mu.Unlock()
	if f == nil && !recorded {
		return Info{}, fmt.Errorf("%w: port %d of sandbox %q is not forwarded", ErrNotForwarded, port, sandbox)
	}
	if s.opt.Store != nil {
		if _, err := s.opt.Store.DeleteForward(sandbox, port); err != nil {
			return info, err
		}
	}
	s.forget(k)
	return info, nil
}

// forget stops serving k here, if it is served here.
func (s *Set) forget(k key) {
	s.mu.Lock()
	f := s.fw[k]
	delete(s.fw, k)
	s.mu.Unlock()
	if f != nil {
		s.stop(f)
	}
}

func (s *Set) stop(f *forward) {
	f.stopOnce.Do(func() {
		close(f.done)
		f.ln.Close()
		<-f.served // no connection is added after this
		f.conns.Wait()
		if f.lock != nil {
			f.lock.Release()
		}
	})
}

// List returns the forwards of sandbox ("" for all), by sandbox and port.
func (s *Set) List(sandbox string) []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaitTakeOvers(func(k key) bool { return sandbox == "" || k.sandbox == sandbox })
	out := []Info{}
	seen := map[key]bool{}
	for _, f := range s.fw {
		if sandbox == "" || f.sandbox == sandbox {
			out = append(out, s.info(f))
			seen[f.key] = true
		}
	}
	if s.opt.Store != nil {
		recs, _ := s.opt.Store.Forwards()
		for _, r := range recs {
			k := key{r.Sandbox, r.Port}
			if !seen[k] && (sandbox == "" || r.Sandbox == sandbox) {
				out = append(out, s.infoOf(k, r.HostPort, r.BindAddr()))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Sandbox != out[j].Sandbox {
			return out[i].Sandbox < out[j].Sandbox
		}
		return out[i].Port < out[j].Port
	})
	return out
}

// Drop ends every forward of sandbox (it was destroyed), here and in its
// records.
func (s *Set) Drop(sandbox string) {
	var keys []key
	s.mu.Lock()
	for k := range s.fw {
		if k.sandbox == sandbox {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	if s.opt.Store != nil {
		if recs, err := s.opt.Store.Forwards(); err == nil {
			for _, r := range recs {
				if r.Sandbox == sandbox {
					_, _ = s.opt.Store.DeleteForward(r.Sandbox, r.Port)
				}
			}
		}
	}
	for _, k := range keys {
		s.forget(k)
	}
}

// watch keeps this Set in line with the records until Close: once every
// Every it stops serving the forwards whose record is gone (unexposed or
// dropped through another server) and takes over, under their lease, the
// recorded forwards that no server serves (their server ended).
func (s *Set) watch() {
	defer s.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-t.C:
		}
		s.sync()
		t.Reset(s.opt.Every)
	}
}

func (s *Set) sync() {
	readAt := time.Now()
	recs, err := s.opt.Store.Forwards()
	if err != nil {
		s.opt.Log.Debug("port forward: read the records", "err", err)
		return
	}
	recorded := make(map[key]bool, len(recs))
	mine := make(map[key]bool, len(recs))
	for _, r := range recs {
		recorded[key{r.Sandbox, r.Port}] = true
		// A forward is served on the address it was exposed on, never
		// moved: a server bound elsewhere (0.0.0.0, say) leaves it to one
		// bound as it was.
		mine[key{r.Sandbox, r.Port}] = r.BindAddr() == s.opt.Bind
	}
	var gone, free []key
	s.mu.Lock()
	for k, f := range s.fw {
		// A forward started after the read is not in it yet.
		if !recorded[k] && f.started.Before(readAt) {
			gone = append(gone, k)
		}
	}
	for k := range s.blocked {
		if !recorded[k] {
			delete(s.blocked, k) // unexposed
		}
	}
	for k := range recorded {
		if mine[k] && !s.opt.NoTakeOver && s.fw[k] == nil && !s.leasing[k] && s.life.Err() == nil {
			s.leasing[k] = true
			free = append(free, k)
		}
	}
	s.mu.Unlock()
	for _, k := range gone {
		s.forget(k)
	}
	for _, k := range free {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.leasing, k)
				s.leased.Broadcast()
				s.mu.Unlock()
			}()
			lock, err := s.tryLock(k)
			if err != nil {
				return // served elsewhere: looked at again next time
			}
			s.takeOver(k, lock)
		}()
	}
}

// takeOver serves a recorded forward here; the caller holds its lock,
// which passes to the forward.
func (s *Set) takeOver(k key, lock *locks.Held) {
	rec, ok := s.record(k)
	if !ok || rec.BindAddr() != s.opt.Bind {
		lock.Release() // unexposed (or exposed again elsewhere) meanwhile
		return
	}
	ln, err := s.listen(rec.HostPort)
	if err != nil {
		s.mu.Lock()
		told := s.blocked[k]
		s.blocked[k] = true
		s.mu.Unlock()
		log := s.opt.Log.Warn
		if told {
			log = s.opt.Log.Debug
		}
		log("port forward: take over", "sandbox", k.sandbox, "port", k.port, "host_port", rec.HostPort, "err", err)
		lock.Release()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blocked, k)
	if s.life.Err() != nil || s.fw[k] != nil {
		ln.Close()
		lock.Release()
		return
	}
	s.opt.Log.Info("port forward taken over", "sandbox", k.sandbox, "port", k.port, "host_port", rec.HostPort)
	s.start(newForward(k, ln, lock))
}

// Close stops serving here; the records stay for the next server.
func (s *Set) Close() {
	s.end()
	s.mu.Lock()
	all := make([]*forward, 0, len(s.fw))
	for k, f := range s.fw {
		all = append(all, f)
		delete(s.fw, k)
	}
	s.mu.Unlock()
	for _, f := range all {
		s.stop(f)
	}
	s.wg.Wait()
}
