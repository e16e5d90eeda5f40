package apple

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The reference reader below implements, independently of the writer,
// the rules of BuildKit's Dockerfile frontend that ENV and LABEL
// key=value words go through (the list in containerfile.go):
//
//  1. Lines end at "\n", and a "\r" before it is dropped. A line of 64 KiB
//     or more is an error.
//  2. A line's leading blanks are dropped; an empty line or one starting
//     with '#' is skipped.
//  3. A line ending in "\" and optional spaces or tabs continues: those
//     are removed and the next line is appended, except that continuation
//     lines that are blank or whose first non-blank is '#' are skipped.
//  4. The instruction is the first blank-separated field; the rest is
//     split into words at blanks outside quotes, where inside double
//     quotes "\" keeps the next character in the word.
//  5. Each word is split at its first '=' (none is an error); key and
//     value are unquoted: outside quotes "\" takes the next character as
//     it is; in single quotes everything is literal; in double quotes
//     "\" escapes '"', '$' and "\" only and is kept before anything else.
//     A '$' outside single quotes would expand a variable: here it is an
//     error, since no value may change in the build.

type instruction struct{ instr, key, val string }

var continuationRE = regexp.MustCompile(`\\[ \t]*$`)

func refParse(text string) ([]instruction, error) {
	lines := strings.Split(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		if len(l) >= 64*1024 {
			return nil, fmt.Errorf("line %d is %d bytes", i+1, len(l))
		}
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	blank := func(s string) bool { return strings.TrimLeftFunc(s, unicode.IsSpace) == "" }
	comment := func(s string) bool { return strings.HasPrefix(strings.TrimLeftFunc(s, unicode.IsSpace), "#") }
	var out []instruction
	for i := 0; i < len(lines); i++ {
		line := strings.TrimLeftFunc(lines[i], unicode.IsSpace)
		if line == "" || comment(line) {
			continue
		}
		for continuationRE.MatchString(line) {
			line = continuationRE.ReplaceAllString(line, "")
			for i+1 < len(lines) && (blank(lines[i+1]) || comment(lines[i+1])) {
				i++
			}
			if i+1 == len(lines) {
				break
			}
			i++
			line += lines[i]
		}
		instr, args, _ := strings.Cut(strings.TrimSpace(line), " ")
		if instr != "ENV" && instr != "LABEL" {
			continue
		}
		words, err := refWords(args)
		if err != nil {
			return nil, err
		}
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				return nil, fmt.Errorf("no '=' in %q", w)
			}
			key, err := refUnquote(k)
			if err != nil {
				return nil, err
			}
			val, err := refUnquote(v)
			if err != nil {
				return nil, err
			}
			out = append(out, instruction{instr, key, val})
		}
	}
	return out, nil
}

// refWords is rule 4's word split.
func refWords(s string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord, quote := false, rune(0)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == 0 && unicode.IsSpace(r):
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case quote == 0 && (r == '"' || r == '\''):
			quote, inWord = r, true
			word.WriteRune(r)
		case quote != 0 && r == quote:
			quote = 0
			word.WriteRune(r)
		case r == '\\' && quote != '\'':
			inWord = true
			if i+1 < len(rs) {
				word.WriteRune(r)
				i++
				word.WriteRune(rs[i])
			}
		default:
			inWord = true
			word.WriteRune(r)
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c in %q", quote, s)
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}

// refUnquote is rule 5's unquoting.
func refUnquote(w string) (string, error) {
	var b strings.Builder
	rs := []rune(w)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '$':
			return "", fmt.Errorf("a variable reference in %q", w)
		case '\\':
			if i+1 < len(rs) {
				i++
				b.WriteRune(rs[i])
			}
		case '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				b.WriteRune(rs[j])
				j++
			}
			if j == len(rs) {
				return "", fmt.Errorf("unterminated ' in %q", w)
			}
			i = j
		case '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				switch {
				case rs[j] == '$':
					return "", fmt.Errorf("a variable reference in %q", w)
				case rs[j] == '\\' && j+1 < len(rs) && (rs[j+1] == '"' || rs[j+1] == '$' || rs[j+1] == '\\'):
					j++
				}
				b.WriteRune(rs[j])
			}
			if j == len(rs) {
				return "", fmt.Errorf(`unterminated " in %q`, w)
			}
			i = j
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}

