package guest

import "testing"

func TestStatsParseRejects(t *testing.T) {
	for _, out := range []string{
		"",                           // the script did not run
		"mem_usage 1\n",              // no process count
		"procs 1\nsurprise 2\n",      // unknown key
		"procs 1\nno-value-at-all\n", // not key value
	} {
		if _, err := ParseStats([]byte(out)); err == nil {
			t.Errorf("%q: accepted", out)
		}
	}
}
