package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/redact"
	"github.com/sandbox-mcp/sandbox-mcp/internal/textcut"
	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// CloneRequest is one git_clone.
type CloneRequest struct {
	Repo   string
	Branch string
	// Token authenticates over HTTPS; credentials in Repo's URL are taken
	// out of it and used the same way.
	Token string
	// User answers git's username prompt; default x-access-token (what
	// GitHub expects with a token; GitLab and others take any name).
	User string
	Path string // default the workspace
	// Depth 0 clones the whole history.
	Depth   int
	Timeout time.Duration
	// Progress, if set, receives git's output as it comes, credentials
	// taken out (for progress notifications).
	Progress io.Writer
}

// redactingWriter passes each write on with credentials taken out.
type redactingWriter struct {
	red func(string) string
	w   io.Writer
}

func (r redactingWriter) Write(p []byte) (int, error) {
	_, _ = io.WriteString(r.w, r.red(string(p)))
	return len(p), nil
}

// Cloned is a clone that worked.
type Cloned struct {
	Repo   string // without credentials
	Path   string
	Commit string
	Output string // git's output, credentials redacted
	Took   time.Duration
}

// gitTimeout bounds a clone by default.
const gitTimeout = 10 * time.Minute

// GitClone runs git clone inside the sandbox, on its network and disk.
// The token reaches git only through an askpass file that the clone
// removes; it is on no command line, not in the history (the history shows
// the redacted URL), not in the clone's config, and not in any text
// returned: git's output is redacted.
func (m *Manager) GitClone(ctx context.Context, name string, req CloneRequest) (Cloned, error) {
	repo, user, token, err := splitCredentials(req.Repo, req.User, req.Token)
	if err != nil {
		return Cloned{}, &ArgError{Err: err}
	}
	dest := req.Path
	if dest == "" {
		dest = m.cfg.Workdir
	}
	g := guest.GitClone{Repo: repo, Dest: dest, Name: repoName(repo), Branch: req.Branch, Depth: req.Depth, User: user, Token: token != ""}
	if strings.HasPrefix(g.Branch, "-") {
		return Cloned{}, &ArgError{Err: fmt.Errorf("branch %q must not start with '-'", g.Branch)}
	}
	script, err := guest.GitCloneScript(g)
	if err != nil {
		return Cloned{}, &ArgError{Err: err}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = gitTimeout
	}
	var stdin []byte
	if token != "" {
		stdin = []byte(token)
	}
	red := redactor(token)
	// git's own output (its progress, on stderr) and the script's
	// success line (stdout) are kept apart: the two streams arrive
	// through pipes of their own, and a progress line still open (ended
	// by '\r') when the success line came would swallow it.
	out := &shell.Capture{Limit: 64 << 10}
	var w io.Writer = out
	if req.Progress != nil {
		w = io.MultiWriter(out, redactingWriter{red: red, w: req.Progress})
	}
	status := &shell.Capture{Limit: 8 << 10}
	start := time.Now()
	res, err := m.ExecAs(ctx, name, "git_clone "+red(repo), shell.Request{
		Command: script, Trusted: true, Stdin: stdin, Timeout: timeout, Stdout: status, Stderr: w,
	})
	took := time.Since(start)
	if err != nil {
		return Cloned{}, errors.New(red(err.Error()))
	}
	head, tail, _ := out.Parts()
	text := red(collapseProgress(string(head) + string(tail)))
	sh, st, _ := status.Parts()
	said := red(string(sh) + string(st))
	commit, where, ok := guest.ParseGitCloned(said)
	if i := strings.LastIndex(said, guest.GitCloneMark); i >= 0 {
		said = said[:i]
	}
	if said = strings.TrimSpace(said); said != "" {
		text = strings.TrimRight(text, "\n") + "\n" + said
	}
	if res.TimedOut || res.Canceled || res.ExitCode != 0 || !ok {
		why := fmt.Sprintf("exit %d", res.ExitCode)
		switch {
		case res.TimedOut:
			why = fmt.Sprintf("timed out after %s", timeout)
		case res.Canceled:
			why = "cancelled"
		}
		return Cloned{}, fmt.Errorf("git clone of %s in sandbox %q failed (%s): %s", red(repo), name, why, textcut.Shorten(strings.TrimSpace(text), 2000))
	}
	text = strings.TrimSpace(text)
	return Cloned{Repo: red(repo), Path: where, Commit: commit, Output: textcut.Shorten(text, 4000), Took: took}, nil
}

