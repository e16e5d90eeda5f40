package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/shell"
	"github.com/sandbox-mcp/sandbox-mcp/state"
)

// What history keeps of a command: registered secrets and token-shaped
// text hidden, ordinary text as typed.
func TestHistoryRedaction(t *testing.T) {
	for i := range 20 { // map order varied; the result may not
		h := NewHistory(100, nil)
		h.AddSecret("box", "hunter22")
		h.AddSecret("box", "hunter22-db-prod-Zq9xT4")
		h.AddSecret("box", "db-prod")
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

// A sandbox's secrets hide text in its own history only: its env store
// lives in the sandbox, which may name any word secret. A destroyed
// sandbox's secrets go with it.
func TestSecretsAreEachSandboxsOwn(t *testing.T) {
	h := NewHistory(100, nil)
	h.AddSecret("evil", "make")
	h.AddSecret("good", "s3cr3t-token")
	h.Add("good", "make test s3cr3t-token", shell.Result{}, nil)
	h.Add("evil", "make test s3cr3t-token", shell.Result{}, nil)
	if got, _ := h.Recent("good", 1); got[0].Command != "make test ***" {
		t.Fatalf("good: %q", got[0].Command)
	}
	if got, _ := h.Recent("evil", 1); got[0].Command != "*** test s3cr3t-token" {
		t.Fatalf("evil: %q", got[0].Command)
	}
	if err := h.Forget("evil"); err != nil {
		t.Fatal(err)
	}
	h.Add("evil", "make", shell.Result{}, nil)
	if got, _ := h.Recent("evil", 1); got[0].Command != "make" {
		t.Fatalf("after destroy: %q", got[0].Command)
	}
	for i := range maxSecrets + 10 {
		h.AddSecret("many", fmt.Sprintf("secret-%04d", i))
	}
	if n := len(h.secrets["many"]); n != maxSecrets {
		t.Fatalf("%d secrets kept", n)
	}
}

// failingStore fails its first n writes.
type failingStore struct {
	HistoryStore
	n int
}

func (f *failingStore) AppendHistory(batch map[string][]json.RawMessage, limit int) error {
	if f.n > 0 {
		f.n--
		return errors.New("disk full")
	}
	return f.HistoryStore.AppendHistory(batch, limit)
}

// TestHistorySurvivesFailuresAndKills: a flush that fails keeps its
// entries for the next; entries a server wrote ahead and never flushed (it
// was killed) are stored by the next server, those it did flush not twice.
func TestHistorySurvivesFailuresAndKills(t *testing.T) {
	st, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := NewHistory(100, &failingStore{HistoryStore: st, n: 1})
	h.Add("box", "echo one", shell.Result{}, nil)
	if err := h.Flush(); err == nil {
		t.Fatal("the failing write was not reported")
	}
	h.Add("box", "echo two", shell.Result{}, nil)
	if err := h.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := commands(t, st, "box"); got != "echo one,echo two" {
		t.Fatalf("after a failed and a good flush: %s", got)
	}

	// A server killed after writing ahead: one entry flushed (its file
	// not yet rewritten), two not.
	locks := t.TempDir()
	m := NewManager(staleListing{}, Config{Prefix: "smthist", History: st, LockDir: locks})
	t.Cleanup(m.Close)
	const dead = "00000000deadbeef"
	w := NewHistory(100, st)
	if err := w.SetWAL(m.historyWAL(dead)); err != nil {
		t.Fatal(err)
	}
	w.Add("box", "echo three", shell.Result{}, nil)
	w.mu.Lock()
	flushed := w.pending["box"][0]
	w.mu.Unlock()
	raw, _ := json.Marshal(flushed)
	if err := st.AppendHistory(map[string][]json.RawMessage{"box": {raw}}, 100); err != nil {
		t.Fatal(err)
	}
	w.Add("box", "echo four", shell.Result{}, nil)
	w.Add("other", "echo five", shell.Result{}, nil)
	m.replayHistory(dead)
	if got := commands(t, st, "box"); got != "echo one,echo two,echo three,echo four" {
		t.Errorf("after the replay: %s", got)
	}
	if got := commands(t, st, "other"); got != "echo five" {
		t.Errorf("the other sandbox: %s", got)
	}
	if _, err := os.Stat(m.historyWAL(dead)); err == nil {
		t.Error("the replayed file is left")
	}
}

func commands(t *testing.T, st *state.Store, name string) string {
	t.Helper()
	raw, err := st.History(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range raw {
		var e HistoryEntry
		if json.Unmarshal(r, &e) == nil {
			out = append(out, e.Command)
		}
	}
	return strings.Join(out, ",")
}

// A sandbox's history keeps its newest entries, in order, up to the
// limit, in memory and pending a store alike.
func TestHistoryKeepsTheNewest(t *testing.T) {
	st, err := state.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*History{NewHistory(10, nil), NewHistory(10, st)} {
		for i := range 137 {
			h.Add("box", fmt.Sprintf("echo %d", i), shell.Result{}, nil)
			got, err := h.Recent("box", 0)
			if err != nil {
				t.Fatal(err)
			}
			want := min(i+1, 10)
			if len(got) != want || got[len(got)-1].Command != fmt.Sprintf("echo %d", i) ||
				got[0].Command != fmt.Sprintf("echo %d", i+1-want) {
				t.Fatalf("after %d: %d entries, %q … %q", i+1, len(got), got[0].Command, got[len(got)-1].Command)
			}
		}
	}
}
