package redact

import (
	"net/url"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"git clone https://alice:s3cretTok@github.com/o/r.git", "git clone https://alice:***@github.com/o/r.git"},
		{"git_clone https://alice:TOKEN%zz@host/r.git", "git_clone https://alice:***@host/r.git"},
		{"git_clone https://alice:p@ss/w0rd@host/r.git now", "git_clone https://alice:***@host/r.git now"},
		{"git_clone ssh://alice:TOKEN@host/r.git", "git_clone ssh://alice:***@host/r.git"},
		{"git_clone git+ssh://alice:TOKEN@host/r.git", "git_clone git+ssh://alice:***@host/r.git"},
		{"git_clone git://alice:TOKEN@host/r.git", "git_clone git://alice:***@host/r.git"},
		{"git_clone HTTPS://:TOKEN@host/r.git", "git_clone HTTPS://:***@host/r.git"},
		{"git_clone https://ghtoken123@github.com/o/r.git", "git_clone https://***@github.com/o/r.git"},
		{"git clone alice:TOKEN@host.example:o/r.git", "git clone alice:***@host.example:o/r.git"},
		{"fatal: unable to access 'https://u:TOKEN@127.0.0.1:8765/p.git/'", "fatal: unable to access 'https://u:***@127.0.0.1:8765/p.git/'"},
		{"curl -u bob:hunter22 https://x", "curl -u bob:*** https://x"},
		{"export GITHUB_TOKEN=abc123", "export GITHUB_TOKEN=***"},
		{"mysql --password hunter2 db", "mysql --password *** db"},
		{"echo ghp_abcdefghijklmnopqrstuvwxyz0123", "echo ***"},
		{"git clone 'https://u:TOK C04@127.0.0.1:1/r' /tmp/e2", "git clone 'https://u:***@127.0.0.1:1/r' /tmp/e2"},
		{`git clone https://u"x:TOKC06@127.0.0.1/r`, `git clone https://u"x:***@127.0.0.1/r`},
		{"git_clone u:TOKA20@h_x:r.git", "git_clone u:***@h_x:r.git"},
		// Hidden with more than the password: a password may hold "//".
		{"curl http://127.0.0.1:1/r?x=https://u:TOKA22@h", "curl http://127.0.0.1:***@h"},
		{"curl -H 'Authorization: Bearer TOKC07' x", "curl -H 'Authorization: Bearer ***' x"},
		{"curl -H 'Authorization: token TOK10' x", "curl -H 'Authorization: token ***' x"},
		// What is no secret stays.
		{"git clone ssh://git@github.com/o/r.git", "git clone ssh://git@github.com/o/r.git"},
		{"git clone git@github.com:o/r.git", "git clone git@github.com:o/r.git"},
		{"docker run -u 1000:1000 img", "docker run -u 1000:1000 img"},
		{"curl http://127.0.0.1:8080/x", "curl http://127.0.0.1:8080/x"},
		{"ls -la /workspace && echo done", "ls -la /workspace && echo done"},
	} {
		if got := Text(c.in); got != c.want {
			t.Errorf("Text(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

func TestTextSecrets(t *testing.T) {
	for _, c := range []struct {
		in      string
		secrets []string
		want    string
	}{
		{"value is hunter2 here", []string{"hunter2"}, "value is *** here"},
		// Longest first: the longer secret is hidden whole.
		{"ab abcdef", []string{"ab", "abcdef"}, "*** ***"},
		// In the forms a URL or a program prints it.
		{"https://h/?k=p%40ss+w and p@ss w", []string{"p@ss w"}, "https://h/?k=*** and ***"},
		{"raw p@ss seen", []string{"p%40ss"}, "raw *** seen"},
		// A replacement that joins the text around it into the secret.
		{"aa*", []string{"a*"}, "*****"},
		{"*** stays", []string{"***", ""}, "*** stays"},
	} {
		if got := Text(c.in, c.secrets...); got != c.want {
			t.Errorf("Text(%q, %q) = %q, want %q", c.in, c.secrets, got, c.want)
		}
	}
}

// urlForms are the ways git accepts credentials in a repository address,
// each a func of user and password.
var urlForms = []func(user, pw string) string{
	func(u, p string) string { return "https://" + u + ":" + p + "@github.com/o/r.git" },
	func(u, p string) string { return "http://" + u + ":" + p + "@10.0.0.1:8080/r.git" },
	func(u, p string) string { return "ssh://" + u + ":" + p + "@host.example/r.git" },
	func(u, p string) string { return "git://" + u + ":" + p + "@host.example/r.git" },
	func(u, p string) string { return "git+ssh://" + u + ":" + p + "@host.example:22/r.git" },
	func(u, p string) string { return "ftps://" + u + ":" + p + "@host.example/r" },
	func(u, p string) string { return u + ":" + p + "@host.example:o/r.git" },
	func(u, p string) string { return "https://" + u + ":" + url.PathEscape(p) + "@github.com/o/r.git" },
	func(u, p string) string { return "https://" + u + ":" + url.QueryEscape(p) + "@github.com/o/r.git" },
	func(u, p string) string { return "HTTPS://" + u + ":" + p + "@[::1]:9/r.git" },
}

// contexts are the texts such an address turns up in.
var contexts = []string{
	"git_clone %s",
	"git clone --depth 1 '%s' /workspace/r",
	`{"repo":"%s","path":"/w"}`,
	"fatal: unable to access '%s/': Could not resolve host",
	"Cloning into 'r'...\nremote: %s\n",
	"x=%s;y",
}

func usable(s string, min int, deny string) bool {
	if len(s) < min || !utf8.ValidString(s) || strings.Contains(s, "***") {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) || strings.ContainsRune(deny, r) {
			return false
		}
	}
	return true
}

// FuzzURLPassword: a password in any URL form, in any of the texts it
// turns up in, is hidden without being told what it is.
func FuzzURLPassword(f *testing.F) {
	f.Add("alice", "TOKEN%zz", uint8(0), uint8(0))
	f.Add("x-access-token", "p@ss/w:rd'\"<>", uint8(7), uint8(2))
	f.Add("u", "ghp_0123456789abcdefghij", uint8(6), uint8(3))
	f.Add("bob", "a'b\"c@d", uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, user, pw string, form, ctx uint8) {
		if !usable(user, 1, `:@/'"=(,;<>%\`) || !usable(pw, 8, "") {
			return
		}
		build := urlForms[int(form)%len(urlForms)]
		if int(form)%len(urlForms) == 6 && strings.HasPrefix(pw, "/") {
			return // user:/x@host:path is host "user", path "/x@host:path" to git
		}
		addr := build(user, pw)
		text := strings.Replace(contexts[int(ctx)%len(contexts)], "%s", addr, 1)
		if strings.Count(text, pw) != 1 && !strings.Contains(addr, url.PathEscape(pw)) && !strings.Contains(addr, url.QueryEscape(pw)) {
			return // the password is also part of the text around it
		}
		for _, c := range contexts {
			for _, w := range strings.Fields(strings.NewReplacer("%s", "", "'", " ", `"`, " ").Replace(c)) {
				if strings.Contains(w, pw) {
					return
				}
			}
		}
		if strings.Contains(user, pw) || strings.Contains("host.example github.com 10.0.0.1", pw) {
			return
		}
		got := Text(text)
		for _, v := range []string{pw, url.PathEscape(pw), url.QueryEscape(pw)} {
			if strings.Contains(got, v) {
				t.Fatalf("password %q left in %q (from %q)", v, got, text)
			}
		}
		if !strings.Contains(got, user) {
			t.Fatalf("user %q lost from %q (from %q)", user, got, text)
		}
	})
}

