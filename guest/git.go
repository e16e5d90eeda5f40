package guest

import (
	"errors"
	"strconv"
	"strings"
)

// GitClone describes one clone in the sandbox.
type GitClone struct {
	// Repo is the URL without credentials.
	Repo string
	// Dest is where to clone; when it is an existing directory the clone
	// goes into Dest/Name.
	Dest, Name string
	Branch     string
	Depth      int // 0: full history
	// User answers git's username prompt when a token is sent.
	User string
	// Token says that the token comes on stdin.
	Token bool
}

// GitCloneMark starts the line the clone script prints on success:
// "<mark> <commit> <path>".
const GitCloneMark = "sandbox-mcp-cloned"

// GitCloneScript clones as g says. The token, when sent, is read from
// stdin into a file only the sandbox's user can read, handed to git by an
// askpass program that reads that file (so it is on no command line), and
// removed when the script ends (a killed clone's is removed by the next
// one within the hour). A credential
// helper configured in the sandbox is not consulted, and git never
// prompts. It runs in the persistent shell, in a subshell.
func GitCloneScript(g GitClone) (string, error) {
	for _, s := range []string{g.Repo, g.Dest, g.Name, g.Branch, g.User} {
		if strings.IndexByte(s, 0) >= 0 {
			return "", errors.New("git_clone arguments must not hold NUL")
		}
	}
	if g.Repo == "" || g.Dest == "" || g.Name == "" {
		return "", errors.New("repo, path and name are required")
	}
	var b strings.Builder
	b.WriteString("(umask 077\n")
	b.WriteString("r=" + quote(g.Repo) + "; d=" + quote(g.Dest) + "; n=" + quote(g.Name) + "\n")
	b.WriteString(`command -v git >/dev/null 2>&1 || { echo 'git is not installed in the sandbox (install tool: git)' >&2; exit 127; }` + "\n")
	b.WriteString(`if [ -d "$d" ]; then d=${d%/}/$n; fi` + "\n")
	b.WriteString(`case $d in /*) ;; *) d=$(command pwd)/$d ;; esac` + "\n")
	b.WriteString(`if [ -e "$d" ] && [ -n "$(command ls -A -- "$d" 2>/dev/null)" ]; then echo "$d exists and is not empty: name another path" >&2; exit 17; fi` + "\n")
	b.WriteString("export GIT_TERMINAL_PROMPT=0\n")
	if g.Token {
		// Stale credentials of a clone that was killed are removed first.
		b.WriteString(`command find /tmp -maxdepth 1 -name '.sandbox-mcp-git-*' -user "$(command id -u)" -mmin +60 -exec rm -rf {} + 2>/dev/null` + "\n")
		b.WriteString(`t=$(command mktemp -d /tmp/.sandbox-mcp-git-XXXXXX) || exit 1` + "\n")
		b.WriteString(`trap 'command rm -rf "$t"' EXIT` + "\n")
		b.WriteString(`command cat >"$t/token" || exit 1` + "\n")
		b.WriteString(`command printf '%s\n' ` + quote(g.User) + ` >"$t/user" || exit 1` + "\n")
		b.WriteString(`command printf '%s\n' '#!/bin/sh' 'd=$(command dirname -- "$0")' ` +
			`'case "$1" in [Uu]sername*) command cat -- "$d/user" ;; *) command cat -- "$d/token" ;; esac' >"$t/askpass" || exit 1` + "\n")
		b.WriteString(`command chmod 700 "$t/askpass" || exit 1` + "\n")
		b.WriteString(`export GIT_ASKPASS="$t/askpass"` + "\n")
	}
	args := `command git -c credential.helper= -c core.askPass= clone --progress`
	if g.Token {
		args = `command git -c credential.helper= clone --progress`
	}
	if g.Depth > 0 {
		args += " --depth " + strconv.Itoa(g.Depth)
	}
	if g.Branch != "" {
		args += " --branch " + quote(g.Branch)
	}
	b.WriteString(args + ` -- "$r" "$d" </dev/null || exit $?` + "\n")
	b.WriteString(`c=$(command git -C "$d" rev-parse HEAD 2>/dev/null) || c=-` + "\n")
	b.WriteString(`command printf '` + GitCloneMark + ` %s %s\n' "$c" "$d")`)
	return b.String(), nil
}

// ParseGitCloned reads the success line of GitCloneScript.
func ParseGitCloned(out string) (commit, path string, ok bool) {
	i := strings.LastIndex(out, GitCloneMark+" ")
	if i < 0 {
		return "", "", false
	}
	rest, _, _ := strings.Cut(out[i+len(GitCloneMark)+1:], "\n")
	commit, path, ok = strings.Cut(strings.TrimSuffix(rest, "\r"), " ")
	return commit, path, ok
}
