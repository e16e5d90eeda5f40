package guest

import (
	"fmt"
	"strings"
	"testing"
)

func TestNeedsIsolation(t *testing.T) {
	for cmd, want := range map[string]bool{
		"true":                                   false,
		"ls -la /tmp && echo done":               false,
		"cd /tmp; export A=1":                    false,
		"python3 -m pytest -q":                   false,
		"echo $(date) `id` ${HOME}":              false,
		"git reset --hard":                       false,
		"echo set exit trap":                     false, // arguments, not commands
		"X=1 make":                               false,
		"sleep 1 &":                              false,
		"set -e; false":                          true,
		"  set -x":                               true,
		"true && set -u":                         true,
		"ulimit -v 1000":                         true,
		"umask 077":                              true,
		"trap 'echo x' EXIT":                     true,
		"alias ll='ls -l'":                       true,
		"f() { :; }; f":                          true,
		"f () { :; }":                            true,
		"function f { :; }":                      true,
		"exit 3":                                 true,
		"exec >/dev/null":                        true,
		"7<&- exec":                              true, // the redirections go first
		"2>/dev/null exec 7<&-":                  true,
		"0<&7 exec":                              true,
		"1>/dev/null exec":                       true,
		"ls 2>/dev/null":                         false,
		"2>/dev/null ls 7<&-":                    false, // for ls alone
		"echo 12 >x; cat 3<x":                    false,
		"eval \"$CMD\"":                          true,
		". ./venv/bin/activate":                  true,
		"source env.sh":                          true,
		"$CMD arg":                               true,
		"`echo exit`":                            true,
		"\"$(echo exit)\"":                       true,
		"IFS=:":                                  true,
		"if true; then exit 1; fi":               true,
		"case x in x) set -e;; esac":             true,
		"\\set -e":                               true,
		"'exit' 1":                               true,
		"readonly PATH":                          true,
		"for i in 1 2; do return; done":          true,
		"ex\\\nec 7<&-":                          true, // a continued line is one word
		"7\\\n<&- exec":                          true,
		"7<&- \\\nexec":                          true,
		"echo \"a\\\nb\"; ex\\\nec 7<&-":         true,
		"echo 'it''s' \\\n; ex\\\nec":            true,
		"echo \\\\\nexec 7<&-":                   true,  // an escaped backslash, then a newline
		"echo 'a\\\nexec'":                       false, // quoted: not joined, not a command
		"ls \\\n  -la":                           false,
		"exe? 7<&-":                              true, // a pattern the directory may match
		"e[x]ec 7<&-":                            true,
		"{exec,} 7<&-":                           true, // bash's braces
		"./run*.sh":                              true,
		"[ -f x ] && echo y":                     false, // the test command
		"[[ -f x ]]":                             false,
		"ls *.txt [ab]":                          false, // patterns as arguments
		"{ ls; }":                                false,
		"echo $'\\'' ; exec 7<&- ; echo '":       true, // $'…' read two ways
		"echo $(echo '(') ; exec 7<&- # )":       true, // a quote inside $( … )
		"echo `echo \"'\"` ; exec 7<&-":          true,
		"cat <<EOF\na '\nEOF\nexec 7<&-\n# '":    true, // a here-document's quote
		"cat <<'EOF' > f.py\nprint(1)\nEOF":      true,
		"echo $(date) > f":                       false,
		"cd \"$(mktemp -d)\" && echo \"$(pwd)\"": false, // quotes around it, not in it
		"echo $(( $(nproc) * 2 )) 'x'":           true,  // the output is computed
		"echo \"$(echo \")\")\"; exec 7<&-":      true,  // a quote in it
		"echo $(ls # )\n) ; exec 7<&-":           true,  // a comment in it
		"echo $(echo \\)) ; exec 7<&-":           true,
		"echo $(echo ( ; exec 7<&-":              true, // never closed
		"echo ${x:- #}; f() { echo hidden; }":    true, // a blank in ${ … }
		"echo ${x:-|#}; set -e":                  true,
		"echo $(echo ${x:-(}) ; set -e ; case x in x) ;; esac": true,
		"echo ${HOME} ${#x} ${x%.py} ${x:-a/b}":                false,
		"true # \\\nf() { echo hidden; }":                      true, // no continuation in a comment
		"true # it's\nse\\\nt -e":                              true, // nor a quote
		"true # it's":                                          false,
		"time () { echo hidden; }":                             true, // a function in dash
		"time make":                                            false,
		"for x do set -e; done":                                true,
		"echo to do list":                                      false,
		"export \"IFS\"=:":                                     true,
		"for IFS in :; do :; done":                             true,
		": $(( IFS = 1 ))":                                     true,
		"read IFS < /etc/hostname":                             true,
		// Found by the parser, missed by the text reading:
		"time -p set -e":             true, // bash's time takes options
		"time -p exec 7<&-":          true,
		"coproc cat":                 true, // leaves a process and fds behind
		"coproc { exec 7<&-; }":      true,
		"echo 'never closed; set -e": true, // the grammar cannot parse it
		"if true; then set -e":       true,
		"[[ -n $x ]] && ((2 > 1))":   false, // bash's tests and arithmetic
		// Names set where the text does not show them, and bash's fatal
		// errors reached through a value:
		"p=%; PATH=/tmp/d${p}func:$PATH; f":         true,
		"p=%; export PATH=/tmp/b:${p}builtin:$PATH": true,
		"PATH=/opt/bin:$PATH make":                  true,
		"PWD=/etc":                                  true,
		"for UID in 1; do :; done":                  true,
		"for PATH in /x; do :; done":                true,
		"z=1/0; echo $((z))":                        true,
		"z=1/0; echo $[z]":                          true,
		"a=UI; z=${a}D=1; : $((z))":                 true,
		"a=GLOBIGNOR; z=${a}E=1; ((z))":             true,
		"a=GLOBIGNOR; z=${a}E=1; let z":             true,
		"echo $((2**-1))":                           true,
		"echo $((08))":                              true, // not octal
		"x=$((RANDOM % 10))":                        true,
		"export -z":                                 true,
		"compgen -W '${x?}'":                        true,
		"test -v 'a[${x?}]'":                        true,
		"[ -v 'a[$((x=1/0))]' ]":                    true,
		"[[ -v x ]]":                                true,
		"[[ $x -eq 1 ]]":                            true,
		"read -r 'a[${x?}]' </dev/null":             true,
		"a=GLOBIGNOR; x=${a}E; : ${!x:=zz}":         true,
		": ${PATH:=/bin}":                           true,
		"echo $((10/2)) $((7 % 3)) $((1 + 4 * 2))":  false,
		"[[ 2 -gt 1 ]] && echo yes":                 false,
		"printf '%s\\n' --verbose -v":               false, // after the format
		"export -p; export -n A":                    false,
		"for f in a b; do echo $f; done":            false,
		"history -s 'set -u'; fc -s":                true, // runs history's text
		"jobs -x set -u":                            true, // runs its command in the shell
		"jobs -l; jobs":                             false,
		"times -x":                                  true, // a special builtin's usage error
		"times":                                     false,
		"GROUPS= :":                                 true,
		"FUNCNAME=x export A":                       true,
		"echo ${#=}":                                true, // bad substitution
		"echo ${#} ${#x}":                           false,
		"o=-v; a=BAS; printf $o ${a}H_XTRACEFD 1":   true, // an option from an expansion
		"o=-v; n=GLOBIGNOR; printf $o ${n}E \"*\"":  true,
		"o=-v; [ $o 'a[1/0]' ]":                     true,
		"o=-v; s='a[1/0]'; [ $o \"$s\" ]":           true,
		"o=-v; [ -f x -a $o 'a[1/0]' ]":             true,
		"o=-p; wait $o x y":                         true,
		"suspend -f":                                true,
		"printf \"$fmt\" \"$a\"; printf \"$x\"":     false,
		"wait $pid":                                 false,
		"[ \"$a\" = \"$b\" ] && [ -n \"$x\" ] && test -f \"$f\" && [ \"$y\" ]": false,
		"[ \"$n\" -gt 2 ] || test \"$a\" != x":                                 false,
		// Names that change how the shell reads what follows, however
		// they are reached:
		"v=IF; export ${v}S=:":                                true,
		"v=IF; read ${v}S < /etc/hostname":                    true,
		": $(( BASH_ALIASES[command] = 0 ))":                  true, // bash: an alias
		"let BASH_ALIASES[command]=0":                         true,
		"printf -v 'x' '%s' 'set -e;'":                        true,
		"mapfile -C 'set -e;:' -c 1 a < /etc/hostname":        true, // -C runs text
		"readarray -C 'f() { :; }; :' -c 1 a < /etc/hostname": true,
		"BASH_XTRACEFD=1; BASH_XTRACEFD=":                     true, // closes fd 1
		"PATH=/tmp/d%func:$PATH f":                            true, // dash sources /tmp/d/f
		"x=/tmp/d%func; PATH=$x f":                            true,
		"PATH=/tmp/b:%builtin:$PATH":                          true,
		"GLOBIGNORE=x":                                        true,
		"EXECIGNORE='*/base64'":                               true,
		"__sbx_done=1":                                        true,
		"CDPATH=/tmp":                                         true,
		// What bash as sh takes for a fatal error, even under command eval:
		": > /nonexistent/x":                      true,
		"export A=1 > /nonexistent/x":             true,
		"export UID=1":                            true,
		"UID=1 true":                              true,
		"echo $((10/0))":                          true,
		"cd /tmp && export A=1 && echo ${B:?}":    true,
		"read -r l <&11":                          true, // bash's copy of its input
		"read -u 11 l":                            true,
		"exec 11>&-; true {fd}>/tmp/x":            true,
		"echo $((1+2)) ${x:-a} ${y:=b}":           false,
		"~/bin/tool --help":                       false, // a path: no builtin
		"~ --help":                                true,  // HOME may name one
		"export PATH=$PATH:/opt/bin A=\"$(pwd)\"": true,  // PATH is bound
		"export A=\"$(pwd)\" B=$HOME/x":           false,
		"read -r line < f; echo \"$line\"":        false,
		"printf '%s\\n' a b 2>&1":                 false,
	} {
		if got := NeedsIsolation(cmd); got != want {
			t.Errorf("NeedsIsolation(%q) = %v, want %v", cmd, got, want)
		}
	}
}

