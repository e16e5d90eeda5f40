package telemetry

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Span is one finished operation.
type Span struct {
	TraceID  [16]byte
	SpanID   [8]byte
	ParentID [8]byte // zero: a root span
	Name     string
	Start    time.Time
	End      time.Time
	Attrs    []Attr
	// Error, if set, marks the span failed with this description.
	Error string
}

// NewIDs returns a trace id (parent's, if traceparent is a valid W3C
// traceparent header value, else a new one), the parent span id, if any,
// and a new span id.
func NewIDs(traceparent string) (trace [16]byte, parent, span [8]byte) {
	binary := func(b []byte) {
		for i := 0; i < len(b); i += 8 {
			v := rand.Uint64()
			for j := 0; j < 8 && i+j < len(b); j++ {
				b[i+j] = byte(v >> (8 * j))
			}
		}
	}
	binary(span[:])
	// version "00" - 32 hex trace id - 16 hex parent id - flags
	p := strings.Split(traceparent, "-")
	if len(p) == 4 && len(p[0]) == 2 && p[0] != "ff" && len(p[1]) == 32 && len(p[2]) == 16 && len(p[3]) == 2 {
		t, err1 := hex.DecodeString(p[1])
		s, err2 := hex.DecodeString(p[2])
		if err1 == nil && err2 == nil && !allZero(t) && !allZero(s) {
			copy(trace[:], t)
			copy(parent[:], s)
			return trace, parent, span
		}
	}
	binary(trace[:])
	return trace, parent, span
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Exporter sends spans and metrics to an OTLP/HTTP endpoint with JSON
// bodies.
type Exporter struct {
	traces, metrics string // URLs; "" for a signal not sent
	headers         http.Header
	client          *http.Client
	interval        time.Duration
	resource        []Attr
	m               *Metrics
	log             *slog.Logger

	queue    chan Span
	dropped  atomic.Int64 // spans never sent
	lastWarn atomic.Int64 // unix nanos of the last warning
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// Export bounds.
const (
	queueCap  = 2048
	batchSize = 512
	batchWait = 5 * time.Second
)

// ExporterFromEnv returns an exporter configured by the OTEL_EXPORTER_OTLP_*
// variables of env, or nil when no endpoint is set. Only the http/json
// protocol is spoken; another protocol asked for is an error.
func ExporterFromEnv(env func(string) string, m *Metrics, service, version string, log *slog.Logger) (*Exporter, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	base := strings.TrimRight(env("OTEL_EXPORTER_OTLP_ENDPOINT"), "/")
	signal := func(name, path string) (string, error) {
		u := env("OTEL_EXPORTER_OTLP_" + name + "_ENDPOINT")
		if u == "" && base != "" {
			u = base + path
		}
		if u == "" {
			return "", nil
		}
		p, err := url.Parse(u)
		if err != nil {
			return "", errors.New("OTLP endpoint: not a URL; give an http:// or https:// URL")
		}
		if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return "", fmt.Errorf("OTLP endpoint %q: give an http:// or https:// URL", p.Redacted())
		}
		return u, nil
	}
	traces, err := signal("TRACES", "/v1/traces")
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(env("OTEL_TRACES_EXPORTER"), "none") {
		traces = ""
	}
	metrics, err := signal("METRICS", "/v1/metrics")
	if err != nil {
		return nil, err
	}
	if traces == "" && metrics == "" {
		return nil, nil
	}
	if p := env("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/json" {
		// A shell-wide setting for other programs must not stop the
		// server: it runs without export, and says why.
		log.Warn("telemetry: OTLP export off: this server sends OTLP over http/json only (a collector's OTLP/HTTP receiver takes it); set OTEL_EXPORTER_OTLP_PROTOCOL=http/json for it", "protocol", p)
		return nil, nil
	}
	timeout := 10 * time.Second
	if v, err := strconv.Atoi(env("OTEL_EXPORTER_OTLP_TIMEOUT")); err == nil && v > 0 {
		timeout = time.Duration(v) * time.Millisecond
	}
	interval := time.Minute
	if v, err := strconv.Atoi(env("OTEL_METRIC_EXPORT_INTERVAL")); err == nil && v > 0 {
		interval = time.Duration(v) * time.Millisecond
	}
	headers := http.Header{}
	for _, kv := range strings.Split(env("OTEL_EXPORTER_OTLP_HEADERS"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		if uv, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
			v = uv
		}
		if k != "" {
			headers.Set(k, v)
		}
	}
	e := &Exporter{traces: traces, metrics: metrics, headers: headers, interval: interval, m: m, log: log,
		// A redirect would carry the headers (an API key) elsewhere.
		client:   &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		resource: []Attr{{"service.name", service}, {"service.version", version}},
		queue:    make(chan Span, queueCap), stop: make(chan struct{}), done: make(chan struct{})}
	go e.run()
	return e, nil
}

// Tracing reports whether spans are sent.
func (e *Exporter) Tracing() bool { return e != nil && e.traces != "" }

// Dropped is the number of spans never sent (queue full, or an export
// that failed).
func (e *Exporter) Dropped() int64 { return e.dropped.Load() }

// Offer queues a span for export without waiting: when the queue is full
// (the endpoint is slow or down) the span is dropped and counted.
func (e *Exporter) Offer(s Span) {
	if !e.Tracing() {
		return
	}
	select {
	case e.queue <- s:
	default:
		e.dropped.Add(1)
	}
}

// Close sends what is queued and the metrics once more, giving up after
// d, and stops.
func (e *Exporter) Close(d time.Duration) {
	if e == nil {
		return
	}
	e.once.Do(func() { close(e.stop) })
	select {
	case <-e.done:
	case <-time.After(d):
	}
}

func (e *Exporter) run() {
	defer close(e.done)
	batch := make([]Span, 0, batchSize)
	flush := time.NewTicker(batchWait)
	defer flush.Stop()
	metrics := time.NewTicker(e.interval)
	defer metrics.Stop()
	send := func() {
		if len(batch) > 0 {
			if err := e.post(e.traces, e.tracesBody(batch)); err != nil {
				e.dropped.Add(int64(len(batch)))
				e.warn("spans", len(batch), err)
			}
			batch = batch[:0]
		}
	}
	for {
		select {
		case s := <-e.queue:
			batch = append(batch, s)
			if len(batch) >= batchSize {
				send()
			}
		case <-flush.C:
			send()
		case <-metrics.C:
			e.sendMetrics()
		case <-e.stop:
			for len(e.queue) > 0 && len(batch) < batchSize {
				batch = append(batch, <-e.queue)
			}
			send()
			e.dropped.Add(int64(len(e.queue))) // one last batch only: the exit is bounded
			e.sendMetrics()
			return
		}
	}
}

func (e *Exporter) sendMetrics() {
	if e.metrics == "" {
		return
	}
	if err := e.post(e.metrics, e.metricsBody()); err != nil {
		e.warn("metrics", 0, err)
	}
}

// warn logs a failed export, at most once a minute.
func (e *Exporter) warn(what string, n int, err error) {
	now := time.Now().UnixNano()
	if last := e.lastWarn.Load(); last != 0 && now-last < int64(time.Minute) || !e.lastWarn.CompareAndSwap(last, now) {
		return
	}
	e.log.Warn("OTLP export failed; what it held is dropped (said at most once a minute)", "what", what, "count", n,
		"dropped_spans_so_far", e.dropped.Load(), "err", err)
}

func (e *Exporter) post(u string, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.client.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range e.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		// The URL may hold credentials; the error names it.
		if ue, ok := err.(*url.Error); ok {
			return ue.Err
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the endpoint answered %s", resp.Status)
	}
	return nil
}

// OTLP JSON shapes (opentelemetry-proto's JSON mapping: ids in hex,
// 64-bit integers as strings).
type (
	anyValue struct {
		StringValue string `json:"stringValue"`
	}
	keyValue struct {
		Key   string   `json:"key"`
		Value anyValue `json:"value"`
	}
	resource struct {
		Attributes []keyValue `json:"attributes"`
	}
	scope struct {
		Name string `json:"name"`
	}
	otlpStatus struct {
		Code    int    `json:"code"`
		Message string `json:"message,omitempty"`
	}
	otlpSpan struct {
		TraceID      string     `json:"traceId"`
		SpanID       string     `json:"spanId"`
		ParentSpanID string     `json:"parentSpanId,omitempty"`
		Name         string     `json:"name"`
		Kind         int        `json:"kind"`
		Start        string     `json:"startTimeUnixNano"`
		End          string     `json:"endTimeUnixNano"`
		Attributes   []keyValue `json:"attributes"`
		Status       otlpStatus `json:"status"`
	}
)

func kvs(attrs []Attr) []keyValue {
	out := make([]keyValue, len(attrs))
	for i, a := range attrs {
		out[i] = keyValue{a.Key, anyValue{a.Value}}
	}
	return out
}

func nanos(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

func (e *Exporter) tracesBody(spans []Span) []byte {
	out := make([]otlpSpan, len(spans))
	for i, s := range spans {
		o := otlpSpan{TraceID: hex.EncodeToString(s.TraceID[:]), SpanID: hex.EncodeToString(s.SpanID[:]),
			Name: s.Name, Kind: 2, Start: nanos(s.Start), End: nanos(s.End), Attributes: kvs(s.Attrs)} // 2: SERVER
		if s.ParentID != [8]byte{} {
			o.ParentSpanID = hex.EncodeToString(s.ParentID[:])
		}
		if s.Error != "" {
			o.Status = otlpStatus{Code: 2, Message: s.Error} // 2: ERROR
		}
		out[i] = o
	}
	b, _ := json.Marshal(map[string]any{"resourceSpans": []any{map[string]any{
		"resource":   resource{kvs(e.resource)},
		"scopeSpans": []any{map[string]any{"scope": scope{"sandbox-mcp"}, "spans": out}},
	}}})
	return b
}

func (e *Exporter) metricsBody() []byte {
	s := e.m.collect()
	now, start := nanos(time.Now()), nanos(e.m.start)
	var metrics []any
	for _, ip := range s.counters {
		var points []any
		for _, p := range ip.points {
			points = append(points, map[string]any{"attributes": kvs(p.attrs), "startTimeUnixNano": start, "timeUnixNano": now,
				"asDouble": math.Float64frombits(p.value.Load())})
		}
		metrics = append(metrics, map[string]any{"name": ip.in.name, "description": ip.in.desc, "unit": ip.in.unit,
			"sum": map[string]any{"dataPoints": points, "aggregationTemporality": 2, "isMonotonic": true}})
	}
	for _, ip := range s.hists {
		var points []any
		for _, p := range ip.points {
			counts := make([]string, len(p.buckets))
			var total uint64
			for i := range p.buckets {
				c := p.buckets[i].Load()
				total += c
				counts[i] = strconv.FormatUint(c, 10)
			}
			points = append(points, map[string]any{"attributes": kvs(p.attrs), "startTimeUnixNano": start, "timeUnixNano": now,
				"count": strconv.FormatUint(total, 10), "sum": math.Float64frombits(p.sumBits.Load()),
				"bucketCounts": counts, "explicitBounds": ip.in.bounds})
		}
		metrics = append(metrics, map[string]any{"name": ip.in.name, "description": ip.in.desc, "unit": ip.in.unit,
			"histogram": map[string]any{"dataPoints": points, "aggregationTemporality": 2}})
	}
	for _, gp := range s.gauges {
		var points []any
		for _, p := range gp.points {
			points = append(points, map[string]any{"attributes": kvs(p.Attrs), "timeUnixNano": now, "asDouble": p.Value})
		}
		m := map[string]any{"name": gp.g.name, "description": gp.g.desc, "unit": gp.g.unit}
		if gp.g.monotonic {
			for _, p := range points {
				p.(map[string]any)["startTimeUnixNano"] = start
			}
			m["sum"] = map[string]any{"dataPoints": points, "aggregationTemporality": 2, "isMonotonic": true}
		} else {
			m["gauge"] = map[string]any{"dataPoints": points}
		}
		metrics = append(metrics, m)
	}
	b, _ := json.Marshal(map[string]any{"resourceMetrics": []any{map[string]any{
		"resource":     resource{kvs(e.resource)},
		"scopeMetrics": []any{map[string]any{"scope": scope{"sandbox-mcp"}, "metrics": metrics}},
	}}})
	return b
}
