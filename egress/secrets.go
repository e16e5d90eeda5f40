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
	// Every field and every coding in it: one "identity" first does not
	// vouch for a "gzip" after it.
	for _, k := range []string{"Content-Encoding", "Grpc-Encoding"} {
		for _, v := range resp.Header.Values(k) {
			for _, enc := range strings.Split(v, ",") {
				if enc = strings.TrimSpace(enc); enc != "" && !strings.EqualFold(enc, "identity") {
					return errEncoded
				}
			}
		}
	}
	resp.Status = scrubValue(resp.Status, secrets)
	h := scrubHeader(resp.Header, secrets)
	h.Del("Trailer")
	resp.Header, resp.Trailer = h, nil
	if resp.Body != nil {
		resp.Body = &scrubber{r: resp.Body, secrets: secrets}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
	return nil
}

// scrubValue puts the placeholders back where v holds a value.
func scrubValue(v string, secrets []Secret) string {
	if len(secrets) == 0 {
		return v
	}
	out, _ := scanSecrets([]byte(v), secrets, true)
	return string(out)
}

// scrubHeader is h with the placeholders back where its names or values
// hold a value (h itself when no secret was used).
func scrubHeader(h http.Header, secrets []Secret) http.Header {
	if len(secrets) == 0 {
		return h
	}
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
	out := http.Header{}
	for k, vs := range h {
		for _, v := range vs {
			out.Add(scrubName(k), scrubValue(v, secrets))
		}
	}
	return out
}

// scrubber replaces secrets' values with their placeholders in a stream,
// holding back an end of what was read that may be the start of a value
// cut by a read; nothing else waits, so a stream of lines (server-sent
// events, a duplex exchange) gets each line as it comes.
type scrubber struct {
	r       io.ReadCloser
	secrets []Secret
	buf     []byte // one read
	in      []byte // read, not yet scrubbed (raw)
	out     []byte // scrubbed, not yet returned
	eof     bool
}

func (s *scrubber) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			if len(s.in) == 0 {
				return 0, io.EOF
			}
			s.out, _ = scanSecrets(s.in, s.secrets, true)
			s.in = nil
			break
		}
		if s.buf == nil {
			s.buf = make([]byte, 32<<10)
		}
		n, err := s.r.Read(s.buf)
		s.in = append(s.in, s.buf[:n]...)
		if err == io.EOF {
			s.eof = true
			continue
		} else if err != nil {
			return 0, err
		}
		var rest []byte
		s.out, rest = scanSecrets(s.in, s.secrets, false)
		s.in = append(s.in[:0:0], rest...)
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// scanSecrets scrubs raw bytes b in one pass, left to right: at each
// place, the longest value that starts there is replaced by its
// placeholder, and what was written is never read again (a placeholder
// that holds a value, or values inside others, cannot make one appear).
// Unless atEnd, an end of b that may begin a value once more comes is
// left unscrubbed, and returned raw as rest.
func scanSecrets(b []byte, secrets []Secret, atEnd bool) (out, rest []byte) {
	var first [256]bool
	for _, sec := range secrets {
		if sec.Value != "" {
			first[sec.Value[0]] = true
		}
	}
	out = make([]byte, 0, len(b))
	i := 0
	for i < len(b) {
		j := i
		for j < len(b) && !first[b[j]] {
			j++
		}
		out = append(out, b[i:j]...)
		if j == len(b) {
			break
		}
		best, more := -1, false
		for k, sec := range secrets {
			v := sec.Value
			switch {
			case v == "":
			case bytes.HasPrefix(b[j:], []byte(v)):
				if best < 0 || len(v) > len(secrets[best].Value) {
					best = k
				}
			case len(b)-j < len(v) && bytes.HasPrefix([]byte(v), b[j:]):
				more = true // a longer value may start here
			}
		}
		switch {
		case more && !atEnd:
			return out, b[j:]
		case best >= 0:
			out = append(out, secrets[best].Placeholder...)
			i = j + len(secrets[best].Value)
		default:
			out = append(out, b[j])
			i = j + 1
		}
	}
	return out, nil
}

func (s *scrubber) Close() error { return s.r.Close() }
