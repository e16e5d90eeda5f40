// Package telemetry keeps the server's metrics and spans and gives them
// out: as Prometheus text (WritePrometheus, for /metrics) and, when
// OTEL_EXPORTER_OTLP_ENDPOINT (or its per-signal forms) is set, as OTLP
// over HTTP with JSON bodies. Recording never waits on an exporter: spans
// go through a bounded queue, and what an unreachable endpoint cannot take
// is dropped and counted.
package telemetry

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Attr is one attribute of a data point or a span.
type Attr struct{ Key, Value string }

// series is one attribute set's values of an instrument.
type series struct {
	attrs   []Attr
	value   atomic.Uint64 // float64 bits (counters)
	count   atomic.Uint64 // histograms
	sumBits atomic.Uint64
	buckets []atomic.Uint64 // len(bounds)+1
}

// instrument is a counter or a histogram with its series by attribute set.
type instrument struct {
	name, desc, unit string
	bounds           []float64 // histograms only
	series           sync.Map  // key(attrs) → *series
	n                atomic.Int64
}

// maxSeries bounds the attribute sets one instrument keeps; past it a
// data point is counted under the attribute otel.metric.overflow.
const maxSeries = 2000

func (in *instrument) get(attrs []Attr) *series {
	k := key(attrs)
	if s, ok := in.series.Load(k); ok {
		return s.(*series)
	}
	if in.n.Load() >= maxSeries {
		attrs = []Attr{{"otel.metric.overflow", "true"}}
		k = key(attrs)
		if s, ok := in.series.Load(k); ok {
			return s.(*series)
		}
	}
	s := &series{attrs: slices.Clone(attrs)}
	if in.bounds != nil {
		s.buckets = make([]atomic.Uint64, len(in.bounds)+1)
	}
	actual, loaded := in.series.LoadOrStore(k, s)
	if !loaded {
		in.n.Add(1)
	}
	return actual.(*series)
}

func key(attrs []Attr) string {
	var b strings.Builder
	for _, a := range attrs {
		b.WriteString(a.Key)
		b.WriteByte(0)
		b.WriteString(a.Value)
		b.WriteByte(0)
	}
	return b.String()
}

