package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
)

// secretHandler is a proxy handler that resolves each of hosts to
// 127.0.0.1 and allows it, and holds one secret (TOKEN, of value) for
// them. It returns the handler and the secret.
func secretHandler(t *testing.T, value string, hosts ...string) (Handler, Secret) {
	t.Helper()
	rules, err := ParseSecretHosts(hosts)
	if err != nil {
		t.Fatal(err)
	}
	sec := Secret{Name: "TOKEN", Placeholder: NewPlaceholder("TOKEN"), Value: value, Hosts: rules}
	names := map[string][]string{}
	for _, h := range hosts {
		names[h] = []string{"127.0.0.1"}
	}
	res := &fakeResolver{names: names}
	chain := []Policy{mustPolicy(t, ModeAllowlist, nil, slices.Concat(hosts, []string{"127.0.0.0/8"})...)}
	return Handler{
		Decide:  func(ctx context.Context, host string, port int) Decision { return Decide(ctx, res, chain, host, port) },
		Secrets: func() []Secret { return []Secret{sec} },
	}, sec
}

// interceptFixture is secretHandler's handler that also intercepts every
// connection with a CA of its own, and trusts roots upstream. It returns
// the handler, a pool that trusts its CA, and the secret.
func interceptFixture(t *testing.T, roots *x509.CertPool, value string, hosts ...string) (Handler, *x509.CertPool, Secret) {
	t.Helper()
	ca, err := LoadOrCreateCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	caPool := x509.NewCertPool()
	caPool.AppendCertsFromPEM(ca.CertPEM())
	h, sec := secretHandler(t, value, hosts...)
	h.Intercept = func(string, int) bool { return true }
	h.CA, h.UpstreamRoots = ca, roots
	return h, caPool, sec
}

// connectTLS opens a CONNECT to example.com:port through the proxy that
// open reaches and speaks TLS on it under trust, offering protos (none:
// no ALPN), as a client in the sandbox does.
func connectTLS(t *testing.T, open func() net.Conn, port uint16, trust *x509.CertPool, protos ...string) *tls.Conn {
	t.Helper()
	c := open()
	fmt.Fprintf(c, "CONNECT example.com:%d HTTP/1.1\r\nHost: example.com\r\n\r\n", port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(&prefixConn{Conn: c, pre: peekAll(br)}, &tls.Config{ServerName: "example.com", RootCAs: trust, NextProtos: protos})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}
