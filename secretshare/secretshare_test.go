package secretshare

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// memHolder keeps secrets in a map, as a server does.
type memHolder struct {
	mu sync.Mutex
	m  map[string]Secret // sandbox/key
}

func (h *memHolder) Put(s Secret) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]Secret{}
	}
	h.m[s.Sandbox+"/"+s.Key] = s
	return nil
}

func (h *memHolder) Drop(sandbox, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.m {
		if k == sandbox+"/"+key || (key == "" && strings.HasPrefix(k, sandbox+"/")) {
			delete(h.m, k)
		}
	}
}

func (h *memHolder) All() []Secret {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Secret
	for _, s := range h.m {
		out = append(out, s)
	}
	return out
}

func (h *memHolder) keys() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ks []string
	for k, s := range h.m {
		ks = append(ks, k+"="+s.Value)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// TestServersShareSecrets: a set and a drop through one server reach the
// others, in order; a server that starts later takes what they hold; the
// socket of a server that is gone is removed; the directory and the
// sockets are the user's alone.
func TestServersShareSecrets(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "peers")
	var ha, hb, hc memHolder
	a, err := Start(dir, &ha, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Start(dir, &hb, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// A server that died: a socket nobody listens on.
	dead := filepath.Join(dir, "1-dead.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dead, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()

	s := Secret{Sandbox: "box", Key: "TOKEN", Placeholder: "SANDBOX_SECRET_TOKEN_1", Value: "v1", Hosts: []string{"api.test"}}
	ha.Put(s)
	a.Put(s)
	s.Value, s.Placeholder = "v2", "SANDBOX_SECRET_TOKEN_2"
	ha.Put(s)
	a.Drop("box", "TOKEN")
	a.Put(s) // a drop then a set: the set stays
	if got := hb.keys(); got != "box/TOKEN=v2" {
		t.Fatalf("the other server holds %q", got)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead server's socket: %v", err)
	}
	c, err := Start(dir, &hc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Pull(context.Background())
	if got := hc.keys(); got != "box/TOKEN=v2" {
		t.Fatalf("a server started later took %q", got)
	}
	b.Drop("box", "")
	if ha.keys() != "" || hc.keys() != "" {
		t.Fatalf("after a drop of all: %q %q", ha.keys(), hc.keys())
	}
	for _, p := range []string{dir, a.path} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Fatalf("%s is open to others: %v %v", p, fi.Mode(), err)
		}
	}
	// A message too long, or not one, is answered with an error and
	// changes nothing.
	conn, err := net.Dial("unix", b.path)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte(strings.Repeat("x", maxLine+10) + "\n"))
	conn.Close()
	a.Close()
	if _, err := os.Stat(a.path); !os.IsNotExist(err) {
		t.Fatalf("a closed server's socket is left: %v", err)
	}
}
