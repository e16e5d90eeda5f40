package egress

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Secret is a value the sandbox never holds: its processes see
// Placeholder, and the host puts Value in its place in requests to the
// hosts Hosts names (headers of plain HTTP requests, and of HTTPS requests
// to hosts the user opted in to interception for). In the answers to
// those requests the value is put back to the placeholder.
type Secret struct {
	Name        string
	Placeholder string
	Value       string
	Hosts       []Rule
}

// PlaceholderPrefix starts every placeholder.
const PlaceholderPrefix = "SANDBOX_SECRET_"

// NewPlaceholder makes an unguessable placeholder for the variable name.
func NewPlaceholder(name string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return PlaceholderPrefix + name + "_" + hex.EncodeToString(b)
}

// ParseSecretHosts reads the hosts a secret may be sent to: names or
// "*.suffix" patterns, with or without a port.
func ParseSecretHosts(hosts []string) ([]Rule, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("a secret swapped in at egress needs the hosts it may be sent to")
	}
	var out []Rule
	for _, h := range hosts {
		r, err := ParseRule(h)
		if err != nil {
			return nil, err
		}
		if r.Host == "" {
			return nil, fmt.Errorf("hosts: %q: a secret goes to host names, not addresses", h)
		}
		out = append(out, r)
	}
	return out, nil
}

// For reports whether s may be sent to host on port.
func (s Secret) For(host string, port int) bool {
	for _, r := range s.Hosts {
		if r.matchName(host, port) {
			return true
		}
	}
	return false
}

// secretsFor are the secrets of all that go to host:port.
func secretsFor(all []Secret, host string, port int) []Secret {
	var out []Secret
	for _, s := range all {
		if s.For(host, port) && s.Placeholder != "" && s.Value != "" {
			out = append(out, s)
		}
	}
	return out
}

// swapIn puts each secret's value in place of its placeholder in the
// request's header values and returns the secrets it used. A request
// that carries one asks for an unencoded answer: the value must be
// recognisable in whatever comes back.
func swapIn(req *http.Request, secrets []Secret) []Secret {
	var used []Secret
	for _, s := range secrets {
		hit := false
		for k, vs := range req.Header {
			for i, v := range vs {
				if strings.Contains(v, s.Placeholder) {
					vs[i] = strings.ReplaceAll(v, s.Placeholder, s.Value)
					hit = true
				}
			}
			req.Header[k] = vs
		}
		if hit {
			used = append(used, s)
		}
	}
	if len(used) > 0 {
		req.Header.Set("Accept-Encoding", "identity")
	}
	return used
}

// errEncoded refuses an answer the scrubber cannot read.
var errEncoded = errors.New("the answer to a request that carried a secret came encoded, where the proxy cannot keep the value out of the sandbox: it is not passed on")

// scrubResponse puts the placeholders back where an answer to a request
// that carried secrets holds a value: its status line, header names and
// values, and body (which streams); trailers are dropped. An encoded
// (compressed) body cannot be read for values: the answer is refused.
func scrubResponse(resp *http.Response, secrets []Secret) error {
	if len(secrets) == 0 {
		return nil
	}
	if enc := strings.TrimSpace(resp.Header.Get("Content-Encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
		return errEncoded
	}
	scrub := func(v string) string {
		for _, s := range secrets {
			v = strings.ReplaceAll(v, s.Value, s.Placeholder)
		}
		return v
	}
	resp.Status = scrub(resp.Status)
	// Header names come canonicalised (X-Value-Abc): their case is not
	// the value's.
	scrubName := func(k string) string {
		for _, s := range secrets {
			lv := strings.ToLower(s.Value)
			if lv == "" || len(lv) != len(s.Value) {
				continue
			}
			var b strings.Builder
			rest := k
			for {
				i := strings.Index(strings.ToLower(rest), lv)
				if i < 0 {
					break
				}
				b.WriteString(rest[:i] + s.Placeholder)
				rest = rest[i+len(lv):]
			}
			k = b.String() + rest
		}
		return k
	}
	h := http.Header{}
	for k, vs := range resp.Header {
		for _, v := range vs {
			h.Add(scrubName(k), scrub(v))
		}
	}
	h.Del("Trailer")
	resp.Header, resp.Trailer = h, nil
	if resp.Body != nil {
		resp.Body = &scrubber{r: resp.Body, secrets: secrets}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
	return nil
}

// scrubber replaces secrets' values with their placeholders in a stream,
// holding back the few bytes that may be the start of a value cut by a
// read.
type scrubber struct {
	r       io.ReadCloser
	secrets []Secret
	in      []byte // read, not yet scrubbed
	out     []byte // scrubbed, not yet returned
	eof     bool
}

func (s *scrubber) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			if len(s.in) == 0 {
				return 0, io.EOF
			}
			s.out, s.in = s.replace(s.in), nil
			break
		}
		buf := make([]byte, 32<<10)
		n, err := s.r.Read(buf)
		s.in = append(s.in, buf[:n]...)
		if err == io.EOF {
			s.eof = true
			continue
		} else if err != nil {
			return 0, err
		}
		// Every whole value in what was read is replaced; what may be
		// the start of one (shorter than the longest value) waits for
		// the next read.
		res := s.replace(s.in)
		keep := min(s.longest()-1, len(res))
		s.out = res[:len(res)-keep]
		s.in = append([]byte(nil), res[len(res)-keep:]...)
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

func (s *scrubber) longest() int {
	n := 1
	for _, sec := range s.secrets {
		n = max(n, len(sec.Value))
	}
	return n
}

func (s *scrubber) replace(b []byte) []byte {
	for _, sec := range s.secrets {
		b = bytes.ReplaceAll(b, []byte(sec.Value), []byte(sec.Placeholder))
	}
	return b
}

func (s *scrubber) Close() error { return s.r.Close() }
