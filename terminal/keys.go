package terminal

import (
	"fmt"
	"sort"
	"strings"
)

// keys are the named keys terminal_send takes, as the bytes a terminal
// sends for them. The arrows, Home and End depend on the cursor-key mode
// the program set (see keyBytes).
var keys = map[string]string{
	"Enter":     "\r",
	"Tab":       "\t",
	"Esc":       "\x1b",
	"Backspace": "\x7f",
	"Up":        "\x1b[A",
	"Down":      "\x1b[B",
	"Right":     "\x1b[C",
	"Left":      "\x1b[D",
	"Home":      "\x1b[H",
	"End":       "\x1b[F",
	"PageUp":    "\x1b[5~",
	"PageDown":  "\x1b[6~",
}

func init() {
	for c := 'A'; c <= 'Z'; c++ {
		keys["Ctrl-"+string(c)] = string(rune(c - 'A' + 1))
	}
}

// KeyNames lists the named keys, sorted.
func KeyNames() []string {
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// keyBytes is what typing the named key sends; appCursor is the
// program's application cursor-key mode (DECCKM), in which the arrows,
// Home and End send SS3 sequences. Names match case-insensitively.
func keyBytes(name string, appCursor bool) (string, error) {
	for k, v := range keys {
		if strings.EqualFold(k, name) {
			if appCursor && strings.HasPrefix(v, "\x1b[") && len(v) == 3 {
				return "\x1bO" + v[2:], nil
			}
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown key %q: the keys are Enter, Tab, Esc, Backspace, Up, Down, Left, Right, Home, End, PageUp, PageDown and Ctrl-A … Ctrl-Z", name)
}
