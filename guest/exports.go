package guest

import (
	"slices"
	"strings"
)

// ExportNames returns the variable names in the output of `export -p` as
// printed by dash, busybox ash and bash (`export NAME='v'`, `export NAME`,
// `declare -x NAME="v"`). Values may span lines and contain quotes; only
// the names are returned, in order.
func ExportNames(text string) []string {
	var names []string
	for _, e := range ParseExports(text) {
		names = append(names, e.Name)
	}
	return names
}

// skipValue moves past one shell word that may hold quoted newlines.
func skipValue(text string, i int) int {
	for i < len(text) {
		switch c := text[i]; c {
		case '\n':
			return i
		case '\'':
			j := strings.IndexByte(text[i+1:], '\'')
			if j < 0 {
				return len(text)
			}
			i += j + 2
		case '"':
			i++
			for i < len(text) && text[i] != '"' {
				if text[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case '\\':
			i += 2
		default:
			i++
		}
	}
	return len(text)
}

func skipLine(text string, i int) int {
	j := strings.IndexByte(text[i:], '\n')
	if j < 0 {
		return len(text)
	}
	return i + j + 1
}

// bashReadOnly are the variables bash makes read-only: assigning one is a
// fatal error in bash run as sh.
var bashReadOnly = map[string]bool{
	"BASHOPTS": true, "BASH_VERSINFO": true, "EUID": true, "PPID": true, "SHELLOPTS": true, "UID": true,
}

// restorable reports whether Restore may set (or unset) the exported
// variable e in a framing shell: not one of bash's read-only variables
// (setting one, even to its own value, ends bash run as sh), nor one of
// the names that change how the shell reads the frame (see specialNames;
// unsetting POSIXLY_CORRECT ends bash's POSIX mode), nor a PATH with a %
// (dash reads an entry's %func or %builtin as a command to source files
// or look for builtins there). A command may still export them in its
// own subshell; they do not reach the framing shell.
func restorable(e Export) bool {
	switch {
	case bashReadOnly[e.Name], e.Name == "PATH" && strings.Contains(e.Stmt, "%"),
		strings.HasPrefix(e.Name, "BASH_"), strings.HasPrefix(e.Name, "__sbx_"):
		return false
	}
	for _, name := range specialNames {
		if e.Name == name {
			return false
		}
	}
	return true
}

// Export is one variable of `export -p` output: its name and the whole
// statement that sets it (which may span lines).
type Export struct {
	Name, Stmt string
}

// ParseExports splits `export -p` output into its statements, in order.
// Lines that are not export statements are dropped.
func ParseExports(text string) []Export {
	var out []Export
	i := 0
	for i < len(text) {
		line := text[i:]
		var prefix string
		switch {
		case strings.HasPrefix(line, "export "):
			prefix = "export "
		case strings.HasPrefix(line, "declare -x "):
			prefix = "declare -x "
		}
		if prefix == "" {
			i = skipLine(text, i)
			continue
		}
		start := i
		i += len(prefix)
		nameStart := i
		for i < len(text) && text[i] != '=' && text[i] != '\n' {
			i++
		}
		name := text[nameStart:i]
		if i < len(text) && text[i] == '=' {
			i = skipValue(text, i+1)
		}
		stmt := strings.TrimSuffix(text[start:min(i, len(text))], "\n")
		i = skipLine(text, i)
		if validVarName(name) {
			out = append(out, Export{Name: name, Stmt: stmt})
		}
	}
	return out
}

// MergeState applies the changes a command made (from before to after) to
// base, the state other commands may have changed meanwhile: per variable
// the last writer wins, and the directory moves only if the command moved
// it.
func MergeState(base, before, after State) State {
	if base == before {
		return after
	}
	if after.Cwd != before.Cwd {
		base.Cwd = after.Cwd
	}
	if after.Exports == before.Exports {
		return base
	}
	was, now := exportMap(before.Exports), exportMap(after.Exports)
	merged := map[string]string{}
	var names []string
	for _, e := range ParseExports(base.Exports) {
		merged[e.Name] = e.Stmt
		names = append(names, e.Name)
	}
	for n, stmt := range now {
		if was[n] != stmt {
			if _, ok := merged[n]; !ok {
				names = append(names, n)
			}
			merged[n] = stmt
		}
	}
	for n := range was {
		if _, ok := now[n]; !ok {
			delete(merged, n)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		if stmt, ok := merged[n]; ok {
			b.WriteString(stmt)
			b.WriteByte('\n')
		}
	}
	base.Exports = b.String()
	return base
}

// exportMap maps each variable of `export -p` output to its statement.
func exportMap(text string) map[string]string {
	m := map[string]string{}
	for _, e := range ParseExports(text) {
		m[e.Name] = e.Stmt
	}
	return m
}
