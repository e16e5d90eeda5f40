package guest

import (
	"reflect"
	"testing"
)

func init() {
	goldenCases = append(goldenCases, goldenCase{"sweep", text(SweepScript)})
}

func TestParseSweep(t *testing.T) {
	out := "noise before\n" +
		"shell 0123456789abcdef 12 40 2\ncmd 13 sleep 988 \ncmd 14 sh\n" +
		"cmd 99 shell ffff 1 1 1\n" + // a command line that looks like a shell line stays a command
		"shell 0123456789abcdef 20 -5 0\n" +
		"shell bad line\ncmd orphan\n"
	got := ParseSweep([]byte(out))
	want := []SweptShell{
		{Server: "0123456789abcdef", PID: 12, Age: 40, Procs: 2, Commands: []string{"sleep 988", "sh", "shell ffff 1 1 1"}},
		{Server: "0123456789abcdef", PID: 20, Age: 0, Procs: 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if got := ParseSweep(nil); got != nil {
		t.Fatalf("empty output: %+v", got)
	}
}
