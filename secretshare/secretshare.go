// Package secretshare carries the secrets swapped in at egress between
// the servers that share one state directory, so that whichever server's
// agent holds a sandbox's proxy has the values the others were given.
//
// A value lives in the memory of the servers only: each server listens on
// a unix socket of its own in a directory private to the user (0700), and
// a set, a drop, or a newcomer's request for all travels over it, never
// through a file. The directory's mode is the access control: nobody else
// can reach a socket in it.
package secretshare

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Secret is one secret of one sandbox, as it travels.
type Secret struct {
	Sandbox     string   `json:"sandbox"`
	Key         string   `json:"key"`
	Placeholder string   `json:"placeholder"`
	Value       string   `json:"value"`
	Hosts       []string `json:"hosts"`
}

// Holder is the server's side: what it is told, and what it holds.
type Holder interface {
	// Put keeps s, which another server was given.
	Put(s Secret) error
	// Drop forgets key's secret in sandbox ("" key: all of sandbox's).
	Drop(sandbox, key string)
	// All is every secret the server holds.
	All() []Secret
}

// msg is one request on a socket: "put" (Secret), "drop" (Sandbox, Key)
// or "all". The answer is "ok" or an error line; to "all", the secrets,
// a line each, then "ok".
type msg struct {
	Op      string  `json:"op"`
	Secret  *Secret `json:"secret,omitempty"`
	Sandbox string  `json:"sandbox,omitempty"`
	Key     string  `json:"key,omitempty"`
}

// Bounds.
const (
	maxLine     = 1 << 20 // one message
	peerTimeout = 2 * time.Second
)

// Node is this server's end.
type Node struct {
	dir, path string
	h         Holder
	log       *slog.Logger
	ln        *net.UnixListener
	wg        sync.WaitGroup
	// mu orders this server's messages: each is taken by every peer
	// before the next goes.
	mu sync.Mutex
}

// Start listens in dir (made private to the user) for the other servers,
// and removes the sockets of servers that are gone.
func Start(dir string, h Holder, log *slog.Logger) (*Node, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secret sharing: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secret sharing: %w", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	// Short: a socket's path is limited to about 100 bytes.
	path := filepath.Join(dir, strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(b[:])+".sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("secret sharing: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("secret sharing: %w", err)
	}
	n := &Node{dir: dir, path: path, h: h, log: log, ln: ln}
	n.wg.Add(1)
	go n.accept()
	return n, nil
}

// Close stops listening and removes the socket.
func (n *Node) Close() {
	n.ln.Close()
	n.wg.Wait()
}

func (n *Node) accept() {
	defer n.wg.Done()
	for {
		c, err := n.ln.AcceptUnix()
		if err != nil {
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.serve(c)
		}()
	}
}

// serve answers one request.
func (n *Node) serve(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(peerTimeout))
	line, err := readLine(bufio.NewReaderSize(c, 4096))
	if err != nil {
		return
	}
	var m msg
	if err := json.Unmarshal(line, &m); err != nil {
		fmt.Fprintf(c, "error: %s\n", "not a message")
		return
	}
	w := bufio.NewWriter(c)
	switch m.Op {
	case "put":
		if m.Secret == nil {
			fmt.Fprintln(w, "error: no secret")
			break
		}
		if err := n.h.Put(*m.Secret); err != nil {
			fmt.Fprintf(w, "error: %s\n", oneLine(err.Error()))
			break
		}
		fmt.Fprintln(w, "ok")
	case "drop":
		n.h.Drop(m.Sandbox, m.Key)
		fmt.Fprintln(w, "ok")
	case "all":
		enc := json.NewEncoder(w)
		for _, s := range n.h.All() {
			_ = enc.Encode(s)
		}
		fmt.Fprintln(w, "ok")
	default:
		fmt.Fprintln(w, "error: unknown op")
	}
	_ = w.Flush()
}

// Put tells every other server of s, each before the next message.
func (n *Node) Put(s Secret) { n.send(msg{Op: "put", Secret: &s}) }

// Drop tells every other server to forget key's secret in sandbox ("":
// all of them).
func (n *Node) Drop(sandbox, key string) { n.send(msg{Op: "drop", Sandbox: sandbox, Key: key}) }

// send gives m to each peer and waits for its answer.
func (n *Node) send(m msg) {
	n.mu.Lock()
	defer n.mu.Unlock()
	data, _ := json.Marshal(m)
	data = append(data, '\n')
	for _, p := range n.peers() {
		c, err := dial(p)
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(peerTimeout))
		if _, err := c.Write(data); err == nil {
			line, err := readLine(bufio.NewReader(c))
			if err != nil || string(line) != "ok" {
				n.log.Debug("secret sharing: a server did not take a message", "op", m.Op, "answer", oneLine(string(line)), "err", err)
			}
		}
		c.Close()
	}
}

// Pull asks every other server for the secrets it holds and puts them.
func (n *Node) Pull(ctx context.Context) {
	for _, p := range n.peers() {
		if ctx.Err() != nil {
			return
		}
		c, err := dial(p)
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(peerTimeout))
		if _, err := c.Write([]byte(`{"op":"all"}` + "\n")); err == nil {
			br := bufio.NewReaderSize(c, 4096)
			for {
				line, err := readLine(br)
				if err != nil || string(line) == "ok" {
					break
				}
				var s Secret
				if json.Unmarshal(line, &s) != nil {
					break
				}
				if err := n.h.Put(s); err != nil {
					n.log.Debug("secret sharing: a secret another server holds was not taken", "sandbox", s.Sandbox, "key", s.Key, "err", err)
				}
			}
		}
		c.Close()
	}
}

// peers are the sockets of the other servers; those nobody listens on
// any more (a server that died) are removed.
func (n *Node) peers() []string {
	ents, err := os.ReadDir(n.dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(n.dir, e.Name())
		if p == n.path || !strings.HasSuffix(e.Name(), ".sock") || e.Type()&os.ModeSocket == 0 {
			continue
		}
		out = append(out, p)
	}
	return out
}

// dial reaches the server at socket p, removing the socket when nobody
// listens there.
func dial(p string) (*net.UnixConn, error) {
	c, err := net.DialTimeout("unix", p, peerTimeout)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || isRefused(err) {
			_ = os.Remove(p)
		}
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// readLine reads a line of at most maxLine bytes, without its newline.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, isPrefix, err := br.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > maxLine {
			return nil, errors.New("a line too long")
		}
		if !isPrefix {
			return line, nil
		}
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

// isRefused reports whether err says nobody listens on the socket.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