func TestRefParseRules(t *testing.T) {
	got, err := refParse("FROM scratch\n  # a comment\n\nENV A=1 B=\"two words\" C='$lit' D=x\\ y\r\n" +
		"LABEL E=\"a\\qb\\\\\"\nENV F=\"long\\\n# skipped\n\n  value\"\n")
	want := []instruction{{"ENV", "A", "1"}, {"ENV", "B", "two words"}, {"ENV", "C", "$lit"}, {"ENV", "D", "x y"},
		{"LABEL", "E", `a\qb\`}, {"ENV", "F", "long  value"}}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q %v\nwant %q", got, err, want)
	}
	for _, bad := range []string{"ENV A=$HOME\n", "ENV A=\"${X}\"\n", "ENV A\n", "ENV A=\"open\n", "LABEL \"k=\"=v\n"} {
		if got, err := refParse(bad); err == nil {
			t.Errorf("%q: %q, want an error", bad, got)
		}
	}
}

// TestSnapshotContainerfile: every value a Containerfile can hold is read
// back exactly; the others are refused, saying why.
func TestSnapshotContainerfile(t *testing.T) {
	values := []string{
		"", "plain", "with space", `say "hi"`, "it's", "$HOME", "${HOME:-x}", "$", "$$", `back\slash`,
		`trailing\`, `\\`, `\"`, `\$`, "tab\there", "non-ASCII é 日本 🎉 e\u0301", "=x=", "#not a comment",
		" lead", "trail ", "`cmd`", `a'b"c$d\e`, "\\n is not a newline", "\u2028 line separator", "\x01\x7f",
		strings.Repeat("x", 200_000), strings.Repeat(" ", 5000) + "end", strings.Repeat("#", 9000) + "z",
		strings.Repeat(`\`, 9000), strings.Repeat("é", 30_000), strings.Repeat("$", 5000), strings.Repeat("a b#\\\"$", 20_000),
	}
	env := make([]string, 0, len(values))
	labels := map[string]string{}
	for i, v := range values {
		env = append(env, fmt.Sprintf("V%d=%s", i, v))
		labels[fmt.Sprintf("io.sandbox-mcp.v%d", i)] = v
	}
	env = append(env, "PATH=/usr/bin:/bin", "weird-name=1", "with space=2", "é=3")
	labels["key with space"], labels[`q"uote`], labels["é"] = "1", "2", "3"
	cf, err := snapshotContainerfile(env, labels)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cf, "FROM scratch\nADD rootfs.tar /\n") {
		t.Fatalf("header: %q", cf[:40])
	}
	got, err := refParse(cf)
	if err != nil {
		t.Fatal(err)
	}
	var want []instruction
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		want = append(want, instruction{"ENV", k, v})
	}
	for _, k := range sortedKeys(labels) {
		want = append(want, instruction{"LABEL", k, labels[k]})
	}
	if len(got) != len(want) {
		t.Fatalf("%d instructions read back, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s %.40q: read back as %.40q=%.40q", want[i].instr, want[i].key, got[i].key, got[i].val)
		}
	}
	long := 0
	for _, line := range strings.Split(cf, "\n") {
		if len(line) > maxContainerfileLine {
			long++
		}
	}
	if long > 4 { // the runs of '#' and of blanks, in ENV and LABEL, leave no place to break
		t.Errorf("%d lines over %d bytes", long, maxContainerfileLine)
	}

	for _, c := range []struct {
		env    []string
		labels map[string]string
		why    string
	}{
		{env: []string{"PEM=a\nb"}, why: "newline"},
		{env: []string{"CR=a\rb"}, why: "carriage return"},
		{env: []string{"NUL=a\x00b"}, why: "NUL"},
		{env: []string{"BAD=\xff"}, why: "UTF-8"},
		{env: []string{"NOEQUALS"}, why: "'='"},
		{env: []string{"=v"}, why: "empty key"},
		{env: []string{"BLANKS=" + strings.Repeat(" ", 70_000)}, why: "too long"},
		{labels: map[string]string{"a=b": "v"}, why: "'='"},
		{labels: map[string]string{"k": "x\ny"}, why: "newline"},
	} {
		_, err := snapshotContainerfile(c.env, c.labels)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%q %q: %v, want an error about %s", c.env, c.labels, err, c.why)
		}
	}
}

// TestSnapshotContainerfileOldQuoting: Go quoting, which SaveImage used,
// is not what a Containerfile reads ($ expands, \t and \u stay).
func TestSnapshotContainerfileOldQuoting(t *testing.T) {
	for _, v := range []string{"$HOME", "tab\there", "no\u00a0break"} {
		got, err := refParse(fmt.Sprintf("ENV A=%q\n", v))
		if err == nil && len(got) == 1 && got[0].val == v {
			t.Errorf("%q read back through Go quoting", v)
		}
	}
}