// TestFrameCarriesStateTheParserFound checks that a command the text
// reading of MayChangeState misses, but the parser names (c\d is cd), has
// its frame report the shell's state.
func TestFrameCarriesStateTheParserFound(t *testing.T) {
	for cmd, want := range map[string]string{
		"c\\d /tmp":              "__sbx_end M 1\n",
		"'cd' /tmp":              "__sbx_end M 1\n",
		"ls /tmp":                "__sbx_end M 0\n",
		"echo cd":                "__sbx_end M 1\n", // the text reading errs towards yes
		"true && \\export A":     "__sbx_end M 1\n",
		"for A in 2; do :; done": "__sbx_end M 1\n",
		"chdir /tmp":             "__sbx_end M 1\n", // dash's other name for cd
		"echo $((1+2))":          "__sbx_end M 0\n",
	} {
		f, err := CommandFrame("M", Command{Command: cmd, RunID: "run0123456789"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(f.Script, want) {
			t.Errorf("frame of %q lacks %q:\n%s", cmd, want, f.Script)
		}
	}
}

func TestMayChangeState(t *testing.T) {
	for cmd, want := range map[string]bool{
		"true":                false,
		"ls -la":              false,
		"make test":           false,
		"cd /tmp":             true,
		"export A":            true,
		"A=1":                 true,
		"unset B":             true,
		"read line < f":       true,
		"echo a=b":            true, // errs towards yes
		"abcd efexport":       false,
		"pushd /x":            true,
		": ${X:=1}":           true,
		"popd":                true,
		"getopts ab opt":      true,
		"/usr/bin/env | sort": false,
	} {
		if got := MayChangeState(cmd); got != want {
			t.Errorf("MayChangeState(%q) = %v, want %v", cmd, got, want)
		}
	}
}

// TestRestoreLeavesWhatChangesTheShell checks that the prelude that
// brings a shell to a state neither sets nor unsets a variable bash keeps
// read-only (export UID run in a subshell reports UID as exported), which
// would end bash run as sh at once, nor one that changes how the shell
// reads the frame, nor a PATH dash would read %func or %builtin in.
func TestRestoreLeavesWhatChangesTheShell(t *testing.T) {
	exports := "export A=\"1\"\nexport UID=\"0\"\nexport B='x\ny'\nexport IFS=\":\"\n" +
		"export PATH=\"/tmp/d%func:/bin\"\nexport GLOBIGNORE=\"x\"\nexport BASH_ENV=\"/x\"\n"
	got := Restore(State{Cwd: "/w", Exports: exports}, []string{"A", "PPID", "C", "POSIXLY_CORRECT", "__sbx_x"})
	want := "unset C\nexport A=\"1\"\nexport B='x\ny'\ncd -- '/w'\n"
	if got != want {
		t.Fatalf("Restore = %q, want %q", got, want)
	}
	plain := "export PATH=\"/opt/bin:/bin\"\nexport NOTIFS=\"1\"\nexport MY_BASH_X=\"2\"\n"
	if got := Restore(State{Exports: plain}, nil); got != plain {
		t.Fatalf("a plain PATH and names that only hold special ones: Restore = %q", got)
	}
}

func TestMergeState(t *testing.T) {
	base := State{Cwd: "/a", Exports: "export A='1'\nexport B='2'\nexport OTHER='x'\n"}
	before := State{Cwd: "/a", Exports: "export A='1'\nexport B='2'\n"}
	after := State{Cwd: "/b", Exports: "export A='9'\nexport C='3'\n"}
	got := MergeState(base, before, after)
	if got.Cwd != "/b" || got.Exports != "export A='9'\nexport C='3'\nexport OTHER='x'\n" {
		t.Fatalf("got %+v", got)
	}
	if MergeState(before, before, after) != after {
		t.Fatal("an unchanged base should take the command's state as is")
	}
}

// TestNeedsIsolationOfDeepCommands checks that nesting no agent writes
// is isolated rather than read: deep enough, it overflowed the parser's
// stack, which no recover catches.
func TestNeedsIsolationOfDeepCommands(t *testing.T) {
	for _, c := range []string{
		strings.Repeat("(", 600000),
		strings.Repeat("$(", 40000) + strings.Repeat(")", 40000),
		"echo " + strings.Repeat("$(( 1 + ", 20000) + "1" + strings.Repeat("))", 20000),
		"echo " + strings.Repeat("x", maxPlainCommand),
	} {
		if !NeedsIsolation(c) {
			t.Errorf("NeedsIsolation(%.20q… of %d bytes) = false", c, len(c))
		}
	}
}

// The kept readings are the readings: read again, after the cache was
// full and let readings go, each command reads as it did unkept.
func TestKeptReadingsReadAsNew(t *testing.T) {
	var cmds []string
	for i := range readingsKept + 40 {
		cmds = append(cmds, fmt.Sprintf("echo %d", i), fmt.Sprintf("set -e; echo %d", i), fmt.Sprintf("cd /t%d", i))
	}
	cmds = append(cmds, "true", "read -u 11 l", "export A=\"$(pwd)\" B=$HOME/x", strings.Repeat("echo x; ", 200)+"set -e", strings.Repeat("echo x; ", maxPlainCommand/8+1))
	for round := range 3 {
		for _, c := range cmds {
			i1, c1 := readings.read(c)
			i2, c2 := readCommand(c)
			if i1 != i2 || c1 != c2 {
				t.Fatalf("round %d: %q read as %v %v, unkept %v %v", round, c, i1, c1, i2, c2)
			}
		}
	}
	readings.mu.Lock()
	n := len(readings.kept)
	readings.mu.Unlock()
	if n > readingsKept {
		t.Fatalf("%d readings kept, at most %d wanted", n, readingsKept)
	}
}
