package guest

import (
	"crypto/sha256"
	"strings"
	"sync"
)

// isolatingWords are the commands that change a shell in ways that should
// not outlive the command (options, limits, traps, aliases, functions,
// sourced files, the shell's own exit or replacement), or that run text
// the check cannot see (eval, ., source).
var isolatingWords = map[string]bool{
	"set": true, "ulimit": true, "umask": true, "trap": true, "alias": true, "unalias": true,
	"exit": true, "exec": true, "eval": true, ".": true, "source": true, "readonly": true,
	"return": true, "break": true, "continue": true, "local": true, "typeset": true,
	"declare": true, "function": true, "shopt": true, "enable": true, "builtin": true,
	"hash": true, "unset": true, "shift": true, "getopts": true, "command": true,
	"mapfile": true, "readarray": true, // their -C runs text in the shell
	"compgen": true, "complete": true, // -W expands text
	"fc": true, "history": true, // fc runs history's text, which history -s and -r put there
	"suspend": true, // suspend -f stops bash
}

// maxPlainCommand is the longest command that may run in the framing
// shell.
const maxPlainCommand = 16 << 10

// maxPlainNesting is the most parentheses and braces a command that may
// run in the framing shell holds.
const maxPlainNesting = 256

// specialNames are the variables, and the parts of PATH's entries, that
// change how the shell reads or runs what follows, whichever way a
// command mentions them (export "IFS"=, read IFS, for IFS in,
// $(( IFS = 1 )), printf -v), so their mention alone isolates:
//   - IFS would split every later frame's words otherwise;
//   - bash's BASH_ALIASES and BASH_CMDS define aliases (which bash as sh
//     expands in the frame's own lines) and hashed commands,
//     BASH_XTRACEFD closes the fd it named when it changes, and
//     BASH_COMPAT, GLOBIGNORE, EXECIGNORE (which can hide the frame's
//     base64) and CDPATH change how later commands and the frame's cd are
//     read, and POSIXLY_CORRECT unset ends bash's POSIX mode;
//   - dash and busybox source a file found in a PATH entry ending in
//     %func, and dash looks for its builtins where %builtin stands;
//   - __sbx_ names the frame's own functions and variables.
var specialNames = []string{"IFS", "BASH_", "GLOBIGNORE", "EXECIGNORE", "CDPATH", "POSIXLY_CORRECT", "%func", "%builtin", "__sbx_"}

// reservedWords keep the next word in command position.
var reservedWords = map[string]bool{
	"if": true, "then": true, "else": true, "elif": true, "while": true, "until": true,
	"do": true, "!": true, "time": true, "{": true,
}

// NeedsIsolation reports whether command must run in a subshell of the
// framing shell rather than in the shell itself. It is conservative: it
// looks at every word in command position (after ;, &, |, newline, (, {,
// and keywords), and says yes for a command name from isolatingWords, a
// function definition, a command name that comes from an expansion
// ($x, `x`, $(x), a glob or bash's braces), or any mention of one of
// specialNames. It reads the words as the shell will, after joining
// continued lines, and where it could read them otherwise (a
// here-document, a command substitution holding quotes or comments, a
// ${…} holding blanks or operators, $'…') it says yes. It then has the
// command parsed as POSIX sh and as bash (see parsedPlain) and says yes to
// what either grammar cannot parse or finds isolating words, definitions,
// names made at run time or bash's fatal errors in: the parser is a
// second reading, which can only add to the first. A command too long or
// too deeply nested to read quickly is isolated unread.
// Commands that only run programs, cd, export and assignments run in the
// framing shell, which saves a fork; what a value built at run time may
// still set there is undone after each (see afterCommand).
func NeedsIsolation(command string) bool {
	isolate, _ := readings.read(command)
	return isolate
}

// readings keeps the readings of recent commands. An agent runs the same
// commands again and again (a build, the tests, a status), and a reading
// parses the command with two grammars; it depends on the text alone, so
// a kept one is the reading the text would get again. Readings are kept
// by the text's SHA-256, not the text, which may hold a secret.
var readings = readingCache{kept: map[[sha256.Size]byte]reading{}}

// readingsKept bounds how many readings are kept.
const readingsKept = 256

// reading is what readCommand says of one command.
type reading struct{ isolate, changesState bool }

// readingCache is readCommand with recent readings kept.
type readingCache struct {
	mu   sync.Mutex
	kept map[[sha256.Size]byte]reading
}

// read is readCommand(command), from the kept readings when it is there.
func (c *readingCache) read(command string) (isolate, changesState bool) {
	if len(command) > maxPlainCommand {
		return readCommand(command) // isolated unread
	}
	key := sha256.Sum256([]byte(command))
	c.mu.Lock()
	r, ok := c.kept[key]
	c.mu.Unlock()
	if ok {
		return r.isolate, r.changesState
	}
	r.isolate, r.changesState = readCommand(command)
	c.mu.Lock()
	if len(c.kept) >= readingsKept {
		for k := range c.kept { // any one: map order is unspecified
			delete(c.kept, k)
			break
		}
	}
	c.kept[key] = r
	c.mu.Unlock()
	return r.isolate, r.changesState
}

