//go:build linux

package sandbox

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func openFDCount(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// A hostile sandbox connects to its channel over and over and sends
// nothing. Each connection waits handWait (10s) for a handed descriptor
// before serve (and its maxEgressConns cap) is reached: nothing bounds how
// many the server holds meanwhile, so one sandbox can take every
// descriptor the server process has (RLIMIT_NOFILE is the server's, for
// all its sandboxes and its own files).
func TestChannelBoundsPendingHandoffs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "0123456789abcdef")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{}, 1)
	cl, _, err := listenChannel(dir, func(c net.Conn) { c.Close(); served <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	path := filepath.Join(dir, cl.name)
	const n = maxEgressConns + 200
	before := openFDCount(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond)
	held := openFDCount(t) - before - n // the server's ends
	if held > maxEgressConns {
		t.Fatalf("the server holds %d channel connections that sent nothing (cap %d)", held, maxEgressConns)
	}
}
