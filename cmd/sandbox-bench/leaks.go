package main

import "fmt"

// Leak check sizes: calls before the first reading, calls between readings,
// and how much each figure may grow.
const (
	leakWarmup         = 50
	leakCalls          = 1000
	leakFDSlack        = 5
	leakGoroutineSlack = 10
)

// leakReading is one look at the server's descriptors and goroutines.
type leakReading struct {
	fds, goroutines int
}

// benchLeaks runs leakCalls sequential `exec true` calls on the main
// server and compares its open descriptors (/proc/<pid>/fd) and goroutines
// (from health) before and after: a steady server returns to where it was.
func (b *bench) benchLeaks() error {
	if _, err := b.main.execTrueN(b.ctx, "default", leakWarmup); err != nil {
		return fmt.Errorf("leaks: warm-up: %w", err)
	}
	before, err := b.readLeaks()
	if err != nil {
		return err
	}
	if _, err := b.main.execTrueN(b.ctx, "default", leakCalls); err != nil {
		return fmt.Errorf("leaks: %w", err)
	}
	after, err := b.readLeaks()
	if err != nil {
		return err
	}
	dfd, dg := after.fds-before.fds, after.goroutines-before.goroutines
	report(fmt.Sprintf("%d execs: open fds growth", leakCalls), fmt.Sprintf("%+d", dfd),
		fmt.Sprintf("%d before, %d after", before.fds, after.fds), 0, fmt.Sprintf("<= %d", leakFDSlack), dfd <= leakFDSlack)
	report(fmt.Sprintf("%d execs: goroutines growth", leakCalls), fmt.Sprintf("%+d", dg),
		fmt.Sprintf("%d before, %d after", before.goroutines, after.goroutines), 0, fmt.Sprintf("<= %d", leakGoroutineSlack), dg <= leakGoroutineSlack)
	return nil
}

// readLeaks reads the main server's open descriptors from /proc and its
// goroutines from the health tool.
func (b *bench) readLeaks() (leakReading, error) {
	st, err := b.main.stats(b.ctx)
	if err != nil {
		return leakReading{}, fmt.Errorf("leaks: %w", err)
	}
	fds := openFDs(b.main.pid())
	if fds < 0 {
		return leakReading{}, fmt.Errorf("leaks: cannot read /proc/%d/fd (Linux only)", b.main.pid())
	}
	return leakReading{fds: fds, goroutines: st.Goroutines}, nil
}
