package sandbox

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

// markedStream puts its entry last, before the end blocks, whatever the
// sizes of the writes that carry the archive.
func TestMarkedStreamPutsTheMarkLast(t *testing.T) {
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	for _, n := range []int{0, 1, 511, 512, 5000, 70000} {
		tw.WriteHeader(&tar.Header{Name: "top/f", Typeflag: tar.TypeReg, Size: int64(n), Mode: 0o644})
		tw.Write(bytes.Repeat([]byte{'a'}, n))
	}
	tw.Close()
	for _, chunk := range []int{1, 7, 512, 1023, 1024, 1025, 4096, 1 << 20} {
		var out bytes.Buffer
		ms := &markedStream{w: &out}
		data := archive.Bytes()
		for len(data) > 0 {
			k := min(chunk, len(data))
			ms.Write(data[:k])
			data = data[k:]
		}
		if err := ms.finish("END"); err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		tr := tar.NewReader(&out)
		var names []string
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("chunk %d: %v", chunk, err)
			}
			names = append(names, h.Name)
		}
		if len(names) != 7 || names[6] != "END" {
			t.Fatalf("chunk %d: entries %q", chunk, names)
		}
	}
	// A stream that does not end as tar ends is refused.
	ms := &markedStream{w: io.Discard}
	ms.Write(bytes.Repeat([]byte{1}, 3000))
	if err := ms.finish("END"); err == nil {
		t.Fatal("an archive without end blocks was marked")
	}
}
