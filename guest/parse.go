package guest

import (
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// The isolation check's second reading: the command parsed by a real
// parser of the shell's grammar, once as POSIX sh (dash, busybox) and once
// as bash, the shells a sandbox's `sh` is. NeedsIsolation's own reading of
// the text is kept and this one only adds to it: a command runs in the
// framing shell when both readings, in both grammars, find nothing there
// that could outlive it. A command either grammar cannot parse is
// isolated, since the shell may read it in a way neither foresees.

// parsers holds a parser per grammar; a parser serves one parse at a time.
var parsers = [...]*sync.Pool{
	{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangPOSIX)) }},
	{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }},
}

// parsedPlain reports whether command parses in each grammar and every
// command in it, at any depth, is one the framing shell may run (see
// plainNode), and whether one of those commands is named in stateWords
// (a cd the text reading missed, as in c\d).
func parsedPlain(command string) (plain, namesState bool) {
	for _, pool := range parsers {
		p := pool.Get().(*syntax.Parser)
		f, err := p.Parse(strings.NewReader(command), "")
		pool.Put(p)
		if err != nil {
			return false, false
		}
		plain = true
		syntax.Walk(f, func(n syntax.Node) bool {
			if !plain {
				return false
			}
			var name string
			if name, plain = plainNode(n); stateWords[name] {
				namesState = true
			}
			return plain
		})
		if !plain {
			return false, false
		}
	}
	return true, namesState
}

// plainNode reports whether node leaves the shell it runs in as it was,
// but for its directory and variables: no function definition, coprocess
// or declaration other than export, and no simple command whose name
// either comes from an expansion or is one of isolatingWords. Commands in
// subshells and substitutions are held to the same rule, which costs a
// fork at most. name is the command's name, for a simple command or a
// declaration.
func plainNode(node syntax.Node) (name string, plain bool) {
	switch n := node.(type) {
	case *syntax.FuncDecl, *syntax.CoprocClause, *syntax.TestDecl:
		return "", false
	case *syntax.DeclClause:
		if n.Variant == nil {
			return "", false
		}
		return n.Variant.Value, n.Variant.Value == "export"
	case *syntax.CallExpr:
		if len(n.Args) == 0 {
			return "", true // assignments or redirections alone
		}
		name, ok := staticWord(n.Args[0])
		return name, ok && !isolatingWords[name]
	}
	return "", true
}

// staticWord returns the word the shell makes of w when that is fixed by
// its text alone: w is made of literal text, single-quoted text and
// double-quoted literal text only, with no pattern, brace or tilde the
// shell could expand outside quotes. ok is false for any other word.
func staticWord(w *syntax.Word) (string, bool) {
	var b strings.Builder
	unquoted := ""
	for _, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			unquoted += p.Value
			unescape(&b, p.Value, "")
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return "", false
			}
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				unescape(&b, lit.Value, "$`\"\\")
			}
		default:
			return "", false
		}
	}
	if mayExpand(unquoted) {
		return "", false // a pattern, or bash's braces
	}
	if lit, ok := w.Parts[0].(*syntax.Lit); ok && strings.HasPrefix(lit.Value, "~") {
		return "", false // a home directory
	}
	return b.String(), true
}

// unescape writes s to b with the shell's backslashes removed: before any
// byte when escapable is empty (unquoted text), before one of escapable
// otherwise (double-quoted text); a backslash before a newline goes with
// it (a continued line).
func unescape(b *strings.Builder, s, escapable string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			next := s[i+1]
			switch {
			case next == '\n':
				i++
				continue
			case escapable == "" || strings.IndexByte(escapable, next) >= 0:
				i++
				c = next
			}
		}
		b.WriteByte(c)
	}
}
