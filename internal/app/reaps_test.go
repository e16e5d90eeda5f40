package app

import (
	"testing"
	"time"
)

// TestReapTally: each stop is counted once, by why, and only stops since
// the server started; a stop with no why (a person's) is not a reap.
func TestReapTally(t *testing.T) {
	r := newReapTally()
	before, after := r.since.Add(-time.Minute), r.since.Add(time.Second)
	r.saw("smt-a", before, "idle")
	r.saw("smt-a", after, "idle")
	r.saw("smt-a", after, "idle") // seen again: the same stop
	r.saw("smt-a", after.Add(time.Hour), "idle")
	r.saw("smt-b", after, "lifetime")
	r.saw("smt-c", after, "")
	ps := r.points()
	if len(ps) != 2 || ps[0].Attrs[0].Value != "idle" || ps[0].Value != 2 || ps[1].Attrs[0].Value != "lifetime" || ps[1].Value != 1 {
		t.Fatalf("points %+v", ps)
	}
}