// readCommand is NeedsIsolation, and for a command that need not be
// isolated, whether the parser found it may change the shell's variables
// or directory (see parsedPlain), which MayChangeState's reading of the
// text may have missed.
func readCommand(command string) (isolate, changesState bool) {
	if len(command) > maxPlainCommand || strings.Count(command, "(")+strings.Count(command, "{") > maxPlainNesting {
		// Long commands are mostly files written with a here-document,
		// isolated anyway; the caps bound the readings' time and the
		// parser's depth of recursion.
		return true, false
	}
	if strings.Contains(command, "$'") {
		// $'…' differs between shells (bash and busybox end it at an
		// unescaped quote; dash has no $'…' and ends it at the next
		// quote): words seen one way may be hidden the other.
		return true, false
	}
	if strings.Contains(command, "<<") {
		// A here-document's body is data, which the reading below would
		// take for commands, and a quote in it would hide what follows.
		return true, false
	}
	if strings.IndexByte(command, '`') >= 0 && strings.ContainsAny(command, "'\"#\\") || !plainSubstitutions(command) {
		// A command substitution is found by its parentheses (or
		// backquotes) alone; a quote, a comment or a backslash inside it
		// could make the reading end it elsewhere than the shell does.
		return true, false
	}
	for _, name := range specialNames {
		if strings.Contains(command, name) {
			return true, false
		}
	}
	if !plainParameters(command) {
		return true, false
	}
	plain, changesState := parsedPlain(command)
	if !plain {
		return true, false
	}
	command = joinContinuations(command)
	cmdPos := true
	prevWord := ""
	i := 0
	n := len(command)
	for i < n {
		c := command[i]
		switch {
		case c == ' ' || c == '\t':
			i++
			continue
		case c == '#' && (i == 0 || isSpaceOrOp(command[i-1])):
			for i < n && command[i] != '\n' {
				i++
			}
			continue
		case c == '\n' || c == ';' || c == '&' || c == '|':
			i++
			cmdPos, prevWord = true, ""
			continue
		case c == '(':
			if prevWord != "" && (!cmdPos || prevWord == "time") {
				return true, false // name ( ) { … }: a function definition
			}
			i++
			cmdPos, prevWord = true, ""
			continue
		case c == ')':
			// The end of a subshell or of a case pattern: a command may follow.
			i++
			cmdPos, prevWord = true, ""
			continue
		case c == '<' || c == '>':
			// A redirection's target is not a command.
			i++
			for i < n && (command[i] == '>' || command[i] == '&' || command[i] == '|' || command[i] == ' ' || command[i] == '\t') {
				i++
			}
			_, j := scanWord(command, i)
			i = j
			continue
		}
		word, j := scanWord(command, i)
		if j < n && (command[j] == '<' || command[j] == '>') && isDigits(word) {
			// The fd of the redirection that follows (`7<&- exec`): not
			// a word, and the command name is still to come.
			i = j
			continue
		}
		i = j
		if word == "" {
			i++
			continue
		}
		if !cmdPos {
			if unquoteWord(word) == "do" {
				cmdPos = true // for x do …: a command follows
				continue
			}
			prevWord = word
			continue
		}
		if strings.ContainsAny(word, "$`") {
			if eq := strings.IndexByte(word, '='); eq > 0 && validVarName(word[:eq]) {
				continue // an assignment: the command name is still to come
			}
			return true, false
		}
		name := unquoteWord(word)
		if isolatingWords[name] {
			return true, false
		}
		if eq := strings.IndexByte(word, '='); eq > 0 && validVarName(word[:eq]) {
			continue
		}
		if reservedWords[name] {
			if name == "time" {
				prevWord = word // time () { … }: a function in dash
			}
			continue
		}
		if strings.HasSuffix(name, "()") {
			return true, false
		}
		if mayExpand(word) {
			return true, false // e?ec, e[x]ec, {exec,}: a name the shell makes
		}
		cmdPos, prevWord = false, word
	}
	return false, changesState
}

// joinContinuations removes each backslash-newline the shell removes
// before it splits a command into words (those outside single quotes), so
// that `ex\<newline>ec` is read as the word exec.
func joinContinuations(s string) string {
	if !strings.Contains(s, "\\\n") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	single, double := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case single:
			single = c != '\''
		case c == '#' && !double && (i == 0 || isSpaceOrOp(s[i-1])):
			// A comment, to the end of its line: kept as it is (a
			// backslash ends nothing there, and quotes open nothing).
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				end = len(s) - i
			}
			b.WriteString(s[i : i+end])
			i += end - 1
			continue
		case c == '\\' && i+1 < len(s):
			if s[i+1] == '\n' {
				i++
				continue
			}
			b.WriteByte(c)
			i++
			c = s[i]
		case c == '"':
			double = !double
		case c == '\'' && !double:
			single = true
		}
		b.WriteByte(c)
	}
	return b.String()
}

