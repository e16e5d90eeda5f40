package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/guest"
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
	out := &shell.Capture{Limit: 64 << 10}
	var w io.Writer = out
	if req.Progress != nil {
		w = io.MultiWriter(out, redactingWriter{red: red, w: req.Progress})
	}
	start := time.Now()
	res, err := m.ExecAs(ctx, name, "git_clone "+repo, shell.Request{
		Command: script, Trusted: true, Stdin: stdin, Timeout: timeout, Stdout: w, Stderr: w,
	})
	took := time.Since(start)
	if err != nil {
		return Cloned{}, errors.New(red(err.Error()))
	}
	head, tail, _ := out.Parts()
	text := red(collapseProgress(string(head) + string(tail)))
	commit, where, ok := guest.ParseGitCloned(text)
	if res.TimedOut || res.Canceled || res.ExitCode != 0 || !ok {
		why := fmt.Sprintf("exit %d", res.ExitCode)
		switch {
		case res.TimedOut:
			why = fmt.Sprintf("timed out after %s", timeout)
		case res.Canceled:
			why = "cancelled"
		}
		return Cloned{}, fmt.Errorf("git clone of %s in sandbox %q failed (%s): %s", repo, name, why, shorten(strings.TrimSpace(text), 2000))
	}
	text = strings.TrimSpace(text[:strings.LastIndex(text, guest.GitCloneMark)])
	return Cloned{Repo: repo, Path: where, Commit: commit, Output: shorten(text, 4000), Took: took}, nil
}

// splitCredentials takes user and password out of an http(s) URL; a
// password there is the token unless one was given.
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
	u, err := url.Parse(repo)
	if err != nil || u.User == nil || (u.Scheme != "http" && u.Scheme != "https") {
		return repo, user, token, nil
	}
	if pw, ok := u.User.Password(); ok {
		if token == "" {
			token = pw
		}
		if n := u.User.Username(); n != "" {
			user = n
		}
	} else if token != "" && u.User.Username() != "" {
		user = u.User.Username()
	} else {
		return repo, user, token, nil // a user name alone is no secret
	}
	u.User = nil
	return u.String(), user, token, nil
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

var urlCreds = regexp.MustCompile(`(://)[^/@\s]+@`)

// redactor returns a func that hides token and any URL credentials.
func redactor(token string) func(string) string {
	return func(s string) string {
		if token != "" {
			s = strings.ReplaceAll(s, token, "***")
		}
		return urlCreds.ReplaceAllString(s, "${1}***@")
	}
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
