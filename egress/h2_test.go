package egress

import (
	"bufio"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// h2Upstream is an HTTPS test server (HTTP/2 when h2) that echoes the
// Authorization it got in a header, the body and a trailer, and on
// /duplex echoes each line of the request's body as it comes. It
// reports the protocol each request came over.
func h2Upstream(t *testing.T, h2 bool, encoding string) (*httptest.Server, *sync.Map) {
	t.Helper()
	protos := &sync.Map{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		auth := r.Header.Get("Authorization")
		if r.URL.Path == "/duplex" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			sc := bufio.NewScanner(r.Body)
			for sc.Scan() {
				fmt.Fprintf(w, "%s %s\n", sc.Text(), auth)
				w.(http.Flusher).Flush()
			}
			return
		}
		if encoding != "" {
			w.Header().Set("Grpc-Encoding", encoding)
		}
		w.Header().Set("X-Seen", auth)
		w.Header().Set("Trailer", "X-Echo")
		fmt.Fprintf(w, "seen=%s", auth)
		w.Header().Set("X-Echo", auth)
	}))
	srv.EnableHTTP2 = h2
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, protos
}

// h2Client opens an intercepted CONNECT to example.com:port through the
// proxy h, speaks TLS under trust asking for HTTP/2, and returns an
// HTTP/2 client connection on it.
func h2Client(t *testing.T, open func() net.Conn, port uint16, trust *x509.CertPool) *http2.ClientConn {
	t.Helper()
	tc := connectTLS(t, open, port, trust, "h2", "http/1.1")
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("the proxy answered an HTTP/2 client with %q", p)
	}
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestInterceptedHTTP2: an HTTP/2 client on an intercepted host is served
// HTTP/2: its secret goes into the request's headers and not back (the
// answer's header, body and trailer hold the placeholder), streams run
// side by side, a body streams both ways at once, and the host is
// reached over HTTP/2 where it speaks it and over HTTP/1.1 where not. An
// answer the scrubber cannot read (gRPC-compressed) and a host whose
// certificate does not verify get a 502 that says why; the connection's
// bytes are logged.
func TestInterceptedHTTP2(t *testing.T) {
	base, caPool, sec := interceptFixture(t, nil, "h2-s3cr3t-abcdefghijkl", "example.com")

	for _, tc := range []struct {
		name      string
		h2        bool
		wantProto string
	}{{"host speaks HTTP/2", true, "HTTP/2.0"}, {"host speaks HTTP/1.1 only", false, "HTTP/1.1"}} {
		t.Run(tc.name, func(t *testing.T) {
			up, protos := h2Upstream(t, tc.h2, "")
			roots := x509.NewCertPool()
			roots.AddCert(up.Certificate())
			var mu sync.Mutex
			var events []Event
			h := base
			h.UpstreamRoots = roots
			h.Record = func(ev Event) { mu.Lock(); events = append(events, ev); mu.Unlock() }
			open := proxyFixture(t, h)
			port := netip.MustParseAddrPort(up.Listener.Addr().String()).Port()
			cc := h2Client(t, open, port, caPool)

			get := func() (*http.Response, string, error) {
				req, _ := http.NewRequest("GET", "https://example.com/", nil)
				req.Header.Set("Authorization", "Bearer "+sec.Placeholder)
				resp, err := cc.RoundTrip(req)
				if err != nil {
					return nil, "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp, string(b), err
			}
			resp, body, err := get()
			if err != nil {
				t.Fatal(err)
			}
			want := "Bearer " + sec.Placeholder
			if resp.ProtoMajor != 2 || body != "seen="+want || resp.Header.Get("X-Seen") != want || resp.Trailer.Get("X-Echo") != want {
				t.Fatalf("answer %s: %q header %q trailer %v", resp.Proto, body, resp.Header.Get("X-Seen"), resp.Trailer)
			}
			if _, ok := protos.Load(tc.wantProto); !ok {
				t.Fatalf("the host was not reached over %s", tc.wantProto)
			}
			// Streams side by side.
			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for range 20 {
				wg.Go(func() {
					if _, body, err := get(); err != nil || body != "seen="+want {
						errs <- fmt.Errorf("%q %v", body, err)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal("a stream beside others:", err)
			}
			if tc.h2 {
				// A body that streams both ways at once: each line's
				// answer comes before the next line is sent.
				pr, pw := io.Pipe()
				req, _ := http.NewRequest("POST", "https://example.com/duplex", pr)
				req.Header.Set("Authorization", "Bearer "+sec.Placeholder)
				done := make(chan *http.Response, 1)
				go func() {
					resp, err := cc.RoundTrip(req)
					if err != nil {
						t.Error(err)
						close(done)
						return
					}
					done <- resp
				}()
				fmt.Fprintln(pw, "line-0")
				resp := <-done
				if resp == nil {
					t.FailNow()
				}
				rd := bufio.NewReader(resp.Body)
				for i := range 3 {
					if i > 0 {
						fmt.Fprintf(pw, "line-%d\n", i)
					}
					line, err := readLineWithin(rd, time.Minute)
					if err != nil || line != fmt.Sprintf("line-%d %s\n", i, want) {
						t.Fatalf("duplex line %d: %q %v", i, line, err)
					}
				}
				pw.Close()
				resp.Body.Close()
			}
			cc.Close()
			deadline := time.Now().Add(time.Minute)
			for {
				mu.Lock()
				var last Event
				if n := len(events); n > 0 {
					last = events[n-1]
				}
				mu.Unlock()
				if last.Ended {
					if last.Rule != "intercepted" || last.Up == 0 || last.Down == 0 {
						t.Fatalf("the connection's log: %+v", last)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the intercepted HTTP/2 connection was not logged as ended")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}

	t.Run("answers it cannot pass on", func(t *testing.T) {
		up, _ := h2Upstream(t, true, "gzip")
		roots := x509.NewCertPool()
		roots.AddCert(up.Certificate())
		port := netip.MustParseAddrPort(up.Listener.Addr().String()).Port()
		for _, c := range []struct {
			roots *x509.CertPool
			want  string
		}{{roots, "came encoded"}, {x509.NewCertPool(), "certificate"}} {
			h := base
			h.UpstreamRoots = c.roots
			open := proxyFixture(t, h)
			resp, b, err := sendWithSecret(h2Client(t, open, port, caPool), sec)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), c.want) || strings.Contains(string(b), sec.Value) {
				t.Fatalf("want a 502 saying %q: %d %q", c.want, resp.StatusCode, b)
			}
		}
	})
}

// readLineWithin reads a line, failing after d (a proxy that holds a
// streamed body back would hang the read).
func readLineWithin(rd *bufio.Reader, d time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := rd.ReadString('\n')
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(d):
		return "", fmt.Errorf("no line in %s", d)
	}
}
