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
// plainNode), and whether the parser saw it change a variable or the
// directory in ways MayChangeState's reading of the text may miss (c\d,
// a for loop's variable, ${x:=v}).
func parsedPlain(command string) (plain, changesState bool) {
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
			var changes bool
			if changes, plain = plainNode(n); changes {
				changesState = true
			}
			return plain
		})
		if !plain {
			return false, false
		}
	}
	return true, changesState
}

// plainNode reports whether node leaves the shell it runs in as it was,
// but for its directory and variables, and whether it may change those.
// Not plain are a function definition, a coprocess, a declaration other
// than export, a simple command whose name comes from an expansion or is
// one of isolatingWords, an assignment to bound (see bound) or a name made
// at run time, and what bash run as sh takes for a fatal error that ends
// the shell despite `command eval`: ${x?}, a redirection on a special
// builtin, arithmetic it may not compute (see plainArithm). Commands in
// subshells and substitutions are held to the same rule, which costs a
// fork at most.
func plainNode(node syntax.Node) (changes, plain bool) {
	switch n := node.(type) {
	case *syntax.FuncDecl, *syntax.CoprocClause, *syntax.TestDecl:
		return false, false
	case *syntax.Stmt:
		return false, len(n.Redirs) == 0 || !specialBuiltin(n.Cmd)
	case *syntax.DeclClause:
		if n.Variant == nil || n.Variant.Value != "export" {
			return false, false
		}
		for _, a := range n.Args {
			if a.Name == nil && !staticName(a.Value) {
				return false, false // export ${v}S=…: a name made at run time
			}
		}
		return true, true
	case *syntax.Assign:
		return true, n.Name == nil || !bound(n.Name.Value)
	case *syntax.CallExpr:
		if len(n.Args) == 0 {
			return len(n.Assigns) > 0, true // assignments or redirections alone
		}
		name, ok := staticWord(n.Args[0])
		if !ok || isolatingWords[name] {
			return false, false
		}
		return stateWords[name], plainArgs(name, n.Args[1:])
	case *syntax.Redirect:
		return false, plainRedirect(n)
	case *syntax.ParamExp:
		if n.Param != nil && n.Param.Value == "#" && n.Exp != nil && n.Exp.Word == nil {
			return false, false // ${#=}, ${#+}: bash's "bad substitution", fatal
		}
		if n.Exp != nil {
			switch n.Exp.Op {
			case syntax.ErrorUnset, syntax.ErrorUnsetOrNull:
				return false, false
			case syntax.AssignUnset, syntax.AssignUnsetOrNull:
				// ${!x:=v} assigns to the name x holds.
				return true, !n.Excl && (n.Param == nil || !bound(n.Param.Value))
			}
		}
	case *syntax.ArithmExp:
		return false, plainArithm(n.X)
	case *syntax.ArithmCmd:
		return false, plainArithm(n.X)
	case *syntax.LetClause:
		for _, x := range n.Exprs {
			if !plainArithm(x) {
				return false, false
			}
		}
	case *syntax.CStyleLoop:
		return false, false
	case *syntax.BinaryTest:
		switch n.Op {
		case syntax.TsEql, syntax.TsNeq, syntax.TsLeq, syntax.TsGeq, syntax.TsLss, syntax.TsGtr:
			// [[ a -eq b ]] computes its operands as arithmetic.
			return false, decimalOperand(n.X) && decimalOperand(n.Y)
		}
	case *syntax.UnaryTest:
		return false, n.Op != syntax.TsVarSet // [[ -v 'a[${x?}]' ]]
	case *syntax.WordIter:
		return true, n.Name == nil || !bound(n.Name.Value) // a loop's variable
	}
	return false, true
}

// bound reports whether a command in the framing shell may not set the
// variable name: one of bash's read-only ones (setting one is a fatal
// error in bash run as sh), PATH (an entry of dash's ending in %func or
// %builtin changes what the frame's own words run, and its value may be
// built where the text does not show it), the directory's (which the
// frame reports), or GROUPS and FUNCNAME, whose assignment bash ignores
// with an error that, before a special builtin (GROUPS= :), ends it.
func bound(name string) bool {
	return bashReadOnly[name] || name == "GROUPS" || name == "FUNCNAME" || name == "PATH" || name == "PWD" || name == "OLDPWD"
}

// plainArithm reports whether bash computes x without a fatal error and
// without setting a variable: its operands are decimal numbers written
// out (bash computes a variable's value as an expression, which may
// assign any name or divide by zero), it divides only by a number other
// than zero, and it raises to no power (a negative one is an error).
func plainArithm(x syntax.ArithmExpr) bool {
	switch x := x.(type) {
	case nil:
		return true
	case *syntax.Word:
		return decimal(x.Lit())
	case *syntax.ParenArithm:
		return plainArithm(x.X)
	case *syntax.UnaryArithm:
		return x.Op != syntax.Inc && x.Op != syntax.Dec && plainArithm(x.X)
	case *syntax.BinaryArithm:
		switch x.Op {
		case syntax.Quo, syntax.Rem:
			w, ok := x.Y.(*syntax.Word)
			return ok && decimal(w.Lit()) && w.Lit() != "0" && plainArithm(x.X)
		case syntax.Add, syntax.Sub, syntax.Mul, syntax.And, syntax.Or, syntax.Xor,
			syntax.Lss, syntax.Gtr, syntax.Leq, syntax.Geq, syntax.Eql, syntax.Neq,
			syntax.AndArit, syntax.OrArit, syntax.Shl, syntax.Shr:
			return plainArithm(x.X) && plainArithm(x.Y)
		}
	}
	return false
}