func addFloat(u *atomic.Uint64, v float64) {
	for {
		old := u.Load()
		if u.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Counter is a monotonic sum.
type Counter struct{ in *instrument }

// Add adds v (≥ 0) to the series of attrs.
func (c *Counter) Add(v float64, attrs ...Attr) {
	if c == nil || v < 0 {
		return
	}
	addFloat(&c.in.get(attrs).value, v)
}

// Histogram counts values into buckets.
type Histogram struct{ in *instrument }

// Record adds v to the series of attrs.
func (h *Histogram) Record(v float64, attrs ...Attr) {
	if h == nil {
		return
	}
	s := h.in.get(attrs)
	i := sort.SearchFloat64s(h.in.bounds, v) // the first bound ≥ v
	s.buckets[i].Add(1)
	s.count.Add(1)
	addFloat(&s.sumBits, v)
}

// Point is one value of a gauge.
type Point struct {
	Attrs []Attr
	Value float64
}

// gauge is read when collected; a monotonic one is a sum (a counter
// kept elsewhere).
type gauge struct {
	name, desc, unit string
	read             func() []Point
	monotonic        bool
}

// DurationBounds are the bucket bounds of duration histograms, in seconds.
var DurationBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// Metrics holds the instruments.
type Metrics struct {
	start time.Time

	mu       sync.Mutex
	counters []*instrument
	hists    []*instrument
	gauges   []gauge
}

// NewMetrics returns an empty set of instruments.
func NewMetrics() *Metrics { return &Metrics{start: time.Now()} }

// Counter returns a new counter.
func (m *Metrics) Counter(name, desc, unit string) *Counter {
	in := &instrument{name: name, desc: desc, unit: unit}
	m.mu.Lock()
	m.counters = append(m.counters, in)
	m.mu.Unlock()
	return &Counter{in}
}

// Histogram returns a new histogram with the given bucket bounds.
func (m *Metrics) Histogram(name, desc, unit string, bounds []float64) *Histogram {
	in := &instrument{name: name, desc: desc, unit: unit, bounds: slices.Clone(bounds)}
	m.mu.Lock()
	m.hists = append(m.hists, in)
	m.mu.Unlock()
	return &Histogram{in}
}

// Gauge registers a gauge read by read when the metrics are collected.
func (m *Metrics) Gauge(name, desc, unit string, read func() []Point) {
	m.mu.Lock()
	m.gauges = append(m.gauges, gauge{name, desc, unit, read, false})
	m.mu.Unlock()
}

// CounterFunc registers a counter kept elsewhere, read by read when the
// metrics are collected.
func (m *Metrics) CounterFunc(name, desc, unit string, read func() []Point) {
	m.mu.Lock()
	m.gauges = append(m.gauges, gauge{name, desc, unit, read, true})
	m.mu.Unlock()
}

// snapshot is every series at one time.
type snapshot struct {
	counters []instrumentPoints
	hists    []instrumentPoints
	gauges   []gaugePoints
}

type instrumentPoints struct {
	in     *instrument
	points []*series
}

type gaugePoints struct {
	g      gauge
	points []Point
}

func (m *Metrics) collect() snapshot {
	m.mu.Lock()
	counters, hists, gauges := slices.Clone(m.counters), slices.Clone(m.hists), slices.Clone(m.gauges)
	m.mu.Unlock()
	var s snapshot
	each := func(in *instrument) instrumentPoints {
		ip := instrumentPoints{in: in}
		in.series.Range(func(_, v any) bool {
			ip.points = append(ip.points, v.(*series))
			return true
		})
		sort.Slice(ip.points, func(i, j int) bool { return key(ip.points[i].attrs) < key(ip.points[j].attrs) })
		return ip
	}
	for _, in := range counters {
		s.counters = append(s.counters, each(in))
	}
	for _, in := range hists {
		s.hists = append(s.hists, each(in))
	}
	for _, g := range gauges {
		s.gauges = append(s.gauges, gaugePoints{g, g.read()})
	}
	return s
}

// WritePrometheus writes every metric in Prometheus' text format: dots
// become underscores, a unit of seconds or bytes is appended, counters end
// in _total.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	s := m.collect()
	var b strings.Builder
	for _, ip := range s.counters {
		name := promName(ip.in.name, ip.in.unit) + "_total"
		header(&b, name, ip.in.desc, "counter")
		for _, p := range ip.points {
			fmt.Fprintf(&b, "%s%s %s\n", name, promLabels(p.attrs, ""), promFloat(math.Float64frombits(p.value.Load())))
		}
	}
	for _, ip := range s.hists {
		name := promName(ip.in.name, ip.in.unit)
		header(&b, name, ip.in.desc, "histogram")
		for _, p := range ip.points {
			var cum uint64
			for i, bound := range ip.in.bounds {
				cum += p.buckets[i].Load()
				fmt.Fprintf(&b, "%s_bucket%s %d\n", name, promLabels(p.attrs, promFloat(bound)), cum)
			}
			cum += p.buckets[len(ip.in.bounds)].Load()
			fmt.Fprintf(&b, "%s_bucket%s %d\n", name, promLabels(p.attrs, "+Inf"), cum)
			fmt.Fprintf(&b, "%s_sum%s %s\n", name, promLabels(p.attrs, ""), promFloat(math.Float64frombits(p.sumBits.Load())))
			fmt.Fprintf(&b, "%s_count%s %d\n", name, promLabels(p.attrs, ""), cum)
		}
	}
	for _, gp := range s.gauges {
		name, kind := promName(gp.g.name, gp.g.unit), "gauge"
		if gp.g.monotonic {
			name, kind = name+"_total", "counter"
		}
		header(&b, name, gp.g.desc, kind)
		for _, p := range gp.points {
			fmt.Fprintf(&b, "%s%s %s\n", name, promLabels(p.Attrs, ""), promFloat(p.Value))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func header(b *strings.Builder, name, desc, kind string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, strings.ReplaceAll(desc, "\n", " "), name, kind)
}

func promName(name, unit string) string {
	n := promSafe(name)
	switch unit {
	case "s":
		n += "_seconds"
	case "By":
		n += "_bytes"
	}
	return n
}

// promSafe maps a name to [a-zA-Z0-9_].
func promSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

func promLabels(attrs []Attr, le string) string {
	if len(attrs) == 0 && le == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, a := range attrs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(promSafe(a.Key))
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(a.Value))
		b.WriteByte('"')
	}
	if le != "" {
		if len(attrs) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`le="` + le + `"`)
	}
	b.WriteByte('}')
	return b.String()
}

func promFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
