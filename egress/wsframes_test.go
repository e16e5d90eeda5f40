package egress

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// wsFrame is one frame as read.
type wsFrame struct {
	fin     bool
	op      byte
	payload []byte
}

// readWSFrame reads one frame, unmasking it if it is masked.
func readWSFrame(r io.Reader) (wsFrame, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return wsFrame{}, err
	}
	f := wsFrame{fin: h[0]&0x80 != 0, op: h[0] & 0x0f}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return f, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return f, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	var key [4]byte
	masked := h[1]&0x80 != 0
	if masked {
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return f, err
		}
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.payload); err != nil {
		return f, err
	}
	if masked {
		for i := range f.payload {
			f.payload[i] ^= key[i%4]
		}
	}
	return f, nil
}

// clientFrame is a masked frame, as a client sends.
func clientFrame(op byte, p []byte) []byte {
	key := []byte{1, 2, 3, 4}
	b := appendFrame(nil, true, op, nil)
	b[1] |= 0x80
	if len(p) > 125 {
		panic("short frames only")
	}
	b[1] |= byte(len(p))
	b = append(b, key...)
	for i, c := range p {
		b = append(b, c^key[i%4])
	}
	return b
}

// wsUpstream switches to a WebSocket and sends, in frames, what it got in
// the handshake's Authorization: a whole text message, one cut across
// two frames with a ping between them, then an echo of the client's
// first frame, and a close whose reason holds it. With extension set,
// it switches on that extension whatever was asked.
func wsUpstream(extension string, got chan<- string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		got <- auth + " ext=" + r.Header.Get("Sec-WebSocket-Extensions")
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Auth: %s\r\n", auth)
		if extension != "" {
			fmt.Fprintf(brw, "Sec-WebSocket-Extensions: %s\r\n", extension)
		}
		brw.WriteString("\r\n")
		half := len(auth) / 2
		var out []byte
		out = appendFrame(out, true, 0x1, []byte("whole "+auth))
		out = appendFrame(out, false, 0x1, []byte("cut "+auth[:half]))
		out = appendFrame(out, true, 0x9, []byte(auth))
		out = appendFrame(out, true, 0x0, []byte(auth[half:]+" end"))
		brw.Write(out)
		brw.Flush()
		f, err := readWSFrame(brw)
		if err != nil {
			return
		}
		brw.Write(appendFrame(nil, true, 0x1, append([]byte("echo "), f.payload...)))
		brw.Write(appendFrame(nil, true, 0x8, append([]byte{0x03, 0xe8}, "bye "+auth...)))
		brw.Flush()
		time.Sleep(100 * time.Millisecond)
	})
}

