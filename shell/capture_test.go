package shell

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
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