// FuzzTextSecrets: a secret the caller names never survives, whatever text
// it is in.
func FuzzTextSecrets(f *testing.F) {
	f.Add("the token is hunter2 ok", "hunter2")
	f.Add("aa*", "a*")
	f.Add("https://h:pw@x", "h:***@")
	f.Fuzz(func(t *testing.T, s, secret string) {
		if strings.Trim(secret, "*") == "" {
			return
		}
		got := Text(s, secret)
		if strings.Contains(got, secret) {
			t.Fatalf("Text(%q, %q) = %q keeps the secret", s, secret, got)
		}
	})
}

// FuzzQuotedURLPassword: inside quotes a password may hold spaces, and is
// hidden all the same.
func FuzzQuotedURLPassword(f *testing.F) {
	f.Add("u", "TOK C04 more")
	f.Add("alice", "a b@c d")
	f.Fuzz(func(t *testing.T, user, pw string) {
		if !usable(user, 1, `:@/'"=(,;<>%\`) || len(pw) < 8 || !utf8.ValidString(pw) || strings.ContainsAny(pw, "'\"\n\r") ||
			strings.Contains(pw, "***") || strings.TrimSpace(pw) != pw {
			return
		}
		for _, r := range pw {
			if !unicode.IsPrint(r) {
				return
			}
		}
		for _, q := range []string{"'", `"`} {
			text := "git clone " + q + "https://" + user + ":" + pw + "@host.example/r.git" + q + " /w"
			if strings.Contains(user, pw) || strings.Contains("git clone https host.example r.git /w", pw) {
				return
			}
			if got := Text(text); strings.Contains(got, pw) {
				t.Fatalf("password %q left in %q", pw, got)
			}
		}
	})
}

// everyPattern is Text's pattern pass without the literal checks.
func everyPattern(s string) string {
	for _, p := range patterns {
		s = p.re.ReplaceAllString(s, p.with)
	}
	return s
}

// FuzzLiteralChecks: the checks that let Text skip a pattern never skip
// one that would have matched: Text hides what every pattern run on the
// text would.
func FuzzLiteralChecks(f *testing.F) {
	for _, s := range []string{"git clone https://alice:s3cretTok@github.com/o/r.git", "curl -u bob:hunter22 https://x",
		"export GITHUB_TOKEN=abc123", "mysql --password hunter2 db", "echo ghp_abcdefghijklmnopqrstuvwxyz0123",
		"curl -H 'Authorization: Bearer TOKC07' x", "git_clone u:TOKA20@h_x:r.git", "X --Auth-Token s", "API_KEY: v",
		"echo AKIAABCDEFGHIJKLMNOP xoxb-0123456789ab glpat-abcdefghijklmnopqrstu sk-abcdefghijklmnopqrstuvwx",
		"PASSWD=x", "--SECRET y", "github_pat_abcdefghijklmnopqrstuvwxyz", "ls -la /workspace && echo done", "a\u212a=b TOKEN=\u212a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Text(s), everyPattern(s); got != want {
			t.Fatalf("Text(%q) = %q, every pattern gives %q", s, got, want)
		}
	})
}

func BenchmarkTextCommand(b *testing.B) {
	for range b.N {
		Text("cd /workspace/project && go test ./... -run TestSomething -count=1 2>&1 | tail -50")
	}
}
