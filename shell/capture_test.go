package shell

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCaptureUnderLimitKeepsAll(t *testing.T) {
	c := &Capture{Limit: 10}
	c.Write([]byte("hello"))
	c.Write([]byte("world"))
	head, tail, omitted := c.Parts()
	if string(head) != "helloworld" || tail != nil || omitted != 0 || c.Truncated() {
		t.Fatalf("head %q tail %q omitted %d", head, tail, omitted)
	}
}

func TestCaptureKeepsHeadAndTailAndSpillsAll(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "out")
	c := &Capture{Limit: 8, SpillPath: spill}
	var all []byte
	for i := range 100 {
		p := []byte{byte('a' + i%26)}
		if i%7 == 0 {
			p = bytes.Repeat(p, 3)
		}
		all = append(all, p...)
		c.Write(p)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	head, tail, omitted := c.Parts()
	if !bytes.Equal(head, all[:4]) || !bytes.Equal(tail, all[len(all)-4:]) {
		t.Fatalf("head %q tail %q, all ends %q", head, tail, all[len(all)-4:])
	}
	if omitted != int64(len(all)-8) || c.Total() != int64(len(all)) || !c.Truncated() || !c.Spilled() {
		t.Fatalf("omitted %d total %d", omitted, c.Total())
	}
	got, err := os.ReadFile(spill)
	if err != nil || !bytes.Equal(got, all) {
		t.Fatalf("spill file differs (%v)", err)
	}
	if n := c.Newest(3); !bytes.Equal(n, all[len(all)-3:]) {
		t.Fatalf("Newest %q", n)
	}
}

func TestCaptureOneHugeWrite(t *testing.T) {
	c := &Capture{Limit: 6}
	big := []byte("0123456789abcdef")
	c.Write(big)
	head, tail, omitted := c.Parts()
	if string(head) != "012" || string(tail) != "def" || omitted != 10 {
		t.Fatalf("head %q tail %q omitted %d", head, tail, omitted)
	}
}

// A cap that falls inside a UTF-8 character leaves the character out
// whole: head and tail stay valid text, and what was left out starts on a
// character in the saved stream.
func TestCaptureCutsOnCharacters(t *testing.T) {
	for _, s := range []string{"a" + strings.Repeat("é", 8000), strings.Repeat("✓ ", 5000), "ab" + strings.Repeat("😀", 4000)} {
		spill := filepath.Join(t.TempDir(), "out")
		c := &Capture{Limit: 1024, SpillPath: spill}
		for i := 0; i < len(s); i += 333 {
			c.Write([]byte(s[i:min(i+333, len(s))]))
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		head, tail, omitted := c.Parts()
		if !utf8.Valid(head) || !utf8.Valid(tail) || int64(len(head))+omitted+int64(len(tail)) != int64(len(s)) {
			t.Fatalf("head %q… tail …%q omitted %d of %d", head[max(len(head)-8, 0):], tail[:min(8, len(tail))], omitted, len(s))
		}
		if !strings.HasPrefix(s, string(head)) || !strings.HasSuffix(s, string(tail)) || !utf8.RuneStart(s[len(head)]) {
			t.Fatalf("cut at %d is not on a character", len(head))
		}
	}
	for b, want := range map[string]int{"": 0, "a": 0, "é": 0, "\xc3": 1, "a\xe2\x9c": 2, "\xe2\x9c\x93": 0, "\xf0\x9f\x98": 3, "\x80\x80\x80\x80": 0} {
		if got := PartialRuneEnd([]byte(b)); got != want {
			t.Errorf("PartialRuneEnd(%q) = %d, want %d", b, got, want)
		}
	}
}
