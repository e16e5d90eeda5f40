// Command testreport reads `go test -json` on stdin and writes what a plain
// `go test` run of several packages prints: a passing package's result
// line, and for a failing one the whole output of its failed tests (each
// test's as one block), of the tests a timeout or a panic cut short, and
// its own, when the package ends. At the end it writes the slowest tests
// and first-level subtests to stderr, so a run that grows slower says
// where.
//
// Lines that are not JSON events (go's own messages) pass through as they
// are.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// timing is a finished test's run time.
type timing struct {
	pkg, test string
	secs      float64
	failed    bool
}

// line is one line of output and its place in the package's stream.
type line struct {
	seq  int
	text string
}

// pkgState is what a running package printed that is not yet decided:
// the output of its tests still running or failed, and its own.
type pkgState struct {
	tests map[string][]line // running or failed test → its output
	own   []line            // the package's own output (TestMain's, its result line)
}

// report turns events into go test's plain output. Like go test, it
// prints a package's output when the package ends: the lines of its
// failed and unfinished tests and its own, in the order they came.
type report struct {
	out     io.Writer
	seq     int
	pkgs    map[string]*pkgState
	timings []timing
}

func newReport(out io.Writer) *report {
	return &report{out: out, pkgs: map[string]*pkgState{}}
}

// noise is verbose mode's bookkeeping, which plain go test does not print.
func noise(text string) bool {
	t := strings.TrimLeft(text, " ")
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- SKIP"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

func (r *report) pkg(name string) *pkgState {
	p := r.pkgs[name]
	if p == nil {
		p = &pkgState{tests: map[string][]line{}}
		r.pkgs[name] = p
	}
	return p
}

func (r *report) handle(raw []byte) {
	var e event
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &e) != nil || e.Action == "" {
		_, _ = r.out.Write(raw)
		_, _ = io.WriteString(r.out, "\n")
		return
	}
	r.seq++
	switch {
	case e.Action == "build-output":
		_, _ = io.WriteString(r.out, e.Output)
	case e.Action == "output" && e.Test == "":
		if e.Output != "PASS\n" && !noise(e.Output) {
			p := r.pkg(e.Package)
			p.own = append(p.own, line{r.seq, e.Output})
		}
	case e.Action == "output":
		if !noise(e.Output) {
			p := r.pkg(e.Package)
			p.tests[e.Test] = append(p.tests[e.Test], line{r.seq, e.Output})
		}
	case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		if e.Action != "fail" {
			delete(r.pkg(e.Package).tests, e.Test)
		}
		// A parent's time leaves out its parallel subtests (one per
		// engine, say), so those are listed too.
		if strings.Count(e.Test, "/") <= 1 && e.Action != "skip" {
			r.timings = append(r.timings, timing{e.Package, e.Test, e.Elapsed, e.Action == "fail"})
		}
	case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
		r.finish(e.Package, e.Action == "fail")
	}
}

// finish prints what a package that ended left to print. A failed
// package's failed tests and the tests it cut short (a timeout's or a
// panic's victims) print their output, each as one block at the place of
// its first line, among the package's own lines; a package that passed
// prints only its result line, as go test does.
func (r *report) finish(name string, failed bool) {
	p := r.pkgs[name]
	if p == nil {
		return
	}
	delete(r.pkgs, name)
	if !failed {
		for _, l := range p.own {
			if strings.HasPrefix(l.text, "ok ") || strings.HasPrefix(l.text, "? ") {
				_, _ = io.WriteString(r.out, l.text)
			}
		}
		return
	}
	blocks := make([][]line, 0, len(p.tests)+len(p.own))
	for _, l := range p.own {
		blocks = append(blocks, []line{l})
	}
	for _, ls := range p.tests {
		if len(ls) > 0 {
			blocks = append(blocks, ls)
		}
	}
	slices.SortFunc(blocks, func(a, b []line) int { return cmp.Compare(a[0].seq, b[0].seq) })
	for _, b := range blocks {
		for _, l := range b {
			_, _ = io.WriteString(r.out, l.text)
		}
	}
}

// slowest writes the n slowest tests.
func (r *report) slowest(w io.Writer, n int) {
	ts := slices.Clone(r.timings)
	slices.SortStableFunc(ts, func(a, b timing) int { return cmp.Compare(b.secs, a.secs) })
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(w, "test.sh: the %d slowest tests:\n", min(n, len(ts)))
	for _, t := range ts[:min(n, len(ts))] {
		status := "ok  "
		if t.failed {
			status = "FAIL"
		}
		pkg := t.pkg[strings.LastIndex(t.pkg, "/")+1:]
		fmt.Fprintf(w, "test.sh:   %8.1f s  %s %s.%s\n", t.secs, status, pkg, t.test)
	}
}

func main() {
	top := flag.Int("slowest", 30, "how many of the slowest tests to list on stderr at the end (0: none)")
	flag.Parse()
	r := newReport(os.Stdout)
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	for {
		raw, err := in.ReadBytes('\n')
		if len(raw) > 0 {
			r.handle(bytes.TrimSuffix(raw, []byte("\n")))
		}
		if err != nil {
			break
		}
	}
	for name := range r.pkgs { // a stream cut short
		r.finish(name, true)
	}
	if *top > 0 {
		r.slowest(os.Stderr, *top)
	}
}
