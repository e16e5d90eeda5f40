package portfwd

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A forward outlives its server as a record, and while no server listens
// its host port is free: another program may take it. expose then fails
// and says why, and list_ports names no server, rather than hand out a URL
// that program answers.
func TestExposeOfAForwardWhosePortWasTakenFails(t *testing.T) {
	opts := sharedOptions(t)
	a := New(opts)
	info, _, err := a.Expose("box", 8000, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.Close() // the server ends (client restarted); the record stays
	squatter, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(info.HostPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer squatter.Close()
	b := New(opts)
	defer b.Close()
	time.Sleep(200 * time.Millisecond) // several take-over attempts
	again, _, err := b.Expose("box", 8000, 0)
	if err == nil || !strings.Contains(err.Error(), "another program may hold it") {
		t.Fatalf("expose: %v (%s, server %q), with another program on the port", err, again.URL, again.Server)
	}
	if l := b.List(""); len(l) != 1 || l[0].Server != "waiting" {
		t.Fatalf("list: %+v", l)
	}
	squatter.Close()
	if again, _, err = b.Expose("box", 8000, 0); err != nil || again.Server != "this server" || again.URL != info.URL {
		t.Fatalf("once the port is free: %+v %v", again, err)
	}
}
