package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestReportPrintsWhatPlainGoTestDoes: a passing test's logs, a passing
// package's own output and verbose mode's bookkeeping are dropped; a
// failed package prints its failed tests' output (parallel ones each as
// one block), its unfinished tests' (a timeout) and its own lines when it
// ends; non-JSON lines pass at once.
func TestReportPrintsWhatPlainGoTestDoes(t *testing.T) {
	events := []string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestOK"}`,
		`{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"p","Test":"TestOK","Output":"    x_test.go:1: quiet\n"}`,
		`{"Action":"output","Package":"p","Test":"TestOK","Output":"--- PASS: TestOK (2.50s)\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestOK","Elapsed":2.5}`,
		`{"Action":"output","Package":"p","Test":"TestBad/sub","Output":"    x_test.go:2: boom\n"}`,
		`{"Action":"output","Package":"p","Test":"TestBad/sub","Output":"--- FAIL: TestBad/sub (0.10s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestBad/sub","Elapsed":0.1}`,
		`{"Action":"output","Package":"p","Test":"TestBad","Output":"--- FAIL: TestBad (0.10s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestBad","Elapsed":0.1}`,
		`{"Action":"output","Package":"p","Test":"TestPar/a","Output":"    x_test.go:4: a1\n"}`,
		`{"Action":"output","Package":"p","Test":"TestPar/b","Output":"=== NAME  TestPar/b\n"}`,
		`{"Action":"output","Package":"p","Test":"TestPar/b","Output":"    x_test.go:4: b1\n"}`,
		`{"Action":"output","Package":"p","Test":"TestPar/a","Output":"    x_test.go:5: a2\n"}`,
		`{"Action":"output","Package":"p","Test":"TestPar/a","Output":"--- FAIL: TestPar/a (1.00s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestPar/a","Elapsed":1}`,
		`{"Action":"output","Package":"p","Test":"TestPar/b","Output":"--- FAIL: TestPar/b (1.00s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestPar/b","Elapsed":1}`,
		`{"Action":"output","Package":"p","Test":"TestHang","Output":"    x_test.go:3: before\n"}`,
		`go: a line that is not an event`,
		`{"Action":"output","Package":"p","Output":"panic: test timed out after 3s\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t3.0s\n"}`,
		`{"Action":"fail","Package":"p","Elapsed":3}`,
		`{"Action":"output","Package":"q","Output":"argv contract: 12 checks\n"}`,
		`{"Action":"output","Package":"q","Output":"PASS\n"}`,
		`{"Action":"output","Package":"q","Output":"ok  \tq\t0.1s\n"}`,
		`{"Action":"pass","Package":"q","Elapsed":0.1}`,
	}
	var out, slow bytes.Buffer
	r := newReport(&out)
	for _, e := range events {
		r.handle([]byte(e))
	}
	want := "go: a line that is not an event\n" +
		"    x_test.go:2: boom\n--- FAIL: TestBad/sub (0.10s)\n--- FAIL: TestBad (0.10s)\n" +
		"    x_test.go:4: a1\n    x_test.go:5: a2\n--- FAIL: TestPar/a (1.00s)\n" +
		"    x_test.go:4: b1\n--- FAIL: TestPar/b (1.00s)\n" +
		"    x_test.go:3: before\npanic: test timed out after 3s\nFAIL\tp\t3.0s\n" +
		"ok  \tq\t0.1s\n"
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	r.slowest(&slow, 2)
	got := slow.String()
	if !strings.Contains(got, "2.5 s  ok   p.TestOK\n") || !strings.Contains(got, "1.0 s  FAIL p.TestPar/a\n") {
		t.Fatalf("the slowest tests should be TestOK, then the subtest TestPar/a: %q", got)
	}
}
