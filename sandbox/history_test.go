package sandbox

import (
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/shell"
)

// What history keeps of a command: registered secrets and token-shaped
// text hidden, ordinary text as typed.
func TestHistoryRedaction(t *testing.T) {
	for i := range 20 { // map order varied; the result may not
		h := NewHistory(100, nil)
		h.AddSecret("hunter22")
		h.AddSecret("hunter22-db-prod-Zq9xT4")
		h.AddSecret("db-prod")
		for cmd, want := range map[string]string{
			"psql 'pw=hunter22-db-prod-Zq9xT4'":               "psql 'pw=***'",
			"echo hunter22 and db-prod":                       "echo *** and ***",
			"mysql -u root --password S3cr3tPassw0rd":         "mysql -u root --password ***",
			"gh auth login --with-token --token abcd1234efgh": "gh auth login --with-token --token ***",
			`tool -token "two words" next`:                    "tool -token *** next",
			"curl -u admin:S3cr3tPassw0rd https://x/":         "curl -u admin:*** https://x/",
			"curl --user admin:S3cr3t https://x/":             "curl --user admin:*** https://x/",
			"podman run -u 1000:1000 img":                     "podman run -u 1000:1000 img",
			"make test && git push --force":                   "make test && git push --force",
			"export API_KEY=abc123":                           "export API_KEY=***",
			"git clone https://me:tok3n@host/r":               "git clone https://me:***@host/r",
			"grep --token-file x":                             "grep --token-file x",
		} {
			h.Add("box", cmd, shell.Result{}, nil)
			got, _ := h.Recent("box", 1)
			if got[0].Command != want {
				t.Fatalf("round %d: %q kept as %q, want %q", i, cmd, got[0].Command, want)
			}
		}
	}
}
