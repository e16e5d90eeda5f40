package enginetest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckArgvRecord: a record's lines are checked for the release they
// were sent to and for the releases the dialect would send them to.
func TestCheckArgvRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "argv.jsonl")
	lines := []string{
		`{"version":"1.5.0","argv":["run","-d","--name","web1","-l","io.sandbox-mcp.owner=me","--init","img","sleep","1"]}`,
		`{"version":"1.5.0","argv":["run","-d","--name","web1","-l","io.sandbox-mcp.owner=me","--init","img","sleep","1"]}`,
		`{"version":"0.9.0","argv":["system","status"]}`,
		`{"version":"1.5.0","argv":["system","status","--format","json"]}`,
		`{"version":"1.5.0","argv":["stop","-t","5","web1"]}`,
		`{"version":"1.5.0","argv":["--version"]}`,
		// A label with '=' in its value, refused everywhere.
		`{"version":"1.5.0","argv":["run","-d","--name","web2","-l","limits=disk=1G","img"]}`,
		// --shm-size exists from 1.0.0, and the dialect would send it to 0.8.0 too.
		`{"version":"1.2.2","argv":["run","-d","--name","web3","--shm-size","64M","img"]}`,
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := CheckArgvRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lines != 8 || rep.Distinct != 7 {
		t.Errorf("lines %d distinct %d", rep.Lines, rep.Distinct)
	}
	var b strings.Builder
	rep.Write(&b)
	out := b.String()
	for _, want := range []string{
		`sent to 1.5.0: container 1.5.0 refuses ["run" "-d" "--name" "web2" "-l" "limits=disk=1G" "img"]: Error: invalid label format limits=disk=1G (exit 1); row: run -l/--label <label>`,
		`the dialect would send it to 0.8.0 too (sent to 1.2.2): container 0.8.0 refuses ["run" "-d" "--name" "web3" "--shm-size" "64M" "img"]: Error: Unknown option '--shm-size'`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	for _, f := range rep.Failures {
		if strings.Contains(f, "--init") || strings.Contains(f, `"status"`) || strings.Contains(f, `"stop"`) {
			t.Errorf("unexpected failure: %s", f)
		}
	}
	if !rep.Shapes["run"]["run -d --name <name> -l <label> --init <image> <arguments> ..."] || !rep.Shapes["--version"]["--version"] {
		t.Errorf("shapes: %v", rep.Shapes)
	}
	if got := WithArgvLog([]string{"A=1", EnvStandInLog + "=/r"}, "/t"); !slices.Equal(got, []string{"A=1", EnvStandInLog + "=/r" + string(os.PathListSeparator) + "/t"}) {
		t.Errorf("WithArgvLog: %q", got)
	}
}
