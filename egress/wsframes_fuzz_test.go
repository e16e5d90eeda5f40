package egress

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzWebSocketScrub: a text message cut into frames anyhow (a ping after
// each but the last), read a few bytes at a time, comes out as scrubbing
// it whole gives, with no value left in it, in valid RFC 6455 framing
// (the first frame with the opcode, continuations after, one final
// frame); and so with a placeholder that ends with the start of its
// value (letters a and b only, so that they overlap).
func FuzzWebSocketScrub(f *testing.F) {
	f.Add("aab", "ab", "aaabab", []byte{1, 2}, []byte{3})
	f.Add("abab", "ba", "ababababa", []byte{3}, []byte{1})
	f.Add("aa", "baab", "baabaab", []byte{2, 5}, []byte{0})
	f.Add("baba", "", "babababa", []byte{4}, []byte{6})
	f.Fuzz(func(t *testing.T, v1, v2, data string, cuts, reads []byte) {
		secs, v1, data, ok := fuzzSecrets(v1, v2, data)
		if !ok {
			return
		}
		var in []byte
		rest := []byte(data)
		op := byte(1)
		for i := 0; ; i++ {
			n := len(rest)
			if len(cuts) > 0 && i < 100 {
				n = min(n, int(cuts[i%len(cuts)])%9)
			}
			fin := n == len(rest)
			in = appendFrame(in, fin, op, rest[:n])
			rest = rest[n:]
			op = 0
			if fin {
				break
			}
			in = appendFrame(in, true, 9, []byte("p"))
		}
		for _, secs := range [][]Secret{secs, {{Placeholder: "a" + v1[:len(v1)/2], Value: v1}}} {
			var out bytes.Buffer
			if err := wsScrub(&out, &chunks{data: in, sizes: reads}, secs); err != nil {
				t.Fatal(err)
			}
			var msg []byte
			first, done := true, false
			for out.Len() > 0 {
				fr, err := readWSFrame(&out)
				if err != nil {
					t.Fatal(err)
				}
				if fr.op >= 8 {
					continue
				}
				if done || (first && fr.op != 1) || (!first && fr.op != 0) {
					t.Fatalf("framing: opcode %d, first %v, after the final frame %v", fr.op, first, done)
				}
				first = false
				msg = append(msg, fr.payload...)
				done = fr.fin
			}
			if !done {
				t.Fatal("no final frame")
			}
			if whole := scrubValue(data, secs); string(msg) != whole {
				t.Fatalf("secrets %+v, %q cut %v: %q, scrubbed whole %q", secs, data, cuts, msg, whole)
			}
		}
		for _, s := range secs {
			if strings.Contains(scrubValue(data, secs), s.Value) {
				t.Fatalf("secrets %+v: a value is left in %q", secs, scrubValue(data, secs))
			}
		}
	})
}
