// Package portfwd forwards TCP ports on the host to ports inside
// sandboxes. Each forward is a listener on the host (127.0.0.1 unless
// configured otherwise); each connection it accepts is one stream to
// 127.0.0.1:<port> inside the sandbox, opened by a Dialer (the in-sandbox
// agent in production), so no process starts per connection.
//
// Forwards live in this server process: they end with it (recording them
// so that the next server serves them again is left for later).
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
)

// Dialer connects to port inside sandbox.
type Dialer func(ctx context.Context, sandbox string, port int) (net.Conn, error)

// Info describes one forward.
type Info struct {
	Sandbox  string `json:"sandbox"`
	Port     int    `json:"port"`
	HostPort int    `json:"host_port"`
	URL      string `json:"url"`
	// Connections counts the connections accepted; Active those open now.
	Connections int64 `json:"connections"`
	Active      int64 `json:"active"`
	// Via says how connections reach the sandbox.
	Via string `json:"via"`
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

type forward struct {
	key
	ln          net.Listener
	hostPort    int
	connections atomic.Int64
	active      atomic.Int64
	done        chan struct{}
	conns       sync.WaitGroup
}

// Set is this server's forwards.
type Set struct {
	dial Dialer
	bind string
	log  *slog.Logger

	mu sync.Mutex
	fw map[key]*forward
}

// New returns an empty Set whose listeners bind to address bind
// ("127.0.0.1" when empty).
func New(dial Dialer, bind string, log *slog.Logger) *Set {
	if bind == "" {
		bind = "127.0.0.1"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Set{dial: dial, bind: bind, log: log, fw: map[key]*forward{}}
}

func checkPort(what string, p int, zeroOK bool) error {
	if (p == 0 && zeroOK) || (p >= 1 && p <= 65535) {
		return nil
	}
	return fmt.Errorf("%s %d is not a TCP port (1-65535)", what, p)
}

// Expose forwards hostPort on the host to port in sandbox; hostPort 0
// means the same number as port when it is free on the host, else any
// free port. Exposing a port again returns its forward when hostPort is 0
// or the same.
func (s *Set) Expose(sandbox string, port, hostPort int) (Info, error) {
	if err := checkPort("port", port, false); err != nil {
		return Info{}, err
	}
	if err := checkPort("host_port", hostPort, true); err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{sandbox, port}
	if f, ok := s.fw[k]; ok {
		if hostPort == 0 || hostPort == f.hostPort {
			return s.info(f), nil
		}
		return Info{}, fmt.Errorf("port %d of sandbox %q is already forwarded from host port %d: unexpose it first", port, sandbox, f.hostPort)
	}
	var ln net.Listener
	var err error
	if hostPort == 0 {
		// The same number as in the sandbox when it is free here.
		ln, err = net.Listen("tcp", net.JoinHostPort(s.bind, strconv.Itoa(port)))
	}
	if ln == nil {
		ln, err = net.Listen("tcp", net.JoinHostPort(s.bind, strconv.Itoa(hostPort)))
	}
	if err != nil {
		return Info{}, fmt.Errorf("listen on %s:%d: %w", s.bind, hostPort, err)
	}
	f := &forward{key: k, ln: ln, hostPort: ln.Addr().(*net.TCPAddr).Port, done: make(chan struct{})}
	s.fw[k] = f
	go s.serve(f)
	return s.info(f), nil
}

func (s *Set) info(f *forward) Info {
	host := s.bind
	if host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return Info{Sandbox: f.sandbox, Port: f.port, HostPort: f.hostPort,
		URL:         "http://" + net.JoinHostPort(host, strconv.Itoa(f.hostPort)),
		Connections: f.connections.Load(), Active: f.active.Load(), Via: "agent"}
}

// serve accepts connections until the forward is closed.
func (s *Set) serve(f *forward) {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			select {
			case <-f.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Warn("port forward: accept", "sandbox", f.sandbox, "port", f.port, "err", err)
			return
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
	sc, err := s.dial(ctx, f.sandbox, f.port)
	cancel()
	if err != nil {
		s.log.Info("port forward: reach the sandbox", "sandbox", f.sandbox, "port", f.port, "err", err)
		c.Close()
		return
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

// Unexpose ends the forward of port in sandbox and its open connections.
func (s *Set) Unexpose(sandbox string, port int) (Info, error) {
	s.mu.Lock()
	f, ok := s.fw[key{sandbox, port}]
	if ok {
		delete(s.fw, f.key)
	}
	s.mu.Unlock()
	if !ok {
		return Info{}, fmt.Errorf("%w: port %d of sandbox %q is not forwarded", ErrNotForwarded, port, sandbox)
	}
	info := s.info(f)
	s.stop(f)
	return info, nil
}

func (s *Set) stop(f *forward) {
	close(f.done)
	f.ln.Close()
	f.conns.Wait()
}

// List returns the forwards of sandbox ("" for all), by sandbox and port.
func (s *Set) List(sandbox string) []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Info{}
	for _, f := range s.fw {
		if sandbox == "" || f.sandbox == sandbox {
			out = append(out, s.info(f))
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

// Drop ends every forward of sandbox (it was destroyed).
func (s *Set) Drop(sandbox string) {
	s.mu.Lock()
	var gone []*forward
	for k, f := range s.fw {
		if k.sandbox == sandbox {
			gone = append(gone, f)
			delete(s.fw, k)
		}
	}
	s.mu.Unlock()
	for _, f := range gone {
		s.stop(f)
	}
}

// Close ends every forward.
func (s *Set) Close() {
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
}
