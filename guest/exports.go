package guest

import "strings"

// ExportNames returns the variable names in the output of `export -p` as
// printed by dash, busybox ash and bash (`export NAME='v'`, `export NAME`,
// `declare -x NAME="v"`). Values may span lines and contain quotes; only
// the names are returned, in order.
func ExportNames(text string) []string {
	var names []string
	i := 0
	for i < len(text) {
		// At the start of a logical line.
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
		i += len(prefix)
		start := i
		for i < len(text) && text[i] != '=' && text[i] != '\n' {
			i++
		}
		if name := text[start:i]; validVarName(name) {
			names = append(names, name)
		}
		if i < len(text) && text[i] == '=' {
			i = skipValue(text, i+1)
		}
		i = skipLine(text, i)
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
