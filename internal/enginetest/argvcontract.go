package enginetest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/internal/applecli"
	"github.com/sandbox-mcp/sandbox-mcp/sandbox/apple"
)

// The argv contract: every command line sent to the container stand-in
// during a run (RecordArgv) must be one that Apple's CLI takes, for the
// release it was sent to and for every other release the dialect would
// send the same line to (apple.Builds), by the argument tables of
// internal/applecli.

// ArgvReport is what CheckArgvRecord found.
type ArgvReport struct {
	// Lines are the invocations recorded, Distinct the distinct argv.
	Lines, Distinct int
	// Checks counts the (release, argv) pairs checked.
	Checks int
	// Shapes are the distinct argv shapes checked, by command
	// (applecli.Parsed.Shape; "--version", "help" for those requests).
	Shapes map[string]map[string]bool
	// Failures name the refused argv, the release and the row it broke.
	Failures []string
}

// recorded is one line of the stand-in's log.
type recorded struct {
	Version string   `json:"version"`
	Argv    []string `json:"argv"`
}

// CheckArgvRecord checks the invocations logged at path. A missing file
// is no invocation.
func CheckArgvRecord(path string) (*ArgvReport, error) {
	rep := &ArgvReport{Shapes: map[string]map[string]bool{}}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return rep, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	// The releases each distinct argv was sent to.
	sent := map[string][]applecli.Version{}
	argvOf := map[string][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var r recorded
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %q: %v", path, sc.Text(), err)
		}
		v, err := applecli.ParseVersion(r.Version)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %v", path, sc.Text(), err)
		}
		rep.Lines++
		key, _ := json.Marshal(r.Argv)
		if !slices.Contains(sent[string(key)], v) {
			sent[string(key)] = append(sent[string(key)], v)
		}
		argvOf[string(key)] = r.Argv
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(sent))
	for k := range sent {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rep.Distinct = len(keys)
	for _, k := range keys {
		argv, versions := argvOf[k], sent[k]
		for _, v := range versions {
			rep.Checks++
			if err := applecli.Check(v, argv); err != nil {
				rep.Failures = append(rep.Failures, fmt.Sprintf("sent to %s: %v", v, err))
			}
			rep.shape(v, argv)
		}
		for _, r := range applecli.Releases {
			if slices.Contains(versions, r) || !apple.Builds(apple.FeaturesOf(appleVersion(r)), argv) {
				continue
			}
			rep.Checks++
			if err := applecli.Check(r, argv); err != nil {
				rep.Failures = append(rep.Failures, fmt.Sprintf("the dialect would send it to %s too (sent to %s): %v", r, versions[0], err))
			}
		}
	}
	return rep, nil
}

// shape adds argv's shape, as release v parses it, to the coverage.
func (rep *ArgvReport) shape(v applecli.Version, argv []string) {
	p, err := applecli.Parse(v, argv)
	cmd, shape := "(refused)", strings.Join(argv, " ")
	if err == nil {
		switch p.Outcome {
		case applecli.ShowVersion:
			cmd, shape = "--version", "--version"
		case applecli.ShowHelp:
			cmd, shape = "help", strings.Join(argv, " ")
		case applecli.RunPlugin:
			cmd = "(plugin)"
		default:
			cmd, shape = p.Table.Command.Path, p.Shape()
		}
	}
	if rep.Shapes[cmd] == nil {
		rep.Shapes[cmd] = map[string]bool{}
	}
	rep.Shapes[cmd][shape] = true
}

func appleVersion(v applecli.Version) apple.Version {
	return apple.Version{Major: v.Major, Minor: v.Minor, Patch: v.Patch}
}

// Write prints the coverage (distinct shapes per command) and the failures.
func (rep *ArgvReport) Write(w io.Writer) {
	fmt.Fprintf(w, "argv contract: %d invocations, %d distinct argv, %d (release, argv) checks against the container CLI tables (%s)\n",
		rep.Lines, rep.Distinct, rep.Checks, releaseList())
	cmds := make([]string, 0, len(rep.Shapes))
	for c := range rep.Shapes {
		cmds = append(cmds, c)
	}
	sort.Strings(cmds)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-22s %3d shapes\n", c, len(rep.Shapes[c]))
	}
	for _, f := range rep.Failures {
		fmt.Fprintln(w, "  REFUSED: "+f)
	}
}

func releaseList() string {
	s := make([]string, len(applecli.Releases))
	for i, r := range applecli.Releases {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}