// decimalOperand reports whether x, an operand of [[ … -eq … ]], is a
// decimal number written out.
func decimalOperand(x syntax.TestExpr) bool {
	w, ok := x.(*syntax.Word)
	return ok && decimal(w.Lit())
}

// decimal reports whether s is a decimal number as bash reads it: 0, or
// digits that do not start with 0 (which would make them octal).
func decimal(s string) bool {
	if s == "0" {
		return true
	}
	return s != "" && s[0] != '0' && isDigits(s)
}

// specialBuiltin reports whether cmd is a simple command naming one of
// the special builtins that may run in the framing shell: one whose
// redirection, failing, ends bash run as sh.
func specialBuiltin(cmd syntax.Command) bool {
	switch c := cmd.(type) {
	case *syntax.CallExpr:
		if len(c.Args) == 0 {
			return false
		}
		name, _ := staticWord(c.Args[0])
		return name == ":" || name == "export" || name == "times"
	case *syntax.DeclClause:
		return true
	}
	return false
}

// plainArgs reports whether the arguments of the command name leave the
// variables they set named by their text, and bash alive: export's and
// read's names must not come from an expansion nor be bound (see bound),
// read's no array element (whose subscript bash expands), and read -u,
// printf -v, wait -p, test -v (which expands a subscript), jobs -x (which
// runs a command in the shell) and times with arguments are not plain,
// nor a word from an expansion where one of those options could stand.
func plainArgs(name string, args []*syntax.Word) bool {
	switch name {
	case "export":
		for _, a := range args {
			if !staticName(a) {
				return false
			}
		}
	case "read":
		for _, a := range args {
			w, ok := staticWord(a)
			if !ok || bound(w) || strings.ContainsRune(w, '[') ||
				strings.HasPrefix(w, "-") && strings.ContainsRune(w, 'u') {
				return false
			}
		}
	case "printf", "wait":
		for i, a := range args {
			w, ok := staticWord(a)
			if !ok {
				// An option may come from an expansion (o=-v; printf
				// $o NAME fmt): one with words after it may be -v or -p.
				return name == "printf" && len(args)-i < 3 || name == "wait" && i == len(args)-1
			}
			if !strings.HasPrefix(w, "-") || w == "--" {
				break // the format: options come before it
			}
			if strings.ContainsAny(w, "vp") {
				return false
			}
		}
	case "times":
		// times takes no arguments: one is a usage error, which for a
		// special builtin ends bash run as sh.
		return len(args) == 0
	case "jobs":
		// jobs -x runs its arguments as a command of the shell itself.
		for _, a := range args {
			if w, ok := staticWord(a); !ok || strings.HasPrefix(w, "-") && strings.ContainsRune(w, 'x') {
				return false
			}
		}
	case "test", "[":
		if n := len(args); name == "[" && n > 0 {
			if w, _ := staticWord(args[n-1]); w == "]" {
				args = args[:n-1]
			}
		}
		for i, a := range args {
			w, ok := staticWord(a)
			if w == "-v" {
				return false
			}
			if !ok && i+1 < len(args) {
				// A word from an expansion may be -v, unless what follows
				// makes it an operand of a comparison ([ "$a" = "$b" ]).
				if next, _ := staticWord(args[i+1]); !testComparisons[next] {
					return false
				}
			}
		}
	}
	return true
}

// testComparisons are test's binary operators: a word before one is its
// operand, whatever the word holds.
var testComparisons = map[string]bool{
	"=": true, "==": true, "!=": true, "<": true, ">": true, "-eq": true, "-ne": true,
	"-lt": true, "-le": true, "-gt": true, "-ge": true, "-nt": true, "-ot": true, "-ef": true,
}

// staticName reports whether w, an argument of export, names its variable
// by its text: -p, -n, -f or --, a name, or a name= followed by any value,
// and the name is not bound.
func staticName(w *syntax.Word) bool {
	if w == nil || len(w.Parts) == 0 {
		return false
	}
	if lit, ok := w.Parts[0].(*syntax.Lit); ok {
		if eq := strings.IndexByte(lit.Value, '='); eq > 0 {
			return validVarName(lit.Value[:eq]) && !bound(lit.Value[:eq])
		}
	}
	name, ok := staticWord(w)
	return ok && (name == "-p" || name == "-n" || name == "-f" || name == "--" || validVarName(name) && !bound(name))
}

// plainRedirect reports whether r is one a command in the framing shell
// may make: its fd is a number under 10 (bash keeps its own, the frame's
// input among them, at 10 and above; {var}> keeps an fd open for good), and
// one it duplicates or closes is too.
func plainRedirect(r *syntax.Redirect) bool {
	if r.N != nil && !smallFD(r.N.Value) {
		return false
	}
	if r.Op == syntax.DplIn || r.Op == syntax.DplOut {
		w, ok := staticWord(r.Word)
		return ok && (w == "-" || smallFD(strings.TrimSuffix(w, "-")))
	}
	return true
}

// smallFD reports whether s is one digit: an fd under 10.
func smallFD(s string) bool {
	return len(s) == 1 && s[0] >= '0' && s[0] <= '9'
}

// staticWord returns the word the shell makes of w when that is fixed by
// its text alone: w is made of literal text, single-quoted text and
// double-quoted literal text only, with no pattern, brace or tilde the
// shell could expand outside quotes. ok is false for any other word.
func staticWord(w *syntax.Word) (string, bool) {
	if w == nil || len(w.Parts) == 0 {
		return "", w != nil
	}
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
	if lit, ok := w.Parts[0].(*syntax.Lit); ok && strings.HasPrefix(lit.Value, "~") && !strings.Contains(lit.Value, "/") {
		return "", false // a home directory (~/bin/tool is a path: no builtin)
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