// TestWebSocketWithSecret: a WebSocket whose handshake carries a secret
// goes through, over plain HTTP and intercepted HTTPS: the host gets the
// value and no extension request; the sandbox's client gets the value
// nowhere (101 headers, whole messages, a message cut across frames
// with a ping between, the ping, the close's reason), the placeholder in
// its place; its own frames reach the host as sent. A host that
// switches on an extension anyway gets the client a 502.
func TestWebSocketWithSecret(t *testing.T) {
	got := make(chan string, 10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Server{Handler: wsUpstream("", got)}
	go plain.Serve(ln)
	t.Cleanup(func() { plain.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	deflating := httptest.NewServer(wsUpstream("permessage-deflate", got))
	t.Cleanup(deflating.Close)
	up := httptest.NewTLSServer(wsUpstream("", got))
	t.Cleanup(up.Close)
	upAddr := netip.MustParseAddrPort(up.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	h, caPool, sec := interceptFixture(t, roots, "ws-s3cr3t-abcdefghijklmnop", "api.test", "example.com")
	open := proxyFixture(t, h)
	handshake := func(target, host string) string {
		return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Extensions: permessage-deflate\r\nAuthorization: Bearer %s\r\n\r\n", target, host, sec.Placeholder)
	}
	want := "Bearer " + sec.Placeholder
	// talk does the handshake on c and returns what the client got.
	talk := func(c io.ReadWriter, req string) {
		t.Helper()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Auth") != want {
			t.Fatalf("the handshake's answer: %d %v", resp.StatusCode, resp.Header)
		}
		if a := <-got; a != "Bearer "+sec.Value+" ext=" {
			t.Fatalf("the host got %q", a)
		}
		var frames []wsFrame
		var all bytes.Buffer
		sent := false
		for {
			f, err := readWSFrame(br)
			if err != nil {
				t.Fatalf("after %d frames: %v", len(frames), err)
			}
			frames = append(frames, f)
			all.Write(f.payload)
			if f.op == 0x9 && !sent { // after the ping, the client speaks
				if _, err := c.Write(clientFrame(0x1, []byte("from-client "+sec.Placeholder))); err != nil {
					t.Fatal(err)
				}
				sent = true
			}
			if f.op == 0x8 {
				break
			}
		}
		if bytes.Contains(all.Bytes(), []byte(sec.Value)) {
			t.Fatalf("the value reached the client: %q", all.String())
		}
		// Reassemble the data messages; keep control frames apart.
		var msgs, controls []string
		var cur []byte
		for _, f := range frames {
			switch {
			case f.op >= 0x8:
				controls = append(controls, fmt.Sprintf("%d:%s", f.op, f.payload))
			default:
				if f.op != 0 && cur != nil {
					t.Fatalf("a new message inside another: %+v", frames)
				}
				cur = append(cur, f.payload...)
				if f.fin {
					msgs = append(msgs, string(cur))
					cur = nil
				}
			}
		}
		wantMsgs := []string{"whole " + want, "cut " + want + " end", "echo from-client " + sec.Placeholder}
		if strings.Join(msgs, "|") != strings.Join(wantMsgs, "|") {
			t.Fatalf("messages %q, want %q", msgs, wantMsgs)
		}
		if len(controls) != 2 || controls[0] != "9:"+want || controls[1] != "8:\x03\xe8bye "+want {
			t.Fatalf("control frames %q", controls)
		}
	}

	// Plain HTTP.
	talk(open(), handshake(fmt.Sprintf("http://api.test:%d/ws", port), "api.test"))

	// Intercepted HTTPS.
	tc := connectTLS(t, open, upAddr.Port(), caPool, "http/1.1")
	talk(tc, handshake("/ws", "example.com"))

	// A host that switches on an extension anyway.
	dport := netip.MustParseAddrPort(deflating.Listener.Addr().String()).Port()
	c := open()
	io.WriteString(c, handshake(fmt.Sprintf("http://api.test:%d/ws", dport), "api.test"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	<-got
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "extension") || strings.Contains(string(body), sec.Value) {
		t.Fatalf("a host that compresses anyway: %d %q", resp.StatusCode, body)
	}
}

// TestWebSocketScrubRefusesBrokenFrames: frames from the host that break
// the protocol (masked, with extension bits, a continuation outside a
// message, a control frame too long or cut) end the scrub with an error,
// and a value is replaced wherever a read cuts it.
func TestWebSocketScrubRefusesBrokenFrames(t *testing.T) {
	sec := Secret{Placeholder: "PH_0123456789", Value: "VALUE-xyz"}
	for name, in := range map[string][]byte{
		"masked":            func() []byte { b := appendFrame(nil, true, 1, []byte("x")); b[1] |= 0x80; return append(b, 0, 0, 0, 0) }(),
		"extension bits":    func() []byte { b := appendFrame(nil, true, 1, []byte("x")); b[0] |= 0x40; return b }(),
		"lone continuation": appendFrame(nil, true, 0, []byte("x")),
		"long control":      appendFrame(nil, true, 9, bytes.Repeat([]byte("x"), 126)),
		"cut control":       appendFrame(nil, false, 9, []byte("x")),
		"two messages":      append(appendFrame(nil, false, 1, []byte("x")), appendFrame(nil, true, 2, []byte("y"))...),
	} {
		if err := wsScrub(io.Discard, bytes.NewReader(in), []Secret{sec}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// A 100 KB binary message with values, one at a frame's edge, read a
	// byte at a time.
	payload := bytes.Repeat([]byte("ab"), 50000)
	copy(payload[1000:], sec.Value)
	copy(payload[len(payload)-4:], sec.Value[:4])
	in := appendFrame(nil, false, 2, payload)
	in = appendFrame(in, true, 0, []byte(sec.Value[4:]+"tail"))
	var out bytes.Buffer
	if err := wsScrub(&out, &oneByte{r: bytes.NewReader(in)}, []Secret{sec}); err != nil {
		t.Fatal(err)
	}
	var msg []byte
	for {
		f, err := readWSFrame(&out)
		if err != nil {
			break
		}
		msg = append(msg, f.payload...)
	}
	want := strings.ReplaceAll(string(payload[:len(payload)-4])+sec.Value+"tail", sec.Value, sec.Placeholder)
	if string(msg) != want {
		t.Fatalf("the message came out %d bytes, want %d", len(msg), len(want))
	}
}

// oneByte reads a byte at a time.
type oneByte struct{ r io.Reader }

func (o *oneByte) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

// TestWebSocketRefusalQuotesNothing: a host that echoes a request header
// into its 101's Sec-WebSocket-Extensions gets the client a 502 that
// does not quote it (it could be the value).
func TestWebSocketRefusalQuotesNothing(t *testing.T) {
	const v = "ws-s3cr3t-abcdefghijklmnop"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, _ := w.(http.Hijacker).Hijack()
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Extensions: x\r\nSec-WebSocket-Extensions: %s\r\n\r\n", r.Header.Get("X-Echo"))
		brw.Flush()
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	h, sec := secretHandler(t, v, "api.test")
	c := proxyFixture(t, h)()
	fmt.Fprintf(c, "GET http://api.test:%d/ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Echo: %s\r\n\r\n", port, sec.Placeholder)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || bytes.Contains(body, []byte(v)) {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}