// splitCredentials takes the credentials out of repo's address. Over
// http(s) a password is the token unless one was given, and the address
// git sees has no user information; a lone user name is kept as git's
// user. No other transport takes a password from the address (ssh asks
// for a key), so one there is refused rather than passed on. The address
// is split by hand, not by a URL parser, so one no parser accepts
// ("TOKEN%zz", a raw '@' or '/' in the password) is split all the same.
func splitCredentials(repo, user, token string) (string, string, string, error) {
	if repo == "" || strings.HasPrefix(repo, "-") {
		return "", "", "", errors.New("repo must be a URL or path that does not start with '-'")
	}
	if strings.ContainsAny(token, "\n\x00") {
		return "", "", "", errors.New("token must be one line")
	}
	if user == "" {
		user = "x-access-token"
	}
	scheme, rest, isURL := strings.Cut(repo, "://")
	if !isURL || !validScheme(scheme) {
		// A path, or scp-like [user@]host:path, where a password would be
		// part of the host to git.
		if shown := redact.Text(repo); shown != repo {
			return "", "", "", fmt.Errorf("repo %s holds a credential, which git cannot use there: give an https URL and token, or use an ssh key", shown)
		}
		return repo, user, token, nil
	}
	// The authority ends at the first '/' after the last '@' that comes
	// before any '/': a password may hold raw '/' or '@' characters.
	auth := rest
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		auth = rest[:i]
	}
	at := strings.LastIndexByte(auth, '@')
	if at < 0 {
		return repo, user, token, nil
	}
	info, host := rest[:at], rest[at+1:]
	name, pw, hasPW := strings.Cut(info, ":")
	web := strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")
	switch {
	case !hasPW && (!web || token == ""):
		return repo, user, token, nil // a user name alone is no secret to git
	case !web:
		return "", "", "", fmt.Errorf("repo %s holds a password, which git cannot use over %s: give an https URL and token, or use an ssh key", redact.Text(repo), scheme)
	}
	if hasPW && token == "" {
		token = unescape(pw)
	}
	if n := unescape(name); n != "" {
		user = n
	}
	return scheme + "://" + host, user, token, nil
}

// validScheme reports whether s is a URL scheme: a letter, then letters,
// digits, '+', '-' or '.'.
func validScheme(s string) bool {
	if s == "" || !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isLetter(c) && !('0' <= c && c <= '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// unescape percent-decodes s, or returns it as given when it does not
// decode: git would send it as written.
func unescape(s string) string {
	if d, err := url.PathUnescape(s); err == nil {
		return d
	}
	return s
}

// repoName is the directory git would clone repo into.
func repoName(repo string) string {
	s := strings.TrimRight(repo, "/")
	if u, err := url.Parse(s); err == nil && u.Path != "" {
		s = u.Path
	}
	s = path.Base(strings.ReplaceAll(s, ":", "/"))
	s = strings.TrimSuffix(s, ".git")
	if s == "" || s == "." || s == "/" {
		return "repo"
	}
	return s
}

// redactor returns a func that hides token and any credentials.
func redactor(token string) func(string) string {
	return func(s string) string { return redact.Text(s, token) }
}

// collapseProgress keeps the last state of lines git redraws with \r.
func collapseProgress(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if j := strings.LastIndexByte(strings.TrimRight(l, "\r"), '\r'); j >= 0 {
			lines[i] = l[j+1:]
		}
	}
	return strings.Join(lines, "\n")
}
