package guest

import "testing"

// BenchmarkCommandFrame measures building a plain command's frame, the
// isolation check's two readings of it included.
func BenchmarkCommandFrame(b *testing.B) {
	for _, cmd := range []string{"true", "cd /work && go test ./... 2>&1 | tail -20"} {
		b.Run(cmd[:min(len(cmd), 12)], func(b *testing.B) {
			for b.Loop() {
				if _, err := CommandFrame("M", Command{Command: cmd, RunID: "run0123456789"}, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
