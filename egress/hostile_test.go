package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// tcpProxy serves h on a loopback TCP listener (a real socket: half-close
// works, unlike net.Pipe's) and returns its address.
func tcpProxy(t *testing.T, h Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go h.Serve(ctx, c)
		}
	}()
	return ln.Addr().String()
}

// An upstream may send interim answers (100 Continue, 103 Early Hints)
// before its final one; readFinal writes them to the sandbox as they
// came, before (and without) scrubResponse. An upstream that reflects the
// request's Authorization in one puts the secret's value in the sandbox.
func TestInterimAnswerCarriesSecretIntoSandbox(t *testing.T) {
	h, sec := secretHandler(t, "ir-s3cr3t-0123456789abcdef", "api.test")
	port := rawUpstream(t, func(c net.Conn, req *http.Request) {
		fmt.Fprintf(c, "HTTP/1.1 103 Early Hints\r\nLink: <%s>; rel=preload\r\n\r\n", req.Header.Get("Authorization"))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	c, err := net.Dial("tcp", tcpProxy(t, h))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", port, sec.Placeholder)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	all, _ := io.ReadAll(c)
	if strings.Contains(string(all), sec.Value) {
		t.Fatalf("the secret's value reached the sandbox in an interim answer:\n%s", all)
	}
}

// Through an upgraded connection, a client's half-close reaches the
// upstream and the upstream's answer to it still reaches the client.
func TestUpgradeHalfClose(t *testing.T) {
	h, _ := secretHandler(t, "ir-s3cr3t-0123456789abcdef", "api.test")
	port := rawUpstream(t, func(c net.Conn, req *http.Request) {
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
		b, _ := io.ReadAll(c) // to the client's half-close
		fmt.Fprintf(c, "got %q", b)
	})
	c, err := net.Dial("tcp", tcpProxy(t, h))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\nearly", port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	io.WriteString(c, "+late")
	c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != `got "early+late"` {
		t.Fatalf("after the half-close: %q %v", rest, err)
	}
}

// A secret placed in a header that Connection names is dropped as a hop
// header before the swap: the upgrade goes through without it, and the
// upstream never sees the value.
func TestUpgradeSecretInConnectionNamedHeader(t *testing.T) {
	h, sec := secretHandler(t, "ir-s3cr3t-0123456789abcdef", "api.test")
	seen := make(chan string, 1)
	port := rawUpstream(t, func(c net.Conn, req *http.Request) {
		var b strings.Builder
		req.Header.Write(&b)
		seen <- b.String()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	})
	c, err := net.Dial("tcp", tcpProxy(t, h))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://api.test:%d/ HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade, X-Tok\r\nX-Tok: %s\r\nUpgrade: websocket %s\r\n\r\n", port, sec.Placeholder, sec.Placeholder)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := <-seen
	if strings.Contains(got, sec.Value) {
		t.Fatalf("upstream saw the value: %s", got)
	}
	t.Logf("status %d; upstream saw:\n%s", resp.StatusCode, got)
}
