package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readTestdata reads a captured output from the Apple dialect's testdata
// (provenance in sandbox/apple/testdata/README.md). The stand-in prints
// exactly one trailing newline where a capture may have kept none or one.
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "sandbox", "apple", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// TestPrettyMatchesCaptures decodes captured `inspect` outputs (which fixes
// the input values) and checks that the Apple pretty printer reproduces
// the captured bytes exactly, slash escaping included.
func TestPrettyMatchesCaptures(t *testing.T) {
	cases := []struct {
		file    string
		version string
	}{
		{"container-inspect-1.0.0.json", "1.0.0"}, // samples §1.2, escaped
		{"container-inspect-1.2.0.json", "1.2.0"}, // samples §1.4, escaped
		{"container-inspect-1.4.1.json", "1.4.1"}, // samples §1.7, unescaped
		{"volume-inspect-1.0.0.json", "1.0.0"},    // samples §5.2
		{"volume-inspect-1.4.1.json", "1.4.1"},    // samples §5.2
		{"image-inspect-1.4.1.json", "1.4.1"},     // samples §2.3
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			want := readTestdata(t, c.file)
			v, err := decodeOrdered([]byte(want))
			if err != nil {
				t.Fatal(err)
			}
			got := string(encodingFor(MustVersion(c.version)).Pretty(v))
			if got != want {
				t.Errorf("pretty output differs from capture\n%s", firstDiff(got, want))
			}
		})
	}
}

// TestCompactMatchesCaptures does the same for one-line list output.
func TestCompactMatchesCaptures(t *testing.T) {
	for _, c := range []struct{ file, version string }{
		{"container-ls-1.2.0.json", "1.2.0"}, // samples §1.3, escaped, sorted
		{"stats-1.2.0.json", "1.2.0"},        // samples §3.2
	} {
		want := readTestdata(t, c.file)
		v, err := decodeOrdered([]byte(want))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(encodingFor(MustVersion(c.version)).Compact(v)); got != want {
			t.Errorf("%s: compact output differs\n%s", c.file, firstDiff(got, want))
		}
	}
}

func TestPrettyEmptyContainers(t *testing.T) {
	o := NewObj().Set("b", []any{}).Set("a", NewObj())
	got := string(Encoding{Sorted: true}.Pretty([]any{o}))
	want := "[\n  {\n    \"a\" : {\n\n    },\n    \"b\" : [\n\n    ]\n  }\n]"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := string(Encoding{}.Pretty([]any{})); got != "[\n\n]" {
		t.Errorf("empty top-level array: %q", got)
	}
}

func TestSlashEscapingByVersion(t *testing.T) {
	val := []any{"docker.io/library/alpine:latest"}
	for _, c := range []struct {
		version string
		want    string
	}{
		{"0.9.0", `["docker.io\/library\/alpine:latest"]`},
		{"0.12.3", `["docker.io\/library\/alpine:latest"]`},
		{"1.0.0", `["docker.io\/library\/alpine:latest"]`},
		{"1.2.0", `["docker.io\/library\/alpine:latest"]`},
		{"1.4.1", `["docker.io/library/alpine:latest"]`},
		{"1.5.0", `["docker.io/library/alpine:latest"]`},
	} {
		if got := string(encodingFor(MustVersion(c.version)).Compact(val)); got != c.want {
			t.Errorf("%s: got %s, want %s", c.version, got, c.want)
		}
	}
}

func TestStringEscapes(t *testing.T) {
	got := string(Encoding{}.Compact("a\"b\\c\nd\te\x01é"))
	if want := `"a\"b\\c\nd\te\u0001é"`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestKeyOrder(t *testing.T) {
	o := NewObj().Set("z", 1).Set("a", 2)
	if got := string(Encoding{}.Compact(o)); got != `{"z":1,"a":2}` {
		t.Errorf("insertion order: %s", got)
	}
	if got := string(Encoding{Sorted: true}.Compact(o)); got != `{"a":2,"z":1}` {
		t.Errorf("sorted: %s", got)
	}
}

// firstDiff shows where two texts start to differ.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-80)
	return "at byte " + itoa(i) + "\n--- got:\n" + got[lo:min(len(got), i+80)] +
		"\n--- want:\n" + want[lo:min(len(want), i+80)] + "\n" + strings.Repeat("-", 20)
}
