package agent

import (
	"os"
	"testing"
)

// TestReserveThreadsMakesThem: after reserveThreads(n) the process has at
// least n threads more than the runtime's own, kept though no goroutine
// holds them.
func TestReserveThreadsMakesThem(t *testing.T) {
	threads := func() int {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := threads()
	reserveThreads(before + threadReserve)
	if after := threads(); after < before+threadReserve {
		t.Fatalf("%d threads before, %d after reserving %d", before, after, before+threadReserve)
	}
}