// plainSubstitutions reports whether every $( in s is closed by a ) that
// parentheses alone find, with no quote, comment, backslash or backquote
// between: then the shell ends each where the reading does (an arithmetic
// $(( … )) alike). A parenthesis the shell would not count (quoted, in a
// comment, escaped) can only be in such a substitution if one of those is
// there too.
func plainSubstitutions(s string) bool {
	return everyAfter(s, "$(", func(rest string) bool {
		depth := 1
		for _, c := range []byte(rest) {
			switch {
			case c == '(':
				depth++
			case c == ')':
				if depth--; depth == 0 {
					return true
				}
			case strings.IndexByte("'\"#\\`", c) >= 0:
				return false
			}
		}
		return false // not closed
	})
}

// plainParameters reports whether every ${ in s is closed by the first }
// after it with nothing between that the reading could take for something
// else: no blank (after which it would see a comment), quote, backslash,
// parenthesis, brace or operator. ${HOME}, ${x:-a/b}, ${#x} and ${x%.py}
// are plain.
func plainParameters(s string) bool {
	return everyAfter(s, "${", func(rest string) bool {
		end := strings.IndexByte(rest, '}')
		return end >= 0 && !strings.ContainsAny(rest[:end], " \t\n'\"\\`(){;|&<>")
	})
}

// everyAfter reports whether ok holds for the text after each occurrence
// of open in s.
func everyAfter(s, open string, ok func(rest string) bool) bool {
	for {
		k := strings.Index(s, open)
		if k < 0 {
			return true
		}
		s = s[k+len(open):]
		if !ok(s) {
			return false
		}
	}
}

// mayExpand reports whether word, in command position, may become another
// word when the shell expands it: a pattern (*, ?, [ … ]) matched against
// the directory's names, or bash's brace expansion ({a,b}, {a..b}). The
// test command `[` and a lone `{` stay themselves.
func mayExpand(word string) bool {
	if strings.ContainsAny(word, "*?") {
		return true
	}
	if i := strings.IndexByte(word, '['); i >= 0 && strings.IndexByte(word[i+1:], ']') >= 0 {
		return true
	}
	if i := strings.IndexByte(word, '{'); i >= 0 && strings.IndexByte(word[i+1:], '}') >= 0 {
		return true
	}
	return false
}

// isDigits reports whether w is a number of digits only: before a
// redirection operator, the fd it redirects.
func isDigits(w string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] < '0' || w[i] > '9' {
			return false
		}
	}
	return w != ""
}

func isSpaceOrOp(c byte) bool {
	return strings.IndexByte(" \t\n;&|()<>", c) >= 0
}

// scanWord returns the word starting at i (quotes kept, so callers see
// expansions) and the index after it.
func scanWord(s string, i int) (string, int) {
	start := i
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\\':
			i += 2
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return s[start:], len(s)
			}
			i += j + 2
		case c == '"':
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			// $( … ) or $(( … )): to the matching parenthesis.
			depth := 0
			for i < len(s) {
				if s[i] == '(' {
					depth++
				} else if s[i] == ')' {
					depth--
					if depth == 0 {
						i++
						break
					}
				}
				i++
			}
		case c == '`':
			j := strings.IndexByte(s[i+1:], '`')
			if j < 0 {
				return s[start:], len(s)
			}
			i += j + 2
		case strings.IndexByte(" \t\n;&|<>", c) >= 0:
			return s[start:i], i
		case c == '(' || c == ')':
			if c == '(' && i+1 < len(s) && s[i+1] == ')' && i > start {
				return s[start : i+2], i + 2 // name()
			}
			return s[start:i], i
		default:
			i++
		}
	}
	if i > len(s) {
		i = len(s)
	}
	return s[start:i], i
}

// unquoteWord removes backslashes and quotes, so \set and 'set' are set.
func unquoteWord(w string) string {
	if !strings.ContainsAny(w, `\'"`) {
		return w
	}
	var b strings.Builder
	for i := 0; i < len(w); i++ {
		switch c := w[i]; c {
		case '\\':
			if i+1 < len(w) {
				i++
				b.WriteByte(w[i])
			}
		case '\'', '"':
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// stateWords are the commands that change the working directory or the
// exported variables of the shell they run in.
var stateWords = map[string]bool{
	"export": true, "unset": true, "cd": true, "chdir": true, "pushd": true, "popd": true, "read": true,
	"getopts": true, "readonly": true, "local": true, "declare": true, "typeset": true,
}

// MayChangeState reports whether a command run in the framing shell may
// change its directory or exports: it names one of stateWords or holds an
// assignment (any "="). Only then does its frame carry the shell's state,
// which keeps the common frame small. It errs towards yes.
func MayChangeState(command string) bool {
	command = joinContinuations(command)
	if strings.IndexByte(command, '=') >= 0 {
		return true
	}
	isWordByte := func(c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for i := 0; i < len(command); {
		if !isWordByte(command[i]) {
			i++
			continue
		}
		j := i
		for j < len(command) && isWordByte(command[j]) {
			j++
		}
		if stateWords[command[i:j]] {
			return true
		}
		i = j
	}
	return false
}
