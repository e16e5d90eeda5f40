package sandbox

import (
	"strings"
	"testing"
)

func TestSplitCredentials(t *testing.T) {
	const tok = "s3cr3t-Tok"
	for _, c := range []struct {
		repo, token         string
		want, user, wantTok string
		refused             bool
	}{
		{repo: "https://github.com/o/r.git", want: "https://github.com/o/r.git", user: "x-access-token"},
		{repo: "https://alice:" + tok + "@github.com/o/r.git", want: "https://github.com/o/r.git", user: "alice", wantTok: tok},
		{repo: "HTTP://alice:" + tok + "@10.0.0.1:8080/r.git", want: "HTTP://10.0.0.1:8080/r.git", user: "alice", wantTok: tok},
		// No URL parser takes these; git is given what was written.
		{repo: "https://alice:" + tok + "%zz@host/r.git", want: "https://host/r.git", user: "alice", wantTok: tok + "%zz"},
		{repo: "https://alice:p@ss/w@host/r.git", want: "https://host/r.git", user: "alice", wantTok: "p@ss/w"},
		{repo: "https://al%40ice:p%40ss@host/r.git", want: "https://host/r.git", user: "al@ice", wantTok: "p@ss"},
		// A given token wins over the URL's password.
		{repo: "https://alice:old@host/r.git", token: tok, want: "https://host/r.git", user: "alice", wantTok: tok},
		{repo: "https://alice@host/r.git", token: tok, want: "https://host/r.git", user: "alice", wantTok: tok},
		{repo: "https://alice@host/r.git", want: "https://alice@host/r.git", user: "x-access-token"},
		{repo: "https://host/r.git?x=a@b", want: "https://host/r.git?x=a@b", user: "x-access-token"},
		{repo: "ssh://git@host/r.git", want: "ssh://git@host/r.git", user: "x-access-token"},
		{repo: "git@github.com:o/r.git", want: "git@github.com:o/r.git", user: "x-access-token"},
		{repo: "/srv/git/r.git", want: "/srv/git/r.git", user: "x-access-token"},
		{repo: "ssh://alice:" + tok + "@host/r.git", refused: true},
		{repo: "git://alice:" + tok + "@host/r.git", refused: true},
		{repo: "git+ssh://alice:" + tok + "@host/r.git", refused: true},
		{repo: "alice:" + tok + "@host:o/r.git", refused: true},
		{repo: "-upload-pack=x", refused: true},
	} {
		repo, user, token, err := splitCredentials(c.repo, "", c.token)
		if c.refused {
			if err == nil || strings.Contains(err.Error(), tok) {
				t.Errorf("%s: err %v, want a refusal without the token", c.repo, err)
			}
			continue
		}
		if err != nil || repo != c.want || user != c.user || token != c.wantTok {
			t.Errorf("%s: got %q %q %q %v, want %q %q %q", c.repo, repo, user, token, err, c.want, c.user, c.wantTok)
		}
	}
}
