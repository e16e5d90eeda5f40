package portfwd

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// A forward is served on the address it was exposed on: when its server
// ends, one bound to every interface (another client's --ports-bind
// 0.0.0.0) leaves it, and one bound as it was takes it over.
func TestTakeOverKeepsTheBindAddress(t *testing.T) {
	opts := sharedOptions(t)
	a := New(opts) // 127.0.0.1
	info, _, err := a.Expose("box", 8000, 0)
	if err != nil {
		t.Fatal(err)
	}
	wideOpts := opts
	wideOpts.Bind = "0.0.0.0"
	wide := New(wideOpts)
	defer wide.Close()
	a.Close()
	time.Sleep(time.Second) // some fifty of wide's looks at the records
	if l := wide.List(""); len(l) != 1 || l[0].Server == "this server" || l[0].URL != info.URL {
		t.Fatalf("the server bound to 0.0.0.0 lists %+v", l)
	}
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.3", strconv.Itoa(info.HostPort))); err == nil {
		c.Close()
		t.Fatalf("the forward exposed on 127.0.0.1 answers on another address (port %d)", info.HostPort)
	}
	local := New(opts)
	defer local.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if l := local.List(""); len(l) == 1 && l[0].Server == "this server" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server bound as the forward was did not take it over")
		}
	}
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(info.HostPort)))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
