package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// benchTelemetry: warm exec through a server that exports a span per
// call and its metrics over OTLP (to a local receiver) against the main
// server, which only counts them, one call of each in turn on one
// sandbox; throughput is the inverse of the mean call time.
func (b *bench) benchTelemetry() error {
	if _, err := b.main.execTrue(b.ctx, "default"); err != nil {
		return err
	}
	var bodies, bytes atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		bodies.Add(1)
		bytes.Add(n)
	}))
	defer sink.Close()
	os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
	os.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "1000")
	traced, err := b.launch.start(b.ctx, filepath.Join(b.dir, "state"))
	os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	os.Unsetenv("OTEL_METRIC_EXPORT_INTERVAL")
	if err != nil {
		return err
	}
	defer traced.close()
	lat, err := timeInterleaved(b.n,
		func() error { _, err := b.main.execTrue(b.ctx, "default"); return err },
		func() error { _, err := traced.execTrue(b.ctx, "default"); return err })
	if err != nil {
		return err
	}
	mean := func(d []time.Duration) time.Duration {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return sum / time.Duration(len(d))
	}
	off, on := mean(lat[0]), mean(lat[1])
	cost := float64(on)/float64(off) - 1
	report("exec throughput, OTLP export on (spans + metrics)", fmt.Sprintf("%.0f calls/s", 1/on.Seconds()),
		fmt.Sprintf("%.0f calls/s (export off)", 1/off.Seconds()), float64(off)/float64(on), "cost <= 5%", cost <= 0.05)
	time.Sleep(6 * time.Second) // a span batch goes out every 5 s
	fmt.Printf("%-44s p50 on %s, off %s; the receiver got %d exports, %d bytes\n", "", us(pct(lat[1], 0.5)), us(pct(lat[0], 0.5)), bodies.Load(), bytes.Load())
	return nil
}
