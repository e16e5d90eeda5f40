package app

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/telemetry"
)

// reapTally counts the sandboxes that stopped themselves (their watchdog:
// the idle TTL, or a child's end of life) since the server started, each
// stop once, as the server comes to see them: in the engine's listing the
// sandboxes gauge reads, or when it starts such a sandbox again (which
// makes the engine forget why it stopped). The watchdog runs without a
// server, so a stop the server never sees is not counted; an engine that
// keeps no exit codes (Apple's) gives none.
type reapTally struct {
	since time.Time
	mu    sync.Mutex
	seen  map[string]bool // container and stop time
	count map[string]int  // by why
}

func newReapTally() *reapTally {
	return &reapTally{since: time.Now(), seen: map[string]bool{}, count: map[string]int{}}
}

// maxReapsSeen bounds the stops remembered to count each once.
const maxReapsSeen = 100_000

// saw counts the stop of container at finished, for why ("idle" or
// "lifetime"), unless it came before the server or was counted already.
func (r *reapTally) saw(container string, finished time.Time, why string) {
	if why == "" || finished.Before(r.since) {
		return
	}
	key := container + "@" + strconv.FormatInt(finished.UnixNano(), 10)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[key] {
		return
	}
	if len(r.seen) >= maxReapsSeen {
		clear(r.seen)
	}
	r.seen[key] = true
	r.count[why]++
}

// points are the counts by why.
func (r *reapTally) points() []telemetry.Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ps []telemetry.Point
	for _, why := range slices.Sorted(maps.Keys(r.count)) {
		ps = append(ps, telemetry.Point{Attrs: []telemetry.Attr{{Key: "why", Value: why}}, Value: float64(r.count[why])})
	}
	return ps
}
